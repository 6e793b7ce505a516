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
// except for `barrier` on one team, which exactly one group per PE calls at a time (barriers on
// different teams may run at once).
//
// What a transport lacks is not there: `requires { c.get(g, dst, src, n, pe); }` is false for a
// transport without get, and a call fails to compile naming the capability
// (gpucomm::transport_lacks<gpucomm::capability::get>). The can_* concepts of
// contract.cuh say the same. Operations a transport does not write itself (put_signal,
// fence, barrier, wait_until) come from the contract, built from its primitives.
//
// Local buffers: a put's or put_signal's `src` and a get's `dst` may be anywhere a kernel addresses,
// on every transport: the symmetric heap, a buffer given to world::register_buffer, any other
// device memory, shared memory, a local variable. A local variable is each thread's own, so a put
// from one sends the same bytes only when every thread of g holds them (or g is one thread), and a
// get into one is whole only for a group of one thread (load/store paths fill each thread's share
// of its own copy, staged ones every thread's copy). Where a NIC moves the bytes (IBGDAPost,
// ProxyQueue's network backend), the heap and registered buffers go straight to it and the rest
// through the PE's staging slots (detail/staging.cuh), one extra copy per byte. Remote addresses
// are always symmetric.
//
// Operations that need per-group scratch take it from the caller (scratch.hpp); none of these do,
// except that fetching operations and the group wait_until of a group without shfl need
// `gpucomm::with_scratch(g, storage)` as their group.
//
// Ordering and visibility (OpenSHMEM 1.5 semantics, stated in the CUDA memory model):
//   put, get          put returns when `src` may be reused by any thread of g; get returns when
//                     `dst` holds the data and every thread of g may read it. Neither says when a
//                     put is visible at the target: use put_signal, fence, quiet or barrier.
//   *_nbi             return at once; `src` may not be changed and `dst` not read until `quiet`
//                     (a put's `src` may be changed after `flush`).
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
//                     delivered before those it issues after it. Without one, two puts to a PE may
//                     land in either order, even on the same bytes (ProxyQueue carries small ones
//                     by the GPU's stores and large ones by a copy engine). To publish data with
//                     a flag after a fence, write the flag with `signal` or the atomic `set`: a
//                     flag written by `put` is ordered on the wire, but a reader that polls it
//                     races with the write in the CUDA memory model.
//   flush             the sources of every put and put_signal the group issued before have been
//                     read: any thread of g may change them. Nothing is said about delivery (the
//                     data may still be on its way: quiet, fence or barrier say when it lands).
//                     Its cost follows the transport: a group sync on NVLinkStore, the bulk
//                     reads of its copies on P2PCopy, and quiet on IBGDAPost and ProxyQueue,
//                     whose NIC or copy engine reports a copy only once it has landed.
//   quiet             everything the group issued before (puts, put_nbi, get_nbi, signals,
//                     atomics) is complete: delivered and visible to any thread that synchronises
//                     with this PE afterwards.
//   barrier           quiet, then wait until every PE's group has called barrier; afterwards every
//                     PE's pre-barrier writes are visible to every thread of g. barrier(g, team)
//                     does the same over the team's PEs (teams: team.hpp); barrier(g) is the world
//                     team's.

#include <cstddef>
#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__)
#include <cuda/atomic>
#endif

#include "config.hpp"
#include "detail/control_block.hpp"
#include "detail/device_check.cuh"
#include "group.cuh"
#include "ops.hpp"
#include "scratch.hpp"
#include "sym_ptr.hpp"
#include "team.hpp"
#include "contract.cuh"
#include "transport_concept.hpp"

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
#if defined(__CUDACC__)
  /// Whether the transport can perform atomic Op on T: atomics for integers, float add for float
  /// and double add. A T that no atomic takes passes here, and check_atomic rejects it by name.
  template <class T, atomic_op Op>
  static consteval bool atomic_capable() {
    if constexpr (!can_atomics<Transport>)
      return false;
    else if constexpr ((Op == atomic_op::fetch_add || Op == atomic_op::add) &&
                       (std::is_same_v<T, float> || std::is_same_v<T, double>))
      return can_float_add<Transport>;
    else
      return true;
  }
  /// What an atomic the transport cannot perform returns: the missing capability, by name.
  template <class T, atomic_op Op>
  using lacking = std::conditional_t<can_atomics<Transport>, transport_lacks<capability::float_add>,
                                     transport_lacks<capability::atomics>>;
