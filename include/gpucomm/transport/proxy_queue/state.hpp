#pragma once
// ProxyQueue's device state, apart from its device code so the host half builds it without any.

#include <cstddef>
#include <cstdint>
#include <type_traits>

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
/// and the slots where the NIC leaves fetched values.
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
};
static_assert(std::is_trivially_copyable_v<proxy_queue_state>);

}  // namespace gpucomm::detail
