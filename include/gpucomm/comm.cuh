#pragma once
// comm<Transport>: the device handle through which a kernel talks to the other PEs.
//
//   __global__ void ring(gpucomm::comm<gpucomm::NVLinkStore> c, gpucomm::sym_ptr<int> buf, int n) {
//     auto block = cooperative_groups::this_thread_block();
//     int const next = (c.my_pe() + 1) % c.npes();
//     c.put(block, buf + n, buf.get(), n, next);  // my first n ints into next's second n
//     c.barrier(block);                           // everyone's data has landed
//   }
//
// A comm is trivially copyable and passed by value; the world hands one out per PE
// (`world.comm<NVLinkStore>(pe)`). It holds no pointer to host objects and needs no -rdc, no
// device globals and no module initialisation.
//
// Calling convention: the first argument `g` is the calling group (group.cuh). Every thread of g
// calls with the same arguments; the threads share the data movement and the leader (rank 0)
// performs single actions (signals, atomics). The same PE may have many groups calling at once,
// except for `barrier`, which exactly one group per PE calls at a time.
//
// Ordering and visibility (OpenSHMEM 1.5 semantics, stated in the CUDA memory model):
//   put, get          put returns when `src` may be reused by any thread of g; get returns when
//                     `dst` holds the data and every thread of g may read it. Neither says when a
//                     put is visible at the target: use put_signal, fence, quiet or barrier.
//   *_nbi             return at once; `src` may not be changed and `dst` not read until `quiet`.
//   put_signal        the data is delivered before the signal update is visible: a thread at the
//                     target that observes the update with wait_until (an acquire) also observes
//                     the data. The update is a release at system scope ordering everything the
//                     group wrote before the call.
//   signal            an atomic update of the signal word at the target, released at system scope
//                     after everything the group wrote before the call.
//   wait_until        spins on a local signal word until the comparison holds; the successful
//                     load is an acquire at system scope, so what the signaller released is
//                     visible to the waiting thread (and, for the group form, to all of g).
//   atomics           relaxed atomic read-modify-writes at system scope on the target's word,
//                     performed once per call by the leader, atomic with respect to every other
//                     gpucomm atomic of the same transport on that word. Order them against puts
//                     with fence or quiet.
//   fence             puts, signals and atomics the group issued to each PE before the fence are
//                     delivered before those it issues after it. To publish data with a flag
//                     after a fence, write the flag with `signal` or the atomic `set`: a flag
//                     written by `put` is ordered on the wire, but a reader that polls it races
//                     with the write in the CUDA memory model.
//   quiet             everything the group issued before (puts, put_nbi, get_nbi, signals,
//                     atomics) is complete: delivered and visible to any thread that synchronises
//                     with this PE afterwards.
//   barrier           quiet, then wait until every PE's group has called barrier; afterwards every
//                     PE's pre-barrier writes are visible to every thread of g.

#include <cstddef>
#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__)
#include <cuda/atomic>
#endif

#include "config.hpp"
#include "group.cuh"
#include "ops.hpp"
#include "sym_ptr.hpp"
#include "transport/transport.hpp"

namespace gpucomm {

/// Integer types the atomics take: 32- and 64-bit, signed or unsigned.
template <class T>
concept atomic_integer = std::is_integral_v<T> && !std::is_same_v<T, bool> && (sizeof(T) == 4 || sizeof(T) == 8);

/// Types `fetch_add`/`add` take: the atomic integers, and float and double where the transport has
/// `caps.float_add`.
template <class T>
concept atomic_addable = atomic_integer<T> || std::is_same_v<T, float> || std::is_same_v<T, double>;

template <transport Transport>
class comm {
 public:
  using transport_type = Transport;
  using device_state = typename Transport::device_state;

  comm() = default;
  GPUCOMM_HD constexpr comm(int my_pe, int npes, device_state const& state) noexcept
      : my_pe_(my_pe), npes_(npes), state_(state) {}

