// Host-testable choices of the collectives: the launch shape (CTAs and threads by protocol, size,
// parts and co-residency cap), allreduce's automatic algorithm, the packet protocol's flags (never
// a zeroed or stale line's) and units, views of a workspace's first parts, and the launchers' refusal of
// src and dst that overlap other than in a collective's in-place form.
#include <gpucomm/collectives.cuh>
#include <gpucomm/host/collectives.cuh>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

using gpucomm::allreduce_algorithm;
using gpucomm::collective_workspace;
using gpucomm::launch_shape;
namespace detail = gpucomm::detail;

namespace {

constexpr std::size_t KiB = 1024;

struct twelve {
  int a, b, c;
};
struct sixteen {
  float f;
  int i;
  double d;
};

launch_shape packets(std::size_t bytes, int parts, int cap) {
  return detail::collective_launch_shape(detail::collective_protocol::packets, bytes, parts, cap);
}

}  // namespace

TEST_CASE("packet launches: CTAs by size, 256 threads, capped by parts and co-residency", "[collectives][launch]") {
  // The table of collectives/launch_shape.hpp, at and just past each row.
  std::vector<std::pair<std::size_t, int>> const rows = {
      {0, 1},         {8, 1},          {1 * KiB, 1},      {1 * KiB + 1, 2}, {2 * KiB, 2},
      {4 * KiB, 4},   {8 * KiB, 8},    {8 * KiB + 4, 12}, {16 * KiB, 12},   {32 * KiB, 20},
      {64 * KiB, 32}, {128 * KiB, 48}, {256 * KiB, 64},   {1 << 30, 64}};
  for (auto const& [bytes, ctas] : rows) {
    INFO(bytes << " bytes");
    CHECK(detail::packet_ctas(bytes) == ctas);
    CHECK(packets(bytes, 64, 132).ctas == ctas);
    CHECK(packets(bytes, 64, 132).threads == detail::packet_threads);
  }
  STATIC_REQUIRE(detail::packet_threads == 256);
  // More bytes never take fewer CTAs; never more than the parts or the cap, never fewer than one.
  int last = 0;
  for (std::size_t bytes = 0; bytes <= 512 * KiB; bytes += 8) {
    int const c = detail::packet_ctas(bytes);
    REQUIRE(c >= last);
    REQUIRE(c >= 1);
    REQUIRE(c <= 64);
    last = c;
    for (int parts : {1, 3, 64}) {
      for (int cap : {1, 16, 33, 132}) {
        launch_shape const s = packets(bytes, parts, cap);
        REQUIRE(s.ctas >= 1);
        REQUIRE(s.ctas <= parts);
        REQUIRE(s.ctas <= cap);
        REQUIRE(s.ctas == std::min({c, parts, cap}));
      }
    }
  }
  CHECK(packets(64 * KiB, 0, 0).ctas == 1);  // degenerate caps still launch one CTA
}

TEST_CASE("round launches: every part up to the cap, 512 threads", "[collectives][launch]") {
  for (std::size_t bytes : {std::size_t{0}, std::size_t{8}, 64 * KiB, std::size_t{1} << 30}) {
    for (int parts : {1, 3, 64}) {
      for (int cap : {1, 16, 132}) {
        launch_shape const s = detail::collective_launch_shape(detail::collective_protocol::rounds, bytes, parts, cap);
        CHECK(s.ctas == std::min(parts, cap));
        CHECK(s.threads == detail::round_threads);
      }
    }
  }
  STATIC_REQUIRE(detail::round_threads == 512);
}

