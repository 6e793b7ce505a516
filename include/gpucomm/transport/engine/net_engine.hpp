#pragma once
// A network engine: the host-side interface through which ProxyQueue's engine backend
// (proxy_queue/detail/engine_backend.hpp) reaches PEs on other hosts over an existing
// communication library. Host only; nothing here names a library. The UCX implementation is
// engine/ucx_engine.hpp (CMake target gpucomm::ucx); engine/engine_hook.hpp is how a program
// that links it finds it.
//
// Set-up (one engine per PE, every step collective across the world's ranks through the world's
// bootstrap, which the caller drives):
//   1. address():      this engine's worker address, opaque bytes; the caller allgathers them;
//   2. connect(all):   an endpoint to every rank (itself included), each checked with a round
//                      trip; a rank that does not answer within connect_timeout is a gpucomm::error
//                      naming it (peer_unreachable);
//   3. register_memory(base, bytes) -> packed key bytes; the caller allgathers (base, bytes, key)
//      and gives every peer's to import_region(peer, base, bytes, key).
// Operations (any order after set-up, all from one thread: the proxy thread, which alone calls
// progress()). Each takes a caller token and returns a `posted`: ok, or why it was refused
// (nothing was sent and no completion will come). An accepted operation completes exactly once,
// through progress(), with that token, successfully or with a named error:
//   put         bytes from local `src` to `dst` in a region imported from `peer` (by RMA, or with
//               data_through_agents read here and written there by the agents); complete = the
//               data is in the peer's memory, visible to the peer's readers (a remote completion,
//               not "src may be reused");
//   get         bytes from `src` in a peer's region to local `dst`; complete = the data is here;
//   signal      the 64-bit word `word` at the peer updated (set or add) by the peer's memory
//               agent (memory_agent.hpp); complete = applied at the peer;
//   put_signal  the put, then the signal, applied by the peer's agent in that order: a reader at
//               the peer that sees the signal (acquire) sees the data; complete = both applied;
//   atomic      a 4- or 8-byte atomic on `word` at the peer, applied by the peer's agent, which is
//               the atomicity domain of every word the engine updates (memory_agent.hpp); the
//               completion carries the old value;
//   flush       completes once every operation posted to `peer` before it has completed.
// Operations to one peer may complete, and take effect, in any order: a caller that needs order
// waits for completions (the engine backend's fence does so). Completion of an operation to
// `peer` is reported with errc::ok only if its effect is in place at the peer.
//
// Failures: a peer whose process dies or whose connection breaks is reported by
// peer_failure(peer) within op_timeout at the latest; every operation to it that has not completed
// then completes with errc::peer_failed, and later ones are refused with it. An operation that
// gets no completion within op_timeout completes with errc::timed_out and marks its peer failed.
// progress() never blocks for longer than one pass over the engine's queues.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "../../ops.hpp"
#include "../../transport_concept.hpp"