  /// This PE's index, 0 <= my_pe() < npes().
  GPUCOMM_HD constexpr int my_pe() const noexcept { return my_pe_; }
  /// The number of PEs in the world.
  GPUCOMM_HD constexpr int npes() const noexcept { return npes_; }
  /// The transport's device state (for transport implementers).
  GPUCOMM_HD constexpr device_state const& state() const noexcept { return state_; }

#if defined(__CUDACC__)
  // ---- data movement ----------------------------------------------------------------------------
  // In every put and get, the n elements at `src` and those at `dst` (at the PE they live on) must
  // not overlap, as in OpenSHMEM: transports copy in any order (NVLinkStore loads two elements per
  // thread before it stores them). A put to this PE between disjoint parts of one buffer is fine;
  // onto the same or an overlapping range it is undefined.

  /// Copy n elements from local `src` to `dst` at PE `pe`. Returns when `src` may be reused.
  template <class G, class T>
  __device__ void put(G const& g, sym_ptr<T> dst, T const* src, std::size_t n, int pe) const {
    require_group<G>();
    static_assert(Transport::caps.put, "gpucomm: this transport has no put (capabilities::put is false)");
    if constexpr (Transport::caps.put) Transport::put(*this, g, dst, src, n, pe, /*blocking=*/true);
  }

  /// As put, but returns at once; `src` may be reused after `quiet`.
  template <class G, class T>
  __device__ void put_nbi(G const& g, sym_ptr<T> dst, T const* src, std::size_t n, int pe) const {
    require_group<G>();
    static_assert(Transport::caps.put, "gpucomm: this transport has no put_nbi (capabilities::put is false)");
    if constexpr (Transport::caps.put) Transport::put(*this, g, dst, src, n, pe, /*blocking=*/false);
  }

  /// Copy n elements from `src` at PE `pe` to local `dst`. Returns when `dst` holds them.
  template <class G, class T>
  __device__ void get(G const& g, T* dst, std::type_identity_t<sym_ptr<T const>> src, std::size_t n, int pe) const {
    require_group<G>();
    static_assert(Transport::caps.get, "gpucomm: this transport has no get (capabilities::get is false)");
    if constexpr (Transport::caps.get) Transport::get(*this, g, dst, src, n, pe, /*blocking=*/true);
  }

  /// As get, but returns at once; `dst` holds the data after `quiet`.
  template <class G, class T>
  __device__ void get_nbi(G const& g, T* dst, std::type_identity_t<sym_ptr<T const>> src, std::size_t n, int pe) const {
    require_group<G>();
    static_assert(Transport::caps.get, "gpucomm: this transport has no get_nbi (capabilities::get is false)");
    if constexpr (Transport::caps.get) Transport::get(*this, g, dst, src, n, pe, /*blocking=*/false);
  }

  /// put, then update signal `sig` at PE `pe` by `op` with `value`; the data is delivered before
  /// the update is visible. Returns when `src` may be reused.
  template <class G, class T>
  __device__ void put_signal(G const& g, sym_ptr<T> dst, T const* src, std::size_t n, sym_ptr<signal_t> sig,
                             signal_t value, signal_op op, int pe) const {
    require_group<G>();
    static_assert(Transport::caps.put_signal,
                  "gpucomm: this transport has no put_signal (capabilities::put_signal is false)");
    if constexpr (Transport::caps.put_signal)
      Transport::put_signal(*this, g, dst, src, n, sig, value, op, pe, /*blocking=*/true);
  }

  /// As put_signal, but returns at once; `src` may be reused after `quiet`.
  template <class G, class T>
  __device__ void put_signal_nbi(G const& g, sym_ptr<T> dst, T const* src, std::size_t n, sym_ptr<signal_t> sig,
                                 signal_t value, signal_op op, int pe) const {
    require_group<G>();
    static_assert(Transport::caps.put_signal,
                  "gpucomm: this transport has no put_signal_nbi (capabilities::put_signal is false)");
    if constexpr (Transport::caps.put_signal)
      Transport::put_signal(*this, g, dst, src, n, sig, value, op, pe, /*blocking=*/false);
  }

