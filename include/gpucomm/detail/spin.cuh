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

/// Prints which PEs share this PE's GPU, from the control block's header (detail/control_block.hpp):
/// the usual reason a wait never ends when PEs share a GPU is a peer whose kernel is not resident.
__device__ inline void report_shared_gpu(std::uint64_t const* header) {
  if (header == nullptr) return;
  auto const pe = static_cast<long long>(header[0]);
  auto const start = static_cast<long long>(header[3]), stride = static_cast<long long>(header[4]),
             size = static_cast<long long>(header[5]);
  if (size > 1) {
    printf(
        "gpucomm: PE %lld shares its GPU with PEs %lld..%lld (stride %lld): kernels of PEs that share a GPU and "
        "wait on each other must be resident at the same time (one process: launch them on the world's streams "
        "and leave room on the GPU; one process per PE: run the MPS control daemon)\n",
        pe, start, start + (size - 1) * stride, stride);
  } else if (size == 0) {
    printf(
        "gpucomm: PE %lld shares its GPU with PEs that are not evenly spaced: kernels of PEs that share a GPU and "
        "wait on each other must be resident at the same time\n",
        pe);
  }
}

/// What a spin does now and then while it waits: nothing (the default), or a transport's progress
/// (contract.cuh, waiting_progress). `active` says whether there is anything to call.
struct no_progress {
  static constexpr bool active = false;
  __device__ void operator()() const noexcept {}
};

/// Spin until `done()` returns true. `what` names the wait in the debug report; `header`, when
/// given, is the waiting PE's control-block header, so the report says which PEs share its GPU.
/// `progress`, where active, is called every 1024 polls.
template <class Done, class Progress = no_progress>
__device__ GPUCOMM_FORCEINLINE void spin_until(Done&& done, char const* what, std::uint64_t const* header = nullptr,
                                               Progress progress = {}) {
#if GPUCOMM_DEBUG
  std::uint64_t const start = global_time_ns();
  for (unsigned polls = 1; !done(); ++polls) {
    if constexpr (Progress::active) {
      if ((polls & 1023u) == 0) progress();
    }
    if ((polls & 1023u) == 0 && global_time_ns() - start > GPUCOMM_SPIN_TIMEOUT_NS) {
      printf("gpucomm: %s still waiting after %llu ns (block %d,%d,%d thread %d,%d,%d); trapping\n", what,
             static_cast<unsigned long long>(GPUCOMM_SPIN_TIMEOUT_NS), blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x,
             threadIdx.y, threadIdx.z);
      report_shared_gpu(header);
      __trap();
    }
  }
#else
  (void)what;
  (void)header;
  if constexpr (Progress::active) {
    for (unsigned polls = 1; !done(); ++polls) {
      if ((polls & 1023u) == 0) progress();
    }
  } else {
    while (!done()) {
    }
  }
#endif
}

#endif  // __CUDACC__

}  // namespace gpucomm::detail
