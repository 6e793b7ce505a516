#pragma once
// P2PCopy, device side: peers' memory mapped into this GPU's address space, as for NVLinkStore, but
// the bytes of a put or get are moved by the GPU's asynchronous bulk-copy unit (PTX
// cp.async.bulk, sm_90) that one thread of the calling group drives, instead of by the group's
// own loads and stores. The host half is p2p_copy/host.hpp.
//
//   using P2PCopy = BasicP2PCopy<>;              // the default: a staging that fits a static __shared__
//   using P2PCopy128K = BasicP2PCopy<16384, 8>;  // the recommended one, in dynamic shared memory
//   BasicP2PCopy<StageBytes, Stages>             // another staging shape
//   BasicP2PCopy<StageBytes, Stages, StoresInFlight>  // and how many of its stages drain at once
//   BasicP2PCopy<StageBytes, Stages, StoresInFlight, PrefetchAhead>  // and an L2 prefetch of a put's
//                                                // source that many chunks ahead of its loads
//
// Where the bytes come from decides the path, per call:
//   put, src in the calling CTA's shared memory (detected at run time: PTX isspacep.shared): bulk stores
//       straight from src to the peer, no staging. This is the fused-kernel case: compute a tile
//       into shared memory, push it.
//   put, src in global memory, group given staging (with_staging(g, stages), staging.cuh): the
//       group's leader pipelines bulk loads into the stages and bulk stores out of them
//       (detail/bulk_copy.cuh). The group's other threads only copy the unaligned head and tail.
//   put, src in global memory, no staging: the group's own loads and stores, as NVLinkStore (the
//       bulk-copy unit cannot copy global to global). Say so with without_staging(g) (group.cuh):
//       GPUCOMM_DEBUG builds print a note, once per module, for a call with a plain group whose
//       bytes a staging would have sent through the bulk-copy unit.
//   get, dst in shared memory, group given staging: one bulk load from the peer straight into dst
//       (the staging lends only its first mbarrier).
//   get, dst in global memory, group given staging: the same pipeline, from the peer into dst.
//   get, no staging: the group's own loads and stores (the same note, the same without_staging).
// Any size and alignment: the bulk-copy unit needs 16-byte aligned addresses and sizes, so bytes
// before dst's first 16-byte boundary and after its last go through the group's stores; a copy
// whose src and dst disagree modulo 16, or whose aligned body is under 512 bytes
// (detail::bulk_min_bytes), goes through them entirely.
//
// How each operation meets comm.cuh's contract (in the PTX memory model):
//   put             every thread of g runs fence.proxy.async (its earlier generic accesses to
//                   src are ordered before the unit's), then g syncs and the leader issues: what
//                   any thread of g wrote to src before the call is what is sent, on every path. Blocking: the leader
//                   waits until the stores have read src (cp.async.bulk.wait_group.read) or, staged, until every load
//                   has landed, then g syncs: src may be reused. The writes at the peer complete later (quiet). Threads
//                   outside g that wrote a shared-memory src must run gpucomm::publish_for_bulk_copy() before the
//                   synchronisation that hands the tile to g.
//   put_nbi         as put without the final wait and sync. A shared-memory src must not be
//                   changed, nor the CTA exit, before quiet; a staged put_nbi still returns only
//                   when its stages are free again (the stages are the caller's scratch).
//   get             the leader waits for the writes to dst (mbarrier for shared memory, where
//                   every thread of g waits on it; bulk-group completion then fence.proxy.async
//                   for global memory), then g syncs: every thread may read dst.
//   get_nbi         as get (it completes before returning).
//   quiet, fence    every thread of g waits for the bulk copies it issued itself (bulk groups are
//                   per thread) and runs fence.proxy.async, ordering their writes before its later
//                   generic operations; then NVLinkStore's quiet (sync, fence.acq_rel.sys by the
//                   leader, sync). So quiet completes every bulk copy issued by any thread of g:
//                   call it with a group that holds the threads that issued (a put's issuer is
//                   its group's leader).
//   flush           every thread of g waits until the bulk copies it issued have read their
//                   sources (cp.async.bulk.wait_group.read), then g syncs: a shared-memory `src`
//                   may be rewritten while the writes at the peer are still landing. A staged put
//                   has read its source before it returns; the group's own stores, as they issue.
//   put_signal,     the same per-thread completion, then NVLinkStore's signal: the leader's release
//   signal          store or release fetch_add at system scope, cumulative over the bulk writes
//                   the completion ordered before it. A waiter that acquires the signal sees them.
//   barrier         the same per-thread completion, then NVLinkStore's barrier.
//   atomics         NVLinkStore's: cuda::atomic_ref<T, thread_scope_system>, relaxed, on the
//                   peer's word.
//   wait_until      the contract's: acquire loads at system scope until the comparison holds.
// Atomicity domain: NVLink/GPU atomics, the same as NVLinkStore's, so the two mix on one word
// (route may carry a PE's atomics by either). They do not mix with NIC atomics.

