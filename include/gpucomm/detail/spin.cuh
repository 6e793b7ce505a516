#pragma once
// Spin loops. Release builds spin until the condition holds. Debug builds (GPUCOMM_DEBUG) give up
// after GPUCOMM_SPIN_TIMEOUT_NS of global time, print what was awaited and where, and trap, so a
// lost signal ends the kernel with an error the host sees instead of hanging the GPU.

#include <cuda/ptx>

#include <cstdint>
#include <cstdio>

#include "../config.hpp"

#ifndef GPUCOMM_SPIN_TIMEOUT_NS
#define GPUCOMM_SPIN_TIMEOUT_NS 20000000000ull  // 20 s
#endif

namespace gpucomm::detail {

#if defined(__CUDACC__)

/// The GPU's global nanosecond timer.
__device__ GPUCOMM_FORCEINLINE std::uint64_t global_time_ns() {
  // %globaltimer: nanoseconds, the same clock on every SM.
  return cuda::ptx::get_sreg_globaltimer();
}

/// Spin until `done()` returns true. `what` names the wait in the debug report.
template <class Done>
__device__ GPUCOMM_FORCEINLINE void spin_until(Done&& done, char const* what) {
#if GPUCOMM_DEBUG
  std::uint64_t const start = global_time_ns();
  for (unsigned polls = 1; !done(); ++polls) {
    if ((polls & 1023u) == 0 && global_time_ns() - start > GPUCOMM_SPIN_TIMEOUT_NS) {
      printf("gpucomm: %s still waiting after %llu ns (block %d,%d,%d thread %d,%d,%d); trapping\n", what,
             static_cast<unsigned long long>(GPUCOMM_SPIN_TIMEOUT_NS), blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x,
             threadIdx.y, threadIdx.z);
      __trap();
    }
  }
#else
  (void)what;
  while (!done()) {
  }
#endif
}

#endif  // __CUDACC__

}  // namespace gpucomm::detail
