#pragma once
// route<Legs...>, device side: per-peer routing over a compile-time list of transports, e.g.
//
//   using Transport = gpucomm::route<gpucomm::NVLinkStore, gpucomm::IBGDAPost>;
//   my_kernel<<<...>>>(w.comm<Transport>(pe), ...);
//
// Set-up. A route has no options of its own: each leg keeps its own, given with
// world::configure<Leg>(...) before the first world::comm<route<...>>(), which sets every leg up:
//
//   w.configure<gpucomm::IBGDAPost>({.nic = gpucomm::nic_choice::model});
//   auto c = w.comm<gpucomm::route<gpucomm::NVLinkStore, gpucomm::IBGDAPost>>(pe);
//
// A leg configured after that throws (it is already set up). The split between legs is the
// world's: world_options::load_store_filter decides which peers' memory this PE maps, for every
// transport and for the host. So a host copy of a PE's symmetric memory (cudaMemcpy of
// buf.ptr(pe)) must run with that PE's own GPU current: another GPU may not map it.
// w.reaches<Transport>(from, to) answers which pairs a transport reaches.
//
// Each peer goes through the first leg that reaches it from this PE (NVLinkStore: load/store
// access to its heap, the hardware's and world_options::load_store_filter's answer; IBGDAPost:
// every PE). The choice is made once, when the world hands out the first comm<route<...>>; a call
// then reads one byte of a per-PE table and runs that leg's code. Nothing else is dispatched at
// run time.
//
// Cost. put, get and put_signal are each one out-of-line function per group type (on bytes: the
// element type only sizes the transfer), holding the dispatch and every leg's code: a kernel's call
// site is one call, however many legs there are. Inlining both legs' copies at every site made
// route's code several times a leg's (the op suite: 2.7x IBGDAPost's PTX, now under 1.5x;
// docs/contributing/benchmarks.md, "Compile cost"). The price is that call on the NVLinkStore leg too, where
// NVLinkStore alone copies inline: a few instructions and the calling convention's register traffic
// per operation, no more memory traffic. signal, the atomics, fence and quiet stay inline: small on
// both legs, and with them out of line as well, the route soak (tests/gpu/ops/soak.cu) read stale
// data on an H100 at 1 and 4 PEs, while either half out of line alone passed. The cause is not
// found; until it is, they stay inline.
//
// Atomicity domains. Atomics of different legs do not mix on one word (NVLink atomics are not
// atomic with the NIC's). So every atomic and every signal update on PE t's memory, from any PE
// including t, goes through one leg: the latest leg in the list that some PE needs to reach t.
// If every PE reaches t by NVLink, that is NVLinkStore; if any PE reaches t only through the NIC,
// every PE, t itself included, updates t's words through the NIC. The rule is applied by
// construction, so no mix can happen; world set-up fails if that leg cannot reach t from every
// PE. It covers gpucomm's own operations: do not update such words with plain CUDA atomics.
//
// Operations and their ordering, per call:
//   put, get          the peer's leg.
//   put_signal        the same leg when the signal's domain is that leg; otherwise the data goes
//                     through the peer's leg, that leg's quiet makes it visible, then the signal
//                     goes through the domain's leg (data before signal, as comm.cuh promises).
//   signal            the target's atomicity domain, preceded by the peer leg's quiet when that
//                     differs, so the group's earlier puts to the peer land first.
//   atomics           the target's atomicity domain. As in OpenSHMEM, an atomic is not ordered
//                     after earlier puts without a fence (which quiets every leg).
//   wait_until        the contract's local acquire spin (the same in every leg), with each
//                     leg's progress where it has one.
//   fence, quiet      every leg's (a leg without its own fence quiets).
//   flush             every leg's (a leg without its own flush quiets).
//   barrier           the contract's epoch barrier: every leg's quiet_pe (or quiet), then each
//                     member's arrival flag set with route's signal, so through the member's
//                     atomicity domain like every other update of its words.
//   remote            the first leg's, for peers that leg reaches (needs caps.load_store there);
//                     nullptr for the others.

// The host half, which builds the per-PE tables, is route/host.hpp.

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <utility>

#include "../../comm.cuh"
#include "../../group.cuh"
#include "../../ops.hpp"
#include "../../sym_ptr.hpp"
#include "../../contract.cuh"
#include "../../transport_concept.hpp"

