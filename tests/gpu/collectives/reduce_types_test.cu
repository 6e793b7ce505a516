// The collectives suite (every transport under test): every reduction operation on the element
// types it takes (integers exact and wrapping, floating types against a double reference with a
// tolerance that grows with the inputs folded, __half and __nv_bfloat16 accumulated in float); the
// multi-CTA form and one large block. (A translation unit of its own, so that the suite builds in
// parallel.)
#include "shapes.cuh"

using namespace gpucomm::test::coll;

TEST_CASE("every reduction operation on the element types it takes", "[gpu][collectives]") {
  auto& w = gpucomm::test::the_world();
  team const world_team = w.team_world();
  std::size_t const n = 300 / static_cast<std::size_t>(model_slowdown) + 1;
  for (kind k : {kind::allreduce_one_shot, kind::allreduce_two_shot}) {
    coll_case cc{world_team, k, n};
    // The fold is the same code on every transport: the other suites take a sample of the types,
    // so that their builds stay short.
    check_collective<mk_block, __half, reduction::sum>(cc);
    check_collective<mk_block, std::int8_t, reduction::prod>(cc);
    check_collective<mk_block, bool, reduction::bit_and>(cc);
    if constexpr (full_sample) {
      check_collective<mk_block, std::int64_t, reduction::prod>(cc);
      check_collective<mk_block, std::int64_t, reduction::max>(cc);
      check_collective<mk_block, int, reduction::min>(cc);
      check_collective<mk_block, int, reduction::bit_xor>(cc);
      check_collective<mk_block, std::uint8_t, reduction::bit_or>(cc);
      check_collective<mk_block, std::uint16_t, reduction::bit_and>(cc);
      check_collective<mk_block, bool, reduction::min>(cc);
      check_collective<mk_block, float, reduction::max>(cc);
      check_collective<mk_block, double, reduction::sum>(cc);
      check_collective<mk_block, __half, reduction::max>(cc);
      check_collective<mk_block, __nv_bfloat16, reduction::sum>(cc);
      check_collective<mk_block, __nv_bfloat16, reduction::min>(cc);
    }
  }
}

TEST_CASE("reductions in the multi-CTA form and with one large block", "[gpu][collectives][sanitize]") {
  auto& w = gpucomm::test::the_world();
  team const world_team = w.team_world();
  std::size_t const n = 20000 / static_cast<std::size_t>(model_slowdown) + 3;
  for (kind k : reductions) {
    check_collective<mk_block, float, reduction::sum>({world_team, k, n, 0, {.block_bytes = 1000, .parts = 3}, 9});
    check_collective<mk_tile<32>, int, reduction::sum>(
        {world_team, k, n, w.npes() - 1, {.block_bytes = 64 << 10, .parts = 1}, 10});
  }
  // reduce_scatter above the packet limit, where the transport stores to every member: channel steps.
  if constexpr (gpucomm::test::load_store_everywhere) {
    for (kind k : {kind::reduce_scatter, kind::reduce_scatter_in_place})
      check_collective<mk_block, float, reduction::sum>(
          {world_team, k, 100003, 0, {.block_bytes = 1000, .parts = 3}, 13});
  }
}

// The round protocols on a group whose leader is late out of syncs (common.cuh): every reduction
// and a data collective, in many rounds (packet rounds of 256 ints, rounds of 512). The units of a
// round must reach past the leader's warp: the threads of that warp wait for the leader at the end
// of its delay, so only the other warps can run ahead of it. (The protocols are the same on every
// transport: the full sample's suite has it.)
GPUCOMM_TEST_CASE_IF(gpucomm::test::full_sample, "collectives on a group whose leader leaves every sync late",
                     "[gpu][collectives]") {
  auto& w = gpucomm::test::the_world();
  team const world_team = w.team_world();
  std::size_t const n = 8000 / static_cast<std::size_t>(model_slowdown) + 5;
  workspace_options const ws{.block_bytes = 2048, .parts = 1};
  for (kind k : reductions) check_collective<mk_late_leader, int, reduction::sum>({world_team, k, n, 0, ws, 11});
  check_collective<mk_late_leader, int>({world_team, kind::allgather, n, 0, ws, 12});
}