TEST_CASE("allreduce's automatic choice: packets by size and team size, then one_shot, then two_shot",
          "[collectives][launch]") {
  using Tr = gpucomm::NVLinkStore;
  using enum allreduce_algorithm;
  CHECK(gpucomm::packet_limit(1) == 512 * KiB);
  CHECK(gpucomm::packet_limit(2) == 512 * KiB);
  CHECK(gpucomm::packet_limit(3) == 128 * KiB);
  CHECK(gpucomm::packet_limit(4) == 128 * KiB);
  CHECK(gpucomm::packet_limit(5) == 64 * KiB);
  CHECK(gpucomm::packet_limit(8) == 64 * KiB);
  for (int members : {1, 2, 3, 4, 5, 8, 16}) {
    std::size_t const limit = gpucomm::packet_limit(members) / sizeof(float);
    INFO(members << " members");
    CHECK(detail::chosen_allreduce<Tr, float>(automatic, 0, members) == packets);
    CHECK(detail::chosen_allreduce<Tr, float>(automatic, 1, members) == packets);
    CHECK(detail::chosen_allreduce<Tr, float>(automatic, limit, members) == packets);
    allreduce_algorithm const past = detail::chosen_allreduce<Tr, float>(automatic, limit + 1, members);
    CHECK(past == (limit + 1 <= gpucomm::one_shot_limit / sizeof(float) || members <= 2 ? one_shot : two_shot));
    allreduce_algorithm const large = detail::chosen_allreduce<Tr, float>(automatic, std::size_t{1} << 24, members);
    CHECK(large == (members <= 2 ? one_shot : two_shot));
    // An explicit algorithm is kept.
    for (allreduce_algorithm a : {packets, one_shot, two_shot})
      CHECK(detail::chosen_allreduce<Tr, float>(a, std::size_t{1} << 24, members) == a);
  }
  // Packets take elements of 1, 2, 4, 8 and 16 bytes; others take the round protocols.
  STATIC_REQUIRE(detail::packets_automatic<Tr, std::uint8_t>);
  STATIC_REQUIRE(detail::packets_automatic<Tr, __nv_bfloat16>);
  STATIC_REQUIRE(detail::packets_automatic<Tr, double>);
  STATIC_REQUIRE(detail::packets_automatic<Tr, sixteen>);
  STATIC_REQUIRE(!detail::packets_automatic<Tr, twelve>);
  CHECK(detail::chosen_allreduce<Tr, twelve>(automatic, 10, 2) == one_shot);
}

TEST_CASE("allgather, alltoall and reduce_scatter take packets up to the packet limit where allreduce may",
          "[collectives][launch]") {
  using Tr = gpucomm::NVLinkStore;
  using detail::collective_protocol;
  for (int members : {1, 2, 3, 4, 5, 8}) {
    std::size_t const limit = gpucomm::packet_limit(members) / sizeof(float);
    INFO(members << " members");
    CHECK(detail::data_protocol<Tr, float>(1, members) == collective_protocol::packets);
    CHECK(detail::data_protocol<Tr, float>(limit, members) == collective_protocol::packets);
    CHECK(detail::data_protocol<Tr, float>(limit + 1, members) == collective_protocol::rounds);
  }
  CHECK(detail::data_protocol<Tr, twelve>(1, 2) == collective_protocol::rounds);
}

TEST_CASE("packet flags: never zero, never the flag of the epoch before or two before", "[collectives][packets]") {
  constexpr std::uint64_t wrap = std::uint64_t{1} << 32;
  std::vector<std::uint64_t> epochs;
  for (std::uint64_t e = 1; e < 70; ++e) epochs.push_back(e);
  for (std::uint64_t base : {wrap - 1, wrap, 2 * wrap - 2, 2 * wrap, 3 * wrap + 7, ~std::uint64_t{0} - 70})
    for (std::uint64_t d = 0; d < 70; ++d) epochs.push_back(base - 35 + d);
  for (std::uint64_t e : epochs) {
    INFO("epoch " << e);
    REQUIRE(detail::packet_flag(e) != 0);
    REQUIRE(detail::packet_flag(e) != detail::packet_flag(e - 1));
    REQUIRE(detail::packet_flag(e) != detail::packet_flag(e - 2));
  }
  STATIC_REQUIRE(sizeof(detail::packet_line) == 16);
}

