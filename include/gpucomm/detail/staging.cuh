#pragma once
// Staging, device side: how a group moves a put's source, or a get's destination, that the network
// cannot reach through a staging slot (detail/staging.hpp), one 64 KiB chunk per half, the two
// halves in turn. The transport says how a chunk travels and how it waits for one (a `run`, below);
// the slot pool, the chunk loop and the copies are here, one copy of each per translation unit.
//
// A run is the leader's side of one staged operation; its member functions, called by the leader:
//   chunks(), length(k), half(k)  how many chunks, chunk k's size, the half that carries it;
//   start()                       before the first copy (a get: its first two reads);
//   before_copy(k)                a put: wait until the half's previous chunk was read; a get:
//                                 wait for chunk k's read, acquiring it at system scope;
//   after_copy(k)                 a put: post chunk k from its half; a get: read chunk k + 2;
//   end(blocking)                 a put_signal's signal, a blocking put's wait; the slot goes back.
// Who copies: the whole group; or, into a local variable (each thread's own), every thread its
// own copy (a get); or one thread, where only it may (a put from its local variable) or only it
// knows the slot (a group type without shfl).

#include <cuda/atomic>

#include <cstddef>
#include <cstdint>

#include "../group.cuh"
#include "../ops.hpp"
#include "../sym_ptr.hpp"
#include "copy.cuh"
#include "spin.cuh"
#include "staging.hpp"

namespace gpucomm::detail {

/// What a staged operation does: put, put_signal (with its signal) or get.
struct staged_op {
  enum kind_t : std::uint8_t { put, put_signal, get } kind;
  sym_ptr<signal_t> sig{};
  signal_t value = 0;
  signal_op op = signal_op::set;
  GPUCOMM_HD char const* name() const { return kind == put ? "put" : kind == get ? "get" : "put_signal"; }
};

#if defined(__CUDACC__)

/// The registered buffer of `table` holding [p, p + bytes), or null.
__device__ inline GPUCOMM_NOINLINE local_region const* registered_region(local_regions const& table, void const* p,
                                                                         std::size_t bytes) {
  auto const addr = reinterpret_cast<std::uintptr_t>(p);
  for (std::uint32_t i = 0; i < table.count; ++i) {
    if (range_within(addr, bytes, table.entries[i].base, table.entries[i].bytes)) return &table.entries[i];
  }
  return nullptr;
}

/// Takes a free slot of `slots` (staging_layout::slots of them) for the calling thread's group (the
/// leader calls it): tries every slot from one that depends on the thread, so groups of different
/// warps rarely meet; waits (bounded as the world says, `header`) while all are taken.
__device__ inline GPUCOMM_NOINLINE unsigned take_staging_slot(staging_slot* slots, char const* op,
                                                              std::uint64_t const* header) {
  unsigned const thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  unsigned const block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  unsigned const first = block * 7u + thread / 32u + thread % 32u;
  unsigned taken = 0;
  spin_until(
      [&] {
        for (unsigned k = 0; k < staging_layout::slots; ++k) {
          unsigned const i = (first + k) % staging_layout::slots;
          cuda::atomic_ref<std::uint64_t, cuda::thread_scope_device> lock(slots[i].lock);
          std::uint64_t seen = lock.load(cuda::memory_order_relaxed);
          // Acquire: the previous user's writes of the slot's control words (what it left in
          // flight) and its reads of the halves happen before ours.
          if ((seen & 1) == 0 &&
              lock.compare_exchange_strong(seen, seen + 1, cuda::memory_order_acquire, cuda::memory_order_relaxed)) {
            taken = i;
            return true;
          }
        }
        return false;
      },
      {op, &slots[first % staging_layout::slots].lock, "even (free), like", 0}, header);
  return taken;
}

/// take_staging_slot for group g: its leader takes the slot, and every thread of g learns which
/// where the group type can broadcast (elsewhere only the leader knows, and copies alone).
template <group G>
__device__ unsigned take_staging_slot(G const& g, staging_slot* slots, char const* op, std::uint64_t const* header) {
  unsigned const taken = is_leader(g) ? take_staging_slot(slots, op, header) : 0;
  if constexpr (broadcasting_group<G>) {
    return broadcast_from_leader(g, taken);
  } else {
    return taken;
  }
}

/// Gives the slot back: the control words written and the halves read happen before the next
/// user's take (its acquire).
__device__ inline void give_back_staging_slot(staging_slot& slot) {
  cuda::atomic_ref<std::uint64_t, cuda::thread_scope_device>(slot.lock).fetch_add(1, cuda::memory_order_release);
}

/// The chunks of one staged operation of `bytes` through a slot's two halves (`pair`, 2 x
/// staging_layout::half_bytes): chunk k is in half k % 2.
struct staging_chunks {
  unsigned char* pair;
  std::size_t bytes;
  static constexpr std::size_t half_bytes = staging_layout::half_bytes;
  __device__ std::size_t chunks() const { return (bytes + half_bytes - 1) / half_bytes; }
  __device__ std::size_t length(std::size_t k) const {
    return bytes - k * half_bytes < half_bytes ? bytes - k * half_bytes : half_bytes;
  }
  __device__ unsigned char* half(std::size_t k) const { return pair + (k & 1) * half_bytes; }
};

/// What the runs of every transport share: the chunks, what the operation does, the slot, the
/// reads in flight into each half (a get), and start(). Derived provides drain_half(h) (waits until
/// the backend is done with what half h last carried: a put that may still read it) and
/// post_read(k) (reads chunk k into its half; returns what before_copy then waits for).
template <class Derived>
struct staging_run_base : staging_chunks {
  staged_op const& what;
  staging_slot& slot;
  std::uint64_t reading[2] = {0, 0};  ///< a get: the read in flight into each half

