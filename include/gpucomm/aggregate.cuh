#pragma once
// Plain aggregates field by field, through Boost.PFR (an optional dependency: the rest of gpucomm
// needs only the CUDA toolkit; CMake target gpucomm::pfr, or Boost's headers on the include path):
//   - reductions (reduce, allreduce, reduce_scatter) of aggregates, one operation for all fields or
//     reduction::per_field<Ops...>: collectives/aggregate_reduction.cuh;
//   - field-wise atomic add at a PE, add_fields: aggregate_atomics.cuh.
// Plain aggregates move through every other operation (put, get, allgather, alltoall, ...) as they
// are: those need only a trivially copyable type.

#include "aggregate_atomics.cuh"
#include "collectives/aggregate_reduction.cuh"
