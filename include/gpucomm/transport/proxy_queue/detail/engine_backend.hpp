#pragma once
// ProxyQueue's engine backend: carries one local PE's commands to its peers through a network
// engine (transport/engine/net_engine.hpp; UCX through gpucomm::ucx), for PEs on other hosts.
// Host only; run by the PE's proxy thread, which alone calls issue() and poll() (and through them
// the engine's progress()). Driven as a proxy_backend (backend.hpp): takes, issue, busy, poll.
// Unlike the NIC backend's, its poll() must run on every pass of the thread, busy() or not
// (polls_every_pass): the engine serves its peers' requests, and over TCP receives their puts,
// only inside it. In a world it is set up by engine_setup.hpp.
//
//   put         the engine's put of `bytes` from `src` to the peer's copy of `dst`;
//   get         the engine's get from the peer's copy of `src` into `dst`;
//   signal      the engine's signal on the peer's copy of the word `signal`;
//   put_signal  the engine's put_signal: the peer's agent applies the data, then the signal;
//   atomic      the engine's atomic on the peer's copy of `dst`; a fetching one's old value is
//               written by this PE's memory agent into the result slot the command names
//               (`src`; 0: none), in the slots' format (state.hpp: a 4-byte value in network
//               order, as a NIC returns it and the device reads it), before the command is
//               reported complete;
//   fence       later commands to each peer are issued only after every earlier command to that
//               peer has completed; the fence completes when they all have;
//   nop         completes at once.
// Addresses in commands are this PE's view of the symmetric heap ([slot, slot + slot_bytes)); the
// peer's copy of address a is bases[peer] + (a - slot). Targets must lie in the heap and signal
// and atomic words be aligned; anything else is refused.
//
// Completion: a command is complete when the engine reports it so: for put, put_signal, signal
// and atomic that is when its effect is in place at the peer (visible to the peer's readers), for
// get when the data is here. Commands without a fence between them may complete in any order.
// Errors: a command refused here or by the engine, or completed with an engine error (a peer that
// died, a timeout: net_engine.hpp), is recorded in proxy_failures with the engine's error name
// leading its reason, and is completed, so no GPU waits for it forever.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../../engine/memory_agent.hpp"
#include "../../engine/net_engine.hpp"
#include "../../../transport_concept.hpp"
#include "../command.cuh"
#include "../state.hpp"
#include "failures.hpp"

namespace gpucomm::detail {

class engine_backend {
 public:
  struct placement {
    int pe = 0;                        ///< the local PE whose commands this backend carries out
    int npes = 0;                      ///< PEs in the world (the engine's ranks)
    std::uint64_t slot = 0;            ///< this PE's heap, as commands name it
    std::uint64_t slot_bytes = 0;      ///< its size
    std::vector<std::uint64_t> bases;  ///< [pe]: where every PE's heap starts, as its engine registered it
    std::uint64_t* results = nullptr;  ///< [result_slots]: where fetched values go, written by `local`
    std::uint32_t result_slots = 0;
    std::vector<std::uint8_t> peers;  ///< [pe]: nonzero when this backend carries data to it; empty: all
  };

  /// The proxy thread polls this backend on every pass (backend.hpp).
  static constexpr bool polls_every_pass = true;

  /// Carries commands through `engine`, connected and with every PE's heap imported; `local`
  /// writes fetched values into this PE's result slots. Both outlive the backend.
  engine_backend(engine::net_engine& e, engine::memory_agent& local, placement p, proxy_failures& failures)
      : engine_(&e), local_(&local), at_(std::move(p)), failures_(&failures) {
    held_.resize(static_cast<std::size_t>(at_.npes));
    in_flight_.assign(static_cast<std::size_t>(at_.npes), 0);
  }

  engine_backend(engine_backend const&) = delete;
  engine_backend& operator=(engine_backend const&) = delete;

  /// Whether command c is this backend's: data to a peer it carries, every signal and atomic (the
  /// GPU posts those only where the engine is the word's atomicity domain), fences and nops, and
  /// commands to no valid PE (refused here, with a reason).
  bool takes(proxy_queue::command const& c) const {
    using proxy_queue::command_op;
    if (c.op == command_op::nop || c.op == command_op::fence) return true;
    if (c.op == command_op::signal || c.op == command_op::atomic) return true;
    if (c.pe < 0 || c.pe >= at_.npes || at_.peers.empty()) return true;
    return at_.peers[static_cast<std::size_t>(c.pe)] != 0;
  }