  // ---- signals ----------------------------------------------------------------------------------

  /// Update signal `sig` at PE `pe` by `op` with `value`, released after the group's earlier writes.
  template <class G>
  __device__ void signal(G const& g, sym_ptr<signal_t> sig, signal_t value, signal_op op, int pe) const {
    require_group<G>();
    static_assert(Transport::caps.signal, "gpucomm: this transport has no signal (capabilities::signal is false)");
    if constexpr (Transport::caps.signal) Transport::signal(*this, g, sig, value, op, pe);
  }

  /// Wait until the local signal word satisfies `*sig <c> value`; returns the value that did.
  /// Called by one thread; acquire at system scope.
  __device__ signal_t wait_until(sym_ptr<signal_t> sig, cmp c, signal_t value) const {
    return Transport::wait_until(*this, sig, c, value);
  }

  /// Group form: the leader waits, then the group synchronises, so every thread of g sees what
  /// the signaller released. Returns the value that satisfied the comparison to every thread.
  /// (A user group without shfl cannot pass the leader's value around: there each thread returns
  /// the word as it reads it after the leader's wait, which is the same value unless the word is
  /// updated again meanwhile.)
  template <class G>
  __device__ signal_t wait_until(G const& g, sym_ptr<signal_t> sig, cmp c, signal_t value) const {
    require_group<G>();
    signal_t seen = 0;
    if (is_leader(g)) seen = Transport::wait_until(*this, sig, c, value);
    group_sync(g);
    if constexpr (broadcasting_group<G>) {
      return broadcast_from_leader(g, seen);
    } else {
      // Every thread may read the word itself: it already satisfied the comparison once and the
      // sync above orders this load after the leader's acquire.
      return cuda_load_relaxed(sig.get());
    }
  }

  // ---- atomics (relaxed, system scope, performed once by the leader) ----------------------------

  template <class G, class T>
  __device__ T fetch_add(G const& g, sym_ptr<T> target, T value, int pe) const {
    require_group<G>();
    return fetching<atomic_op::fetch_add>(g, target, value, T{}, pe);
  }
  template <class G, class T>
  __device__ void add(G const& g, sym_ptr<T> target, T value, int pe) const {
    require_group<G>();
    nonfetching<atomic_op::add>(g, target, value, pe);
  }
  template <class G, class T>
  __device__ T fetch_and(G const& g, sym_ptr<T> target, T value, int pe) const {
    require_group<G>();
    return fetching<atomic_op::fetch_and>(g, target, value, T{}, pe);
  }
  template <class G, class T>
  __device__ T fetch_or(G const& g, sym_ptr<T> target, T value, int pe) const {
    require_group<G>();
    return fetching<atomic_op::fetch_or>(g, target, value, T{}, pe);
  }
  template <class G, class T>
  __device__ T fetch_xor(G const& g, sym_ptr<T> target, T value, int pe) const {
    require_group<G>();
    return fetching<atomic_op::fetch_xor>(g, target, value, T{}, pe);
  }
  /// Store `value`, return the old value.
  template <class G, class T>
  __device__ T swap(G const& g, sym_ptr<T> target, T value, int pe) const {
    require_group<G>();
    return fetching<atomic_op::swap>(g, target, value, T{}, pe);
  }
  /// If the word equals `expected`, store `desired`; return the old value either way.
  template <class G, class T>
  __device__ T compare_swap(G const& g, sym_ptr<T> target, T expected, T desired, int pe) const {
    require_group<G>();
    return fetching<atomic_op::compare_swap>(g, target, desired, expected, pe);
  }
  /// Atomic load.
  template <class G, class T>
  __device__ T fetch(G const& g, sym_ptr<T> target, int pe) const {
    require_group<G>();
    return fetching<atomic_op::fetch>(g, target, T{}, T{}, pe);
  }
  /// Atomic store.
  template <class G, class T>
  __device__ void set(G const& g, sym_ptr<T> target, T value, int pe) const {
    require_group<G>();
    nonfetching<atomic_op::set>(g, target, value, pe);
  }

