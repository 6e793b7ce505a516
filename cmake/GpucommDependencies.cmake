# What gpucomm's targets need. The core needs only the CUDA toolkit; MPI and rdma-core are optional.
find_package(CUDAToolkit REQUIRED)
find_package(MPI COMPONENTS CXX QUIET)
