#pragma once
// The world's memory rules, apart from the world: how many bytes an allocation of n elements
// asks the symmetric heap for, where a local PE's view of a symmetric object lies, and which local
// buffers may be registered with the NICs (world::register_buffer). The heap itself is heap.hpp.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "../../error.hpp"
#include "../world_options.hpp"
#include "heap.hpp"

namespace gpucomm::detail {

/// The bytes an allocation of n elements of `size` bytes takes, and, when that count overflows a
/// size_t, SIZE_MAX (which the heap refuses) with why in `problem`: n * size past SIZE_MAX would
/// wrap to a small block that kernels then overrun.
struct allocation_bytes {
  std::size_t bytes;
  std::string problem;
};
allocation_bytes allocation_bytes_of(std::size_t n, std::size_t size);

/// The heap offset of `p` in whichever of `local_pes`' slots holds it; nothing when none does.
std::optional<std::size_t> offset_in_local_slots(symmetric_heap const& heap, std::vector<int> const& local_pes,
                                                 void const* p);

/// The heap offset of `p` (any local PE's view), which must point into a live allocation; throws
/// naming local PE `pe` otherwise (world::view).
std::size_t live_offset(symmetric_heap const& heap, std::vector<int> const& local_pes, void const* p, int pe);

/// Throws unless [ptr, ptr + bytes) may be registered for local PE `pe`: not null or empty, inside
/// the address space, outside the symmetric heap (heap_layout, npes slots), overlapping none of
/// pe's registered buffers, and fewer than `most` of them so far.
void check_new_buffer(char const* call, int pe, void const* ptr, std::size_t bytes, heap_layout const& heap, int npes,
                      std::vector<registered_buffer> const& buffers, int most);

/// The GPU whose memory `ptr` is (it must be `device`, local PE pe's), or -1 for pinned host
/// memory the GPU maps at the same address; anything else (pageable or managed memory) throws.
int buffer_device(char const* call, int pe, void const* ptr, int device);

}  // namespace gpucomm::detail

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "world_memory.inl"
#endif