#include <cuda/atomic>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <type_traits>

#include "../../comm.cuh"
#include "../../detail/bulk_copy.cuh"
#include "../../detail/bulk_ptx.cuh"
#include "../../detail/copy.cuh"
#include "../../group.cuh"
#include "../../ops.hpp"
#include "../../sym_ptr.hpp"
#include "../../team.hpp"
#include "../nvlink_store/device.cuh"
#include "../nvlink_store/state.hpp"
#include "../../transport_concept.hpp"
#include "staging.cuh"

namespace gpucomm {

#if defined(__CUDACC__)
namespace detail {
/// The note of an unstaged P2PCopy call (BasicP2PCopy::note_unstaged), printed by the module's first
/// caller only.
__device__ GPUCOMM_NOINLINE inline void note_unstaged_p2p_copy(char const* op) {
  static unsigned noted = 0;
  cuda::atomic_ref<unsigned, cuda::thread_scope_device> const once(noted);
  // Relaxed: a flag, ordering nothing; the read first keeps later callers off the exchange.
  if (once.load(cuda::memory_order_relaxed) != 0 || once.exchange(1u, cuda::memory_order_relaxed) != 0) return;
  printf(
      "gpucomm: note: a P2PCopy %s from or to global memory without staging goes through the group's own "
      "stores (block %d thread %d). Pass with_staging(g, stages) to move it with the bulk-copy unit, or "
      "without_staging(g) to choose stores; GPUCOMM_DEBUG builds print this once per module.\n",
      op, blockIdx.x, threadIdx.x);
}
}  // namespace detail

/// For threads outside the calling group that wrote a P2PCopy put's shared-memory source: orders
/// those writes before the bulk-copy unit's reads (fence.proxy.async.shared::cta). Run it after
/// writing and before the synchronisation (e.g. __syncthreads) that hands the data to the group.
__device__ GPUCOMM_FORCEINLINE void publish_for_bulk_copy() { detail::fence_shared_for_bulk(); }
#endif

/// The bulk-copy transport; StageBytes, Stages and StoresInFlight shape `staging`, the shared memory
/// a put from global memory is pipelined through (see staging.cuh), and PrefetchAhead is how many
/// chunks ahead of its loads such a put asks L2 to prefetch its source (0: none). Why the defaults
/// are what they are: docs/guide/p2p_copy.md, "Why the default staging" and "Why no L2 prefetch".
template <std::size_t StageBytes = 8192, unsigned Stages = 5, unsigned StoresInFlight = default_stores_in_flight,
          unsigned PrefetchAhead = default_prefetch_ahead>
struct BasicP2PCopy {
  static constexpr char const* name = "P2PCopy";
  /// NVLinkStore's: the same operations over the same mappings, only the bytes move differently.
  static constexpr capabilities caps = NVLinkStore::caps;

  using device_state = detail::nvlink_store_state;
  using host_state = detail::nvlink_store_host;
  /// What with_staging takes for this policy: declare one per calling group in shared memory.
  using staging = p2p_staging<StageBytes, Stages, StoresInFlight>;
  /// Chunks ahead of its bulk loads that a staged put asks L2 to prefetch its source (0: none).
  static constexpr unsigned prefetch_ahead = PrefetchAhead;

#if defined(__CUDACC__)
  // Each operation takes comm<Self> with Self deduced (always this policy): naming
  // comm<BasicP2PCopy> in a member's signature would check the transport concept on the class
  // while it is still incomplete.
  template <class Self, class T>
  __device__ static T* remote(comm<Self> const& c, sym_ptr<T> p, int pe) {
    return NVLinkStore::remote(as_nvlink(c), p, pe);
  }