TEST_CASE("packet units: 8 bytes of whole elements, 16-byte elements in two lines; parts cover every element",
          "[collectives][packets]") {
  STATIC_REQUIRE(detail::packet_unit<std::uint8_t>::elements == 8 && detail::packet_unit<std::uint8_t>::lines == 1);
  STATIC_REQUIRE(detail::packet_unit<__half>::elements == 4 && detail::packet_unit<__half>::lines == 1);
  STATIC_REQUIRE(detail::packet_unit<float>::elements == 2 && detail::packet_unit<float>::lines == 1);
  STATIC_REQUIRE(detail::packet_unit<double>::elements == 1 && detail::packet_unit<double>::lines == 1);
  STATIC_REQUIRE(detail::packet_unit<sixteen>::elements == 1 && detail::packet_unit<sixteen>::lines == 2);
  // fold_packets' split: units over parts, each part's units in epochs of a block's lines; the
  // elements of unit u are [u E, min((u + 1) E, n)).
  for (std::size_t per_unit : {std::size_t{1}, std::size_t{2}, std::size_t{4}, std::size_t{8}}) {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{9}, std::size_t{1001}}) {
      for (int parts : {1, 3, 64}) {
        for (std::size_t per_epoch : {std::size_t{8}, std::size_t{1024}}) {
          std::vector<int> seen(n, 0);
          std::size_t const units = (n + per_unit - 1) / per_unit;
          for (int k = 0; k < parts; ++k) {
            auto const mine = detail::part_range(units, k, parts);
            for (std::size_t j = 0; j < detail::rounds_for(mine.size(), per_epoch); ++j) {
              auto const chunk = detail::chunk_of(mine.size(), j, per_epoch);
              for (std::size_t u = mine.lo + chunk.lo; u < mine.lo + chunk.hi; ++u)
                for (std::size_t e = u * per_unit; e < (u + 1) * per_unit && e < n; ++e) ++seen[e];
            }
          }
          for (std::size_t i = 0; i < n; ++i) REQUIRE(seen[i] == 1);
        }
      }
    }
  }
}

TEST_CASE("a view of a workspace's first parts: the same parts, in the same places", "[collectives][launch]") {
  collective_workspace ws;
  ws.members = {0, 1, 4, 0};
  ws.parts = 64;
  ws.block_bytes = 16 * KiB;
  ws.channel_block_bytes = 60 * KiB;
  std::vector<unsigned char> memory(collective_workspace::bytes(4, ws.block_bytes, ws.channel_block_bytes, ws.parts));
  ws.base = gpucomm::sym_ptr<std::byte>(reinterpret_cast<std::byte*>(memory.data()));
  collective_workspace const few = ws.first_parts(8);
  CHECK(few.parts == 8);
  CHECK(few.part_index == -1);
  for (int k = 0; k < 8; ++k) {
    CHECK(few.part(k).part_base(k) == ws.part_base(k));
    CHECK(few.part(k).packet_block(k, 3, 2) == ws.packet_block(k, 3, 2));
    CHECK(few.part(k).channel_block(k, 3, 2, 1) == ws.channel_block(k, 3, 2, 1));
    CHECK(few.part(k).chosen_part() == k);
  }
  CHECK(ws.chosen_part() == 0);  // the whole view: one group, on part 0
  // The default workspace's size: 64 parts of 16 KiB blocks, 64 x (256 B + 128 KiB per member):
  // at most 64 MiB and the parts' 16 KiB of flags up to 8 members.
  gpucomm::workspace_options const defaults;
  CHECK(defaults.parts == 64);
  CHECK(defaults.block_bytes == 16 * KiB);
  CHECK(defaults.programmatic_launch);
  CHECK(defaults.channel_block_bytes == 0);  // automatic
  for (int members = 1; members <= 8; ++members) {
    INFO(members << " members");
    std::size_t const channel =
        collective_workspace::automatic_channel_block_bytes(members, defaults.block_bytes, defaults.parts);
    CHECK(collective_workspace::bytes(members, defaults.block_bytes, channel, defaults.parts) <=
          (std::size_t{64} << 20));
    CHECK(channel % (4 * KiB) == 0);
    CHECK(channel >= defaults.block_bytes);
    CHECK(channel <= collective_workspace::automatic_channel_block_most);
  }
  // The figures team_workspace.hpp states.
  CHECK(collective_workspace::automatic_channel_block_bytes(2, 16 * KiB, 64) == 220 * KiB);
  CHECK(collective_workspace::automatic_channel_block_bytes(3, 16 * KiB, 64) == 100 * KiB);
  CHECK(collective_workspace::automatic_channel_block_bytes(4, 16 * KiB, 64) == 60 * KiB);
  CHECK(collective_workspace::automatic_channel_block_bytes(8, 16 * KiB, 64) == 16 * KiB);
  CHECK(collective_workspace::bytes(8, 16 * KiB, 16 * KiB, 64) == 64 * (256 + 4 * 8 * 16 * KiB + 4 * 7 * 16 * KiB));
  // Few parts: the largest block; blocks past the budget: never below block_bytes (up to the largest).
  CHECK(collective_workspace::automatic_channel_block_bytes(2, 16 * KiB, 4) == 256 * KiB);
  CHECK(collective_workspace::automatic_channel_block_bytes(2, 1024 * KiB, 64) == 256 * KiB);
  CHECK(collective_workspace::automatic_channel_block_bytes(4, 128 * KiB, 64) == 128 * KiB);
  CHECK(collective_workspace::automatic_channel_block_bytes(1, 16 * KiB, 64) == 16 * KiB);
}

