// The op suite (every transport under test): put / get / put_signal with element types other than bytes: 2 and 4 bytes
// (warp groups), 8 and 16 bytes (a 16-byte struct; block groups), and a 3-byte struct (single threads), every op x
// every target PE x random element counts (0, 1, odd, mid, large) x src and dst offsets misaligned independently as far
// as each type's alignment allows. Host reference for every byte.
#include "common.cuh"

using namespace gpucomm::test::ops;

namespace {

matrix_opts typed(std::uint64_t salt, unsigned grid, unsigned block, std::size_t large_max) {
  int const npes = gpucomm::test::the_world().npes();
  matrix_opts o;
  o.salt = salt;
  o.jobs_per_pe = op_count * npes * 2 * 2;  // every op x target x both types, twice
  o.grid = grid;
  o.block = block;
  o.mid_max_bytes = 16384;
  o.large_jobs = 2;
  o.large_min = large_max / 2;
  o.large_max = large_max;
  return o;
}

}  // namespace

TEST_CASE("put/get matrix: 2- and 4-byte elements, thread_block_tile<32>", "[gpu][ops][put][get][signal]") {
  run_copy_matrix<mk_tile<32>, elems_2_4, ops_all>(typed(701, 2, 256, 2u << 20));
}

TEST_CASE("put/get matrix: 8- and 16-byte elements, thread_block", "[gpu][ops][put][get][signal]") {
  run_copy_matrix<mk_block, elems_8_16, ops_all>(typed(702, 4, 256, 4u << 20));
}

TEST_CASE("put/get matrix: 3-byte struct elements, this_thread()", "[gpu][ops][put][get][signal]") {
  auto o = typed(703, 1, 64, 96u << 10);
  o.jobs_per_pe /= 2;
  run_copy_matrix<mk_single, elems_3, ops_all>(o);
}
