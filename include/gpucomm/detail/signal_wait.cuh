#pragma once
// Waiting on local words that other PEs update, shared by the transports: signal waits
// (wait_until) and the arrival flags of the epoch barrier.

#include <cuda/atomic>

#include <cstdint>

#include "../group.cuh"
#include "../ops.hpp"
#include "spin.cuh"

namespace gpucomm::detail {

#if defined(__CUDACC__)

/// Spins until `*sig <c> value`; returns the value that satisfied it. Whoever updated the word
/// (a GPU store over NVLink or a NIC write) released it at system scope, so the acquire makes what
/// it released visible to the calling thread.
__device__ inline signal_t wait_signal(signal_t* sig, cmp c, signal_t value, std::uint64_t const* header = nullptr) {
  cuda::atomic_ref<signal_t, cuda::thread_scope_system> word(*sig);
  signal_t seen = 0;
  spin_until([&] { return compare(c, seen = word.load(cuda::memory_order_acquire), value); }, "wait_until", header);
  return seen;
}

/// Epoch barrier, the waiting half: every thread of g takes a share of the team's `npes` arrival
/// flags and waits until each reaches `epoch` (acquire: rank i's writes before it announced the
/// epoch are visible), then g syncs so every thread sees them all. Epochs only grow, so no flag is
/// reset.
template <group G>
__device__ void wait_for_epochs(G const& g, std::uint64_t* flags, int npes, std::uint64_t epoch,
                                std::uint64_t const* header = nullptr) {
  unsigned const rank = group_rank(g);
  unsigned const size = group_size(g);
  for (int pe = static_cast<int>(rank); pe < npes; pe += static_cast<int>(size)) {
    cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system> flag(flags[pe]);
    spin_until([&] { return flag.load(cuda::memory_order_acquire) >= epoch; }, "barrier", header);
  }
  group_sync(g);
}

/// Epoch barrier, the first half: every thread reads this PE's next epoch before the group syncs,
/// and the leader then records it, so the read and the write never race (and the next barrier's
/// read comes after this one's last sync). Returns the epoch to every thread.
template <group G>
__device__ std::uint64_t next_epoch(G const& g, std::uint64_t* epoch_word) {
  std::uint64_t const epoch = *epoch_word + 1;
  group_sync(g);
  if (is_leader(g)) *epoch_word = epoch;
  return epoch;
}

#endif  // __CUDACC__

}  // namespace gpucomm::detail
