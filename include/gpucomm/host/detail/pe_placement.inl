#pragma once
// The bodies of pe_placement.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::detail {

inline std::uint64_t host_id() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a of the host name
  for (char const* c = name; *c; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 1099511628211ull;
  return h;
}

inline int visible_gpus(char const* call) {
  int count = 0;
  cudaError_t const rc = cudaGetDeviceCount(&count);
  if (rc == cudaErrorNoDevice || rc == cudaErrorInsufficientDriver || (rc == cudaSuccess && count == 0)) {
    throw error(call, -1, "no CUDA GPU is visible to this process",
                "run on a machine with an NVIDIA GPU and its driver");
  }
  GPUCOMM_CUDA_CHECK(rc, -1);
  return count;
}

inline std::string one_process_problem(int device, int rank, int npes) {
  int count = 0;
  cudaError_t const rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess || count == 0) return "no CUDA GPU is visible to this process";
  if (device < 0 || device >= count)
    return "GPU " + std::to_string(device) + " does not exist; " + std::to_string(count) + " are visible";
  if (rank < 0 || rank >= npes)
    return "the bootstrap says this process is rank " + std::to_string(rank) + " of " + std::to_string(npes);
  return {};
}

inline pe_placement pe_placement::single_process(std::vector<int> const& devices, int count, char const* call) {
  for (std::size_t i = 0; i < devices.size(); ++i) {
    if (devices[i] < 0 || devices[i] >= count) {
      throw error(call, static_cast<int>(i),
                  "GPU " + std::to_string(devices[i]) + " does not exist; " + std::to_string(count) + " are visible",
                  "list devices between 0 and " + std::to_string(count - 1));
    }
  }
  pe_placement p;
  std::uint64_t const host = host_id();
  for (std::size_t i = 0; i < devices.size(); ++i) {
    int const pe = static_cast<int>(i);
    p.locals_.push_back({pe, devices[i]});
    p.local_pe_ids_.push_back(pe);
    p.places_.push_back(place_of(host, devices[i], pe));
  }
  return p;
}

inline pe_placement pe_placement::one_process_per_gpu(any_bootstrap& boot, int rank, int device) {
  pe_placement p;
  p.places_ = boot.allgather_value(place_of(host_id(), device, rank));
  p.locals_.push_back({rank, device});
  p.local_pe_ids_.push_back(rank);
  return p;
}

inline std::vector<std::uint64_t> pe_placement::hosts() const {
  std::vector<std::uint64_t> h;
  for (auto const& p : places_) h.push_back(p.host);
  return h;
}

inline int pe_placement::device(int pe) const {
  for (auto const& l : locals_)
    if (l.pe == pe) return l.device;
  throw error("world::device", pe, "PE " + std::to_string(pe) + " is not owned by this process",
              "ask only for the PEs in local_pes()");
}

inline pe_place const& pe_placement::place(int pe) const {
  if (pe < 0 || pe >= npes()) {
    throw error("world", pe, "PE " + std::to_string(pe) + " is outside the world of " + std::to_string(npes()) + " PEs",
                "pass a PE between 0 and npes() - 1");
  }
  return places_[static_cast<std::size_t>(pe)];
}

inline bool pe_placement::same_gpu(int a, int b) const {
  return same_host(a, b) && std::string(place(a).bus_id) == std::string(place(b).bus_id);
}

inline pe_place pe_placement::place_of(std::uint64_t host, int device, int pe) {
  pe_place p{host, {}};
  GPUCOMM_CUDA_CHECK(cudaDeviceGetPCIBusId(p.bus_id, sizeof(p.bus_id), device), pe);
  return p;
}

}  // namespace gpucomm::detail
