#pragma once
// IBGDAPost's device state (ibgda_post.cuh), kept apart so the host half can build it without
// device code.

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../../verbs_gpu/send_queue.cuh"
#include "../nic/heap_keys.hpp"

namespace gpucomm::detail {

/// A local buffer registered with the NIC (world::register_buffer): puts from it and gets into it
/// go straight to the NIC.
struct ibgda_region {
  std::uint64_t base = 0;
  std::uint64_t bytes = 0;
  std::uint32_t lkey_wire = 0;
  std::uint32_t reserved = 0;
};
static_assert(sizeof(ibgda_region) == 24);

/// The registered buffers of one PE, in GPU memory; the host rewrites it between kernels.
struct ibgda_regions {
  static constexpr std::uint32_t capacity = 64;
  std::uint32_t count = 0;
  std::uint32_t reserved = 0;
  ibgda_region entries[capacity];
};

/// Staging of local buffers the NIC cannot reach: each PE has `slots` slots of two halves of
/// `half_bytes`, in memory registered with the NIC. A group takes a slot (its lock), copies a chunk
/// into one half and posts it while it fills the other (puts), or reads into both halves and copies
/// each out when it has landed (gets).
struct ibgda_staging {
  static constexpr std::uint32_t slots = 16;
  static constexpr std::uint64_t half_bytes = std::uint64_t{64} << 10;
};

/// One staging slot's control words, in GPU memory.
struct ibgda_staging_slot {
  /// Per half: index + 1 of the last WQE that reads it (a put's RDMA WRITE, maybe still in flight),
  /// 0 when none; and which of the PE's queues it is on.
  std::uint64_t pending[2] = {0, 0};
  std::uint32_t pending_queue[2] = {0, 0};
  /// Odd while a group uses the slot; each use adds 2 (taking it 1, giving it back 1).
  std::uint64_t lock = 0;
};
static_assert(sizeof(ibgda_staging_slot) == 32);

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
  /// ibgda_staging::slots slots of two halves each, and their control words.
  unsigned char* staging = nullptr;
  ibgda_staging_slot* staging_slots = nullptr;
  ibgda_regions const* regions = nullptr;  ///< registered local buffers
};
static_assert(std::is_trivially_copyable_v<ibgda_state>);

}  // namespace gpucomm::detail
