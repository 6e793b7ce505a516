#pragma once
// Device-side checks of how an operation is called. A misuse that would lose or corrupt data
// (a PE out of range, a buffer the transport cannot reach) prints what was wrong and where, then
// traps: the kernel ends with an error the host sees from synchronize().

#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "../config.hpp"

namespace gpucomm::detail {

#if defined(__CUDACC__)

// The reports are out of line: one copy per translation unit, not one per call site.

/// Prints `what` (a printf format with one %s for `op`) and traps. Never returns.
[[noreturn]] __device__ inline GPUCOMM_NOINLINE void device_misuse(char const* op, char const* what) {
  printf("gpucomm: %s: %s (block %d thread %d); trapping\n", op, what, blockIdx.x, threadIdx.x);
  __trap();
  __builtin_unreachable();
}

[[noreturn]] __device__ inline GPUCOMM_NOINLINE void report_pe_out_of_range(int pe, int npes) {
  printf("gpucomm: PE %d out of range [0, %d) (block %d thread %d); trapping\n", pe, npes, blockIdx.x, threadIdx.x);
  __trap();
  __builtin_unreachable();
}

/// Debug builds: traps when pe is outside [0, npes).
__device__ GPUCOMM_FORCEINLINE void check_pe(int pe, int npes) {
#if GPUCOMM_DEBUG
  if (pe < 0 || pe >= npes) report_pe_out_of_range(pe, npes);
#else
  (void)pe;
  (void)npes;
#endif
}

[[noreturn]] __device__ inline GPUCOMM_NOINLINE void report_not_symmetric(void const* p, void const* slot,
                                                                          std::size_t stride, char const* op) {
  printf(
      "gpucomm: %s: the pointer %p is not in this PE's symmetric heap [%p, +%llu); a remote address is only "
      "defined for symmetric memory (block %d thread %d); trapping\n",
      op, p, slot, static_cast<unsigned long long>(stride), blockIdx.x, threadIdx.x);
  __trap();
  __builtin_unreachable();
}

/// Debug builds: traps when `p` is not in this PE's slot of the symmetric heap, [slot, slot +
/// stride), where a transport that translates addresses by offset (NVLinkStore, and the load/store
/// paths of P2PCopy, ProxyQueue and route) needs it: memory from cudaMalloc, shared memory or a
/// local variable would otherwise be translated into another PE's unrelated memory. No check
/// when `slot` is null (a handle made without a world).
__device__ GPUCOMM_FORCEINLINE void check_symmetric(void const* p, void const* slot, std::size_t stride,
                                                    char const* op) {
#if GPUCOMM_DEBUG
  auto const at = reinterpret_cast<std::uintptr_t>(p);
  auto const begin = reinterpret_cast<std::uintptr_t>(slot);
  if (slot != nullptr && (at < begin || at - begin >= stride)) report_not_symmetric(p, slot, stride, op);
#else
  (void)p;
  (void)slot;
  (void)stride;
  (void)op;
#endif
}

#endif  // __CUDACC__

}  // namespace gpucomm::detail
