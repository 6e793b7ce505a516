// mpi_bootstrap and the checks a one-process-per-GPU world makes before it touches a GPU.
#include <gpucomm/host/mpi_bootstrap.hpp>
#include <gpucomm/host/world.hpp>

#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>

#include <numeric>
#include <vector>

TEST_CASE("mpi_bootstrap allgathers in rank order", "[mpi]") {
  gpucomm::mpi_bootstrap boot;
  REQUIRE(boot.size() == 2);
  int world_rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  CHECK(boot.rank() == world_rank);
  long const mine = 1000 + 7 * boot.rank();
  std::vector<long> all(static_cast<std::size_t>(boot.size()), -1);
  boot.allgather(&mine, all.data(), sizeof(long));
  for (int r = 0; r < boot.size(); ++r) CHECK(all[static_cast<std::size_t>(r)] == 1000 + 7 * r);
  boot.barrier();
}

TEST_CASE("agree fails on every rank when ranks pass different sizes", "[mpi]") {
  gpucomm::detail::any_bootstrap boot{gpucomm::mpi_bootstrap()};
  std::size_t const bytes = boot.rank() == 0 ? 4096 : 8192;
  try {
    gpucomm::detail::agree(boot, bytes, "world::allocate", "the requested size", "same sizes everywhere");
    FAIL("differing sizes were accepted");
  } catch (gpucomm::error const& e) {
    CHECK(e.pe() == 1);
    CHECK_THAT(e.what(), Catch::Contains("world::allocate") && Catch::Contains("PE 0 passed 4096, PE 1 passed 8192"));
  }
  CHECK_NOTHROW(gpucomm::detail::agree(boot, std::size_t{64}, "c", "w", "h"));
}

TEST_CASE("all_ok_or_throw reports one rank's failure on every rank", "[mpi]") {
  gpucomm::detail::any_bootstrap boot{gpucomm::mpi_bootstrap()};
  bool const ok = boot.rank() != 1;
  try {
    gpucomm::detail::all_ok_or_throw(boot, ok, ok ? "" : "cuMemCreate ran out of memory", "world::allocate");
    FAIL("a failing rank went unnoticed");
  } catch (gpucomm::error const& e) {
    CHECK(e.pe() == 1);
    CHECK_THAT(e.what(), Catch::Contains("cuMemCreate ran out of memory"));
  }
  CHECK_NOTHROW(gpucomm::detail::all_ok_or_throw(boot, true, "", "x"));
}

TEST_CASE("a world refuses a PE count that does not match the launcher, on every rank", "[mpi]") {
  gpucomm::world_options options;
  options.expected_pes = 4;
  try {
    gpucomm::world w(gpucomm::mpi_bootstrap(), 0, options);
    FAIL("a world of 2 PEs was built where 4 were expected");
  } catch (gpucomm::error const& e) {
    CHECK_THAT(e.what(), Catch::Contains("expects 4 PEs but the launcher gives 2"));
  }
}

TEST_CASE("a world on a machine without a GPU fails on every rank with a plain message", "[mpi]") {
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) {
    SUCCEED("this machine has a GPU; the GPU tests cover world construction");
    return;
  }
  try {
    gpucomm::world w(gpucomm::mpi_bootstrap(), 0);
    FAIL("a world was built without a GPU");
  } catch (gpucomm::error const& e) {
    CHECK_THAT(e.what(), Catch::Contains("no CUDA GPU is visible"));
  }
}
