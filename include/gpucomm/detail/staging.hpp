#pragma once
// Local buffers a network path cannot read or write directly: the table of buffers registered
// with world::register_buffer that a PE's kernels consult, and the staging slots the rest goes
// through. Shared by IBGDAPost and ProxyQueue's network backends; the device code that uses them
// is detail/staging.cuh. No device code here, so host halves build these without it.

#include <cstdint>

#include "../config.hpp"

namespace gpucomm::detail {

/// Whether [addr, addr + bytes) lies inside [base, base + size).
GPUCOMM_HD constexpr bool range_within(std::uint64_t addr, std::uint64_t bytes, std::uint64_t base,
                                       std::uint64_t size) noexcept {
  return addr >= base && addr - base <= size && bytes <= size - (addr - base);
}

/// A local buffer registered with the NIC (world::register_buffer): puts from it and gets into it
/// go straight to the NIC.
struct local_region {
  std::uint64_t base = 0;
  std::uint64_t bytes = 0;
  std::uint32_t lkey_wire = 0;  ///< the NIC's key, where the device posts itself (IBGDAPost)
  std::uint32_t reserved = 0;
};
static_assert(sizeof(local_region) == 24);

/// The registered buffers of one PE, in GPU memory; the host rewrites it between kernels.
struct local_regions {
  static constexpr std::uint32_t capacity = 64;
  std::uint32_t count = 0;
  std::uint32_t reserved = 0;
  local_region entries[capacity];
};

/// Staging of local buffers the network cannot reach: each PE has `slots` slots of two halves of
/// `half_bytes`, in memory the network reaches. A group takes a slot (its lock), copies a chunk
/// into one half and posts it while it fills the other (puts), or reads into both halves and copies
/// each out when it has landed (gets).
struct staging_layout {
  static constexpr std::uint32_t slots = 16;
  static constexpr std::uint64_t half_bytes = std::uint64_t{64} << 10;
  static constexpr std::uint64_t bytes = std::uint64_t{slots} * 2 * half_bytes;
};

/// One staging slot's control words, in GPU memory.
struct staging_slot {
  /// Per half: what must complete before the half is written again (a put reading it, maybe
  /// still in flight), + 1, 0 when nothing: a WQE index (IBGDAPost) or a command's ticket
  /// (ProxyQueue); and, for a WQE, which of the PE's queues it is on.
  std::uint64_t pending[2] = {0, 0};
  std::uint32_t pending_queue[2] = {0, 0};
  /// Odd while a group uses the slot; each use adds 2 (taking it 1, giving it back 1).
  std::uint64_t lock = 0;
};
static_assert(sizeof(staging_slot) == 32);

}  // namespace gpucomm::detail
