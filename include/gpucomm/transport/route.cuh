#pragma once
// route<Legs...>: per-peer routing over a compile-time list of transports, e.g.
//
//   using Transport = gpucomm::route<gpucomm::NVLinkStore, gpucomm::IBGDAPost>;
//   my_kernel<<<...>>>(w.comm<Transport>(pe), ...);
//
// Each peer goes through the first leg that reaches it from this PE (NVLinkStore: load/store
// access to its heap, the hardware's and world_options::load_store_filter's answer; IBGDAPost:
// every PE). The choice is made once, when the world hands out the first comm<route<...>>; a call
// then reads one byte of a per-PE table and runs that leg's code. Nothing else is dispatched at
// run time.
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
//   signal, atomics   the target's atomicity domain (preceded by the peer leg's quiet when that
//                     differs, so the group's earlier puts to the peer land first).
//   wait_until        a local acquire spin (the same in every leg).
//   fence, quiet      every leg's.
//   barrier           every leg's quiet, then the epoch barrier with each PE's arrival flag set
//                     through its peer's leg.
//   remote            the first leg's, for peers that leg reaches (needs caps.load_store there);
//                     nullptr for the others.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../comm.cuh"
#include "../detail/signal_wait.cuh"
#include "../error.hpp"
#include "../group.cuh"
#include "../host/world.hpp"
#include "../ops.hpp"
#include "../sym_ptr.hpp"
#include "transport.hpp"

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

/// The state a composite transport hands to a leg: routed_state_for when the leg has it (no
/// check that it reaches every PE), else device_state_for.
template <class Host>
auto routed_state(Host const& h, int pe) {
  if constexpr (requires { h.routed_state_for(pe); })
    return h.routed_state_for(pe);
  else
    return h.device_state_for(pe);
}
}  // namespace detail

template <transport... Legs>
struct route {
  static_assert(sizeof...(Legs) >= 2, "gpucomm: route<...> needs at least two transports");

  static constexpr char const* name = "route";
  static constexpr capabilities caps{.put = (Legs::caps.put && ...),
                                     .get = (Legs::caps.get && ...),
                                     .put_signal = (Legs::caps.put_signal && ...) && (Legs::caps.put && ...) &&
                                                   (Legs::caps.quiet && ...) && (Legs::caps.signal && ...),
                                     .signal = (Legs::caps.signal && ...) && (Legs::caps.quiet && ...),
                                     .atomics = (Legs::caps.atomics && ...),
                                     .float_add = (Legs::caps.float_add && ...),
                                     .fence = (Legs::caps.fence && ...),
                                     .quiet = (Legs::caps.quiet && ...),
                                     .barrier = (Legs::caps.quiet && ...) && (Legs::caps.signal && ...),
                                     .load_store = std::tuple_element_t<0, std::tuple<Legs...>>::caps.load_store};

  struct device_state {
    detail::leg_states<Legs...> legs;
    std::uint8_t const* leg_of = nullptr;     ///< [pe]: the leg that carries this PE's data to pe
    std::uint8_t const* domain_of = nullptr;  ///< [pe]: the leg of every atomic and signal on pe's memory
    std::uint64_t* barrier_epoch = nullptr;
    std::uint64_t* barrier_flags = nullptr;
  };

