#pragma once
// The transport contract as code: one concept per capability, checking the device signature a
// transport must have for it, and the generic operations built from those primitives.
//
// A transport provides its primitives (each a static __device__ function taking the comm first;
// G is any group, T any trivially copyable type):
//   put(c, g, sym_ptr<T> dst, T const* src, size_t n, int pe, bool blocking)       caps.put
//   get(c, g, T* dst, sym_ptr<T const> src, size_t n, int pe, bool blocking)       caps.get
//   signal(c, g, sym_ptr<signal_t> sig, signal_t value, signal_op op, int pe)      caps.signal
//   atomic<atomic_op>(c, sym_ptr<T> target, T value, T compare, int pe) -> T      caps.atomics
//       (called by the group's leader alone; T a 32- or 64-bit integer, or float and double
//       with caps.float_add)
//   quiet(c, g)                                                                   caps.quiet
//   remote(c, sym_ptr<T> p, int pe) -> T*                                         caps.load_store
// and inherits the rest, or overrides it where it can do better:
//   put_signal(c, g, dst, src, n, sig, value, op, pe, blocking)    caps.put_signal; else put,
//                                                                  fence, signal
//   fence(c, g)                                                    caps.fence; else quiet
//   barrier(c, g, team t)                                          caps.barrier; else the epoch
//                                                                  barrier below
//   wait_until(c, sig, cmp, value) -> signal_t                     optional; else a local acquire
//                                                                  spin at system scope
//   flush(c, g)                                                    optional; the sources of the
//                                                                  group's earlier puts are read
//                                                                  and may be reused (delivery may
//                                                                  come later). Default: quiet
//   quiet_pe(c, g)                                                 optional; what the generic
//                                                                  barrier completes first: every
//                                                                  operation any group of this PE
//                                                                  issued before (default: quiet)
//   progress(c)                                                    optional; called by a thread of
//                                                                  this PE that has waited on a
//                                                                  local word (wait_until, the
//                                                                  barrier) for 50 us, then after
//                                                                  twice as long each time (up to
//                                                                  10 ms): what the transport needs
//                                                                  done while its PE waits
//                                                                  (IBGDAPost rings again for lost
//                                                                  doorbells). Default: nothing
// The `can_*` concepts say what comm<Transport> offers, provided or inherited; generic code asks
// them (or `requires { c.get(g, ...); }`, which agrees).

#include <cuda/atomic>

#include <cstddef>
#include <cstdint>

#include "config.hpp"
#include "detail/bounded_wait.cuh"
#include "detail/control_block.hpp"
#include "detail/device_check.cuh"
#include "detail/signal_wait.cuh"
#include "group.cuh"
#include "ops.hpp"
#include "sym_ptr.hpp"
#include "team.hpp"
#include "transport_concept.hpp"

