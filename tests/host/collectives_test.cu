// Host-testable logic of the collectives: the workspace layout, how elements split into parts,
// granules, rounds and two-shot blocks, allreduce_rows' choice, and the reduction operations (which types take which,
// wrapping integer arithmetic, 16-bit floats accumulated in float).
#include <gpucomm/collectives.cuh>

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <vector>

using gpucomm::collective_workspace;
namespace reduction = gpucomm::reduction;
namespace detail = gpucomm::detail;

TEST_CASE("workspace layout: disjoint regions, aligned blocks and packet blocks, parts back to back", "[collectives]") {
  for (int size : {1, 2, 3, 4, 7, 8, 9, 33}) {
    for (std::size_t block : {std::size_t{128}, std::size_t{1024}, std::size_t{65536}}) {
      for (int parts : {1, 3}) {
        collective_workspace ws;
        ws.members = {0, 1, size, 0};
        ws.parts = parts;
        ws.block_bytes = block;
        std::size_t const channel = 2 * block;
        ws.channel_block_bytes = channel;
        std::vector<unsigned char> memory(collective_workspace::bytes(size, block, channel, parts) + 128);
        // Align the fake base as the heap does (allocations are at least 128-byte aligned).
        auto const raw = reinterpret_cast<std::uintptr_t>(memory.data());
        ws.base = gpucomm::sym_ptr<std::byte>(reinterpret_cast<std::byte*>((raw + 127) / 128 * 128));
        std::vector<int> owner(collective_workspace::bytes(size, block, channel, parts), -1);
        auto claim = [&](void const* p, std::size_t bytes, int who) {
          auto const at = static_cast<std::size_t>(static_cast<std::byte const*>(p) - ws.base.get());
          REQUIRE(at + bytes <= owner.size());
          for (std::size_t i = 0; i < bytes; ++i) {
            INFO("size " << size << " block " << block << " parts " << parts << " byte " << at + i);
            REQUIRE(owner[at + i] == -1);
            owner[at + i] = who;
          }
        };
        int region = 0;
        for (int k = 0; k < parts; ++k) {
          CHECK(ws.part_base(k) ==
                ws.base.get() + static_cast<std::size_t>(k) * collective_workspace::part_bytes(size, block, channel));
          CHECK(reinterpret_cast<std::uintptr_t>(ws.local_words(k)) % 64 == 0);
          claim(ws.local_words(k), 64, region++);
          CHECK(reinterpret_cast<std::uintptr_t>(ws.flags(k)) % 64 == 0);
          claim(ws.flags(k), static_cast<std::size_t>(size) * 8, region++);
          for (std::uint64_t round : {2u, 3u})
            for (int r = 0; r < size; ++r) {
              CHECK(reinterpret_cast<std::uintptr_t>(ws.block(k, round, r)) % 128 == 0);
              claim(ws.block(k, round, r), block, region++);
              CHECK(reinterpret_cast<std::uintptr_t>(ws.packet_block(k, round, r)) % 128 == 0);
              claim(ws.packet_block(k, round, r), block, region++);
            }
          // Channel blocks, as receiver 0 holds them: one per other rank and slot.
          for (std::uint64_t step : {8u, 9u, 10u, 11u})
            for (int r = 1; r < size; ++r) {
              CHECK(reinterpret_cast<std::uintptr_t>(ws.channel_block(k, step, r, 0)) % 128 == 0);
              claim(ws.channel_block(k, step, r, 0), channel, region++);
              // The same offsets, rotated, at every other receiver.
              CHECK(ws.channel_block(k, step, r, 0) == ws.channel_block(k, step, (r + 1) % size, 1 % size));
            }
          CHECK(ws.packet_block(k, 7, 1 % size) == ws.packet_block(k, 3, 1 % size));
          // Rounds of equal parity share a slot.
          CHECK(ws.block(k, 5, 0) == ws.block(k, 3, 0));
          CHECK(ws.block(k, 4, size - 1) == ws.block(k, 2, size - 1));
        }
      }
    }
  }
  CHECK(collective_workspace::round_block_bytes(1) == 128);
  CHECK(collective_workspace::round_block_bytes(129) == 256);
  CHECK(collective_workspace::round_block_bytes(65536) == 65536);
}

