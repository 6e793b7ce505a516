// Runner for the GPU tests. Launched plainly, one process owns every visible GPU (GPUCOMM_TEST_PES_PER_GPU
// PEs each, default 1); launched under mpirun (OMPI_COMM_WORLD_SIZE set), each rank is one PE on GPU
// OMPI_COMM_WORLD_LOCAL_RANK / GPUCOMM_TEST_PES_PER_GPU. The same test cases run in both modes. Under MPI the exit code
// is the worst rank's.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdlib>

#include "harness.cuh"

#if GPUCOMM_TEST_HAVE_MPI
#include <mpi.h>
#endif

int main(int argc, char** argv) {
  // Before any CUDA call: ProxyQueue's copies must not share a hardware queue with the suite's
  // queued kernels (docs/guide/proxyqueue.md#hardware-queues-why-the-world-sets-cuda_device_max_connections).
  bool const mpi = gpucomm::test::under_mpi();
  gpucomm::request_hardware_queues(/*one_pe_per_process=*/mpi);
  if constexpr (gpucomm::test::host_agent) ::setenv("CUDA_MODULE_LOADING", "EAGER", 0);
#if GPUCOMM_TEST_HAVE_MPI
  if (mpi) MPI_Init(&argc, &argv);
#else
  if (mpi) {
    std::fprintf(stderr, "gpucomm_gpu_tests was built without MPI and cannot run under mpirun\n");
    return 2;
  }
#endif
  int rc = 0;
  {
    Catch::Session session;
    rc = session.applyCommandLine(argc, argv);
    if (rc == 0) rc = session.run();
    gpucomm::test::release_world();  // before MPI_Finalize
  }
#if GPUCOMM_TEST_HAVE_MPI
  if (mpi) {
    int worst = 0;
    MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    rc = worst;
  }
#endif
  return rc;
}
