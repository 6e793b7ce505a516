#pragma once
// ProxyQueue's device state, apart from its device code so the host half builds it without any.

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../../config.hpp"
#include "../../detail/staging.hpp"
#include "../../verbs_gpu/detail/endian.cuh"
#include "command_ring.cuh"

namespace gpucomm::detail {

/// How a PE reaches one peer, bits of proxy_queue_state::paths.
enum proxy_path : std::uint8_t {
  /// put, get, put_signal go to the network backend, the NIC or an engine (else the copy engines)
  proxy_data_nic = 1,
  /// signals and atomics on the peer's memory go through the network backend (else the GPU)
  proxy_atomics_nic = 2,
};

/// What ProxyQueue's device code needs: this PE's command ring, how far apart the PEs' heap slots
/// are (the operations the GPU carries out itself reach peers through the mapped heap,
/// host/detail/heap.hpp), and, when some peer is reached through the NIC, the paths to each peer
/// and the slots where the NIC leaves fetched values, and what stages local buffers for it.
struct proxy_queue_state {
  proxy_queue::command_ring ring{};
  std::size_t stride = 0;
  std::uint8_t const* paths = nullptr;  ///< [pe]: proxy_path bits, GPU memory; null: no NIC anywhere
  /// Where the NIC leaves the values fetching atomics fetch, [result_slots], GPU memory: a caller
  /// claims a slot (result_claims[i] 0 -> 1), names it in its command, reads it once the command
  /// is complete, and releases it; nothing else writes a claimed slot.
  std::uint64_t const* results = nullptr;
  std::uint32_t* result_claims = nullptr;  ///< [result_slots]: 1 while a caller holds the slot
  std::uint32_t result_slots = 0;          ///< a power of two
  /// Puts, gets and put_signals of at most this many bytes to a peer the copy engines serve go
  /// through the calling group's own loads and stores instead (proxy_options::store_path_bytes).
  std::uint32_t store_path_bytes = 0;
  /// With a network backend, for the local buffers it does not reach (detail/staging.hpp):
  /// staging_layout::slots slots of two halves in GPU memory it reaches, their control words, and
  /// the buffers registered with world::register_buffer (which it reaches).
  unsigned char* staging = nullptr;
  staging_slot* staging_slots = nullptr;
  local_regions const* regions = nullptr;
  /// Whether the network backend reads and writes any global memory of the GPU (an engine): then
  /// only shared memory and local variables are staged; else (the NIC) all but the heap and the
  /// registered buffers.
  bool network_reads_global = false;
};
static_assert(std::is_trivially_copyable_v<proxy_queue_state>);

/// What the store path carries per thread of the calling group at most: one thread's stores to a
/// peer are latency-bound, so a thread alone crosses a copy engine's command at about 1 KiB, where
/// a warp or a block with the same bytes is far below it (the benchmark's ProxyQueue put_signal
/// ping-pong rows by scope and size, docs/guide/proxyqueue.md, "The store path").
inline constexpr std::uint32_t store_path_bytes_per_thread = 1024;

/// The store path's limit for a group of `threads`: proxy_options::store_path_bytes (`limit`), and
/// store_path_bytes_per_thread for each thread of the group.
GPUCOMM_HD constexpr std::uint64_t store_path_limit(std::uint32_t limit, unsigned threads) noexcept {
  std::uint64_t const by_threads = std::uint64_t{store_path_bytes_per_thread} * threads;
  return by_threads < limit ? by_threads : limit;
}

/// How a result slot holds a fetched value of `width` bytes, whichever backend fills it: as a NIC
/// leaves it, 8-byte values in host order and 4-byte ones in the slot's first bytes in network
/// order (verbs_gpu::fetched32), so the device reads every slot the same way. The NIC writes the
/// slot itself; the engine backend writes result_slot_word(old, width)'s first `width` bytes.
GPUCOMM_HD constexpr std::uint64_t result_slot_word(std::uint64_t value, unsigned width) noexcept {
  return width == 8 ? value : verbs_gpu::to_be32(static_cast<std::uint32_t>(value));
}
/// The value in a result slot holding `word` (little-endian: a 4-byte value is its low half).
GPUCOMM_HD constexpr std::uint64_t result_slot_value(std::uint64_t word, unsigned width) noexcept {
  return width == 8 ? word : verbs_gpu::from_be32(static_cast<std::uint32_t>(word));
}
static_assert(result_slot_value(result_slot_word(0x89ABCDEFu, 4), 4) == 0x89ABCDEFu);

}  // namespace gpucomm::detail
