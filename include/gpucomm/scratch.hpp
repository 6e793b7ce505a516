#pragma once
// Per-group scratch from the caller, in the style of CUB's TempStorage.
//
// An operation or algorithm that needs memory of its own per calling group (a staging buffer, a
// ring position, a slot to hand a value around) names a scratch type whose size and alignment are
// compile-time constants; the caller places one per group, in shared or global memory, and passes
// it. Nothing is hidden in a __shared__ variable that two groups of one CTA could share by accident:
// each group gets exactly the storage its caller gives it.
//
//   __global__ void k(gpucomm::comm<NVLinkStore> c, gpucomm::sym_ptr<int> counter) {
//     // Two 64-thread groups per CTA, user-defined, without shfl: each gets its own slot.
//     __shared__ gpucomm::broadcast_scratch slots[2];
//     my_group64 const g = ...;
//     int const ticket = c.fetch_add(gpucomm::with_scratch(g, slots[g.index()]), counter, 1, 0);
//   }
//
// The library's own users of scratch: with_scratch (below), which lets any group, also one without
// shfl, call the operations that return a value to every thread (fetching atomics, group
// wait_until). Later transports and collectives take their staging the same way.

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "config.hpp"
#include "group.cuh"

namespace gpucomm {

/// Uninitialised storage of `Bytes` bytes aligned to `Align`, for one group's scratch. Trivial, so
/// it may be a __shared__ variable or live in global memory; its contents mean nothing between
/// calls.
template <std::size_t Bytes, std::size_t Align = 16>
struct scratch {
  static_assert(Bytes > 0, "gpucomm::scratch: size must be at least one byte");
  static_assert(Align > 0 && (Align & (Align - 1)) == 0, "gpucomm::scratch: alignment must be a power of two");
  static constexpr std::size_t size = Bytes;
  static constexpr std::size_t alignment = Align;
  alignas(Align) unsigned char bytes[Bytes];
};

/// The scratch types: a size and an alignment known at compile time, and trivial.
template <class S>
concept scratch_storage = std::is_trivial_v<S> && requires {
  { S::size } -> std::convertible_to<std::size_t>;
  { S::alignment } -> std::convertible_to<std::size_t>;
} && sizeof(S) >= S::size && alignof(S) >= S::alignment;

/// What with_scratch needs: one 8-byte slot.
using broadcast_scratch = scratch<8, 8>;
static_assert(scratch_storage<broadcast_scratch> && sizeof(broadcast_scratch) == 8);

/// Group g, handing values between its threads through the caller's scratch: a broadcasting group
/// (it has shfl) whatever g is. Every thread of g must pass the same storage, and no other group
/// may use it while g does.
template <group G>
class scratch_group : public detail::group_wrapper<G> {
 public:
  GPUCOMM_HD scratch_group(G const& g, broadcast_scratch& storage) : detail::group_wrapper<G>(g), storage_(&storage) {}

  /// The value `src_rank` passed, returned to every thread. Two syncs: the first makes the write
  /// visible to the group (CTA scope), the second keeps a later call from overwriting the slot
  /// before every thread has read it.
  GPUCOMM_EXEC_CHECK_DISABLE
  template <class T>
  GPUCOMM_HD T shfl(T value, unsigned src_rank) const {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(broadcast_scratch),
                  "gpucomm: with_scratch passes values of at most 8 bytes");
    if (group_rank(this->base()) == src_rank) std::memcpy(storage_->bytes, &value, sizeof(T));
    group_sync(this->base());
    T out;
    std::memcpy(&out, storage_->bytes, sizeof(T));
    group_sync(this->base());
    return out;
  }

 private:
  broadcast_scratch* storage_;
};

/// g with the caller's scratch, for operations that return a value to every thread.
template <group G>
GPUCOMM_HD scratch_group<G> with_scratch(G const& g, broadcast_scratch& storage) {
  return scratch_group<G>(g, storage);
}

}  // namespace gpucomm
