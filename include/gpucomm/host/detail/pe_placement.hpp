#pragma once
// Where a world's PEs run: every PE's host and GPU, and the GPU of each PE this process owns.
// Several PEs may share a GPU (a device list that names it several times, or ranks given the same
// device).

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../../error.hpp"
#include "../bootstrap.hpp"

namespace gpucomm::detail {

/// A PE this process owns.
struct local_pe {
  int pe;
  int device;
};

/// Where a PE runs: its host (a hash of the host name) and its GPU's PCI bus id.
struct pe_place {
  std::uint64_t host;
  char bus_id[32];
};

/// This host, as pe_place names it.
inline std::uint64_t host_id() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a of the host name
  for (char const* c = name; *c; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 1099511628211ull;
  return h;
}

/// The number of GPUs this process sees; throws when it sees none (single-process worlds).
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

/// Why this process cannot be PE `rank` of `npes` on GPU `device` in a one-process-per-GPU world,
/// or "" when it can. Needs no GPU, so every process can learn the others' answers first.
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

class pe_placement {
 public:
  pe_placement() = default;

  /// A single-process world: PE i on devices[i], of the `count` GPUs visible; all on this host.
  static pe_placement single_process(std::vector<int> const& devices, int count, char const* call) {
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

  /// A one-process-per-GPU world (collective): this process is PE `rank`, on GPU `device`; every
  /// process learns where the others run.
  static pe_placement one_process_per_gpu(any_bootstrap& boot, int rank, int device) {
    pe_placement p;
    p.places_ = boot.allgather_value(place_of(host_id(), device, rank));
    p.locals_.push_back({rank, device});
    p.local_pe_ids_.push_back(rank);
    return p;
  }

  int npes() const noexcept { return static_cast<int>(places_.size()); }
  /// The PEs this process owns, with their GPUs.
  std::vector<local_pe> const& locals() const noexcept { return locals_; }
  std::vector<int> const& local_pes() const noexcept { return local_pe_ids_; }
  /// Every PE's host, in PE order.
  std::vector<std::uint64_t> hosts() const {
    std::vector<std::uint64_t> h;
    for (auto const& p : places_) h.push_back(p.host);
    return h;
  }

  /// The GPU of local PE `pe`.
  int device(int pe) const {
    for (auto const& l : locals_)
      if (l.pe == pe) return l.device;
    throw error("world::device", pe, "PE " + std::to_string(pe) + " is not owned by this process",
                "ask only for the PEs in local_pes()");
  }

  /// Where PE `pe` runs; throws for a PE outside the world.
  pe_place const& place(int pe) const {
    if (pe < 0 || pe >= npes()) {
      throw error("world", pe,
                  "PE " + std::to_string(pe) + " is outside the world of " + std::to_string(npes()) + " PEs",
                  "pass a PE between 0 and npes() - 1");
    }
    return places_[static_cast<std::size_t>(pe)];
  }
  bool same_host(int a, int b) const { return place(a).host == place(b).host; }
  /// The same PCI device of the same host.
  bool same_gpu(int a, int b) const {
    return same_host(a, b) && std::string(place(a).bus_id) == std::string(place(b).bus_id);
  }

 private:
  static pe_place place_of(std::uint64_t host, int device, int pe) {
    pe_place p{host, {}};
    GPUCOMM_CUDA_CHECK(cudaDeviceGetPCIBusId(p.bus_id, sizeof(p.bus_id), device), pe);
    return p;
  }

  std::vector<pe_place> places_;  // [pe]
  std::vector<local_pe> locals_;
  std::vector<int> local_pe_ids_;
};

}  // namespace gpucomm::detail
