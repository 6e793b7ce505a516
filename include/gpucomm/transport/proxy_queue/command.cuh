#pragma once
// ProxyQueue's wire format: one command, one 64-byte slot of the command ring (command_ring.cuh),
// written by a GPU thread into pinned host memory and read by the proxy thread. Everything the
// proxy needs to carry out the operation is in it; nothing refers back to GPU state.

#include <cstddef>
#include <cstdint>

#include "../../config.hpp"

namespace gpucomm::proxy_queue {

/// What a command asks the proxy to do.
enum class command_op : std::uint8_t {
  nop = 0,         ///< nothing (a ring probe: completes at once)
  put = 1,         ///< copy `bytes` from `src` (this PE) to `dst` at PE `pe`
  get = 2,         ///< copy `bytes` from `src` at PE `pe` to `dst` (this PE)
  signal = 3,      ///< update the signal word `signal` at PE `pe` by `value` (`signal_op`)
  put_signal = 4,  ///< put, then the signal update, ordered after the data at PE `pe`
  atomic = 5,      ///< an atomic on `dst` at PE `pe`: `atomic_op`, operands `value`, `aux`; result to `src`
  fence = 6,       ///< later commands to each PE are delivered after earlier ones
};

/// The 64-byte slot layout. `seq` is written last, with release semantics: it is the ticket the
/// slot was written for, plus one, so a reader that sees the ticket it expects (acquire) sees the
/// whole command, and a slot still holding an older lap's command is never mistaken for a new one.
struct alignas(64) command {
  std::uint64_t dst = 0;            ///< 0: target address (symmetric heap address as this PE maps it)
  std::uint64_t src = 0;            ///< 8: source address, or where a fetched value goes
  std::uint64_t bytes = 0;          ///< 16: bytes to move
  std::uint64_t signal = 0;         ///< 24: the signal word's address (put_signal, signal)
  std::uint64_t value = 0;          ///< 32: signal value or the atomic's operand
  std::uint64_t aux = 0;            ///< 40: the atomic's second operand (compare value)
  std::int32_t pe = 0;              ///< 48: target PE
  command_op op = command_op::nop;  ///< 52
  std::uint8_t signal_op = 0;       ///< 53: gpucomm::signal_op of a signal or put_signal
  std::uint8_t atomic_op = 0;       ///< 54: which atomic (set by the transport)
  std::uint8_t flags = 0;           ///< 55: reserved, 0
  std::uint64_t seq = 0;            ///< 56: ticket + 1, written last (see above)
};
static_assert(sizeof(command) == 64, "one command is one 64-byte slot");
static_assert(offsetof(command, dst) == 0 && offsetof(command, src) == 8 && offsetof(command, bytes) == 16);
static_assert(offsetof(command, signal) == 24 && offsetof(command, value) == 32 && offsetof(command, aux) == 40);
static_assert(offsetof(command, pe) == 48 && offsetof(command, op) == 52 && offsetof(command, signal_op) == 53);
static_assert(offsetof(command, atomic_op) == 54 && offsetof(command, flags) == 55 && offsetof(command, seq) == 56);

/// The bytes of a command before `seq`: what a writer stores before publishing it.
inline constexpr std::size_t command_payload_bytes = offsetof(command, seq);
static_assert(command_payload_bytes % 8 == 0);

}  // namespace gpucomm::proxy_queue