TEST_CASE("a workspace part's regions: disjoint, inside the part, blocks 128-byte aligned", "[collectives][launch]") {
  for (int members : {1, 2, 3, 4, 8, 9, 17}) {
    for (std::size_t block : {std::size_t{128}, std::size_t{384}, 16 * KiB}) {
      INFO(members << " members, blocks of " << block << " bytes");
      collective_workspace ws;
      ws.members = {0, 1, members, 0};
      ws.parts = 3;
      ws.block_bytes = block;
      ws.channel_block_bytes = 3 * block;
      ws.base = gpucomm::sym_ptr<std::byte>(reinterpret_cast<std::byte*>(std::uintptr_t{1} << 20));
      auto at = [&](void const* p) { return reinterpret_cast<std::uintptr_t>(p); };
      for (int k = 0; k < ws.parts; ++k) {
        std::uintptr_t const lo = at(ws.part_base(k));
        std::uintptr_t const hi = lo + collective_workspace::part_bytes(members, block, 3 * block);
        // [begin, end) of every region: the local line, the two flag arrays, every block of every slot.
        std::vector<std::pair<std::uintptr_t, std::uintptr_t>> regions;
        regions.push_back({at(ws.local_words(k)), at(ws.local_words(k)) + collective_workspace::line_bytes});
        regions.push_back({at(ws.flags(k)), at(ws.flags(k)) + 8u * members});
        regions.push_back({at(ws.channel_flags(k)), at(ws.channel_flags(k)) + 8u * members});
        for (int r = 0; r < members; ++r) {
          for (std::uint64_t step = 0; step < 2; ++step) {
            regions.push_back({at(ws.block(k, step, r)), at(ws.block(k, step, r)) + block});
            regions.push_back({at(ws.packet_block(k, step, r)), at(ws.packet_block(k, step, r)) + block});
          }
        }
        // Channel blocks: one per (sender, slot) at each receiver, never the receiver's own. The
        // regions of one receiver must be disjoint; those of different receivers are the same offsets.
        int const receiver = members / 2;
        for (int from = 0; from < members; ++from) {
          if (from == receiver) continue;
          for (std::uint64_t step = 0; step < 4; ++step) {
            std::byte const* const b = ws.channel_block(k, step, from, receiver);
            regions.push_back({at(b), at(b) + 3 * block});
            CHECK(ws.channel_block(k, step + 4, from, receiver) == b);  // slot step % 4
            CHECK(at(b) % 128 == 0);
          }
        }
        std::sort(regions.begin(), regions.end());
        CHECK(regions.front().first == lo);
        for (std::size_t i = 0; i < regions.size(); ++i) {
          CHECK(regions[i].second <= hi);
          if (i > 0) CHECK(regions[i - 1].second <= regions[i].first);
        }
      }
    }
  }
}

