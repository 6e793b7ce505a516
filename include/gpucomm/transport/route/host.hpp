#pragma once
// route<Legs...>, host half: decides once which leg carries each PE's operations to each peer and
// which leg is the atomicity domain of each PE's memory (route/device.cuh says the rules), checks
// that the choice is possible, and puts the tables on each local PE's GPU.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../../error.hpp"
#include "../../host/world.hpp"
#include "device.cuh"

namespace gpucomm::detail {

/// The state a composite transport hands to a leg: routed_state_for when the leg has it (no
/// check that it reaches every PE), else device_state_for.
template <class Host>
auto routed_state(Host const& h, int pe) {
  if constexpr (requires { h.routed_state_for(pe); })
    return h.routed_state_for(pe);
  else
    return h.device_state_for(pe);
}

template <class... Legs>
class route_host {
 public:
  explicit route_host(world& w) : world_(&w), hosts_{&w.transport_host<Legs>()...} {
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
  route_host(route_host const&) = delete;
  route_host& operator=(route_host const&) = delete;
  ~route_host() {
    detail::current_device_guard const keep;
    for (auto const& t : tables_) {
      cudaSetDevice(t.device);
      cudaFree(t.table);
    }
  }

  /// Whether some leg carries PE from's operations to PE to (world::reaches).
  bool reaches(int from, int to) const { return first_reaching(from, to) >= 0; }
  /// The leg that carries PE from's operations to PE to.
  int leg_of(int from, int to) const { return leg_[static_cast<std::size_t>(from) * world_->npes() + to]; }
  /// The leg of every atomic and signal on PE to's memory.
  int domain_of(int to) const { return domain_[static_cast<std::size_t>(to)]; }

  using device_state = typename route<Legs...>::device_state;

  device_state device_state_for(int pe) const {
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

 private:
  struct table {
    int pe;
    int device;
    std::uint8_t* table;  // [npes] leg_of, then [npes] domain_of
  };

  template <std::size_t I, class States>
  void fill(States& s, int pe) const {
    if constexpr (I < sizeof...(Legs)) {
      s.head = detail::routed_state(*std::get<I>(hosts_), pe);
      fill<I + 1>(s.tail, pe);
    }
  }

  bool reaches(int l, int from, int to) const {
    bool r = false;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((static_cast<int>(I) == l ? (void)(r = std::get<I>(hosts_)->reaches(from, to)) : (void)0), ...);
    }
    (std::index_sequence_for<Legs...>{});
    return r;
  }
  int first_reaching(int from, int to) const {
    for (int l = 0; l < static_cast<int>(sizeof...(Legs)); ++l) {
      if (reaches(l, from, to)) return l;
    }
    return -1;
  }

  world* world_;
  std::tuple<typename Legs::host_state*...> hosts_;
  std::vector<table> tables_;
  std::vector<std::uint8_t> leg_;
  std::vector<std::uint8_t> domain_;
};

}  // namespace gpucomm::detail