namespace gpucomm::engine {

class memory_agent;

/// Why an engine operation did not take effect. Each has a stable name (errc_name) that error
/// messages lead with, so tests and users can tell them apart.
enum class errc : int {
  ok = 0,
  refused,           ///< bad input (peer out of range, address outside registered memory, bad width)
  peer_failed,       ///< the peer's process died or its connection broke
  peer_unreachable,  ///< connect() got no answer from the peer
  timed_out,         ///< no completion within op_timeout
  remote_refused,    ///< the peer's engine refused it (its agent or its address check)
  engine_failed,     ///< the communication library failed otherwise
};

inline constexpr char const* errc_name(errc e) noexcept {
  switch (e) {
    case errc::ok:
      return "ok";
    case errc::refused:
      return "engine_refused";
    case errc::peer_failed:
      return "engine_peer_failed";
    case errc::peer_unreachable:
      return "engine_peer_unreachable";
    case errc::timed_out:
      return "engine_timed_out";
    case errc::remote_refused:
      return "engine_remote_refused";
    case errc::engine_failed:
      return "engine_failed";
  }
  return "engine_unknown_error";
}

/// Whether `e` says the peer is gone (its process, its connection, or its answers), rather than
/// that one operation was wrong.
inline constexpr bool is_peer_lost(errc e) noexcept {
  return e == errc::peer_failed || e == errc::peer_unreachable || e == errc::timed_out;
}

/// What posting an operation gave: ok (a completion will come), or the error and why.
struct posted {
  errc code = errc::ok;
  std::string what;
  bool ok() const noexcept { return code == errc::ok; }
};

using token = std::uint64_t;

/// One finished operation.
struct completion {
  token id = 0;
  errc code = errc::ok;
  std::uint64_t fetched = 0;  ///< an atomic's old value (zero-extended for 4 bytes)
  std::string what;           ///< why it failed; empty when ok
};

/// How an engine is made. `agent` applies what peers send to this process's memory and must
/// outlive the engine.
struct net_engine_config {
  int rank = 0;  ///< this engine's index among the ranks it connects
  int size = 1;  ///< how many ranks
  memory_agent* agent = nullptr;
  /// Longest wait for a peer's answer in connect().
  std::chrono::milliseconds connect_timeout{10'000};
  /// Longest an operation may stay incomplete before it fails with errc::timed_out and its peer
  /// is marked failed: the bound on how long a dead peer goes unreported.
  std::chrono::milliseconds op_timeout{20'000};
  /// How puts and gets move their bytes. false: RMA between memory the library registered (UCX
  /// registers GPU memory only when built with CUDA support). true: as messages whose bytes the
  /// memory agents read and write at both ends, through host memory (a bounce), for memory the
  /// library cannot register, such as GPU memory under a UCX without CUDA; register_memory then
  /// only names the ranges peers may address, and the engine itself never touches local memory
  /// (a put_signal's source is read by the agent too). Completion means the same either way.
  bool data_through_agents = false;
};

class net_engine {
 public:
  virtual ~net_engine() = default;

  /// The library and its transports, for messages ("UCX 1.13.1").
  virtual std::string name() const = 0;

  /// This engine's address (opaque bytes; every rank's go to connect()).
  virtual std::vector<std::byte> address() const = 0;
  /// Endpoints to every rank, addresses[r] being rank r's address(); collective. Throws
  /// gpucomm::error (peer_unreachable) naming the first rank that did not answer.
  virtual void connect(std::vector<std::vector<std::byte>> const& addresses) = 0;

  /// Registers [base, base + bytes) of this process for peers' puts and gets; returns its packed
  /// remote key for import_region() at the peers. Registered until the engine goes.
  virtual std::vector<std::byte> register_memory(void* base, std::size_t bytes) = 0;
  /// Peer `peer`'s registered range [base, base + bytes) (its addresses) with its packed key.
  virtual void import_region(int peer, std::uint64_t base, std::size_t bytes, std::span<std::byte const> key) = 0;

  virtual posted put(int peer, void const* src, std::uint64_t dst, std::size_t bytes, token t) = 0;
  virtual posted get(int peer, void* dst, std::uint64_t src, std::size_t bytes, token t) = 0;
  virtual posted signal(int peer, std::uint64_t word, signal_op op, std::uint64_t value, token t) = 0;
  virtual posted put_signal(int peer, void const* src, std::uint64_t dst, std::size_t bytes, std::uint64_t word,
                            signal_op op, std::uint64_t value, token t) = 0;
  /// `width` 4 or 8; `operand` the value (compare_swap: the new value), `compare` compare_swap's
  /// expected value.
  virtual posted atomic(int peer, std::uint64_t word, unsigned width, atomic_op op, std::uint64_t operand,
                        std::uint64_t compare, token t) = 0;
  virtual posted flush(int peer, token t) = 0;

  /// Moves every operation on, serves peers' requests (through the agent) and appends the
  /// operations that finished to `done`.
  virtual void progress(std::vector<completion>& done) = 0;
  /// Whether any accepted operation has not completed yet.
  virtual bool busy() const = 0;

  /// Why `peer` is failed, or nothing while it is not.
  virtual std::optional<std::string> peer_failure(int peer) const = 0;
};

}  // namespace gpucomm::engine
