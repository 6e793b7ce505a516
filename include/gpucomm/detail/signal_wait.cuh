#pragma once
// Waiting on local words that other PEs update, shared by the transports: signal waits
// (wait_until) and the arrival flags of the epoch barrier.

#include <cuda/atomic>

#include <cstdint>

#include "../group.cuh"
#include "../ops.hpp"
#include "../team.hpp"
#include "spin.cuh"

namespace gpucomm::detail {

#if defined(__CUDACC__)

/// Spins until `*sig <c> value`; returns the value that satisfied it. Whoever updated the word
/// (a GPU store over NVLink or a NIC write) released it at system scope, so the acquire makes what
/// it released visible to the calling thread. `progress`: see spin_until.
template <class Progress = no_progress>
__device__ inline signal_t wait_signal(signal_t* sig, cmp c, signal_t value, std::uint64_t const* header = nullptr,
                                       Progress progress = {}) {
  cuda::atomic_ref<signal_t, cuda::thread_scope_system> word(*sig);
  signal_t seen = 0;
  spin_until([&] { return compare(c, seen = word.load(cuda::memory_order_acquire), value); },
             {"wait_until", sig, cmp_name(c), value}, header, progress);
  return seen;
}

/// Epoch barrier, the waiting half: every thread of g takes a share of team t's arrival flags and
/// waits until each reaches `epoch` (acquire: rank i's writes before it announced the
/// epoch are visible), then g syncs so every thread sees them all. Epochs only grow, so no flag is
/// reset. `progress` (see spin_until) runs in every thread still waiting (at most npes threads
/// wait; the leader may be done with its flags while another thread waits for one that needs it).
template <group G, class Progress = no_progress>
__device__ void wait_for_epochs(G const& g, std::uint64_t* flags, team t, std::uint64_t epoch,
                                std::uint64_t const* header = nullptr, Progress progress = {}) {
  unsigned const rank = group_rank(g);
  unsigned const size = group_size(g);
  for (int r = static_cast<int>(rank); r < t.size; r += static_cast<int>(size)) {
    cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system> flag(flags[r]);
    spin_until([&] { return flag.load(cuda::memory_order_acquire) >= epoch; },
               {"barrier", flags + r, ">=", epoch, t.pe_of(r)}, header, progress);
  }
  group_sync(g);
}

/// Reserves `count` epochs of the counter at `epoch_word` for the group and returns the first:
/// every thread reads the counter before the group syncs, and the leader then records the last,
/// so this read and that write never race. The caller must sync the group again before its next
/// reservation on the same word, or a thread could read the counter before the leader's write and
/// take an epoch twice (the barrier's wait and a collective's exit both end with a sync; packet
/// rounds reserve all the epochs of a call at once for this reason).
template <group G>
__device__ std::uint64_t next_epochs(G const& g, std::uint64_t* epoch_word, std::uint64_t count) {
  std::uint64_t const first = *epoch_word + 1;
  group_sync(g);
  if (is_leader(g)) *epoch_word = first + count - 1;
  return first;
}

/// Epoch barrier, the first half: the group's next epoch of this PE (next_epochs of one), the same
/// at every thread.
template <group G>
__device__ std::uint64_t next_epoch(G const& g, std::uint64_t* epoch_word) {
  return next_epochs(g, epoch_word, 1);
}

#endif  // __CUDACC__

}  // namespace gpucomm::detail