TEST_CASE("launchers refuse src and dst that overlap other than in the in-place form", "[collectives][errors]") {
  using gpucomm::team;
  using gpucomm::reduction::sum;
  team const four{0, 1, 4, 0};
  // Buffers in one array, so overlaps are real addresses (never dereferenced).
  static float pool[1024];
  float* const base = pool + 64;
  auto problem = [&](auto const& call, int rank = 1) { return detail::launch_problem(call, four, rank); };
  using allreduce = detail::allreduce_call<allreduce_algorithm::one_shot, float, sum>;
  // allreduce: disjoint or exactly in place are fine; a shift by one element is not.
  CHECK(problem(allreduce{base + 100, base, 100}).empty());
  CHECK(problem(allreduce{base, base, 100}).empty());
  CHECK_THAT(problem(allreduce{base + 1, base, 100}),
             Catch::Contains("overlap other than as the collective's in-place"));
  CHECK_THAT(problem(allreduce{base, base + 99, 100}), Catch::Contains("overlap"));
  CHECK(problem(allreduce{base + 1, base, 0}).empty());  // n = 0: nothing is read or written
  // allgather (dst: 4 n): in place is src == dst + rank * n, at this rank only.
  using allgather = detail::allgather_call<float>;
  CHECK(problem(allgather{base, base + 10, 10}, 1).empty());
  CHECK(problem(allgather{base, base + 30, 10}, 3).empty());
  CHECK_THAT(problem(allgather{base, base + 10, 10}, 2), Catch::Contains("overlap"));
  CHECK_THAT(problem(allgather{base, base + 5, 10}, 0), Catch::Contains("overlap"));
  CHECK(problem(allgather{base, base + 40, 10}, 0).empty());  // just past dst's 4 n
  // reduce_scatter (src: 4 n): in place is dst == src + rank * n.
  using reduce_scatter = detail::reduce_scatter_call<float, sum>;
  CHECK(problem(reduce_scatter{base + 20, base, 10}, 2).empty());
  CHECK_THAT(problem(reduce_scatter{base + 20, base, 10}, 1), Catch::Contains("overlap"));
  CHECK(problem(reduce_scatter{base + 40, base, 10}, 1).empty());
  // alltoall has no in-place form: any overlap is refused, the same pointer too.
  using alltoall = detail::alltoall_call<float>;
  CHECK_THAT(problem(alltoall{base, base, 10}), Catch::Contains("overlap"));
  CHECK_THAT(problem(alltoall{base + 39, base, 10}), Catch::Contains("overlap"));
  CHECK(problem(alltoall{base + 40, base, 10}).empty());
  // broadcast: src is read at the root only, so only the root's buffers are checked.
  using broadcast = detail::broadcast_call<float>;
  CHECK_THAT(problem(broadcast{base + 1, base, 10, 1}, 1), Catch::Contains("overlap"));
  CHECK(problem(broadcast{base + 1, base, 10, 0}, 1).empty());
  CHECK(problem(broadcast{base, base, 10, 1}, 1).empty());
  // reduce: dst is written at the root only.
  using reduce = detail::reduce_call<float, sum>;
  CHECK_THAT(problem(reduce{base + 1, base, 10, 2}, 2), Catch::Contains("overlap"));
  CHECK(problem(reduce{base + 1, base, 10, 2}, 1).empty());
}

TEST_CASE("overlap_refused: byte ranges, empty buffers and the in-place offset", "[collectives][errors]") {
  using detail::call_buffers;
  CHECK_FALSE(detail::overlap_refused(call_buffers{1000, 16, 1016, 16}));             // adjacent
  CHECK(detail::overlap_refused(call_buffers{1000, 16, 1015, 16}));                   // one byte shared
  CHECK(detail::overlap_refused(call_buffers{1015, 16, 1000, 16}));                   // the other way
  CHECK_FALSE(detail::overlap_refused(call_buffers{1000, 0, 1000, 16}));              // empty src
  CHECK_FALSE(detail::overlap_refused(call_buffers{1000, 64, 1000, 16, true, 0}));    // in place
  CHECK(detail::overlap_refused(call_buffers{1000, 64, 1000, 16, false, 0}));         // no such form
  CHECK_FALSE(detail::overlap_refused(call_buffers{1032, 16, 1000, 64, true, 32}));   // src = dst + 32
  CHECK(detail::overlap_refused(call_buffers{1032, 16, 1000, 64, true, 16}));         // not the form
  CHECK_FALSE(detail::overlap_refused(call_buffers{1000, 64, 1032, 16, true, -32}));  // dst = src + 32
}

TEST_CASE("the co-residency cap: every member's CTAs fit, an SM per member stays free", "[collectives][launch]") {
  CHECK(detail::co_residency_cap(132, 1) == 131);
  CHECK(detail::co_residency_cap(132, 2) == 65);
  CHECK(detail::co_residency_cap(132, 4) == 32);
  CHECK(detail::co_residency_cap(132, 8) == 15);
  CHECK(detail::co_residency_cap(4, 4) == 1);  // at least one CTA, whatever the GPU
  CHECK(detail::co_residency_cap(1, 1) == 1);
  CHECK(detail::co_residency_cap(132, 0) == 131);  // no sharing count: as one member
  for (int sms = 2; sms <= 200; ++sms) {
    for (int sharing = 1; sharing <= 16 && sharing < sms; ++sharing) {
      int const cap = detail::co_residency_cap(sms, sharing);
      INFO(sms << " SMs, " << sharing << " members per GPU: cap " << cap);
      CHECK(cap >= 1);
      if (cap > 1) CHECK(cap * sharing + sharing <= sms);       // all fit, `sharing` SMs free
      if (cap > 1) CHECK((cap + 1) * sharing + sharing > sms);  // and no more than that
    }
  }
}