  template <class Self, group G, class T>
  __device__ static void put(comm<Self> const& c, G const& g, sym_ptr<T> dst, T const* src, std::size_t n, int pe,
                             bool blocking) {
    auto* const to = reinterpret_cast<unsigned char*>(remote(c, dst, pe));
    auto const* const from = reinterpret_cast<unsigned char const*>(src);
    std::size_t const bytes = n * sizeof(T);
    check_call<G>();
    if (detail::in_shared_memory(from)) {
      push_from_shared(g, to, from, bytes, blocking);
    } else if constexpr (detail::is_staged_group_v<G>) {
      copy_staged<PrefetchAhead>(g, to, from, bytes, blocking);
    } else {
      note_unstaged(g, to, from, bytes, "put");
      detail::group_copy(g, to, from, bytes);
      if (blocking) group_sync(g);
    }
  }

  template <class Self, group G, class T>
  __device__ static void get(comm<Self> const& c, G const& g, T* dst, sym_ptr<T const> src, std::size_t n, int pe,
                             bool /*blocking: every path completes before it returns*/) {
    auto* const to = reinterpret_cast<unsigned char*>(dst);
    auto const* const from = reinterpret_cast<unsigned char const*>(remote(c, src, pe));
    std::size_t const bytes = n * sizeof(T);
    check_call<G>();
    if constexpr (detail::is_staged_group_v<G>) {
      if (detail::in_shared_memory(to))
        pull_into_shared(g, to, from, bytes);
      else
        copy_staged<0>(g, to, from, bytes, /*blocking=*/true);
      if (is_leader(g)) detail::complete_own_bulk_copies();  // the stores into dst, for g's reads
      group_sync(g);
    } else {
      note_unstaged(g, to, from, bytes, "get");
      detail::group_copy(g, to, from, bytes);
      group_sync(g);
    }
  }

  template <class Self, group G, class T>
  __device__ static void put_signal(comm<Self> const& c, G const& g, sym_ptr<T> dst, T const* src, std::size_t n,
                                    sym_ptr<signal_t> sig, signal_t value, signal_op op, int pe, bool blocking) {
    put(c, g, dst, src, n, pe, blocking);
    signal(c, g, sig, value, op, pe);
  }

  template <class Self, group G>
  __device__ static void signal(comm<Self> const& c, G const& g, sym_ptr<signal_t> sig, signal_t value, signal_op op,
                                int pe) {
    detail::complete_own_bulk_copies();
    NVLinkStore::signal(as_nvlink(c), g, sig, value, op, pe);
  }

  template <atomic_op Op, class Self, class T>
  __device__ static T atomic(comm<Self> const& c, sym_ptr<T> target, T value, T compare, int pe) {
    return NVLinkStore::atomic<Op>(as_nvlink(c), target, value, compare, pe);
  }

  template <class Self, group G>
  __device__ static void quiet(comm<Self> const& c, G const& g) {
    detail::complete_own_bulk_copies();
    NVLinkStore::quiet(as_nvlink(c), g);
  }

  template <class Self, group G>
  __device__ static void fence(comm<Self> const& c, G const& g) {
    quiet(c, g);
  }

  template <class Self, group G>
  __device__ static void flush(comm<Self> const&, G const& g) {
    detail::bulk_ptx::wait_group_read<0>();
    group_sync(g);
  }

  template <class Self, group G>
  __device__ static void barrier(comm<Self> const& c, G const& g, team const& t) {
    detail::complete_own_bulk_copies();
    NVLinkStore::barrier(as_nvlink(c), g, t);
  }

 private:
  /// The same PE seen through NVLinkStore, whose device state this transport shares.
  template <class Self>
  __device__ static comm<NVLinkStore> as_nvlink(comm<Self> const& c) {
    return comm<NVLinkStore>(c.my_pe(), c.npes(), c.team_states(), c.state());
  }

  /// A staged group's stages are this policy's `staging`; and the bulk-copy unit exists (sm_90).
  template <class G>
  __device__ static void check_call() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    static_assert(sizeof(G) == 0, "gpucomm: P2PCopy needs sm_90 or newer (the bulk-copy unit, cp.async.bulk)");
#endif
    if constexpr (detail::is_staged_group_v<G>) {
      static_assert(std::is_same_v<typename G::staging_type, staging>,
                    "gpucomm: P2PCopy takes its own staging type: with_staging(g, s) with s a "
                    "BasicP2PCopy<...>::staging of the comm's own policy");
    }
  }

  /// Every thread's earlier shared-memory accesses ordered before the bulk-copy unit's (a put's
  /// source written, a get's destination read), then the group's sync hands them to the leader.
  template <group G>
  __device__ static void hand_shared_to_unit(G const& g) {
    detail::fence_shared_for_bulk();
    group_sync(g);
  }

