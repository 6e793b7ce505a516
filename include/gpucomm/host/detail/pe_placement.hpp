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
std::uint64_t host_id();

/// The number of GPUs this process sees; throws when it sees none (single-process worlds).
int visible_gpus(char const* call);

/// Why this process cannot be PE `rank` of `npes` on GPU `device` in a one-process-per-GPU world,
/// or "" when it can. Needs no GPU, so every process can learn the others' answers first.
std::string one_process_problem(int device, int rank, int npes);

class pe_placement {
 public:
  pe_placement() = default;

  /// A single-process world: PE i on devices[i], of the `count` GPUs visible; all on this host.
  static pe_placement single_process(std::vector<int> const& devices, int count, char const* call);

  /// A one-process-per-GPU world (collective): this process is PE `rank`, on GPU `device`; every
  /// process learns where the others run.
  static pe_placement one_process_per_gpu(any_bootstrap& boot, int rank, int device);

  int npes() const noexcept { return static_cast<int>(places_.size()); }
  /// The PEs this process owns, with their GPUs.
  std::vector<local_pe> const& locals() const noexcept { return locals_; }
  std::vector<int> const& local_pes() const noexcept { return local_pe_ids_; }
  /// Every PE's host, in PE order.
  std::vector<std::uint64_t> hosts() const;

  /// The GPU of local PE `pe`.
  int device(int pe) const;

  /// Where PE `pe` runs; throws for a PE outside the world.
  pe_place const& place(int pe) const;
  bool same_host(int a, int b) const { return place(a).host == place(b).host; }
  /// The same PCI device of the same host.
  bool same_gpu(int a, int b) const;

 private:
  static pe_place place_of(std::uint64_t host, int device, int pe);

  std::vector<pe_place> places_;  // [pe]
  std::vector<local_pe> locals_;
  std::vector<int> local_pe_ids_;
};

}  // namespace gpucomm::detail

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "pe_placement.inl"
#endif