#endif

 public:
  using transport_type = Transport;
  using device_state = typename Transport::device_state;

  comm() = default;
  /// `team_states`: this PE's control block, at its first team slot (world.hpp hands out comms;
  /// composite transports build their legs' from their own).
  GPUCOMM_HD constexpr comm(int my_pe, int npes, std::uint64_t* team_states, device_state const& state) noexcept
      : my_pe_(my_pe), npes_(npes), team_states_(team_states), state_(state) {}

  /// This PE's index, 0 <= my_pe() < npes().
  GPUCOMM_HD constexpr int my_pe() const noexcept { return my_pe_; }
  /// The number of PEs in the world.
  GPUCOMM_HD constexpr int npes() const noexcept { return npes_; }
  /// The transport's device state (for transport implementers).
  GPUCOMM_HD constexpr device_state const& state() const noexcept { return state_; }

  // ---- teams --------------------------------------------------------------------------------------

  /// The team of every PE (rank = world PE).
  GPUCOMM_HD constexpr team world_team() const noexcept {
    return {0, 1, npes_, detail::control_block_layout::world_slot};
  }
  /// This PE's rank in t, or -1 when it is not a member.
  GPUCOMM_HD constexpr int team_rank(team const& t) const noexcept {
    return t.slot == detail::control_block_layout::world_slot ? my_pe_ : t.rank_of(my_pe_);
  }

  // ---- for transport implementers and the contract -------------------------------------------------

  /// Team t's barrier words at this PE (control block, detail/control_block.hpp).
  GPUCOMM_HD GPUCOMM_FORCEINLINE detail::team_words team_state(team const& t) const noexcept {
    return detail::team_words_at(team_states_, npes_, t.slot);
  }
  /// This PE's control block at its first team slot, as the constructor took it.
  GPUCOMM_HD constexpr std::uint64_t* team_states() const noexcept { return team_states_; }
  /// The control block's header (for debug reports).
  GPUCOMM_HD constexpr std::uint64_t const* control_header() const noexcept {
    return team_states_ ? detail::control_header(team_states_) : nullptr;
  }