TEST_CASE("parts, rounds and two-shot blocks cover every element exactly once", "[collectives]") {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{100}, std::size_t{1001}}) {
    for (int parts : {1, 2, 3, 8}) {
      for (std::size_t per_round : {std::size_t{1}, std::size_t{16}, std::size_t{64}}) {
        std::vector<int> seen(n, 0);
        for (int k = 0; k < parts; ++k) {
          auto const range = detail::part_range(n, k, parts);
          REQUIRE(range.lo <= range.hi);
          CHECK(range.size() + 1 >= n / static_cast<std::size_t>(parts));  // balanced
          for (std::size_t j = 0; j < detail::rounds_for(range.size(), per_round); ++j) {
            auto const chunk = detail::chunk_of(range.size(), j, per_round);
            CHECK(chunk.size() >= 1);
            CHECK(chunk.size() <= per_round);
            for (std::size_t i = range.lo + chunk.lo; i < range.lo + chunk.hi; ++i) ++seen[i];
          }
          CHECK(detail::chunk_of(range.size(), detail::rounds_for(range.size(), per_round), per_round).size() == 0);
        }
        for (std::size_t i = 0; i < n; ++i) REQUIRE(seen[i] == 1);
      }
      for (int size : {1, 2, 3, 4, 5}) {
        std::size_t const block = detail::two_shot_block_size(n, size);
        CHECK(block * static_cast<std::size_t>(size) >= n);
        CHECK(block * static_cast<std::size_t>(size) < n + static_cast<std::size_t>(size));
        std::vector<int> seen(n, 0);
        for (int k = 0; k < parts; ++k) {
          // Every member runs the chunks of the part's longest share: none is longer, one is as long.
          std::size_t const per_chunk = 3;
          std::size_t const chunks = detail::two_shot_chunks(n, size, k, parts, per_chunk);
          bool one_as_long = false;
          for (int r = 0; r < size; ++r) {
            auto const range = detail::two_shot_block(n, block, r, k, parts);
            CHECK(range.size() <= detail::two_shot_block(n, block, 0, 0, 1).size());
            CHECK(range.size() <= chunks * per_chunk);
            one_as_long = one_as_long || range.size() > (chunks - 1) * per_chunk || chunks == 0;
            for (std::size_t i = range.lo; i < range.hi; ++i) ++seen[i];
          }
          CHECK(one_as_long);
        }
        for (std::size_t i = 0; i < n; ++i) REQUIRE(seen[i] == 1);
      }
    }
  }
}

TEST_CASE("granule ranges split at whole granules and cover every element once", "[collectives]") {
  CHECK(detail::granule_range(10, 1, 1, 3).lo == detail::part_range(10, 1, 3).lo);
  for (std::size_t n : {std::size_t{0}, std::size_t{8}, std::size_t{96}, std::size_t{100}, std::size_t{4096 * 17}}) {
    for (std::size_t granule : {std::size_t{1}, std::size_t{8}, std::size_t{4096}}) {
      for (int parts : {1, 2, 3, 8, 64}) {
        std::size_t next = 0;  // the parts tile [0, n) in order
        for (int k = 0; k < parts; ++k) {
          auto const r = detail::granule_range(n, granule, k, parts);
          CHECK(r.lo == next);
          CHECK(r.hi >= r.lo);
          CHECK((r.lo % granule == 0 || r.lo == n));
          CHECK((r.hi % granule == 0 || r.hi == n));
          CHECK(r.size() <= ((n + granule - 1) / granule + static_cast<std::size_t>(parts) - 1) /
                                static_cast<std::size_t>(parts) * granule);
          next = r.hi;
        }
        CHECK(next == n);
      }
    }
  }
}

TEST_CASE("allreduce_rows runs packets where allreduce would and one_shot otherwise", "[collectives]") {
  using gpucomm::allreduce_algorithm;
  using Tr = gpucomm::NVLinkStore;
  for (int members : {2, 3, 4, 8})
    for (std::size_t n = 8; n <= (std::size_t{64} << 20); n *= 4) {
      auto const plain = detail::chosen_allreduce<Tr, __nv_bfloat16>(allreduce_algorithm::automatic, n, members);
      auto const rows = detail::chosen_allreduce_rows<Tr, __nv_bfloat16>(allreduce_algorithm::automatic, n, members);
      CHECK(rows == (plain == allreduce_algorithm::packets ? plain : allreduce_algorithm::one_shot));
    }
  CHECK(detail::rows_fit<__nv_bfloat16>(8));
  CHECK(!detail::rows_fit<__nv_bfloat16>(12));
  CHECK(!detail::rows_fit<float>(0));
  CHECK(detail::rows_fit<double>(2));
}

TEST_CASE("alltoallv sends a pair in its packet epoch up to the packet limit and one block a part", "[collectives]") {
  struct twelve {
    int a, b, c;
  };
  struct sixteen {
    double a, b;
  };
  constexpr std::size_t KiB = 1024;
  // 16 KiB blocks: 1024 lines, 2 of them the counts; 64 parts of 1022 lines of two ints each.
  CHECK(detail::alltoallv_inline<int>(0, 2, 64, 16 * KiB));
  CHECK(detail::alltoallv_inline<int>(64 * 2044, 2, 64, 16 * KiB));
  CHECK(!detail::alltoallv_inline<int>(64 * 2044 + 1, 2, 64, 16 * KiB));
  // Four members: 128 KiB a pair, whatever the blocks hold.
  CHECK(detail::alltoallv_inline<int>(32 * KiB, 4, 64, 16 * KiB));
  CHECK(!detail::alltoallv_inline<int>(32 * KiB + 1, 4, 64, 16 * KiB));
  CHECK(!detail::alltoallv_inline<char>(64 * KiB + 1, 8, 64, 1024 * KiB));
  // 256-byte blocks: 14 lines after the counts, for each part's share (the largest: ceil(count / parts)).
  CHECK(detail::alltoallv_inline<sixteen>(7, 2, 1, 256));
  CHECK(!detail::alltoallv_inline<sixteen>(8, 2, 1, 256));
  CHECK(detail::alltoallv_inline<std::uint8_t>(224, 2, 2, 256));
  CHECK(!detail::alltoallv_inline<std::uint8_t>(225, 2, 2, 256));
  // Elements that are not packet elements always go in steps.
  CHECK(!detail::alltoallv_inline<twelve>(0, 2, 1, 16 * KiB));
  CHECK(!detail::alltoallv_inline<twelve>(1, 2, 1, 16 * KiB));
}

