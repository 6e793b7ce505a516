// ProxyQueue's joining of contiguous copies (transport/proxy_queue/detail/merge_copies.hpp), checked
// against what the copies do: random batches of copies between two arenas are carried out once
// as given and once as joined, byte by byte, and must leave the same destination arena; and the
// count of joined copies is checked where it is known (runs of neighbouring words in any order,
// written once or several times in one batch, and the same words from other sources).
#include <gpucomm/transport/proxy_queue/detail/merge_copies.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

using gpucomm::detail::copy_range;

namespace {

std::size_t merge_contiguous(std::vector<copy_range>& ranges) {
  std::vector<std::size_t> open;
  return gpucomm::detail::merge_contiguous(ranges, open);
}

constexpr std::size_t arena_bytes = 4096;

/// The destination arena after copying `ranges` (offsets into the arenas) in order.
std::vector<unsigned char> after_copies(std::vector<copy_range> const& ranges,
                                        std::vector<unsigned char> const& source) {
  std::vector<unsigned char> dst(arena_bytes, 0xA5);
  for (copy_range const& r : ranges) std::memcpy(dst.data() + r.dst, source.data() + r.src, r.bytes);
  return dst;
}

/// Joins `ranges` and checks that exactly the copies `want` are left, in order.
void check_joined(std::vector<copy_range> ranges, std::vector<copy_range> const& want) {
  ranges.resize(merge_contiguous(ranges));
  REQUIRE(ranges.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("copy " << i);
    CHECK(ranges[i].dst == want[i].dst);
    CHECK(ranges[i].src == want[i].src);
    CHECK(ranges[i].bytes == want[i].bytes);
  }
}

}  // namespace

TEST_CASE("merge_contiguous: neighbouring words in any order become one copy", "[proxy]") {
  std::mt19937_64 rng(11);
  std::vector<copy_range> ranges;
  for (std::size_t i = 0; i < 64; ++i) ranges.push_back({1000 + 8 * i, 200 + 8 * i, 8});
  std::shuffle(ranges.begin(), ranges.end(), rng);
  check_joined(ranges, {{1000, 200, 512}});
}

TEST_CASE("merge_contiguous: a run written k times in one batch becomes one copy", "[proxy]") {
  // As 256 threads each putting their own word, twice or more, within one pass of the proxy:
  // arrival in warp order, word by word in any order, and warp by warp in any order (so that
  // runs of several warps join before the batch is sorted, differently in each round), with
  // another run and a scattered word between.
  std::mt19937_64 rng(13);
  enum class arrival { in_order, words_shuffled, warps_shuffled };
  for (int const repeats : {1, 2, 3, 8}) {
    for (arrival const how : {arrival::in_order, arrival::words_shuffled, arrival::warps_shuffled}) {
      std::vector<std::vector<copy_range>> warps;
      for (int k = 0; k < repeats; ++k) {
        for (std::size_t w = 0; w < 8; ++w) {
          warps.emplace_back();
          for (std::size_t i = 32 * w; i < 32 * w + 32; ++i) warps.back().push_back({4096 + 8 * i, 512 + 8 * i, 8});
        }
        warps.emplace_back();
        for (std::size_t i = 0; i < 32; ++i) warps.back().push_back({65536 + 8 * i, 16384 + 8 * i, 8});
        warps.push_back({{100000, 7, 8}});
      }
      if (how == arrival::warps_shuffled) std::shuffle(warps.begin(), warps.end(), rng);
      std::vector<copy_range> ranges;
      for (auto const& w : warps) ranges.insert(ranges.end(), w.begin(), w.end());
      if (how == arrival::words_shuffled) std::shuffle(ranges.begin(), ranges.end(), rng);
      INFO(repeats << " repeats, arrival " << static_cast<int>(how));
      check_joined(ranges, {{4096, 512, 2048}, {65536, 16384, 256}, {100000, 7, 8}});
    }
  }
}