  /// Slot `index` of `slots`, whose halves are at staging + 2 * index * half_bytes.
  __device__ staging_run_base(staged_op const& w, unsigned char* staging, staging_slot* slots, unsigned index,
                              std::size_t bytes)
      : staging_chunks{staging + 2 * std::size_t{index} * half_bytes, bytes}, what(w), slot(slots[index]) {}
  __device__ bool is_get() const { return what.kind == staged_op::get; }

  /// A get: wait until the backend has read both halves for an earlier put, then read chunks 0
  /// and 1.
  __device__ GPUCOMM_NOINLINE void start() {
    if (!is_get()) return;
    auto& self = static_cast<Derived&>(*this);
    self.drain_half(0);
    self.drain_half(1);
    for (std::size_t k = 0; k < chunks() && k < 2; ++k) reading[k] = self.post_read(k);
  }
};

/// One thread's share of a copy that `size` threads make together (the caller synchronises
/// them): one group type for every staged copy, so the copy is instantiated once.
struct staging_copy_share {
  unsigned rank, size;
  __device__ unsigned num_threads() const { return size; }
  __device__ unsigned thread_rank() const { return rank; }
  __device__ void sync() const {}
};
__device__ inline GPUCOMM_NOINLINE void staging_copy_part(void* to, void const* from, std::size_t len, unsigned rank,
                                                          unsigned size) {
  group_copy(staging_copy_share{rank, size}, to, from, len);
}

/// The group's side of a staged put, put_signal or get through `run` (see the header comment);
/// the leader took the run's slot, and every thread of g holds the run (a group type without shfl:
/// only the leader's is used). Returns with g synchronised.
template <group G, class Run>
__device__ void run_staged(G const& g, Run& run, void* local_buffer, bool is_get, bool blocking) {
  bool const thread_private = __isLocal(local_buffer);
  bool const whole_group = broadcasting_group<G> && !thread_private;
  bool const every_thread = broadcasting_group<G> && thread_private && is_get;
  bool const copies = whole_group || every_thread || is_leader(g);
  unsigned const rank = whole_group ? group_rank(g) : 0;
  unsigned const size = whole_group ? group_size(g) : 1;
  auto* const mine = static_cast<unsigned char*>(local_buffer);
  if (is_leader(g)) run.start();
  for (std::size_t k = 0; k < run.chunks(); ++k) {
    if (is_leader(g)) run.before_copy(k);
    group_sync(g);
    unsigned char* const at = mine + k * staging_layout::half_bytes;
    if (copies) {
      if (is_get) {
        staging_copy_part(at, run.half(k), run.length(k), rank, size);
      } else {
        staging_copy_part(run.half(k), at, run.length(k), rank, size);
      }
    }
    group_sync(g);
    if (is_leader(g)) run.after_copy(k);
  }
  if (is_leader(g)) run.end(blocking);
  group_sync(g);
}

#endif  // __CUDACC__

}  // namespace gpucomm::detail
