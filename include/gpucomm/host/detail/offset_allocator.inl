#pragma once
// The bodies of offset_allocator.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::detail {

inline offset_allocator::offset_allocator(std::size_t begin, std::size_t end, std::size_t granularity)
    : granularity_(granularity), capacity_(end - begin) {
  if (end > begin) free_[begin] = end - begin;
}

inline std::size_t offset_allocator::rounded(std::size_t bytes) const {
  std::size_t const b = bytes == 0 ? 1 : bytes;
  return (b + granularity_ - 1) / granularity_ * granularity_;
}

inline std::optional<std::size_t> offset_allocator::allocate(std::size_t bytes) {
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

inline auto offset_allocator::deallocate(std::size_t offset) -> free_result {
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

inline void offset_allocator::cancel(std::size_t offset) {
  if (deallocate(offset) == free_result::ok) freed_.erase(offset);
}

inline std::size_t offset_allocator::size_of(std::size_t offset) const {
  auto const it = live_.find(offset);
  return it == live_.end() ? 0 : it->second;
}

inline std::optional<std::size_t> offset_allocator::block_containing(std::size_t offset) const {
  auto it = live_.upper_bound(offset);
  if (it == live_.begin()) return std::nullopt;
  --it;
  if (offset < it->first + it->second) return it->first;
  return std::nullopt;
}

inline std::size_t offset_allocator::largest_free() const {
  std::size_t best = 0;
  for (auto const& [offset, size] : free_) best = size > best ? size : best;
  return best;
}

inline std::size_t offset_allocator::bytes_in_use() const {
  std::size_t used = 0;
  for (auto const& [offset, size] : live_) used += size;
  return used;
}

}  // namespace gpucomm::detail
