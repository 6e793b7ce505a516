// The op suite (every transport under test): put / get matrix, part C, the lighter group kinds:
// thread_block_tile<2/8/16>, a full-warp coalesced_group and coalesced_groups of lanes with equal lane % 3 (sizes 11,
// 11, 10, lanes not contiguous). put, put_nbi, get and get_nbi only (put_signal runs for these groups in signal.cu).
#include "common.cuh"

using namespace gpucomm::test::ops;

namespace {

matrix_opts light(std::uint64_t salt, unsigned grid, unsigned block) {
  int const npes = gpucomm::test::the_world().npes();
  matrix_opts o;
  o.salt = salt;
  o.jobs_per_pe = 4 * npes * 3;
  o.grid = grid;
  o.block = block;
  o.mid_max_bytes = 16384;
  o.large_jobs = 1;
  o.large_min = 256 * 1024;
  o.large_max = 512 * 1024;
  return o;
}

}  // namespace

TEST_CASE("put/get matrix: thread_block_tile<2>", "[gpu][ops][put][get]") {
  run_copy_matrix<mk_tile<2>, elems_bytes, ops_plain>(light(601, 1, 64));
}
TEST_CASE("put/get matrix: thread_block_tile<8>", "[gpu][ops][put][get]") {
  run_copy_matrix<mk_tile<8>, elems_bytes, ops_plain>(light(602, 1, 128));
}
TEST_CASE("put/get matrix: thread_block_tile<16>", "[gpu][ops][put][get]") {
  run_copy_matrix<mk_tile<16>, elems_bytes, ops_plain>(light(603, 1, 128));
}
TEST_CASE("put/get matrix: coalesced_group of a full warp", "[gpu][ops][put][get]") {
  run_copy_matrix<mk_coalesced_full, elems_bytes, ops_plain>(light(604, 1, 128));
}
TEST_CASE("put/get matrix: coalesced_groups by lane % 3", "[gpu][ops][put][get]") {
  run_copy_matrix<mk_coalesced_mod3, elems_bytes, ops_plain>(light(605, 1, 128));
}
