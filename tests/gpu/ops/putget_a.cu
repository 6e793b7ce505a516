// The op suite (every transport under test): put / get / put_signal matrix, part A: thread_block and
// thread_block_tile<32/4/1>; many groups of every PE hitting one PE; the small [sanitize] matrix. Every job: one op of
// {put, put_nbi, get, get_nbi, put_signal, put_signal_nbi} x every target PE (self included) x random byte size (0, 1,
// odd, mid, several MiB) x independent src / dst byte misalignment (so every vector path of the copy, 16/8/4/2/1 bytes,
// runs); element types other than bytes are in types.cu x independent src / dst misalignment; every byte of every PE's
// arenas checked on the host (guards and sources included), every get's destination checked on the device when the op
// returns (blocking) or after quiet (nbi).
#include "common.cuh"

using namespace gpucomm::test::ops;

namespace {

matrix_opts heavy(std::uint64_t salt, unsigned grid, unsigned block, int large_jobs, std::size_t large_min,
                  std::size_t large_max) {
  int const npes = gpucomm::test::the_world().npes();
  matrix_opts o;
  o.salt = salt;
  o.jobs_per_pe = op_count * npes * 4;  // every op x target, four times
  o.grid = grid;
  o.block = block;
  o.mid_max_bytes = 16384;
  o.large_jobs = large_jobs;
  o.large_min = large_min;
  o.large_max = large_max;
  return o;
}

constexpr std::size_t KiB = 1024, MiB = 1024 * 1024;

}  // namespace

TEST_CASE("put/get matrix: thread_block", "[gpu][ops][put][get][signal]") {
  run_copy_matrix<mk_block>(heavy(101, 6, 256, 3, 2 * MiB, 6 * MiB));
}

TEST_CASE("put/get matrix: thread_block of 1024 threads", "[gpu][ops][put][get]") {
  auto o = heavy(102, 2, 1024, 1, 3 * MiB, 5 * MiB);
  o.jobs_per_pe /= 2;
  run_copy_matrix<mk_block>(o);
}

TEST_CASE("put/get matrix: thread_block_tile<32>", "[gpu][ops][put][get][signal]") {
  run_copy_matrix<mk_tile<32>>(heavy(103, 3, 256, 2, 2 * MiB, 4 * MiB));
}

TEST_CASE("put/get matrix: thread_block_tile<4>", "[gpu][ops][put][get][signal]") {
  run_copy_matrix<mk_tile<4>>(heavy(104, 2, 128, 2, 256 * KiB, 512 * KiB));
}

TEST_CASE("put/get matrix: thread_block_tile<1>", "[gpu][ops][put][get][signal]") {
  auto o = heavy(105, 2, 128, 1, 64 * KiB, 128 * KiB);
  o.mid_max_bytes = 8192;
  run_copy_matrix<mk_tile<1>>(o);
}

TEST_CASE("many warps of every PE put into one PE at once", "[gpu][ops][put][order]") {
  int const npes = gpucomm::test::the_world().npes();
  for (int target = 0; target < npes; ++target) {
    matrix_opts o;
    o.salt = 200 + static_cast<std::uint64_t>(target);
    o.jobs_per_pe = 256;
    o.grid = 16;
    o.block = 256;  // 128 warps per PE, every one writing into `target` concurrently
    o.mid_max_bytes = 8192;
    o.force_target = target;
    o.op_mask = (1u << op_put) | (1u << op_put_nbi) | (1u << op_put_signal) | (1u << op_put_signal_nbi);
    run_copy_matrix<mk_tile<32>>(o);
  }
}

TEST_CASE("many warps of every PE get from one PE at once", "[gpu][ops][get]") {
  int const npes = gpucomm::test::the_world().npes();
  matrix_opts o;
  o.salt = 300;
  o.jobs_per_pe = 256;
  o.grid = 16;
  o.block = 256;
  o.mid_max_bytes = 8192;
  o.force_target = npes - 1;
  o.op_mask = (1u << op_get) | (1u << op_get_nbi);
  run_copy_matrix<mk_tile<32>>(o);
}

TEST_CASE("sanitize: small put/get matrix", "[gpu][ops][put][get][signal][sanitize]") {
  int const npes = gpucomm::test::the_world().npes();
  matrix_opts o;
  o.salt = 400;
  o.jobs_per_pe = op_count * npes * 2;
  o.grid = 1;
  o.block = 128;
  o.mid_max_bytes = 1024;
  run_copy_matrix<mk_tile<32>>(o);
  o.salt = 401;
  o.jobs_per_pe = op_count * npes;
  run_copy_matrix<mk_block>(o);
}