  class host_state {
   public:
    explicit host_state(world& w) : world_(&w), hosts_{&w.transport_host<Legs>()...} {
      int const npes = w.npes();
      std::vector<std::uint8_t> leg(static_cast<std::size_t>(npes) * npes), domain(static_cast<std::size_t>(npes), 0);
      for (int from = 0; from < npes; ++from) {
        for (int to = 0; to < npes; ++to) {
          int const l = first_reaching(from, to);
          if (l < 0) {
            throw error(
                "world::comm<route>", from,
                "no transport of the route reaches PE " + std::to_string(to) + " from PE " + std::to_string(from),
                "end the list with a transport that reaches every PE, such as IBGDAPost");
          }
          leg[static_cast<std::size_t>(from) * npes + to] = static_cast<std::uint8_t>(l);
          auto& d = domain[static_cast<std::size_t>(to)];
          d = std::max(d, static_cast<std::uint8_t>(l));
        }
      }
      for (int to = 0; to < npes; ++to) {
        for (int from = 0; from < npes; ++from) {
          if (!reaches(domain[static_cast<std::size_t>(to)], from, to)) {
            throw error("world::comm<route>", from,
                        "atomics and signals on PE " + std::to_string(to) +
                            "'s memory must all go through one transport, and the one some PE needs (leg " +
                            std::to_string(domain[static_cast<std::size_t>(to)]) + ") does not reach it from PE " +
                            std::to_string(from),
                        "put a transport that reaches every PE last in the route");
          }
        }
      }
      for (int pe : w.local_pes()) {
        std::vector<std::uint8_t> table(leg.begin() + static_cast<std::ptrdiff_t>(pe) * npes,
                                        leg.begin() + static_cast<std::ptrdiff_t>(pe + 1) * npes);
        table.insert(table.end(), domain.begin(), domain.end());
        GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
        void* dev = nullptr;
        GPUCOMM_CUDA_CHECK(cudaMalloc(&dev, table.size()), pe);
        tables_.push_back({pe, w.device(pe), static_cast<std::uint8_t*>(dev)});
        GPUCOMM_CUDA_CHECK(cudaMemcpy(dev, table.data(), table.size(), cudaMemcpyHostToDevice), pe);
      }
      leg_ = std::move(leg);
      domain_ = std::move(domain);
    }
    host_state(host_state const&) = delete;
    host_state& operator=(host_state const&) = delete;
    ~host_state() {
      detail::current_device_guard const keep;
      for (auto const& t : tables_) {
        cudaSetDevice(t.device);
        cudaFree(t.table);
      }
    }

    /// The leg that carries PE from's operations to PE to.
    int leg_of(int from, int to) const { return leg_[static_cast<std::size_t>(from) * world_->npes() + to]; }
    /// The leg of every atomic and signal on PE to's memory.
    int domain_of(int to) const { return domain_[static_cast<std::size_t>(to)]; }

    device_state device_state_for(int pe) const {
      device_state s{};
      fill<0>(s.legs, pe);
      for (auto const& t : tables_) {
        if (t.pe == pe) {
          s.leg_of = t.table;
          s.domain_of = t.table + world_->npes();
        }
      }
      auto const control = world_->control_block(pe);
      s.barrier_epoch = control.barrier_epoch;
      s.barrier_flags = control.barrier_flags;
      return s;
    }

   private:
    struct table {
      int pe;
      int device;
      std::uint8_t* table;  // [npes] leg_of, then [npes] domain_of
    };

    template <std::size_t I, class States>
    void fill(States& s, int pe) const {
      if constexpr (I < sizeof...(Legs)) {
        s.head = detail::routed_state(*std::get<I>(hosts_), pe);
        fill<I + 1>(s.tail, pe);
      }
    }

    bool reaches(int l, int from, int to) const {
      bool r = false;
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        ((static_cast<int>(I) == l ? (void)(r = std::get<I>(hosts_)->reaches(from, to)) : (void)0), ...);
      }
      (std::index_sequence_for<Legs...>{});
      return r;
    }
    int first_reaching(int from, int to) const {
      for (int l = 0; l < static_cast<int>(sizeof...(Legs)); ++l) {
        if (reaches(l, from, to)) return l;
      }
      return -1;
    }

    world* world_;
    std::tuple<typename Legs::host_state*...> hosts_;
    std::vector<table> tables_;
    std::vector<std::uint8_t> leg_;
    std::vector<std::uint8_t> domain_;
  };

