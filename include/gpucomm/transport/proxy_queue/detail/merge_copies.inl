#pragma once
// The bodies of merge_copies.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::detail {

namespace merge_detail {

inline bool continues(copy_range const& last, copy_range const& r) {
  return r.dst == last.dst + last.bytes && r.src == last.src + last.bytes;
}

/// Joins each copy into the one just before it where it continues it, in the order given, and
/// drops empty copies; returns how many are left (the first entries).
inline std::size_t join_in_order(std::vector<copy_range>& ranges) {
  std::size_t out = 0;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    copy_range const r = ranges[i];
    if (r.bytes == 0) continue;
    if (out != 0 && continues(ranges[out - 1], r)) {
      ranges[out - 1].bytes += r.bytes;
      continue;
    }
    ranges[out++] = r;
  }
  return out;
}

/// Whether `r`, which starts at or after `o`, moves bytes from the same place as `o` does (the
/// same distance between destination and source) and starts within `o` or where it ends: then
/// the two are one copy, from `o`'s start to the later of their ends.
inline bool extends(copy_range const& o, copy_range const& r) {
  return r.dst <= o.dst + o.bytes && r.dst - o.dst == r.src - o.src;
}

inline bool before(copy_range const& a, copy_range const& b) { return a.dst != b.dst ? a.dst < b.dst : a.src < b.src; }

}  // namespace merge_detail

inline std::size_t merge_contiguous(std::vector<copy_range>& ranges, std::vector<std::size_t>& open) {
  using namespace merge_detail;
  // 1. Runs that arrive in order (the threads of a warp posting neighbouring words) join first,
  //    so that what follows works on few pieces.
  std::size_t const pieces = join_in_order(ranges);
  ranges.resize(pieces);
  if (pieces < 2) return pieces;
  // 2. In order of destination. qsort rather than std::sort: <algorithm> would cost every file
  //    that includes ProxyQueue more compile time than this sort of one batch costs at run time.
  bool sorted = true;
  for (std::size_t i = 1; i < pieces && sorted; ++i) sorted = !before(ranges[i], ranges[i - 1]);
  if (!sorted) {
    std::qsort(ranges.data(), pieces, sizeof(copy_range), [](void const* x, void const* y) {
      auto const& a = *static_cast<copy_range const*>(x);
      auto const& b = *static_cast<copy_range const*>(y);
      return before(a, b) ? -1 : (before(b, a) ? 1 : 0);
    });
  }
  // 3. Each piece extends a joined copy that moves bytes from the same place and ends where the
  //    piece starts, or after (the piece continues it, or repeats some of its bytes), or begins
  //    one. `open` holds the joined copies that a later piece may still extend: a joined copy
  //    ending below the piece's destination never can (destinations only grow from here), so it
  //    leaves the set; so at most one open copy moves bytes from any one place. Joined copies are
  //    written in place: out <= i always.
  open.clear();
  std::size_t out = 0;
  for (std::size_t i = 0; i < pieces; ++i) {
    copy_range const r = ranges[i];
    std::size_t into = pieces;
    for (std::size_t k = 0; k < open.size();) {
      copy_range const& o = ranges[open[k]];
      if (o.dst + o.bytes < r.dst) {
        open[k] = open.back();
        open.pop_back();
        continue;
      }
      if (into == pieces && extends(o, r)) into = open[k];
      ++k;
    }
    if (into != pieces) {
      copy_range& o = ranges[into];
      if (r.dst + r.bytes > o.dst + o.bytes) o.bytes = r.dst + r.bytes - o.dst;
    } else {
      ranges[out] = r;
      open.push_back(out++);
    }
  }
  return out;
}

}  // namespace gpucomm::detail