namespace gpucomm {

namespace detail {
/// The legs' device states, as one trivially copyable aggregate.
template <class... Legs>
struct leg_states {};
template <class Leg, class... Rest>
struct leg_states<Leg, Rest...> {
  typename Leg::device_state head;
  leg_states<Rest...> tail;
};

template <std::size_t I, class Leg, class... Rest>
GPUCOMM_HD constexpr auto const& leg_state(leg_states<Leg, Rest...> const& s) noexcept {
  if constexpr (I == 0)
    return s.head;
  else
    return leg_state<I - 1>(s.tail);
}

}  // namespace detail

namespace detail {
template <class... Legs>
class route_host;
}

template <transport... Legs>
struct route {
  static_assert(sizeof...(Legs) >= 2, "gpucomm: route<...> needs at least two transports");

  static constexpr char const* name = "route";
  static constexpr capabilities caps{
      .put = (Legs::caps.put && ...),
      .get = (Legs::caps.get && ...),
      .put_signal = (Legs::caps.put && ...) && (Legs::caps.quiet && ...) && (Legs::caps.signal && ...),
      .signal = (Legs::caps.signal && ...) && (Legs::caps.quiet && ...),
      .atomics = (Legs::caps.atomics && ...),
      .float_add = (Legs::caps.float_add && ...),
      .fence = ((Legs::caps.fence || Legs::caps.quiet) && ...),
      .quiet = (Legs::caps.quiet && ...),
      .barrier = false,
      .load_store = std::tuple_element_t<0, std::tuple<Legs...>>::caps.load_store};
  /// remote() reaches only the first leg's peers (nullptr for the others): generic code that would
  /// load and store at every peer asks for this (collectives/detail/packets.cuh).
  static constexpr bool partial_load_store = true;

  struct device_state {
    detail::leg_states<Legs...> legs;
    std::uint8_t const* leg_of = nullptr;  ///< [pe]: the leg that carries this PE's data to pe
    /// [pe]: the leg of every atomic and signal on pe's memory: the latest leg any PE uses to
    /// reach pe, so never before this PE's leg_of[pe] (the device code relies on that).
    std::uint8_t const* domain_of = nullptr;
  };
  using host_state = detail::route_host<Legs...>;

#if defined(__CUDACC__)
  template <group G, class T>
  __device__ static void put(auto const& c, G const& g, sym_ptr<T> dst, T const* src, std::size_t n, int pe,
                             bool blocking) {
    put_bytes(c, g, sym_ptr_cast<byte>(dst), reinterpret_cast<byte const*>(src), n * sizeof(T), pe, blocking);
  }

  template <group G, class T>
  __device__ static void get(auto const& c, G const& g, T* dst, sym_ptr<T const> src, std::size_t n, int pe,
                             bool blocking) {
    get_bytes(c, g, reinterpret_cast<byte*>(dst), sym_ptr_cast<byte const>(src), n * sizeof(T), pe, blocking);
  }

  template <group G, class T>
  __device__ static void put_signal(auto const& c, G const& g, sym_ptr<T> dst, T const* src, std::size_t n,
                                    sym_ptr<signal_t> sig, signal_t value, signal_op op, int pe, bool blocking) {
    put_signal_bytes(c, g, sym_ptr_cast<byte>(dst), reinterpret_cast<byte const*>(src), n * sizeof(T), sig, value, op,
                     pe, blocking);
  }

  template <group G>
  __device__ static void signal(auto const& c, G const& g, sym_ptr<signal_t> sig, signal_t value, signal_op op,
                                int pe) {
    unsigned const data = c.state().leg_of[pe];
    unsigned const domain = c.state().domain_of[pe];
    if (data != domain) on_leg<0, last_leg>(c, data, [&]<class Leg>(comm<Leg> const& lc) { Leg::quiet(lc, g); });
    on_leg(c, domain, [&]<class Leg>(comm<Leg> const& lc) { Leg::signal(lc, g, sig, value, op, pe); });
  }

  /// Called by the group's leader only (comm.cuh).
  template <atomic_op Op, class T>
  __device__ static T atomic(auto const& c, sym_ptr<T> target, T value, T compare, int pe) {
    T old{};
    on_leg(c, c.state().domain_of[pe],
           [&]<class Leg>(comm<Leg> const& lc) { old = Leg::template atomic<Op>(lc, target, value, compare, pe); });
    return old;
  }

  template <group G>
  __device__ static void fence(auto const& c, G const& g) {
    each_leg(c, [&]<class Leg>(comm<Leg> const& lc) { contract::fence(lc, g); });
  }

  template <group G>
  __device__ static void quiet(auto const& c, G const& g) {
    each_leg(c, [&]<class Leg>(comm<Leg> const& lc) { Leg::quiet(lc, g); });
  }

  template <group G>
  __device__ static void flush(auto const& c, G const& g) {
    each_leg(c, [&]<class Leg>(comm<Leg> const& lc) { contract::flush(lc, g); });
  }