#if defined(__CUDACC__)
  static_assert(signatures_match_capabilities<Transport>());

  // ---- data movement ----------------------------------------------------------------------------
  // In every put and get, the n elements at `src` and those at `dst` (at the PE they live on) must
  // not overlap, as in OpenSHMEM: transports copy in any order (NVLinkStore loads two elements per
  // thread before it stores them). A put to this PE between disjoint parts of one buffer is fine;
  // onto the same or an overlapping range it is undefined.

  /// Copy n elements from local `src` to `dst` at PE `pe`. Returns when `src` may be reused.
  template <class G, class T>
  requires can_put<Transport> __device__ void put(G const& g, sym_ptr<T> dst, T const* src, std::size_t n,
                                                  int pe) const {
    require_group<G>();
    Transport::put(*this, g, dst, src, n, pe, /*blocking=*/true);
  }
  template <class G, class T>
  requires(!can_put<Transport>) __device__ transport_lacks<capability::put> put(G const&, sym_ptr<T>, T const*,
                                                                                std::size_t, int)
  const;

  /// As put, but returns at once; `src` may be reused after `quiet`.
  template <class G, class T>
  requires can_put<Transport> __device__ void put_nbi(G const& g, sym_ptr<T> dst, T const* src, std::size_t n,
                                                      int pe) const {
    require_group<G>();
    Transport::put(*this, g, dst, src, n, pe, /*blocking=*/false);
  }
  template <class G, class T>
  requires(!can_put<Transport>) __device__ transport_lacks<capability::put> put_nbi(G const&, sym_ptr<T>, T const*,
                                                                                    std::size_t, int)
  const;

  /// Copy n elements from `src` at PE `pe` to local `dst`. Returns when `dst` holds them.
  template <class G, class T>
  requires can_get<Transport> __device__ void get(G const& g, T* dst, std::type_identity_t<sym_ptr<T const>> src,
                                                  std::size_t n, int pe) const {
    require_group<G>();
    Transport::get(*this, g, dst, src, n, pe, /*blocking=*/true);
  }
  template <class G, class T>
  requires(!can_get<Transport>) __device__ transport_lacks<capability::get> get(G const&, T*,
                                                                                std::type_identity_t<sym_ptr<T const>>,
                                                                                std::size_t, int)
  const;

  /// As get, but returns at once; `dst` holds the data after `quiet`.
  template <class G, class T>
  requires can_get<Transport> __device__ void get_nbi(G const& g, T* dst, std::type_identity_t<sym_ptr<T const>> src,
                                                      std::size_t n, int pe) const {
    require_group<G>();
    Transport::get(*this, g, dst, src, n, pe, /*blocking=*/false);
  }
  template <class G, class T>
  requires(!can_get<Transport>) __device__ transport_lacks<capability::get> get_nbi(
      G const&, T*, std::type_identity_t<sym_ptr<T const>>, std::size_t, int)
  const;

  /// put, then update signal `sig` at PE `pe` by `op` with `value`; the data is delivered before
  /// the update is visible. Returns when `src` may be reused.
  template <class G, class T>
  requires can_put_signal<Transport> __device__ void put_signal(G const& g, sym_ptr<T> dst, T const* src, std::size_t n,
                                                                sym_ptr<signal_t> sig, signal_t value, signal_op op,
                                                                int pe) const {
    require_group<G>();
    contract::put_signal(*this, g, dst, src, n, sig, value, op, pe, /*blocking=*/true);
  }
  template <class G, class T>
  requires(!can_put_signal<Transport>) __device__ transport_lacks<capability::put_signal> put_signal(
      G const&, sym_ptr<T>, T const*, std::size_t, sym_ptr<signal_t>, signal_t, signal_op, int)
  const;

  /// As put_signal, but returns at once; `src` may be reused after `quiet`.
  template <class G, class T>
  requires can_put_signal<Transport> __device__ void put_signal_nbi(G const& g, sym_ptr<T> dst, T const* src,
                                                                    std::size_t n, sym_ptr<signal_t> sig,
                                                                    signal_t value, signal_op op, int pe) const {
    require_group<G>();
    contract::put_signal(*this, g, dst, src, n, sig, value, op, pe, /*blocking=*/false);
  }
  template <class G, class T>
  requires(!can_put_signal<Transport>) __device__ transport_lacks<capability::put_signal> put_signal_nbi(
      G const&, sym_ptr<T>, T const*, std::size_t, sym_ptr<signal_t>, signal_t, signal_op, int)
  const;

  // ---- signals ----------------------------------------------------------------------------------

  /// Update signal `sig` at PE `pe` by `op` with `value`, released after the group's earlier writes.
  template <class G>
  requires can_signal<Transport> __device__ void signal(G const& g, sym_ptr<signal_t> sig, signal_t value, signal_op op,
                                                        int pe) const {
    require_group<G>();
    Transport::signal(*this, g, sig, value, op, pe);
  }
  template <class G>
  requires(!can_signal<Transport>) __device__ transport_lacks<capability::signal> signal(G const&, sym_ptr<signal_t>,
                                                                                         signal_t, signal_op, int)
  const;

  /// Wait until the local signal word satisfies `*sig <c> value`; returns the value that did.
  /// Called by one thread; acquire at system scope.
  __device__ signal_t wait_until(sym_ptr<signal_t> sig, cmp c, signal_t value) const {
    return contract::wait_until(*this, sig, c, value);
  }

  /// Group form: the leader waits, then the group synchronises, so every thread of g sees what
  /// the signaller released. Returns the value that satisfied the comparison to every thread.
  /// (A user group without shfl cannot pass the leader's value around: there each thread returns
  /// the word as it reads it after the leader's wait, which is the same value unless the word is
  /// updated again meanwhile; give it `with_scratch(g, storage)` to get the leader's.)
  template <class G>
  __device__ signal_t wait_until(G const& g, sym_ptr<signal_t> sig, cmp c, signal_t value) const {
    require_group<G>();
    signal_t seen = 0;
    if (is_leader(g)) seen = contract::wait_until(*this, sig, c, value);
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
  // Each exists where the transport has atomics (and float add, for float and double). A fetching
  // one returns the old value to every thread, so its group must be able to broadcast (a
  // cooperative_groups group, a user group with shfl, or with_scratch(g, storage)).

  template <class G, class T>
  requires(atomic_capable<T, atomic_op::fetch_add>()) __device__ T
      fetch_add(G const& g, sym_ptr<T> target, T value, int pe)
  const {
    require_group<G>();
    return fetching<atomic_op::fetch_add>(g, target, value, T{}, pe);
  }
  template <class G, class T>
  requires(atomic_capable<T, atomic_op::add>()) __device__
      void add(G const& g, sym_ptr<T> target, T value, int pe) const {
    require_group<G>();
    nonfetching<atomic_op::add>(g, target, value, pe);
  }
  template <class G, class T>
  requires(atomic_capable<T, atomic_op::fetch_and>()) __device__ T
      fetch_and(G const& g, sym_ptr<T> target, T value, int pe)
  const {
    require_group<G>();
    return fetching<atomic_op::fetch_and>(g, target, value, T{}, pe);
  }
  template <class G, class T>
  requires(atomic_capable<T, atomic_op::fetch_or>()) __device__ T
      fetch_or(G const& g, sym_ptr<T> target, T value, int pe)
  const {
    require_group<G>();
    return fetching<atomic_op::fetch_or>(g, target, value, T{}, pe);
  }
  template <class G, class T>
  requires(atomic_capable<T, atomic_op::fetch_xor>()) __device__ T
      fetch_xor(G const& g, sym_ptr<T> target, T value, int pe)
  const {
    require_group<G>();
    return fetching<atomic_op::fetch_xor>(g, target, value, T{}, pe);
  }
  /// Store `value`, return the old value.
  template <class G, class T>
  requires(atomic_capable<T, atomic_op::swap>()) __device__ T swap(G const& g, sym_ptr<T> target, T value, int pe)
  const {
    require_group<G>();
    return fetching<atomic_op::swap>(g, target, value, T{}, pe);
  }
  /// If the word equals `expected`, store `desired`; return the old value either way.
  template <class G, class T>
  requires(atomic_capable<T, atomic_op::compare_swap>()) __device__ T
      compare_swap(G const& g, sym_ptr<T> target, T expected, T desired, int pe)
  const {
    require_group<G>();
    return fetching<atomic_op::compare_swap>(g, target, desired, expected, pe);
  }
  /// Atomic load.
  template <class G, class T>
  requires(atomic_capable<T, atomic_op::fetch>()) __device__ T fetch(G const& g, sym_ptr<T> target, int pe)
  const {
    require_group<G>();
    return fetching<atomic_op::fetch>(g, target, T{}, T{}, pe);
  }
  /// Atomic store.
  template <class G, class T>
  requires(atomic_capable<T, atomic_op::set>()) __device__
      void set(G const& g, sym_ptr<T> target, T value, int pe) const {
    require_group<G>();
    nonfetching<atomic_op::set>(g, target, value, pe);
  }

  // The same operations where the transport lacks the capability.
  template <class G, class T>
  requires(!atomic_capable<T, atomic_op::fetch_add>()) __device__ lacking<T, atomic_op::fetch_add> fetch_add(G const&,
                                                                                                             sym_ptr<T>,
                                                                                                             T, int)
  const;
  template <class G, class T>
  requires(!atomic_capable<T, atomic_op::add>()) __device__ lacking<T, atomic_op::add> add(G const&, sym_ptr<T>, T, int)
  const;
  template <class G, class T>
  requires(!atomic_capable<T, atomic_op::fetch_and>()) __device__ lacking<T, atomic_op::fetch_and> fetch_and(G const&,
                                                                                                             sym_ptr<T>,
                                                                                                             T, int)
  const;
  template <class G, class T>
  requires(!atomic_capable<T, atomic_op::fetch_or>()) __device__ lacking<T, atomic_op::fetch_or> fetch_or(G const&,
                                                                                                          sym_ptr<T>, T,
                                                                                                          int)
  const;
  template <class G, class T>
  requires(!atomic_capable<T, atomic_op::fetch_xor>()) __device__ lacking<T, atomic_op::fetch_xor> fetch_xor(G const&,
                                                                                                             sym_ptr<T>,
                                                                                                             T, int)
  const;
  template <class G, class T>
  requires(!atomic_capable<T, atomic_op::swap>()) __device__ lacking<T, atomic_op::swap> swap(G const&, sym_ptr<T>, T,
                                                                                              int)
  const;
  template <class G, class T>
  requires(!atomic_capable<T, atomic_op::compare_swap>())
      __device__ lacking<T, atomic_op::compare_swap> compare_swap(G const&, sym_ptr<T>, T, T, int)
  const;
  template <class G, class T>
  requires(!atomic_capable<T, atomic_op::fetch>()) __device__ lacking<T, atomic_op::fetch> fetch(G const&, sym_ptr<T>,
                                                                                                 int)
  const;
  template <class G, class T>
  requires(!atomic_capable<T, atomic_op::set>()) __device__ lacking<T, atomic_op::set> set(G const&, sym_ptr<T>, T, int)
  const;

  // ---- ordering and synchronisation -------------------------------------------------------------

  /// Order the group's earlier operations to each PE before its later ones.
  template <class G>
  requires can_fence<Transport> __device__ void fence(G const& g) const {
    require_group<G>();
    contract::fence(*this, g);
  }
  template <class G>
  requires(!can_fence<Transport>) __device__ transport_lacks<capability::fence> fence(G const&)
  const;

  /// The sources of the group's earlier puts may be reused; they may not have landed yet.
  template <class G>
  requires can_flush<Transport> __device__ void flush(G const& g) const {
    require_group<G>();
    contract::flush(*this, g);
  }
  template <class G>
  requires(!can_flush<Transport>) __device__ transport_lacks<capability::quiet> flush(G const&)
  const;

  /// Complete every operation the group issued before.
  template <class G>
  requires can_quiet<Transport> __device__ void quiet(G const& g) const {
    require_group<G>();
    Transport::quiet(*this, g);
  }
  template <class G>
  requires(!can_quiet<Transport>) __device__ transport_lacks<capability::quiet> quiet(G const&)
  const;

  /// Barrier over all PEs (one group per PE), including quiet.
  template <class G>
  requires can_barrier<Transport> __device__ void barrier(G const& g) const {
    require_group<G>();
    team_barrier(g, world_team());
  }
  template <class G>
  requires(!can_barrier<Transport>) __device__ transport_lacks<capability::barrier> barrier(G const&)
  const;

  /// Barrier over team t's PEs (one group per member PE), including quiet. Every member calls it;
  /// a PE outside the team must not (debug builds trap).
  template <class G>
  requires can_barrier<Transport> __device__ void barrier(G const& g, team const& t) const {
    require_group<G>();
    check_member(t, "barrier");
    team_barrier(g, t);
  }
  template <class G>
  requires(!can_barrier<Transport>) __device__ transport_lacks<capability::barrier> barrier(G const&, team const&)
  const;

  /// A pointer to PE `pe`'s copy of `p`, for transports whose peers threads can load and store.
  template <class T>
  requires can_load_store<Transport> __device__ T* remote(sym_ptr<T> p, int pe) const {
    return Transport::remote(*this, p, pe);
  }
  template <class T>
  requires(!can_load_store<Transport>) __device__ transport_lacks<capability::load_store> remote(sym_ptr<T>, int)
  const;

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
    if constexpr (Op == atomic_op::fetch_add || Op == atomic_op::add) {
      static_assert(atomic_addable<T>, "gpucomm: atomic add takes a 32- or 64-bit integer, float or double");
    } else {
      static_assert(atomic_integer<T>, "gpucomm: atomics other than add take a 32- or 64-bit integer");
    }
  }
  /// Whether atomic Op takes T at all (check_atomic's condition, without the message).
  template <class T, atomic_op Op>
  GPUCOMM_HD static constexpr bool atomic_type_ok() {
    if constexpr (Op == atomic_op::fetch_add || Op == atomic_op::add)
      return atomic_addable<T>;
    else
      return atomic_integer<T>;
  }

  template <atomic_op Op, group G, class T>
  __device__ T fetching(G const& g, sym_ptr<T> target, T value, T compare, int pe) const {
    check_atomic<T, Op>();
    T old{};
    if constexpr (atomic_type_ok<T, Op>()) {
      if (is_leader(g)) old = Transport::template atomic<Op>(*this, target, value, compare, pe);
    }
    return broadcast_from_leader(g, old);
  }

  template <atomic_op Op, group G, class T>
  __device__ void nonfetching(G const& g, sym_ptr<T> target, T value, int pe) const {
    check_atomic<T, Op>();
    if constexpr (atomic_type_ok<T, Op>()) {
      if (is_leader(g)) Transport::template atomic<Op>(*this, target, value, T{}, pe);
    }
  }

  template <group G>
  __device__ GPUCOMM_FORCEINLINE void team_barrier(G const& g, team const& t) const {
    if constexpr (provides_barrier<Transport>)
      Transport::barrier(*this, g, t);
    else
      contract::barrier(*this, g, t);
  }

  __device__ GPUCOMM_FORCEINLINE void check_member(team const& t, char const* op) const {
#if GPUCOMM_DEBUG
    if (!t.valid()) detail::device_misuse(op, "the team is empty (a PE outside a split got no team)");
    if (team_rank(t) < 0) detail::device_misuse(op, "this PE is not a member of the team");
    std::uint64_t const* header = control_header();
    if (header && static_cast<std::uint64_t>(t.slot) >= header[detail::control_block_layout::header_max_teams])
      detail::device_misuse(op, "the team's slot is outside this world's control block (a team of another world?)");
#else
    (void)t;
    (void)op;
#endif
  }
#endif  // __CUDACC__

 private:
  int my_pe_ = 0;
  int npes_ = 0;
  std::uint64_t* team_states_ = nullptr;
  device_state state_{};
};

}  // namespace gpucomm
