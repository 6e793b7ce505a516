// The heap's offset bookkeeping: first fit, coalescing, exhaustion, double free, foreign offsets.
#include <gpucomm/host/detail/offset_allocator.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <map>
#include <random>

using gpucomm::detail::offset_allocator;
using result = offset_allocator::free_result;

TEST_CASE("offset_allocator rounds to the granularity and fits first", "[heap]") {
  offset_allocator a(0, 10 * 64, 64);
  CHECK(a.rounded(0) == 64);
  CHECK(a.rounded(1) == 64);
  CHECK(a.rounded(64) == 64);
  CHECK(a.rounded(65) == 128);
  auto const x = a.allocate(1);
  auto const y = a.allocate(100);
  auto const z = a.allocate(64);
  REQUIRE(x);
  REQUIRE(y);
  REQUIRE(z);
  CHECK(*x == 0);
  CHECK(*y == 64);
  CHECK(*z == 192);
  CHECK(a.size_of(*y) == 128);
  CHECK(a.bytes_in_use() == 256);
  CHECK(a.block_containing(100) == std::optional<std::size_t>(64));
  CHECK(!a.block_containing(300));
}

TEST_CASE("offset_allocator reports exhaustion and recovers after frees", "[heap]") {
  offset_allocator a(0, 4 * 64, 64);
  auto const x = a.allocate(128);
  auto const y = a.allocate(128);
  REQUIRE(x);
  REQUIRE(y);
  CHECK(!a.allocate(1));
  CHECK(a.largest_free() == 0);
  REQUIRE(a.deallocate(*x) == result::ok);
  CHECK(a.largest_free() == 128);
  CHECK(!a.allocate(129));
  REQUIRE(a.deallocate(*y) == result::ok);
  CHECK(a.largest_free() == 256);  // coalesced
  CHECK(a.allocate(256) == std::optional<std::size_t>(0));
}

TEST_CASE("offset_allocator tells double frees from foreign offsets and changes nothing", "[heap]") {
  offset_allocator a(0, 8 * 64, 64);
  auto const x = a.allocate(64);
  auto const y = a.allocate(64);
  REQUIRE(a.deallocate(*x) == result::ok);
  CHECK(a.deallocate(*x) == result::double_free);
  CHECK(a.deallocate(*y + 8) == result::not_allocated);
  CHECK(a.deallocate(7 * 64) == result::not_allocated);
  CHECK(a.size_of(*y) == 64);
  CHECK(a.live_blocks() == 1);
  // Reusing the freed offset makes it live again: freeing it once more is fine.
  auto const z = a.allocate(64);
  CHECK(z == x);
  CHECK(a.deallocate(*z) == result::ok);
}

TEST_CASE("offset_allocator cancel forgets the block without calling it freed", "[heap]") {
  offset_allocator a(0, 4 * 64, 64);
  auto const x = a.allocate(64);
  a.cancel(*x);
  CHECK(a.deallocate(*x) == result::not_allocated);
  CHECK(a.largest_free() == 256);
}

TEST_CASE("offset_allocator keeps blocks disjoint under random allocate/free", "[heap]") {
  std::mt19937_64 rng(1234);
  offset_allocator a(4096, 4096 + 1000 * 256, 256);
  std::map<std::size_t, std::size_t> live;  // independent model: offset -> size
  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      std::size_t const bytes = rng() % 5000;
      auto const off = a.allocate(bytes);
      if (!off) {
        CHECK(a.largest_free() < a.rounded(bytes));
        continue;
      }
      CHECK(*off >= 4096);
      CHECK(*off + a.rounded(bytes) <= 4096 + 1000 * 256);
      CHECK(*off % 256 == 0);
      auto const next = live.lower_bound(*off);
      if (next != live.end()) CHECK(*off + a.rounded(bytes) <= next->first);
      if (next != live.begin()) CHECK(std::prev(next)->first + std::prev(next)->second <= *off);
      live[*off] = a.rounded(bytes);
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      REQUIRE(a.deallocate(it->first) == result::ok);
      live.erase(it);
    }
    std::size_t used = 0;
    for (auto const& [o, s] : live) used += s;
    REQUIRE(a.bytes_in_use() == used);
  }
}

TEST_CASE("offset_allocator refuses requests above its capacity without wrapping", "[heap]") {
  offset_allocator a(0, 4 * 64, 64);
  // rounded() of a byte count within a granule of SIZE_MAX would wrap to 0: a 0-byte block.
  CHECK_FALSE(a.allocate(std::numeric_limits<std::size_t>::max()).has_value());
  CHECK_FALSE(a.allocate(std::numeric_limits<std::size_t>::max() - 10).has_value());
  CHECK_FALSE(a.allocate(4 * 64 + 1).has_value());
  CHECK(a.live_blocks() == 0);
  CHECK(a.allocate(4 * 64) == std::size_t{0});  // the whole capacity is still one block
}