TEST_CASE("which reduction takes which element type", "[collectives]") {
  using gpucomm::reduction_takes;
  STATIC_REQUIRE(reduction_takes<reduction::sum, int>);
  STATIC_REQUIRE(reduction_takes<reduction::sum, double>);
  STATIC_REQUIRE(reduction_takes<reduction::sum, __half>);
  STATIC_REQUIRE(reduction_takes<reduction::prod, __nv_bfloat16>);
  STATIC_REQUIRE(!reduction_takes<reduction::sum, bool>);
  STATIC_REQUIRE(!reduction_takes<reduction::prod, bool>);
  STATIC_REQUIRE(reduction_takes<reduction::min, bool>);
  STATIC_REQUIRE(reduction_takes<reduction::max, __half>);
  STATIC_REQUIRE(reduction_takes<reduction::bit_xor, std::uint8_t>);
  STATIC_REQUIRE(reduction_takes<reduction::bit_and, bool>);
  STATIC_REQUIRE(!reduction_takes<reduction::bit_or, float>);
  STATIC_REQUIRE(!reduction_takes<reduction::bit_and, __half>);
  STATIC_REQUIRE(!reduction_takes<reduction::sum, long double>);
  STATIC_REQUIRE(!reduction_takes<reduction::sum, int*>);
  STATIC_REQUIRE(std::is_same_v<gpucomm::accumulator_t<__half>, float>);
  STATIC_REQUIRE(std::is_same_v<gpucomm::accumulator_t<__nv_bfloat16>, float>);
  STATIC_REQUIRE(std::is_same_v<gpucomm::accumulator_t<std::int8_t>, std::int8_t>);
}

TEST_CASE("reduction operations: wrapping integers, exact min and max, 16-bit floats in float", "[collectives]") {
  using detail::combine;
  CHECK(combine<reduction::sum>(std::numeric_limits<int>::max(), 1) == std::numeric_limits<int>::min());
  CHECK(combine<reduction::prod>(std::int8_t{100}, std::int8_t{3}) == std::int8_t{44});  // 300 mod 256
  CHECK(combine<reduction::prod>(std::uint16_t{65535}, std::uint16_t{65535}) == std::uint16_t{1});
  CHECK(combine<reduction::sum>(std::int64_t{-5}, std::int64_t{3}) == -2);
  CHECK(combine<reduction::min>(-3, 2) == -3);
  CHECK(combine<reduction::max>(std::uint64_t{1} << 63, std::uint64_t{5}) == std::uint64_t{1} << 63);
  CHECK(combine<reduction::bit_and>(0b1100u, 0b1010u) == 0b1000u);
  CHECK(combine<reduction::bit_or>(0b1100u, 0b1010u) == 0b1110u);
  CHECK(combine<reduction::bit_xor>(0b1100u, 0b1010u) == 0b0110u);
  CHECK(combine<reduction::bit_and>(true, false) == false);
  CHECK(combine<reduction::min>(true, false) == false);
  CHECK(combine<reduction::sum>(0.5, 0.25) == 0.75);
  CHECK(combine<reduction::prod>(1.5f, -2.f) == -3.f);
  // 2048 + 1 + 1 in __half steps would stay 2048 (its spacing there is 2); accumulated in float
  // the sum is 2050, which __half represents exactly.
  float acc = detail::to_accumulator(__float2half(2048.f));
  for (int i = 0; i < 2; ++i) acc = combine<reduction::sum>(acc, detail::to_accumulator(__float2half(1.f)));
  CHECK(__half2float(detail::from_accumulator<__half>(acc)) == 2050.f);
  float bacc = detail::to_accumulator(__float2bfloat16(256.f));
  bacc = combine<reduction::sum>(bacc, detail::to_accumulator(__float2bfloat16(1.f)));
  bacc = combine<reduction::sum>(bacc, detail::to_accumulator(__float2bfloat16(1.f)));
  CHECK(__bfloat162float(detail::from_accumulator<__nv_bfloat16>(bacc)) == 258.f);
}