  /// Issues command `c` with ticket `ticket`. Returns true when it is complete already: a nop, a
  /// fence with nothing before it, a zero-byte put or get, or refused (and recorded).
  bool issue(proxy_queue::command const& c, std::uint64_t ticket) {
    using proxy_queue::command_op;
    if (c.op == command_op::nop) return true;
    if (c.op == command_op::fence) return fence(ticket);
    if (c.pe < 0 || c.pe >= at_.npes) {
      return refuse(
          c, ticket,
          "its target PE " + std::to_string(c.pe) + " is outside the world of " + std::to_string(at_.npes) + " PEs");
    }
    auto& held = held_[static_cast<std::size_t>(c.pe)];
    if (!held.empty()) {  // behind a fence
      held.push_back({c, ticket, false});
      return false;
    }
    return dispatch(c, ticket);
  }

  /// Commands issued and not yet complete.
  bool busy() const { return !pending_.empty() || !fences_.empty(); }

  /// Moves the engine on; calls done(ticket) for every command that completed, or failed.
  template <class Done>
  void poll(Done&& done) {
    completions_.clear();
    engine_->progress(completions_);
    for (engine::completion const& e : completions_) {
      auto const it = pending_.find(e.id);
      if (it == pending_.end()) {
        failures_->record({at_.pe, -1, proxy_queue::command_op::nop, e.id, 0,
                           "internal: the engine completed token " + std::to_string(e.id) + ", which is not pending"});
        continue;
      }
      pending_command const p = it->second;
      pending_.erase(it);
      if (e.code != engine::errc::ok) {
        failures_->record({at_.pe, p.peer, p.op, e.id, p.bytes, std::string(engine::errc_name(e.code)) + ": " + e.what,
                           engine::is_peer_lost(e.code)});
      } else if (p.op == proxy_queue::command_op::atomic && p.result != 0) {
        auto const width = static_cast<unsigned>(p.bytes);
        std::uint64_t const word = result_slot_word(e.fetched, width);  // its first `width` bytes
        std::string why = local_->write(reinterpret_cast<void*>(p.result), &word, p.bytes);
        if (why.empty()) why = local_->commit();
        if (!why.empty()) failures_->record({at_.pe, p.peer, p.op, e.id, p.bytes, "writing the fetched value: " + why});
      }
      --in_flight_[static_cast<std::size_t>(p.peer)];
      done(e.id);
    }
    for (std::size_t peer = 0; peer < held_.size(); ++peer) release(peer, done);
  }

 private:
  struct pending_command {
    proxy_queue::command_op op = proxy_queue::command_op::nop;
    int peer = 0;
    std::uint64_t bytes = 0;
    std::uint64_t result = 0;  // an atomic's result slot, or 0
  };
  struct held_command {
    proxy_queue::command c;
    std::uint64_t ticket = 0;
    bool fence = false;  // a fence's marker: passes once nothing issued before it to this peer is in flight
  };

  /// Every peer with commands in flight (or held) gets a marker; the fence completes when the
  /// last marker passes.
  bool fence(std::uint64_t ticket) {
    int markers = 0;
    for (std::size_t peer = 0; peer < held_.size(); ++peer) {
      if (in_flight_[peer] == 0 && held_[peer].empty()) continue;
      held_[peer].push_back({proxy_queue::command{}, ticket, true});
      ++markers;
    }
    if (markers == 0) return true;
    fences_[ticket] = markers;
    return false;
  }

  /// Issues peer's held commands up to the next fence marker that still waits.
  template <class Done>
  void release(std::size_t peer, Done& done) {
    auto& held = held_[peer];
    while (!held.empty()) {
      held_command const h = held.front();
      if (h.fence) {
        if (in_flight_[peer] != 0) return;
        held.pop_front();
        if (auto const f = fences_.find(h.ticket); f != fences_.end() && --f->second == 0) {
          fences_.erase(f);
          done(h.ticket);
        }
        continue;
      }
      held.pop_front();
      if (dispatch(h.c, h.ticket)) done(h.ticket);
    }
  }

