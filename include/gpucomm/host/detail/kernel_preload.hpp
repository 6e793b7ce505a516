#pragma once
// world::prepare: kernels made ready on every local GPU before the first launch. Two things a
// launch may otherwise do wait for the kernels already running on its GPU, which is a deadlock
// when those kernels wait for the new one (kernels of PEs sharing a GPU):
//   - load the kernel's code (CUDA's default lazy module loading): querying its attributes loads it;
//   - grow the GPU's per-thread stack reservation, when the kernel needs more than the kernels
//     before it: reserving the largest first leaves nothing to grow.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <vector>

#include "../../error.hpp"
#include "device_guard.hpp"
#include "pe_placement.hpp"

namespace gpucomm::detail {

/// On each GPU of `locals` (once per GPU, however many PEs share it): loads every kernel in
/// `kernels` (host-side kernel addresses), and raises the GPU's stack limit to the largest of
/// `stack_bytes` and each kernel's per-thread local memory, if that is above the limit now (never
/// lowers it). The caller's current device stays.
inline void preload_kernels(std::vector<local_pe> const& locals, std::initializer_list<void const*> kernels,
                            std::size_t stack_bytes) {
  current_device_guard const keep;
  std::vector<int> done;
  for (auto const& l : locals) {
    if (std::find(done.begin(), done.end(), l.device) != done.end()) continue;
    done.push_back(l.device);
    GPUCOMM_CUDA_CHECK(cudaSetDevice(l.device), l.pe);
    std::size_t wanted = stack_bytes;
    for (void const* kernel : kernels) {
      cudaFuncAttributes attributes{};
      GPUCOMM_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel), l.pe);  // loads its module
      wanted = std::max(wanted, attributes.localSizeBytes);
    }
    std::size_t reserved = 0;
    GPUCOMM_CUDA_CHECK(cudaDeviceGetLimit(&reserved, cudaLimitStackSize), l.pe);
    if (wanted > reserved) GPUCOMM_CUDA_CHECK(cudaDeviceSetLimit(cudaLimitStackSize, wanted), l.pe);
  }
}

}  // namespace gpucomm::detail
