#pragma once
// The bodies of host.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::detail {

template <class... Legs>
route_host<Legs...>::route_host(world& w) : world_(&w), hosts_{&w.transport_host<Legs>()...} {
  int const npes = w.npes();
  std::vector<std::uint8_t> leg(static_cast<std::size_t>(npes) * npes), domain(static_cast<std::size_t>(npes), 0);
  for (int from = 0; from < npes; ++from) {
    for (int to = 0; to < npes; ++to) {
      int const l = first_reaching(from, to);
      if (l < 0) {
        throw error("world::comm<route>", from,
                    "no transport of the route reaches PE " + std::to_string(to) + " from PE " + std::to_string(from),
                    "end the list with a transport that reaches every PE, such as IBGDAPost");
      }
      leg[static_cast<std::size_t>(from) * npes + to] = static_cast<std::uint8_t>(l);
      auto& d = domain[static_cast<std::size_t>(to)];
      if (d < l) d = static_cast<std::uint8_t>(l);
    }
  }
  for (int to = 0; to < npes; ++to) {
    for (int from = 0; from < npes; ++from) {
      if (!reaches(domain[static_cast<std::size_t>(to)], from, to)) {
        throw error("world::comm<route>", from,
                    "atomics and signals on PE " + std::to_string(to) +
                        "'s memory must all go through one transport, and the one some PE needs (leg " +
                        std::to_string(domain[static_cast<std::size_t>(to)]) + ") does not reach it from PE " +
                        std::to_string(from),
                    "put a transport that reaches every PE last in the route");
      }
    }
  }
  for (int pe : w.local_pes()) {
    std::vector<std::uint8_t> table(leg.begin() + static_cast<std::ptrdiff_t>(pe) * npes,
                                    leg.begin() + static_cast<std::ptrdiff_t>(pe + 1) * npes);
    table.insert(table.end(), domain.begin(), domain.end());
    GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
    void* dev = nullptr;
    GPUCOMM_CUDA_CHECK(cudaMalloc(&dev, table.size()), pe);
    tables_.push_back({pe, w.device(pe), static_cast<std::uint8_t*>(dev)});
    GPUCOMM_CUDA_CHECK(cudaMemcpy(dev, table.data(), table.size(), cudaMemcpyHostToDevice), pe);
  }
  leg_ = std::move(leg);
  domain_ = std::move(domain);
}

template <class... Legs>
route_host<Legs...>::~route_host() {
  detail::current_device_guard const keep;
  for (auto const& t : tables_) {
    cudaSetDevice(t.device);
    cudaFree(t.table);
  }
}

template <class... Legs>
auto route_host<Legs...>::device_state_for(int pe) const -> device_state {
  device_state s{};
  fill<0>(s.legs, pe);
  for (auto const& t : tables_) {
    if (t.pe == pe) {
      s.leg_of = t.table;
      s.domain_of = t.table + world_->npes();
    }
  }
  return s;
}

template <class... Legs>
bool route_host<Legs...>::reaches(int l, int from, int to) const {
  bool r = false;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((static_cast<int>(I) == l ? (void)(r = std::get<I>(hosts_)->reaches(from, to)) : (void)0), ...);
  }
  (std::index_sequence_for<Legs...>{});
  return r;
}

template <class... Legs>
int route_host<Legs...>::first_reaching(int from, int to) const {
  for (int l = 0; l < static_cast<int>(sizeof...(Legs)); ++l) {
    if (reaches(l, from, to)) return l;
  }
  return -1;
}

}  // namespace gpucomm::detail
