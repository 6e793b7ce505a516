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
  offset_allocator(std::size_t begin, std::size_t end, std::size_t granularity)
      : granularity_(granularity), capacity_(end - begin) {
    if (end > begin) free_[begin] = end - begin;
  }

  /// Bytes actually reserved for a request of `bytes` (at least one granule; `bytes` at most capacity()).
  std::size_t rounded(std::size_t bytes) const {
    std::size_t const b = bytes == 0 ? 1 : bytes;
    return (b + granularity_ - 1) / granularity_ * granularity_;
  }

  /// The offset of a new block of rounded(bytes), or nothing when no free range is large enough.
  std::optional<std::size_t> allocate(std::size_t bytes) {
    if (bytes > capacity_) return std::nullopt;  // also keeps rounded() from wrapping past SIZE_MAX
    std::size_t const need = rounded(bytes);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < need) continue;
      std::size_t const offset = it->first;
      std::size_t const left = it->second - need;
      free_.erase(it);
      if (left) free_[offset + need] = left;
      live_[offset] = need;
      freed_.erase(offset);
      return offset;
    }
    return std::nullopt;
  }

  enum class free_result { ok, double_free, not_allocated };

  /// Return the block that starts at `offset`. Nothing changes unless the result is ok.
  free_result deallocate(std::size_t offset) {
    auto const it = live_.find(offset);
    if (it == live_.end()) return freed_.count(offset) ? free_result::double_free : free_result::not_allocated;
    std::size_t begin = offset;
    std::size_t size = it->second;
    live_.erase(it);
    freed_.insert(offset);
    // Coalesce with the free range after, then with the one before.
    auto next = free_.find(begin + size);
    if (next != free_.end()) {
      size += next->second;
      free_.erase(next);
    }
    auto after = free_.lower_bound(begin);
    if (after != free_.begin()) {
      auto prev = std::prev(after);
      if (prev->first + prev->second == begin) {
        begin = prev->first;
        size += prev->second;
        free_.erase(prev);
      }
    }
    free_[begin] = size;
    return free_result::ok;
  }

  /// Undo an allocate() whose setup failed: the block is free again and not remembered as freed.
  void cancel(std::size_t offset) {
    if (deallocate(offset) == free_result::ok) freed_.erase(offset);
  }

  /// The size of the live block at `offset`, or 0.
  std::size_t size_of(std::size_t offset) const {
    auto const it = live_.find(offset);
    return it == live_.end() ? 0 : it->second;
  }

  /// The offset of the live block containing `offset`, if any.
  std::optional<std::size_t> block_containing(std::size_t offset) const {
    auto it = live_.upper_bound(offset);
    if (it == live_.begin()) return std::nullopt;
    --it;
    if (offset < it->first + it->second) return it->first;
    return std::nullopt;
  }

  std::size_t largest_free() const {
    std::size_t best = 0;
    for (auto const& [offset, size] : free_) best = size > best ? size : best;
    return best;
  }
  std::size_t bytes_in_use() const {
    std::size_t used = 0;
    for (auto const& [offset, size] : live_) used += size;
    return used;
  }
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
