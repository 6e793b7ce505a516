#pragma once
// IBGDAPost's device state (ibgda_post.cuh), kept apart so the host half can build it without
// device code.

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../../detail/staging.hpp"
#include "../../verbs_gpu/send_queue.cuh"
#include "../nic/heap_keys.hpp"

namespace gpucomm::detail {

/// Everything IBGDAPost's device code needs, by value in comm<IBGDAPost>.
struct ibgda_state {
  verbs_gpu::send_queue const* queues = nullptr;  ///< [pe * qps_per_peer + k], in GPU memory
  /// [pe]: where PE pe's heap slot starts in its own address space (what its regions name), in
  /// GPU memory.
  std::uint64_t const* peer_bases = nullptr;
  heap_keys keys;                    ///< every block's keys, by heap offset (heap_keys.hpp)
  char const* local_base = nullptr;  ///< this PE's heap slot, local address
  std::uint64_t local_bytes = 0;     ///< its size
  std::uint32_t qps_per_peer = 1;
  /// Result slots of fetching atomics: queue i, WQEBB j at [(i << log_depth) + j]; then one word
  /// where the NIC drops the old values of non-fetching atomics and signals.
  std::uint64_t* results = nullptr;
  /// Beside each result slot: the index + 1 of the WQE whose result it holds until read, 0 when free.
  std::uint64_t* result_owners = nullptr;
  std::uint32_t results_lkey_wire = 0;
  std::uint32_t staging_lkey_wire = 0;  ///< of `staging`
  /// staging_layout::slots slots of two halves each, and their control words (detail/staging.hpp).
  unsigned char* staging = nullptr;
  staging_slot* staging_slots = nullptr;
  local_regions const* regions = nullptr;  ///< registered local buffers
};
static_assert(std::is_trivially_copyable_v<ibgda_state>);

}  // namespace gpucomm::detail