#if defined(__CUDACC__)
  template <group G, class T>
  __device__ static void put(auto const& c, G const& g, sym_ptr<T> dst, T const* src, std::size_t n, int pe,
                             bool blocking) {
    on_leg(c, c.state().leg_of[pe],
           [&]<class Leg>(comm<Leg> const& lc) { Leg::put(lc, g, dst, src, n, pe, blocking); });
  }

  template <group G, class T>
  __device__ static void get(auto const& c, G const& g, T* dst, sym_ptr<T const> src, std::size_t n, int pe,
                             bool blocking) {
    on_leg(c, c.state().leg_of[pe],
           [&]<class Leg>(comm<Leg> const& lc) { Leg::get(lc, g, dst, src, n, pe, blocking); });
  }

  template <group G, class T>
  __device__ static void put_signal(auto const& c, G const& g, sym_ptr<T> dst, T const* src, std::size_t n,
                                    sym_ptr<signal_t> sig, signal_t value, signal_op op, int pe, bool blocking) {
    unsigned const data = c.state().leg_of[pe];
    unsigned const domain = c.state().domain_of[pe];
    if (data == domain) {
      on_leg(c, data, [&]<class Leg>(comm<Leg> const& lc) {
        Leg::put_signal(lc, g, dst, src, n, sig, value, op, pe, blocking);
      });
      return;
    }
    on_leg(c, data, [&]<class Leg>(comm<Leg> const& lc) {
      Leg::put(lc, g, dst, src, n, pe, blocking);
      Leg::quiet(lc, g);  // the data is visible before the other leg's signal
    });
    on_leg(c, domain, [&]<class Leg>(comm<Leg> const& lc) { Leg::signal(lc, g, sig, value, op, pe); });
  }

  template <group G>
  __device__ static void signal(auto const& c, G const& g, sym_ptr<signal_t> sig, signal_t value, signal_op op,
                                int pe) {
    unsigned const data = c.state().leg_of[pe];
    unsigned const domain = c.state().domain_of[pe];
    if (data != domain) on_leg(c, data, [&]<class Leg>(comm<Leg> const& lc) { Leg::quiet(lc, g); });
    on_leg(c, domain, [&]<class Leg>(comm<Leg> const& lc) { Leg::signal(lc, g, sig, value, op, pe); });
  }

  __device__ static signal_t wait_until(auto const&, sym_ptr<signal_t> sig, cmp c, signal_t value) {
    return detail::wait_signal(sig.get(), c, value);
  }

  /// Called by the group's leader only (comm.cuh), so the leg's quiet runs with one thread.
  template <atomic_op Op, class T>
  __device__ static T atomic(auto const& c, sym_ptr<T> target, T value, T compare, int pe) {
    T old{};
    on_leg(c, c.state().domain_of[pe],
           [&]<class Leg>(comm<Leg> const& lc) { old = Leg::template atomic<Op>(lc, target, value, compare, pe); });
    return old;
  }

  template <group G>
  __device__ static void fence(auto const& c, G const& g) {
    each_leg(c, [&]<class Leg>(comm<Leg> const& lc) { Leg::fence(lc, g); });
  }

  template <group G>
  __device__ static void quiet(auto const& c, G const& g) {
    each_leg(c, [&]<class Leg>(comm<Leg> const& lc) { Leg::quiet(lc, g); });
  }

  template <group G>
  __device__ static void barrier(auto const& c, G const& g) {
    device_state const& s = c.state();
    quiet(c, g);
    std::uint64_t const epoch = detail::next_epoch(g, s.barrier_epoch);
    if (is_leader(g)) {
      for (int pe = 0; pe < c.npes(); ++pe) {
        on_leg(c, s.leg_of[pe], [&]<class Leg>(comm<Leg> const& lc) {
          Leg::signal(lc, this_thread(), sym_ptr<signal_t>(s.barrier_flags + c.my_pe()), epoch, signal_op::set, pe);
        });
      }
    }
    detail::wait_for_epochs(g, s.barrier_flags, c.npes(), epoch);
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
    return comm<Leg>(c.my_pe(), c.npes(), detail::leg_state<I>(c.state().legs));
  }

 private:
  /// Runs f(leg's comm) for the leg numbered `leg`.
  template <class F>
  __device__ static void on_leg(auto const& c, unsigned leg, F&& f) {
    [&]<std::size_t... I>(std::index_sequence<I...>) { ((leg == I ? (void)f(leg_comm<I>(c)) : (void)0), ...); }
    (std::index_sequence_for<Legs...>{});
  }
  template <class F>
  __device__ static void each_leg(auto const& c, F&& f) {
    [&]<std::size_t... I>(std::index_sequence<I...>) { (f(leg_comm<I>(c)), ...); }
    (std::index_sequence_for<Legs...>{});
  }
#endif  // __CUDACC__
};

}  // namespace gpucomm
