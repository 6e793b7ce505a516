#pragma once
// mpi_bootstrap: a one-process-per-GPU world launched with mpirun or srun (target gpucomm::mpi).
//
//   MPI_Init(&argc, &argv);
//   int local_rank = ...;  // e.g. from OMPI_COMM_WORLD_LOCAL_RANK
//   gpucomm::world w(gpucomm::mpi_bootstrap(MPI_COMM_WORLD), /*device=*/local_rank);
//
// The bootstrap duplicates the communicator, so gpucomm's traffic never matches the user's, and
// frees the duplicate when the world is destroyed (which must be before MPI_Finalize).

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>

#include "../error.hpp"

namespace gpucomm {

class mpi_bootstrap {
 public:
  explicit mpi_bootstrap(MPI_Comm parent = MPI_COMM_WORLD) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      throw error("mpi_bootstrap", -1, "MPI is not initialised", "call MPI_Init before building the bootstrap");
    }
    auto dup = std::make_unique<MPI_Comm>(MPI_COMM_NULL);
    check(MPI_Comm_dup(parent, dup.get()), "MPI_Comm_dup");
    // Errors on gpucomm's communicator come back as codes (and so as gpucomm::error), not aborts.
    MPI_Comm_set_errhandler(*dup, MPI_ERRORS_RETURN);
    comm_ = std::shared_ptr<MPI_Comm>(dup.release(), [](MPI_Comm* c) {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized && *c != MPI_COMM_NULL) MPI_Comm_free(c);
      delete c;
    });
    check(MPI_Comm_rank(*comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(*comm_, &size_), "MPI_Comm_size");
  }

  int rank() const { return rank_; }
  int size() const { return size_; }

  void allgather(void const* send, void* recv, std::size_t bytes) {
    if (bytes > static_cast<std::size_t>(INT32_MAX)) {
      throw error("mpi_bootstrap::allgather", rank_,
                  "message of " + std::to_string(bytes) + " bytes is too large for MPI");
    }
    check(MPI_Allgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes), MPI_BYTE, *comm_),
          "MPI_Allgather");
  }

  void barrier() { check(MPI_Barrier(*comm_), "MPI_Barrier"); }

 private:
  void check(int rc, char const* call) const {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw error(call, rank_, std::string(text, static_cast<std::size_t>(len)), "check the MPI launch (mpirun -np N)");
  }

  std::shared_ptr<MPI_Comm> comm_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace gpucomm
