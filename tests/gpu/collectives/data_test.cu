// The collectives suite (every transport under test): broadcast, allgather (also in place) and
// alltoall on every team shape and count, each root at both ends of the team, with element types of
// 1, 4, 8 and 12 bytes and every group kind, every element of every member checked.
#include "shapes.cuh"

using namespace gpucomm::test::coll;

TEST_CASE("broadcast, allgather and alltoall deliver every element on every team shape", "[gpu][collectives]") {
  team_set const set;
  int turn = 0;
  for (team const& t : set.teams) {
    for (std::size_t n : test_counts()) {
      for (kind k : {kind::broadcast, kind::allgather, kind::allgather_in_place, kind::alltoall}) {
        coll_case cc{t, k, n};
        cc.root = (turn & 1) ? t.size - 1 : 0;
        cc.salt = 100 + static_cast<std::uint64_t>(turn);
        // Group kinds and element types take turns, so each meets every shape and count.
        switch (turn++ % rotation) {
          case 0:
            check_collective<mk_block, std::uint8_t>(cc);
            break;
          case 1:
            check_collective<mk_tile<32>, triple>(cc);
            break;
          case 2:
            check_collective<mk_bar64, double>(cc);
            break;
          case 3:  // the full sample's rotation only
            if constexpr (full_sample) check_collective<mk_single, int>(cc);
            break;
          case 4:
            if constexpr (full_sample) check_collective<mk_coalesced_even, int>(cc);
            break;
        }
      }
    }
  }
}

TEST_CASE("data collectives with one large workspace block and with several parts (multi-CTA)",
          "[gpu][collectives][sanitize]") {
  auto& w = gpucomm::test::the_world();
  team const world_team = w.team_world();
  // Within the packet limit (allgather and alltoall take packet epochs where the transport stores
  // to every member), and, there, above it (channel steps).
  std::vector<std::size_t> counts{20000 / static_cast<std::size_t>(model_slowdown) + 1};
  if constexpr (gpucomm::test::load_store_everywhere) counts.push_back(100001);
  for (std::size_t n : counts) {
    for (kind k : {kind::broadcast, kind::allgather, kind::alltoall}) {
      check_collective<mk_block, float>({world_team, k, n, w.npes() - 1, {.block_bytes = 64 << 10, .parts = 1}, 7});
      check_collective<mk_block, float>({world_team, k, n, 0, {.block_bytes = 1000, .parts = 3}, 8});
    }
  }
}
