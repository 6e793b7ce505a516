#pragma once
// IBGDAPost's device state (ibgda_post.cuh), kept apart so the host half can build it without
// device code.

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../../verbs_gpu/send_queue.cuh"

namespace gpucomm::detail {

/// How the NIC reaches one PE's symmetric heap: where its slot starts in that PE's address space
/// (what its memory registration names) and the region's rkey, in wire order.
struct ibgda_peer {
  std::uint64_t base = 0;
  std::uint32_t rkey_wire = 0;
  std::uint32_t reserved = 0;
};
static_assert(sizeof(ibgda_peer) == 16);

/// Everything IBGDAPost's device code needs, by value in comm<IBGDAPost>.
struct ibgda_state {
  verbs_gpu::send_queue const* queues = nullptr;  ///< [pe * qps_per_peer + k], in GPU memory
  ibgda_peer const* peers = nullptr;              ///< [pe], in GPU memory
  char const* local_base = nullptr;               ///< this PE's heap slot, local address
  std::uint64_t local_bytes = 0;                  ///< its size
  std::uint32_t lkey_wire = 0;                    ///< lkey of the local heap, wire order
  std::uint32_t qps_per_peer = 1;
  /// Result slots of fetching atomics: queue i, WQEBB j at [(i << log_depth) + j]; then one word
  /// where the NIC drops the old values of non-fetching atomics and signals.
  std::uint64_t* results = nullptr;
  /// Beside each result slot: the index + 1 of the WQE whose result it holds until read, 0 when free.
  std::uint64_t* result_owners = nullptr;
  std::uint32_t results_lkey_wire = 0;
  std::uint32_t reserved = 0;
};
static_assert(std::is_trivially_copyable_v<ibgda_state>);

}  // namespace gpucomm::detail