  // ---- ordering and synchronisation -------------------------------------------------------------

  /// Order the group's earlier operations to each PE before its later ones.
  template <class G>
  __device__ void fence(G const& g) const {
    require_group<G>();
    static_assert(Transport::caps.fence, "gpucomm: this transport has no fence (capabilities::fence is false)");
    if constexpr (Transport::caps.fence) Transport::fence(*this, g);
  }

  /// Complete every operation the group issued before.
  template <class G>
  __device__ void quiet(G const& g) const {
    require_group<G>();
    static_assert(Transport::caps.quiet, "gpucomm: this transport has no quiet (capabilities::quiet is false)");
    if constexpr (Transport::caps.quiet) Transport::quiet(*this, g);
  }

  /// Barrier over all PEs (one group per PE), including quiet.
  template <class G>
  __device__ void barrier(G const& g) const {
    require_group<G>();
    static_assert(Transport::caps.barrier, "gpucomm: this transport has no barrier (capabilities::barrier is false)");
    if constexpr (Transport::caps.barrier) Transport::barrier(*this, g);
  }

  /// A pointer to PE `pe`'s copy of `p`, for transports whose peers threads can load and store.
  template <class T>
  __device__ T* remote(sym_ptr<T> p, int pe) const {
    static_assert(Transport::caps.load_store,
                  "gpucomm: remote() needs a transport whose peers are reachable by load and store "
                  "(capabilities::load_store), such as NVLinkStore");
    if constexpr (Transport::caps.load_store)
      return Transport::remote(*this, p, pe);
    else
      return nullptr;
  }

 private:
  template <class G>
  GPUCOMM_HD static constexpr void require_group() {
    static_assert(group<G>,
                  "gpucomm: the first argument must be the calling group: cooperative_groups::thread_block, "
                  "thread_block_tile<N>, coalesced_group, gpucomm::this_thread(), or a type with const "
                  "num_threads(), thread_rank() and sync() (the gpucomm::group concept)");
  }

  template <class T>
  __device__ static T cuda_load_relaxed(T const* p) {
    return cuda::atomic_ref<T const, cuda::thread_scope_system>(*p).load(cuda::memory_order_relaxed);
  }

  template <class T, atomic_op Op>
  GPUCOMM_HD static constexpr void check_atomic() {
    static_assert(Transport::caps.atomics, "gpucomm: this transport has no atomics (capabilities::atomics is false)");
    if constexpr (Op == atomic_op::fetch_add || Op == atomic_op::add) {
      static_assert(atomic_addable<T>, "gpucomm: atomic add takes a 32- or 64-bit integer, float or double");
      static_assert(atomic_integer<T> || Transport::caps.float_add,
                    "gpucomm: this transport has no floating-point atomic add (capabilities::float_add is false)");
    } else {
      static_assert(atomic_integer<T>, "gpucomm: atomics other than add take a 32- or 64-bit integer");
    }
  }

  template <atomic_op Op, group G, class T>
  __device__ T fetching(G const& g, sym_ptr<T> target, T value, T compare, int pe) const {
    check_atomic<T, Op>();
    T old{};
    if constexpr (Transport::caps.atomics) {
      if (is_leader(g)) old = Transport::template atomic<Op>(*this, target, value, compare, pe);
    }
    return broadcast_from_leader(g, old);
  }

  template <atomic_op Op, group G, class T>
  __device__ void nonfetching(G const& g, sym_ptr<T> target, T value, int pe) const {
    check_atomic<T, Op>();
    if constexpr (Transport::caps.atomics) {
      if (is_leader(g)) Transport::template atomic<Op>(*this, target, value, T{}, pe);
    }
  }
#endif  // __CUDACC__

 private:
  int my_pe_ = 0;
  int npes_ = 0;
  device_state state_{};
};

}  // namespace gpucomm
