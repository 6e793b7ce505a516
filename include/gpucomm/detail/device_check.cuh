#pragma once
// Device-side checks of how an operation is called. A misuse that would lose or corrupt data
// (a PE out of range, a buffer the transport cannot reach) prints what was wrong and where, then
// traps: the kernel ends with an error the host sees from synchronize().

#include <cstdio>

#include "../config.hpp"

namespace gpucomm::detail {

#if defined(__CUDACC__)

/// Prints `what` (a printf format with one %s for `op`) and traps. Never returns.
[[noreturn]] __device__ inline void device_misuse(char const* op, char const* what) {
  printf("gpucomm: %s: %s (block %d thread %d); trapping\n", op, what, blockIdx.x, threadIdx.x);
  __trap();
  __builtin_unreachable();
}

/// Debug builds: traps when pe is outside [0, npes).
__device__ GPUCOMM_FORCEINLINE void check_pe(int pe, int npes) {
#if GPUCOMM_DEBUG
  if (pe < 0 || pe >= npes) {
    printf("gpucomm: PE %d out of range [0, %d) (block %d thread %d); trapping\n", pe, npes, blockIdx.x, threadIdx.x);
    __trap();
  }
#else
  (void)pe;
  (void)npes;
#endif
}

#endif  // __CUDACC__

}  // namespace gpucomm::detail
