// The collectives suite (every transport under test): reduce, reduce_scatter (also in place) and
// allreduce with each algorithm (also in place) on every team shape and count, both roots, with
// group kinds and element types taking turns.
#include "shapes.cuh"

using namespace gpucomm::test::coll;

TEST_CASE("reduce, reduce_scatter and allreduce fold every element on every team shape", "[gpu][collectives]") {
  team_set const set;
  int turn = 0;
  for (team const& t : set.teams) {
    for (std::size_t n : test_counts()) {
      for (kind k : reductions) {
        coll_case cc{t, k, n};
        cc.root = (turn & 1) ? t.size - 1 : 0;
        cc.salt = 200 + static_cast<std::uint64_t>(turn);
        switch (turn++ % (rotation - 1)) {
          case 0:
            check_collective<mk_block, int, reduction::sum>(cc);
            break;
          case 1:
            check_collective<mk_bar64, double, reduction::prod>(cc);
            break;
          case 2:  // the full sample's rotation only
            if constexpr (full_sample) check_collective<mk_tile<32>, float, reduction::sum>(cc);
            break;
          case 3:
            if constexpr (full_sample) check_collective<mk_single, std::uint8_t, reduction::sum>(cc);
            break;
        }
      }
    }
  }
}