TEST_CASE("merge_contiguous: overlaps join only when they move bytes from the same place", "[proxy]") {
  // A word put twice from different places in one batch (either result is allowed, but both
  // copies must be made); a run put twice, once from a shifted source; runs that overlap, from
  // the same place (one copy) and from another (apart).
  std::vector<copy_range> ranges = {{0, 100, 8},     {0, 200, 8},     {64, 0, 32},    {64, 8, 32},   {64, 0, 32},
                                    {1000, 500, 64}, {1032, 532, 64}, {1040, 540, 8}, {1200, 0, 16}, {1208, 16, 16}};
  check_joined(ranges,
               {{0, 100, 8}, {0, 200, 8}, {64, 0, 32}, {64, 8, 32}, {1000, 500, 96}, {1200, 0, 16}, {1208, 16, 16}});
}

TEST_CASE("merge_contiguous: what is not contiguous at both ends stays apart", "[proxy]") {
  std::vector<copy_range> ranges = {
      {0, 0, 8},    {8, 16, 8},    // destination contiguous, source not
      {100, 50, 8}, {108, 58, 0},  // an empty copy between: dropped, and the next one still joins
      {108, 58, 4}, {112, 62, 8},  // joins: 100..120 from 50..70
      {300, 0, 16}, {308, 90, 8},  // overlapping destinations, from other places: apart
  };
  check_joined(ranges, {{0, 0, 8}, {8, 16, 8}, {100, 50, 20}, {300, 0, 16}, {308, 90, 8}});
}

TEST_CASE("merge_contiguous: joined copies move the same bytes as the copies given", "[proxy]") {
  std::mt19937_64 rng(12);
  std::vector<unsigned char> source(arena_bytes);
  for (auto& b : source) b = static_cast<unsigned char>(rng());
  for (int trial = 0; trial < 500; ++trial) {
    // Disjoint destination pieces (as one batch of puts must be for its result to be defined),
    // each from a source piece that often continues the previous one.
    std::vector<copy_range> ranges;
    std::size_t dst = rng() % 64, src = rng() % 64;
    while (true) {
      std::size_t const bytes = 1 + rng() % 24;
      if (dst + bytes > arena_bytes || src + bytes > arena_bytes) break;
      ranges.push_back({dst, src, bytes});
      dst += bytes + (rng() % 4 == 0 ? rng() % 16 : 0);
      src = rng() % 5 == 0 ? rng() % (arena_bytes / 2) : src + bytes;
    }
    std::vector<unsigned char> const want = after_copies(ranges, source);
    // Some copies given twice more, and some parts of copies given again: the same bytes to the
    // same place, so the result stays defined.
    std::size_t const distinct = ranges.size();
    for (std::size_t i = 0; i < distinct; ++i) {
      if (rng() % 8 == 0) ranges.insert(ranges.end(), 2, ranges[i]);
      if (rng() % 8 == 0) {
        copy_range const whole = ranges[i];
        std::size_t const skip = rng() % whole.bytes;
        ranges.push_back({whole.dst + skip, whole.src + skip, 1 + rng() % (whole.bytes - skip)});
      }
    }
    std::size_t const given = ranges.size();
    std::shuffle(ranges.begin(), ranges.end(), rng);
    std::size_t const n = merge_contiguous(ranges);
    ranges.resize(n);
    INFO("trial " << trial << ": " << given << " copies, " << n << " joined");
    CHECK(n <= given);
    CHECK(after_copies(ranges, source) == want);
    for (std::size_t i = 1; i < n; ++i) {  // nothing left that could have been joined, nothing made twice
      bool const continues = ranges[i].dst == ranges[i - 1].dst + ranges[i - 1].bytes &&
                             ranges[i].src == ranges[i - 1].src + ranges[i - 1].bytes;
      CHECK_FALSE(continues);
    }
    for (std::size_t i = 0; i < n; ++i) {  // copies from the same place neither overlap nor touch
      for (std::size_t j = i + 1; j < n; ++j) {
        copy_range const& a = ranges[i].dst <= ranges[j].dst ? ranges[i] : ranges[j];
        copy_range const& b = ranges[i].dst <= ranges[j].dst ? ranges[j] : ranges[i];
        CHECK_FALSE((b.dst - a.dst == b.src - a.src && b.dst <= a.dst + a.bytes));
      }
    }
  }
}
