#pragma once
// Device helpers shared by every library's benchmark kernels, so the parts of a measurement that
// are not the library under test are the same code for all of them.

#include <cstdint>

namespace bench {

/// The grid barrier NVSHMEM's shmem_put_bw runs after every iteration: the CTAs' thread 0 bump a
/// global counter and spin until all gridDim.x CTAs of this iteration have arrived. `target` is
/// (iteration + 1) * gridDim.x; the counter is zeroed before each launch. Every CTA of the grid
/// must be resident (cases check with max_resident_ctas).
__device__ inline void grid_barrier(unsigned* counter, unsigned target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();  // this CTA's earlier writes before its arrival
    atomicAdd(counter, 1u);
    while (*static_cast<unsigned volatile*>(counter) < target) {
    }
  }
  __syncthreads();
}

/// Keeps the compiler from dropping a computed value: stores it only if an impossible flag is set.
template <class T>
__device__ inline void keep(T value, T* sink, bool never) {
  if (never) *sink = value;
}

}  // namespace bench
