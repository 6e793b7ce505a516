#pragma once
// world::prepare: kernels made ready on every local GPU before the first launch. Two things a
// launch may otherwise do wait for the kernels already running on its GPU, which is a deadlock
// when those kernels wait for the new one (kernels of PEs sharing a GPU):
//   - load the kernel's code (CUDA's default lazy module loading): querying its attributes loads it;
//   - grow the GPU's per-thread stack reservation, when the kernel needs more than the kernels
//     before it: reserving the largest first leaves nothing to grow.

#include <cuda_runtime_api.h>

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
void preload_kernels(std::vector<local_pe> const& locals, std::initializer_list<void const*> kernels,
                     std::size_t stack_bytes);

}  // namespace gpucomm::detail

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "kernel_preload.inl"
#endif
