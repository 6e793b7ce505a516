#pragma once
// First-fit allocator of offsets inside one PE's heap slot. Pure bookkeeping (no CUDA), so every
// PE that performs the same sequence of allocations and frees computes the same offsets, which is
// what makes the heap symmetric. Freed ranges coalesce with their neighbours.

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <set>

namespace gpucomm::detail {

class offset_allocator {
 public:
  /// Manage [begin, end); every allocation is a multiple of `granularity` and aligned to it.
  offset_allocator(std::size_t begin, std::size_t end, std::size_t granularity);

  /// Bytes actually reserved for a request of `bytes` (at least one granule; `bytes` at most capacity()).
  std::size_t rounded(std::size_t bytes) const;

  /// The offset of a new block of rounded(bytes), or nothing when no free range is large enough.
  std::optional<std::size_t> allocate(std::size_t bytes);

  enum class free_result { ok, double_free, not_allocated };

  /// Return the block that starts at `offset`. Nothing changes unless the result is ok.
  free_result deallocate(std::size_t offset);

  /// Undo an allocate() whose setup failed: the block is free again and not remembered as freed.
  void cancel(std::size_t offset);

  /// The size of the live block at `offset`, or 0.
  std::size_t size_of(std::size_t offset) const;

  /// The offset of the live block containing `offset`, if any.
  std::optional<std::size_t> block_containing(std::size_t offset) const;

  std::size_t largest_free() const;
  std::size_t bytes_in_use() const;
  std::size_t capacity() const { return capacity_; }
  std::size_t live_blocks() const { return live_.size(); }
  std::size_t granularity() const { return granularity_; }

 private:
  std::size_t granularity_;
  std::size_t capacity_;
  std::map<std::size_t, std::size_t> free_;  // offset -> size
  std::map<std::size_t, std::size_t> live_;  // offset -> size
  std::set<std::size_t> freed_;              // starts of blocks freed and not reused: a second free is a double free
};

}  // namespace gpucomm::detail

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "offset_allocator.inl"
#endif