  /// What the contract's barrier completes first: each leg's quiet_pe where it has one, else its quiet.
  template <group G>
  __device__ static void quiet_pe(auto const& c, G const& g) {
    each_leg(c, [&]<class Leg>(comm<Leg> const& lc) {
      if constexpr (provides_quiet_pe<Leg>)
        Leg::quiet_pe(lc, g);
      else
        Leg::quiet(lc, g);
    });
  }

  /// While this PE waits on a local word: each leg's progress where it has one (route has progress
  /// only when a leg does).
  __device__ static void progress(auto const& c) requires(provides_progress<Legs> || ...) {
    each_leg(c, [&]<class Leg>(comm<Leg> const& lc) {
      if constexpr (provides_progress<Leg>) Leg::progress(lc);
    });
  }

  template <class T>
  __device__ static T* remote(auto const& c, sym_ptr<T> p, int pe) {
    using First = std::tuple_element_t<0, std::tuple<Legs...>>;
    if (c.state().leg_of[pe] != 0) return nullptr;
    return First::remote(leg_comm<0>(c), p, pe);
  }

  /// Leg I's handle for this PE.
  template <std::size_t I>
  __device__ static auto leg_comm(auto const& c) {
    using Leg = std::tuple_element_t<I, std::tuple<Legs...>>;
    return comm<Leg>(c.my_pe(), c.npes(), c.team_states(), detail::leg_state<I>(c.state().legs));
  }

 private:
  /// put, get and put_signal as bytes, out of line: one function per group type, holding the
  /// dispatch and every leg's code (the header's "Cost" says why). Every leg moves bytes: the
  /// element type only sized the transfer.
  using byte = unsigned char;

  template <group G>
  __device__ GPUCOMM_NOINLINE static void put_bytes(auto const& c, G const& g, sym_ptr<byte> dst, byte const* src,
                                                    std::size_t bytes, int pe, bool blocking) {
    on_leg(c, c.state().leg_of[pe],
           [&]<class Leg>(comm<Leg> const& lc) { Leg::put(lc, g, dst, src, bytes, pe, blocking); });
  }

  template <group G>
  __device__ GPUCOMM_NOINLINE static void get_bytes(auto const& c, G const& g, byte* dst, sym_ptr<byte const> src,
                                                    std::size_t bytes, int pe, bool blocking) {
    on_leg(c, c.state().leg_of[pe],
           [&]<class Leg>(comm<Leg> const& lc) { Leg::get(lc, g, dst, src, bytes, pe, blocking); });
  }

  template <group G>
  __device__ GPUCOMM_NOINLINE static void put_signal_bytes(auto const& c, G const& g, sym_ptr<byte> dst,
                                                           byte const* src, std::size_t bytes, sym_ptr<signal_t> sig,
                                                           signal_t value, signal_op op, int pe, bool blocking) {
    unsigned const data = c.state().leg_of[pe];
    unsigned const domain = c.state().domain_of[pe];
    if (data == domain) {
      on_leg(c, data, [&]<class Leg>(comm<Leg> const& lc) {
        contract::put_signal(lc, g, dst, src, bytes, sig, value, op, pe, blocking);
      });
      return;
    }
    // Here data < domain (device_state says why): no other pair of legs is compiled.
    on_leg<0, last_leg>(c, data, [&]<class Leg>(comm<Leg> const& lc) {
      Leg::put(lc, g, dst, src, bytes, pe, blocking);
      Leg::quiet(lc, g);  // the data is visible before the other leg's signal
    });
    on_leg<1, leg_count>(c, domain, [&]<class Leg>(comm<Leg> const& lc) { Leg::signal(lc, g, sig, value, op, pe); });
  }

  static constexpr std::size_t leg_count = sizeof...(Legs);
  static constexpr std::size_t last_leg = leg_count - 1;

  /// Runs f(leg's comm) for the leg numbered `leg`, which the caller knows is in [First, End):
  /// only those legs' code is compiled.
  template <std::size_t First = 0, std::size_t End = leg_count, class F>
  __device__ static void on_leg(auto const& c, unsigned leg, F&& f) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((leg == First + I ? (void)f(leg_comm<First + I>(c)) : (void)0), ...);
    }
    (std::make_index_sequence<End - First>{});
  }
  template <class F>
  __device__ static void each_leg(auto const& c, F&& f) {
    [&]<std::size_t... I>(std::index_sequence<I...>) { (f(leg_comm<I>(c)), ...); }
    (std::index_sequence_for<Legs...>{});
  }
#endif  // __CUDACC__
};

}  // namespace gpucomm