  /// Checks command c and hands it to the engine; true when it is complete already.
  bool dispatch(proxy_queue::command const& c, std::uint64_t ticket) {
    using proxy_queue::command_op;
    engine::posted r;
    int const peer = c.pe;
    std::uint64_t result = 0;
    switch (c.op) {
      case command_op::put:
      case command_op::put_signal:
        if (!in_heap(c.dst, c.bytes)) return refuse(c, ticket, not_in_heap("destination"));
        if (c.bytes != 0 && c.src == 0) return refuse(c, ticket, "its source is a null pointer");
        if (c.op == command_op::put) {
          if (c.bytes == 0) return true;
          r = engine_->put(peer, ptr(c.src), remote(peer, c.dst), c.bytes, ticket);
        } else {
          if (!is_word(c.signal, 8)) return refuse(c, ticket, not_in_heap("signal word (aligned, 8 bytes)"));
          r = engine_->put_signal(peer, ptr(c.src), remote(peer, c.dst), c.bytes, remote(peer, c.signal),
                                  static_cast<signal_op>(c.signal_op), c.value, ticket);
        }
        break;
      case command_op::get:
        if (!in_heap(c.src, c.bytes)) return refuse(c, ticket, not_in_heap("source"));
        if (c.bytes != 0 && c.dst == 0) return refuse(c, ticket, "its destination is a null pointer");
        if (c.bytes == 0) return true;
        r = engine_->get(peer, reinterpret_cast<void*>(c.dst), remote(peer, c.src), c.bytes, ticket);
        break;
      case command_op::signal:
        if (!is_word(c.signal, 8)) return refuse(c, ticket, not_in_heap("signal word (aligned, 8 bytes)"));
        if (c.signal_op > static_cast<std::uint8_t>(signal_op::add))
          return refuse(c, ticket, "its signal_op is unknown");
        r = engine_->signal(peer, remote(peer, c.signal), static_cast<signal_op>(c.signal_op), c.value, ticket);
        break;
      case command_op::atomic:
        if ((c.bytes != 4 && c.bytes != 8) || !is_word(c.dst, c.bytes))
          return refuse(c, ticket, not_in_heap("target (an aligned 4- or 8-byte word)"));
        if (c.atomic_op > static_cast<std::uint8_t>(atomic_op::set))
          return refuse(c, ticket, "its atomic_op is unknown");
        if (c.src != 0 && !is_result_slot(c.src)) return refuse(c, ticket, "its result slot is not one of this PE's");
        result = c.src;
        r = engine_->atomic(peer, remote(peer, c.dst), static_cast<unsigned>(c.bytes),
                            static_cast<atomic_op>(c.atomic_op), c.value, c.aux, ticket);
        break;
      default:
        return refuse(c, ticket, "the engine backend does not carry operation " + std::to_string(int(c.op)));
    }
    if (!r.ok()) {
      fail(c, ticket, std::string(engine::errc_name(r.code)) + ": " + r.what, engine::is_peer_lost(r.code));
      return true;
    }
    pending_[ticket] = {c.op, peer, c.bytes, result};
    ++in_flight_[static_cast<std::size_t>(peer)];
    return false;
  }

  static void const* ptr(std::uint64_t a) { return reinterpret_cast<void const*>(a); }
  bool in_heap(std::uint64_t address, std::uint64_t bytes) const {
    return address >= at_.slot && address - at_.slot <= at_.slot_bytes &&
           bytes <= at_.slot_bytes - (address - at_.slot);
  }
  bool is_word(std::uint64_t address, std::uint64_t bytes) const {
    return address % bytes == 0 && in_heap(address, bytes);
  }
  bool is_result_slot(std::uint64_t address) const {
    auto const first = reinterpret_cast<std::uint64_t>(at_.results);
    return address >= first && address % 8 == 0 && (address - first) / 8 < at_.result_slots;
  }
  std::uint64_t remote(int peer, std::uint64_t address) const {
    return at_.bases[static_cast<std::size_t>(peer)] + (address - at_.slot);
  }
  static std::string not_in_heap(char const* what) {
    return std::string("its ") + what + " is not in this PE's symmetric heap";
  }

  bool refuse(proxy_queue::command const& c, std::uint64_t ticket, std::string const& why) {
    fail(c, ticket, std::string(engine::errc_name(engine::errc::refused)) + ": " + why);
    return true;
  }
  void fail(proxy_queue::command const& c, std::uint64_t ticket, std::string const& why, bool peer_lost = false) {
    failures_->record({at_.pe, c.pe, c.op, ticket, c.bytes, why, peer_lost});
  }

  engine::net_engine* engine_;
  engine::memory_agent* local_;
  placement at_;
  proxy_failures* failures_;
  std::unordered_map<std::uint64_t, pending_command> pending_;  // by ticket: handed to the engine
  std::vector<std::deque<held_command>> held_;                  // [peer]: behind a fence, in order
  std::vector<std::uint64_t> in_flight_;                        // [peer]: commands handed to the engine
  std::unordered_map<std::uint64_t, int> fences_;               // fence ticket -> markers not yet passed
  std::vector<engine::completion> completions_;
};

}  // namespace gpucomm::detail
