#pragma once
// Which buffers of one collective call may overlap at a member: none, but for the in-place form
// the collective allows (docs/guide/collectives.md, Arguments), where src lies at a fixed offset from dst:
//   allreduce, reduce, broadcast (root)   src == dst
//   allgather                             src == dst + rank * n
//   reduce_scatter                        dst == src + rank * n
//   alltoall                              no in-place form
// Any other overlap would let a member read what it has already overwritten (or a peer's data
// land on a source not yet sent): the host launchers refuse it before launching anything.

#include <cstddef>
#include <cstdint>

#include "../../config.hpp"

namespace gpucomm::detail {

/// One call's buffers at one member, in bytes, and its in-place form, if it has one: src - dst.
struct call_buffers {
  std::uintptr_t src = 0;
  std::size_t src_bytes = 0;
  std::uintptr_t dst = 0;
  std::size_t dst_bytes = 0;
  bool has_in_place = false;
  std::ptrdiff_t in_place_offset = 0;
};

/// Whether the buffers overlap other than in the in-place form (empty buffers overlap nothing).
GPUCOMM_HD constexpr bool overlap_refused(call_buffers const& b) noexcept {
  if (b.src_bytes == 0 || b.dst_bytes == 0) return false;
  bool const overlap = b.src < b.dst + b.dst_bytes && b.dst < b.src + b.src_bytes;
  if (!overlap) return false;
  return !(b.has_in_place && static_cast<std::ptrdiff_t>(b.src - b.dst) == b.in_place_offset);
}

/// A collective's in-place form: src == dst + `elements` elements.
struct in_place_at {
  std::ptrdiff_t elements = 0;
  constexpr explicit in_place_at(std::ptrdiff_t e) noexcept : elements(e) {}
};

/// The buffers of a call of `src_elements` and `dst_elements` elements of T, with no in-place form.
template <class T>
call_buffers buffers_of(T const* src, std::size_t src_elements, T const* dst, std::size_t dst_elements) noexcept {
  return {reinterpret_cast<std::uintptr_t>(src), src_elements * sizeof(T), reinterpret_cast<std::uintptr_t>(dst),
          dst_elements * sizeof(T)};
}
/// The same with an in-place form.
template <class T>
call_buffers buffers_of(T const* src, std::size_t src_elements, T const* dst, std::size_t dst_elements,
                        in_place_at form) noexcept {
  call_buffers b = buffers_of(src, src_elements, dst, dst_elements);
  b.has_in_place = true;
  b.in_place_offset = form.elements * static_cast<std::ptrdiff_t>(sizeof(T));
  return b;
}

}  // namespace gpucomm::detail
