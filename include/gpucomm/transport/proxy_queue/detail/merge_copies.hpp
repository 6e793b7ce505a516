#pragma once
// Joining copies that continue one another, for ProxyQueue's copy-engine backend: a copy engine
// pays per copy, so many small puts to neighbouring words cost as many copies unless they go as
// one. Host only and free of CUDA, so the host tests check it.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpucomm::detail {

/// One copy: `bytes` from `src` to `dst`.
struct copy_range {
  std::uintptr_t dst = 0;
  std::uintptr_t src = 0;
  std::size_t bytes = 0;
};

/// Sorts `ranges` by destination (then source) and joins each run in which every copy starts,
/// at both ends, where the one before it ends; the joined copies are the first entries of
/// `ranges`, and their count is returned. The order of copies is not kept: only copies that may
/// run in any order among themselves may be joined (one batch of ProxyQueue's, which no fence
/// divides). Overlapping copies stay separate; empty ones are dropped.
inline std::size_t merge_contiguous(std::vector<copy_range>& ranges) {
  std::sort(ranges.begin(), ranges.end(),
            [](copy_range const& a, copy_range const& b) { return a.dst != b.dst ? a.dst < b.dst : a.src < b.src; });
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
