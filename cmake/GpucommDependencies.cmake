# What gpucomm's targets need. The core needs only the CUDA toolkit; MPI, rdma-core and Boost.PFR
# (Boost >= 1.75 headers, for aggregates field by field) are optional.
find_package(CUDAToolkit REQUIRED)
find_package(MPI COMPONENTS CXX QUIET)
find_package(Boost 1.75 CONFIG QUIET)
