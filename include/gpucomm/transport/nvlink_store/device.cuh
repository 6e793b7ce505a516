#pragma once
// NVLinkStore, device side: peers' memory mapped into this GPU's address space (NVLink, PCIe P2P,
// or the same GPU for PEs that share one), moved by the calling group's own loads and stores. The
// host half is nvlink_store/host.hpp.
//
// Every op of comm<NVLinkStore> is implemented. How each meets comm.cuh's ordering contract:
//   put / get       the group copies with the widest vectors the addresses allow (detail/copy.cuh);
//                   the blocking forms end with the group's sync, so `src` (put) may be reused and
//                   `dst` (get) read by every thread of the group.
//   put_signal,     the group's stores, the group's sync (CTA-scope ordering of all the group's
//   signal          stores before the leader's next operation), then the leader's release store or
//                   release fetch_add at system scope on the peer's signal word. Release
//                   cumulativity makes every store ordered before it visible to a thread that
//                   acquires the signal.
//   atomics         cuda::atomic_ref<T, thread_scope_system> on the peer's word, relaxed (NVLink
//                   carries atomics natively; they are atomic with every other NVLink or local GPU
//                   atomic on that word).
//   fence, quiet    the group's sync, a fence.acq_rel at system scope by the leader (cumulative
//                   over the group's stores, which the sync ordered before it), and a second sync:
//                   every store the group issued before is ordered before any store any of its
//                   threads issues after (fence), and before the leader's next signal or atomic,
//                   so visible to whoever synchronises with this PE through it (quiet). The same
//                   instructions serve both, since stores are all NVLinkStore has to complete.
//   flush           the group's sync: each thread loaded its part of `src` before it stored it,
//                   so once all have passed the sync any of them may change `src`.
//   barrier         its own, faster than the contract's: the group's sync; the leader fences once
//                   and writes this PE's barrier epoch of the team into its flag word at every
//                   member (a release pattern at system scope, one fence for all members); the
//                   group's threads then share the waiting for every member's flag to reach the
//                   epoch (acquire). Epochs only grow, so no flag is ever reset and back-to-back
//                   barriers cannot be confused.
//   wait_until      the contract's: acquire loads at system scope until the comparison holds.
// Atomicity domain: NVLink/GPU atomics. They do not mix with NIC atomics on the same word.

#include <cuda/atomic>

#include <cstddef>
#include <cstdint>

#include "../../comm.cuh"
#include "../../detail/copy.cuh"
#include "../../detail/device_check.cuh"
#include "../../detail/signal_wait.cuh"
#include "../../group.cuh"
#include "../../ops.hpp"
#include "../../sym_ptr.hpp"
#include "../../team.hpp"
#include "../../transport_concept.hpp"
#include "state.hpp"

namespace gpucomm {

struct NVLinkStore {
  static constexpr char const* name = "NVLinkStore";
  static constexpr capabilities caps{.put = true,
                                     .get = true,
                                     .put_signal = true,
                                     .signal = true,
                                     .atomics = true,
                                     .float_add = true,
                                     .fence = true,
                                     .quiet = true,
                                     .barrier = true,
                                     .load_store = true};

  using device_state = detail::nvlink_store_state;
  using host_state = detail::nvlink_store_host;

#if defined(__CUDACC__)
  template <class T>
  __device__ static T* remote(comm<NVLinkStore> const& c, sym_ptr<T> p, int pe) {
    detail::check_pe(pe, c.npes());
    detail::check_symmetric(p.get(), c.control_header(), c.state().stride, "NVLinkStore");
    auto const distance = static_cast<std::ptrdiff_t>(pe - c.my_pe()) * static_cast<std::ptrdiff_t>(c.state().stride);
    // The heap maps PE j's slot `distance` bytes from ours in this address space (host/detail/heap.hpp).
    return reinterpret_cast<T*>(reinterpret_cast<char*>(const_cast<std::remove_const_t<T>*>(p.get())) + distance);
  }

  template <group G, class T>
  __device__ static void put(comm<NVLinkStore> const& c, G const& g, sym_ptr<T> dst, T const* src, std::size_t n,
                             int pe, bool blocking) {
    detail::group_copy(g, remote(c, dst, pe), src, n * sizeof(T));
    if (blocking) group_sync(g);
  }

  template <group G, class T>
  __device__ static void get(comm<NVLinkStore> const& c, G const& g, T* dst, sym_ptr<T const> src, std::size_t n,
                             int pe, bool blocking) {
    detail::group_copy(g, dst, remote(c, src, pe), n * sizeof(T));
    if (blocking) group_sync(g);
  }

