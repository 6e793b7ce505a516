// The op suite (every transport under test): put / get / put_signal matrix, part B: this_thread(), a user-defined
// lane-pair group, a partial-warp coalesced_group (even lanes only) and a user-defined 64-thread named-barrier group
// without shfl; many single threads of every PE hitting one PE.
#include "common.cuh"

using namespace gpucomm::test::ops;

namespace {

constexpr std::size_t KiB = 1024;

matrix_opts opts(std::uint64_t salt, unsigned grid, unsigned block, int large_jobs, std::size_t large_min,
                 std::size_t large_max, std::size_t mid_max) {
  int const npes = gpucomm::test::the_world().npes();
  matrix_opts o;
  o.salt = salt;
  o.jobs_per_pe = op_count * npes * 4;
  o.grid = grid;
  o.block = block;
  o.mid_max_bytes = mid_max;
  o.large_jobs = large_jobs;
  o.large_min = large_min;
  o.large_max = large_max;
  return o;
}

}  // namespace

TEST_CASE("put/get matrix: this_thread()", "[gpu][ops][put][get][signal]") {
  run_copy_matrix<mk_single>(opts(501, 2, 64, 1, 64 * KiB, 128 * KiB, 8192));
}

TEST_CASE("put/get matrix: user lane_pair group", "[gpu][ops][put][get][signal]") {
  run_copy_matrix<mk_pair>(opts(502, 2, 64, 1, 128 * KiB, 256 * KiB, 8192));
}

TEST_CASE("put/get matrix: coalesced_group of even lanes", "[gpu][ops][put][get][signal]") {
  run_copy_matrix<mk_coalesced_even>(opts(503, 2, 128, 2, 512 * KiB, 1024 * KiB, 16384));
}

TEST_CASE("put/get matrix: user 64-thread named-barrier group", "[gpu][ops][put][get][signal]") {
  run_copy_matrix<mk_bar64>(opts(504, 2, 256, 2, 1024 * KiB, 2048 * KiB, 16384));
}

TEST_CASE("many single threads of every PE write into one PE at once", "[gpu][ops][put][signal]") {
  int const npes = gpucomm::test::the_world().npes();
  matrix_opts o;
  o.salt = 510;
  o.jobs_per_pe = 512;
  o.grid = 4;
  o.block = 128;  // 512 single-thread groups per PE, one job each
  o.mid_max_bytes = 512;
  o.force_target = 0;
  o.op_mask = (1u << op_put) | (1u << op_put_nbi) | (1u << op_put_signal) | (1u << op_put_signal_nbi);
  (void)npes;
  run_copy_matrix<mk_single>(o);
}
