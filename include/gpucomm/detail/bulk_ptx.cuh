#pragma once
// The PTX instructions of the Hopper bulk-copy unit (sm_90) that P2PCopy issues, each as one inline
// asm statement: cp.async.bulk in both directions, its bulk groups, the async-proxy fences and the
// mbarrier operations the loads complete on, spelled as the PTX ISA (8.0, and 8.6 for loads into
// .shared::cta) spells them. <cuda/ptx> offers these and every other instruction, which every file
// that includes P2PCopy would pay for in compile time and memory; the few used here are written out.
//
// Shared-memory operands go to PTX as 32-bit shared-window addresses, global ones as 64-bit global
// addresses (cvta). Every statement is volatile with a memory clobber: none may be dropped, merged
// or moved across the memory accesses around it. Device code only.

#include <cstdint>

#include "../config.hpp"

#if defined(__CUDACC__)

namespace gpucomm::detail::bulk_ptx {

__device__ GPUCOMM_FORCEINLINE std::uint32_t shared_address(void const* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
__device__ GPUCOMM_FORCEINLINE std::uint64_t global_address(void const* p) {
  return static_cast<std::uint64_t>(__cvta_generic_to_global(p));
}

/// fence.proxy.async: the calling thread's generic-proxy accesses in every state space, ordered
/// with the async proxy's.
__device__ GPUCOMM_FORCEINLINE void fence_async_all() { asm volatile("fence.proxy.async;" ::: "memory"); }
/// fence.proxy.async.shared::cta: the same for the CTA's shared memory.
__device__ GPUCOMM_FORCEINLINE void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
/// fence.proxy.async.global: the same for global memory.
__device__ GPUCOMM_FORCEINLINE void fence_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }

/// cp.async.bulk.global.shared::cta.bulk_group: a bulk store of `bytes` (a multiple of 16) from
/// shared `src` to global `dst`, in the calling thread's current bulk group.
__device__ GPUCOMM_FORCEINLINE void store(void* dst, void const* src, std::uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
               :
               : "l"(global_address(dst)), "r"(shared_address(src)), "r"(bytes)
               : "memory");
}

/// cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes: a bulk load of `bytes` from
/// global `src` into shared `dst`, completing on the mbarrier at `bar` (PTX ISA 8.6).
__device__ GPUCOMM_FORCEINLINE void load(void* dst, void const* src, std::uint32_t bytes, std::uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               :
               : "r"(shared_address(dst)), "l"(global_address(src)), "r"(bytes), "r"(shared_address(bar))
               : "memory");
}

/// cp.async.bulk.prefetch.L2.global: a hint to bring `bytes` (a multiple of 16) of global `src`
/// (16-byte aligned) into L2; nothing waits for it and nothing depends on it.
__device__ GPUCOMM_FORCEINLINE void prefetch_l2(void const* src, std::uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(global_address(src)), "r"(bytes) : "memory");
}

/// cp.async.bulk.commit_group: closes the calling thread's current bulk group.
__device__ GPUCOMM_FORCEINLINE void commit_group() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

/// cp.async.bulk.wait_group N: waits until at most N of the calling thread's bulk groups are
/// incomplete (their writes done).
template <unsigned N>
__device__ GPUCOMM_FORCEINLINE void wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}
/// cp.async.bulk.wait_group.read N: waits until at most N of them still read their sources.
template <unsigned N>
__device__ GPUCOMM_FORCEINLINE void wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

/// mbarrier.init.shared.b64: the mbarrier at `bar`, expecting `count` arrivals per phase.
__device__ GPUCOMM_FORCEINLINE void mbarrier_init(std::uint64_t* bar, std::uint32_t count) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(count) : "memory");
}

/// mbarrier.inval.shared::cta.b64: ends the mbarrier at `bar`, so its memory may be used otherwise.
__device__ GPUCOMM_FORCEINLINE void mbarrier_inval(std::uint64_t* bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(shared_address(bar)) : "memory");
}

/// mbarrier.arrive.expect_tx.release.cta.shared::cta.b64: one arrival at `bar`, raising the bytes
/// its current phase waits for by `bytes`; returns the mbarrier's state before it.
__device__ GPUCOMM_FORCEINLINE std::uint64_t mbarrier_arrive_expect(std::uint64_t* bar, std::uint32_t bytes) {
  std::uint64_t state;
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 %0, [%1], %2;"
               : "=l"(state)
               : "r"(shared_address(bar)), "r"(bytes)
               : "memory");
  return state;
}

/// mbarrier.try_wait.parity.shared::cta.b64: whether the phase of parity `parity` of the mbarrier at
/// `bar` has completed (the hardware may suspend the thread a while before answering no).
__device__ GPUCOMM_FORCEINLINE bool mbarrier_try_wait_parity(std::uint64_t* bar, std::uint32_t parity) {
  std::uint32_t done;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
      "selp.b32 %0, 1, 0, p;\n\t}"
      : "=r"(done)
      : "r"(shared_address(bar)), "r"(parity)
      : "memory");
  return done != 0;
}

}  // namespace gpucomm::detail::bulk_ptx

#endif  // __CUDACC__