  /// The unaligned head and tail of a split copy, by the group's stores.
  template <group G>
  __device__ static void copy_edges(G const& g, unsigned char* to, unsigned char const* from, std::size_t bytes,
                                    detail::bulk_split const& s) {
    detail::group_copy(g, to, from, s.head);
    detail::group_copy(g, to + s.tail_at(), from + s.tail_at(), bytes - s.tail_at());
  }

  template <group G>
  __device__ static void push_from_shared(G const& g, unsigned char* to, unsigned char const* from, std::size_t bytes,
                                          bool blocking) {
    auto const s =
        detail::split_for_bulk(reinterpret_cast<std::uintptr_t>(to), reinterpret_cast<std::uintptr_t>(from), bytes);
    // Whatever the path, the copy reads src after g's sync: a tile g's threads wrote just before
    // the call is sent as written.
    hand_shared_to_unit(g);
    if (s.body == 0) {
      detail::group_copy(g, to, from, bytes);
    } else {
      if (is_leader(g)) detail::bulk_store(to + s.head, from + s.head, s.body);
      copy_edges(g, to, from, bytes, s);
      if (blocking && is_leader(g)) detail::bulk_ptx::wait_group_read<0>();
    }
    if (blocking) group_sync(g);
  }

  /// GPUCOMM_DEBUG builds: the leader of a call with a plain group (no staging, no
  /// without_staging) whose body the bulk-copy unit could carry notes the choice of stores.
  template <group G>
  __device__ static void note_unstaged(G const& g, void const* to, void const* from, std::size_t bytes,
                                       char const* op) {
    if constexpr (GPUCOMM_DEBUG && !detail::is_unstaged_group_v<G>) {
      if (is_leader(g) &&
          detail::split_for_bulk(reinterpret_cast<std::uintptr_t>(to), reinterpret_cast<std::uintptr_t>(from), bytes)
                  .body != 0) {
        detail::note_unstaged_p2p_copy(op);
      }
    }
  }

  /// A put (PrefetchAhead of the policy) or get (none: its source is the peer) through g's staging.
  template <unsigned Ahead, group G>
  __device__ static void copy_staged(G const& g, unsigned char* to, unsigned char const* from, std::size_t bytes,
                                     bool blocking) {
    auto const s =
        detail::split_for_bulk(reinterpret_cast<std::uintptr_t>(to), reinterpret_cast<std::uintptr_t>(from), bytes);
    // The bulk loads (async proxy) read what g's threads may just have written to src (generic
    // proxy): every thread's fence.proxy.async, then g's sync, orders those writes before them.
    detail::bulk_ptx::fence_async_global();
    group_sync(g);
    if (s.body == 0) {
      detail::group_copy(g, to, from, bytes);
    } else {
      copy_edges(g, to, from, bytes, s);
      staging& st = g.staging();
      if (is_leader(g))
        detail::bulk_copy_staged<StageBytes, Stages, StoresInFlight, Ahead>(to + s.head, from + s.head, s.body,
                                                                            st.stage, st.full);
    }
    if (blocking) group_sync(g);
  }

  template <group G>
  __device__ static void pull_into_shared(G const& g, unsigned char* to, unsigned char const* from, std::size_t bytes) {
    auto const s =
        detail::split_for_bulk(reinterpret_cast<std::uintptr_t>(to), reinterpret_cast<std::uintptr_t>(from), bytes);
    if (s.body == 0) {
      detail::group_copy(g, to, from, bytes);
      return;
    }
    std::uint64_t* const bar = &g.staging().full[0];
    hand_shared_to_unit(g);
    if (is_leader(g)) {
      detail::init_mbarriers(bar, 1);
      detail::bulk_load(to + s.head, from + s.head, s.body, bar);
    }
    copy_edges(g, to, from, bytes, s);
    // Every thread waits on the mbarrier itself: its completion is what makes the unit's writes
    // visible to a waiting thread. The sync then keeps the leader from invalidating it early.
    group_sync(g);
    detail::wait_mbarrier(bar, 0);
    group_sync(g);
    if (is_leader(g)) detail::inval_mbarriers(bar, 1);
  }
#endif  // __CUDACC__
};

/// The bulk-copy transport with the default staging (see BasicP2PCopy).
using P2PCopy = BasicP2PCopy<>;

/// The recommended policy for puts from global memory: 8 stages of 16 KiB (131,200 bytes with the
/// mbarriers), too large for a static __shared__ variable, so the staging lives in the launch's
/// dynamic shared memory (gpucomm::dynamic_staging). One thread keeps 112 KiB of loads in flight.
using P2PCopy128K = BasicP2PCopy<16384, 8>;

}  // namespace gpucomm