  template <group G, class T>
  __device__ static void put_signal(comm<NVLinkStore> const& c, G const& g, sym_ptr<T> dst, T const* src, std::size_t n,
                                    sym_ptr<signal_t> sig, signal_t value, signal_op op, int pe,
                                    bool /*blocking: the sync below already frees src*/) {
    detail::group_copy(g, remote(c, dst, pe), src, n * sizeof(T));
    signal(c, g, sig, value, op, pe);
  }

  template <group G>
  __device__ static void signal(comm<NVLinkStore> const& c, G const& g, sym_ptr<signal_t> sig, signal_t value,
                                signal_op op, int pe) {
    // The sync orders every thread's earlier stores before the leader's release (CTA scope), and
    // the release at system scope carries them to the peer ahead of the signal.
    group_sync(g);
    if (is_leader(g)) {
      cuda::atomic_ref<signal_t, cuda::thread_scope_system> word(*remote(c, sig, pe));
      if (op == signal_op::set)
        word.store(value, cuda::memory_order_release);
      else
        word.fetch_add(value, cuda::memory_order_release);
    }
  }

  template <atomic_op Op, class T>
  __device__ static T atomic(comm<NVLinkStore> const& c, sym_ptr<T> target, T value, T compare, int pe) {
    cuda::atomic_ref<T, cuda::thread_scope_system> word(*remote(c, target, pe));
    constexpr auto relaxed = cuda::memory_order_relaxed;
    if constexpr (Op == atomic_op::fetch_add || Op == atomic_op::add)
      return word.fetch_add(value, relaxed);
    else if constexpr (Op == atomic_op::fetch_and)
      return word.fetch_and(value, relaxed);
    else if constexpr (Op == atomic_op::fetch_or)
      return word.fetch_or(value, relaxed);
    else if constexpr (Op == atomic_op::fetch_xor)
      return word.fetch_xor(value, relaxed);
    else if constexpr (Op == atomic_op::swap)
      return word.exchange(value, relaxed);
    else if constexpr (Op == atomic_op::compare_swap) {
      word.compare_exchange_strong(compare, value, relaxed, relaxed);
      return compare;  // the old value, whether or not it matched
    } else if constexpr (Op == atomic_op::fetch)
      return word.load(relaxed);
    else {
      static_assert(Op == atomic_op::set);
      word.store(value, relaxed);
      return T{};
    }
  }

  template <group G>
  __device__ static void quiet(comm<NVLinkStore> const&, G const& g) {
    // The first sync puts every store of the group before the leader's fence in causality order;
    // the leader's fence at system scope is cumulative over them, so they are complete before any
    // operation the leader performs afterwards (signals and atomics are always the leader's). The
    // second sync holds the other threads' later stores back until the fence has completed.
    // One fence per group instead of one per thread: fences are what small operations wait on.
    group_sync(g);
    if (is_leader(g)) cuda::atomic_thread_fence(cuda::memory_order_acq_rel, cuda::thread_scope_system);
    group_sync(g);
  }

  template <group G>
  __device__ static void fence(comm<NVLinkStore> const& c, G const& g) {
    quiet(c, g);
  }

  template <group G>
  __device__ static void flush(comm<NVLinkStore> const&, G const& g) {
    group_sync(g);
  }

  template <group G>
  __device__ static void barrier(comm<NVLinkStore> const& c, G const& g, team const& t) {
    detail::team_words const s = c.team_state(t);
    std::uint64_t const epoch = detail::next_epoch(g, s.epoch);
    if (is_leader(g)) {
      // Fence then relaxed stores, in one thread: a release pattern at system scope. Everything
      // the group wrote before the barrier (ordered before the fence by next_epoch's sync) reaches
      // each member before the epoch does. One fence, however many members.
      cuda::atomic_thread_fence(cuda::memory_order_acq_rel, cuda::thread_scope_system);
      sym_ptr<std::uint64_t> const mine(s.flags + c.team_rank(t));
      for (int r = 0; r < t.size; ++r) {
        cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system>(*remote(c, mine, t.pe_of(r)))
            .store(epoch, cuda::memory_order_relaxed);
      }
    }
    detail::wait_for_epochs(g, s.flags, t, epoch, c.control_header());
  }

#endif  // __CUDACC__
};

}  // namespace gpucomm