namespace gpucomm {

template <transport Transport>
class comm;

#if defined(__CUDACC__)

namespace detail {
/// A type the signature checks move, standing for any trivially copyable T.
struct probe_element {
  int v[3];
};
}  // namespace detail

// ---- primitives: the transport sets the capability and has the function of that form ------------

template <class T>
concept provides_put = transport<T> &&
                       T::caps.put&& requires(comm<T> const& c, single_thread g, sym_ptr<detail::probe_element> dst,
                                              detail::probe_element const* src, std::size_t n, int pe, bool blocking) {
  T::put(c, g, dst, src, n, pe, blocking);
};

template <class T>
concept provides_get = transport<T> &&
                       T::caps.get&& requires(comm<T> const& c, single_thread g, detail::probe_element* dst,
                                              sym_ptr<detail::probe_element const> src, std::size_t n, int pe,
                                              bool blocking) {
  T::get(c, g, dst, src, n, pe, blocking);
};

template <class T>
concept provides_signal = transport<T> &&
                          T::caps.signal&& requires(comm<T> const& c, single_thread g, sym_ptr<signal_t> sig,
                                                    signal_t v, signal_op op, int pe) {
  T::signal(c, g, sig, v, op, pe);
};

template <class T>
concept provides_atomics = transport<T> && T::caps.atomics&& requires(comm<T> const& c, sym_ptr<std::uint64_t> p64,
                                                                      sym_ptr<std::int32_t> p32, int pe) {
  {
    T::template atomic<atomic_op::compare_swap>(c, p64, std::uint64_t{}, std::uint64_t{}, pe)
    } -> std::same_as<std::uint64_t>;
  {
    T::template atomic<atomic_op::fetch_add>(c, p32, std::int32_t{}, std::int32_t{}, pe)
    } -> std::same_as<std::int32_t>;
};

template <class T>
concept provides_float_add = provides_atomics<T> && T::caps.float_add&& requires(comm<T> const& c, sym_ptr<float> pf,
                                                                                 sym_ptr<double> pd, int pe) {
  { T::template atomic<atomic_op::fetch_add>(c, pf, 0.f, 0.f, pe) } -> std::same_as<float>;
  { T::template atomic<atomic_op::fetch_add>(c, pd, 0.0, 0.0, pe) } -> std::same_as<double>;
};

template <class T>
concept provides_quiet = transport<T> && T::caps.quiet&& requires(comm<T> const& c, single_thread g) {
  T::quiet(c, g);
};

template <class T>
concept provides_load_store = transport<T> && T::caps.load_store&& requires(comm<T> const& c,
                                                                            sym_ptr<detail::probe_element> p, int pe) {
  { T::remote(c, p, pe) } -> std::same_as<detail::probe_element*>;
};

// ---- overrides: the transport's own version of an operation the contract can build ---------------

template <class T>
concept provides_put_signal = transport<T> && T::caps.put_signal&& requires(
    comm<T> const& c, single_thread g, sym_ptr<detail::probe_element> dst, detail::probe_element const* src,
    std::size_t n, sym_ptr<signal_t> sig, signal_t v, signal_op op, int pe, bool blocking) {
  T::put_signal(c, g, dst, src, n, sig, v, op, pe, blocking);
};

template <class T>
concept provides_fence = transport<T> && T::caps.fence&& requires(comm<T> const& c, single_thread g) {
  T::fence(c, g);
};

template <class T>
concept provides_barrier = transport<T> && T::caps.barrier&& requires(comm<T> const& c, single_thread g, team t) {
  T::barrier(c, g, t);
};

template <class T>
concept provides_wait_until = transport<T> && requires(comm<T> const& c, sym_ptr<signal_t> sig, cmp k, signal_t v) {
  { T::wait_until(c, sig, k, v) } -> std::same_as<signal_t>;
};

template <class T>
concept provides_flush = transport<T> && requires(comm<T> const& c, single_thread g) {
  T::flush(c, g);
};

template <class T>
concept provides_quiet_pe = transport<T> && requires(comm<T> const& c, single_thread g) {
  T::quiet_pe(c, g);
};

template <class T>
concept provides_progress = transport<T> && requires(comm<T> const& c) {
  T::progress(c);
};

// ---- what comm<Transport> offers ------------------------------------------------------------------

template <class T>
concept can_put = provides_put<T>;
template <class T>
concept can_get = provides_get<T>;
template <class T>
concept can_signal = provides_signal<T>;
template <class T>
concept can_atomics = provides_atomics<T>;
template <class T>
concept can_float_add = provides_float_add<T>;
template <class T>
concept can_quiet = provides_quiet<T>;
template <class T>
concept can_load_store = provides_load_store<T>;
template <class T>
concept can_fence = provides_fence<T> || provides_quiet<T>;
template <class T>
concept can_flush = provides_flush<T> || provides_quiet<T>;
template <class T>
concept can_put_signal = provides_put_signal<T> ||(provides_put<T>&& provides_signal<T>&& can_fence<T>);
template <class T>
concept can_barrier = provides_barrier<T> ||(provides_signal<T>&& provides_quiet<T>);

/// A transport that claims a capability in `caps` must have the function of the contract's form:
/// this names the first one that does not, at the transport's first use in a comm.
template <class T>
consteval bool signatures_match_capabilities() {
  static_assert(!T::caps.put || provides_put<T>,
                "gpucomm: the transport sets capabilities::put but has no put(c, g, sym_ptr<T> dst, T const* src, "
                "size_t n, int pe, bool blocking) (contract.cuh)");
  static_assert(!T::caps.get || provides_get<T>,
                "gpucomm: the transport sets capabilities::get but has no get(c, g, T* dst, sym_ptr<T const> src, "
                "size_t n, int pe, bool blocking) (contract.cuh)");
  static_assert(!T::caps.signal || provides_signal<T>,
                "gpucomm: the transport sets capabilities::signal but has no signal(c, g, sym_ptr<signal_t>, "
                "signal_t, signal_op, int pe) (contract.cuh)");
  static_assert(!T::caps.atomics || provides_atomics<T>,
                "gpucomm: the transport sets capabilities::atomics but has no atomic<op>(c, sym_ptr<T>, T value, "
                "T compare, int pe) -> T for 32- and 64-bit integers (contract.cuh)");
  static_assert(!T::caps.float_add || provides_float_add<T>,
                "gpucomm: the transport sets capabilities::float_add but its atomic<fetch_add> takes no float and "
                "double (contract.cuh)");
  static_assert(!T::caps.quiet || provides_quiet<T>,
                "gpucomm: the transport sets capabilities::quiet but has no quiet(c, g) (contract.cuh)");
  static_assert(!T::caps.load_store || provides_load_store<T>,
                "gpucomm: the transport sets capabilities::load_store but has no remote(c, sym_ptr<T>, int pe) -> T* "
                "(contract.cuh)");
  static_assert(!T::caps.put_signal || provides_put_signal<T>,
                "gpucomm: the transport sets capabilities::put_signal but has no put_signal(c, g, dst, src, n, sig, "
                "value, op, pe, blocking) (contract.cuh)");
  static_assert(!T::caps.fence || provides_fence<T>,
                "gpucomm: the transport sets capabilities::fence but has no fence(c, g) (contract.cuh)");
  static_assert(!T::caps.barrier || provides_barrier<T>,
                "gpucomm: the transport sets capabilities::barrier but has no barrier(c, g, team) "
                "(contract.cuh)");
  return true;
}

// ---- the generic operations -----------------------------------------------------------------------

namespace detail {
/// The progress a wait on a local word makes for transport T (detail::spin_until calls it every
/// 1024 polls): T::progress once the wait has lasted 50 us, then after twice as long each time, up
/// to every 10 ms. Transports without progress get detail::no_progress, so their waits stay bare
/// loads.
template <class T>
struct waiting_progress {
  static constexpr bool active = true;
  comm<T> const* c;
  patience_timer timer{};
  __device__ void operator()() {
    if (timer.due()) T::progress(*c);
  }
};
template <class T>
__device__ GPUCOMM_FORCEINLINE auto progress_while_waiting(comm<T> const& c) {
  if constexpr (provides_progress<T>)
    return waiting_progress<T>{&c};
  else
    return no_progress{};
}
}  // namespace detail

namespace contract {

/// fence: the transport's own, else quiet (completing is a way of ordering).
template <class T, group G>
__device__ GPUCOMM_FORCEINLINE void fence(comm<T> const& c, G const& g) {
  if constexpr (provides_fence<T>)
    T::fence(c, g);
  else
    T::quiet(c, g);
}

/// flush: the transport's own, else quiet (a delivered put has read its source).
template <class T, group G>
__device__ GPUCOMM_FORCEINLINE void flush(comm<T> const& c, G const& g) {
  if constexpr (provides_flush<T>)
    T::flush(c, g);
  else
    T::quiet(c, g);
}

/// put_signal: the transport's own, else put; fence (the data is delivered before what follows);
/// signal (released after the group's writes). A waiter that acquires the update sees the data.
template <class T, group G, class E>
__device__ GPUCOMM_FORCEINLINE void put_signal(comm<T> const& c, G const& g, sym_ptr<E> dst, E const* src,
                                               std::size_t n, sym_ptr<signal_t> sig, signal_t value, signal_op op,
                                               int pe, bool blocking) {
  if constexpr (provides_put_signal<T>) {
    T::put_signal(c, g, dst, src, n, sig, value, op, pe, blocking);
  } else {
    T::put(c, g, dst, src, n, pe, blocking);
    fence(c, g);
    T::signal(c, g, sig, value, op, pe);
  }
}

/// wait_until: the transport's own, else acquire loads of the local word at system scope until
/// the comparison holds (whoever updated it released it at system scope).
template <class T>
__device__ GPUCOMM_FORCEINLINE signal_t wait_until(comm<T> const& c, sym_ptr<signal_t> sig, cmp k, signal_t value) {
  if constexpr (provides_wait_until<T>)
    return T::wait_until(c, sig, k, value);
  else
    return detail::wait_signal(sig.get(), k, value, c.control_header(), detail::progress_while_waiting(c));
}

/// The epoch barrier over team t, for every transport with signal and quiet:
///   1. complete what this PE issued before (quiet_pe where the transport has it, else the group's
///      quiet), so it is visible to any thread that synchronises with this PE afterwards;
///   2. the group agrees on this PE's next epoch of the team (next_epoch's sync);
///   3. the leader sets its arrival flag (index: its team rank) to the epoch at every member with
///      the transport's signal, a release at system scope after step 1;
///   4. the group waits until every member's flag at this PE reaches the epoch (acquire), sharing
///      the flags among its threads, then syncs;
///   5. on a transport with progress, the leader completes its arrival signals (quiet): a PE that
///      leaves the barrier and finishes its kernel rings no more, so an arrival behind a lost
///      doorbell would leave a member waiting. By then they have usually completed.
/// Epochs only grow, so no flag is ever reset (graph-safe) and back-to-back barriers cannot be
/// confused. Each team has its own slot of words, so several teams may be in barriers at once.
template <class T, group G>
__device__ void barrier(comm<T> const& c, G const& g, team t) {
  if constexpr (provides_quiet_pe<T>)
    T::quiet_pe(c, g);
  else
    T::quiet(c, g);
  detail::team_words const w = c.team_state(t);
  std::uint64_t const epoch = detail::next_epoch(g, w.epoch);
  if (is_leader(g)) {
    sym_ptr<signal_t> const mine(w.flags + c.team_rank(t));
    for (int r = 0; r < t.size; ++r) T::signal(c, this_thread(), mine, epoch, signal_op::set, t.pe_of(r));
  }
  detail::wait_for_epochs(g, w.flags, t, epoch, c.control_header(), detail::progress_while_waiting(c));
  if constexpr (provides_progress<T>) {
    if (is_leader(g)) T::quiet(c, this_thread());
  }
}

}  // namespace contract

#endif  // __CUDACC__

}  // namespace gpucomm
