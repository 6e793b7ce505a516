#pragma once
// The bodies of merge_copies.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::detail {

inline std::size_t merge_contiguous(std::vector<copy_range>& ranges) {
  // qsort rather than std::sort: <algorithm> would cost every file that includes ProxyQueue more
  // compile time than this sort of one batch (at most a few dozen copies) costs at run time.
  std::qsort(ranges.data(), ranges.size(), sizeof(copy_range), [](void const* x, void const* y) {
    auto const& a = *static_cast<copy_range const*>(x);
    auto const& b = *static_cast<copy_range const*>(y);
    if (a.dst != b.dst) return a.dst < b.dst ? -1 : 1;
    return a.src < b.src ? -1 : (a.src > b.src ? 1 : 0);
  });
  std::size_t out = 0;
  for (copy_range const& r : ranges) {
    if (r.bytes == 0) continue;
    if (out != 0) {
      copy_range& last = ranges[out - 1];
      if (r.dst == last.dst + last.bytes && r.src == last.src + last.bytes) {
        last.bytes += r.bytes;
        continue;
      }
    }
    ranges[out++] = r;
  }
  return out;
}

}  // namespace gpucomm::detail
