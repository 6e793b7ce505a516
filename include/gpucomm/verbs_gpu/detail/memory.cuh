#pragma once
// Memory operations of the verbs layer that differ between host and device: 16-byte WQE stores,
// the doorbell store, fences with a run-time scope, clocks for bounded waits, and a tiny
// host/device group adaptor. Everything else goes through cuda::atomic_ref, which works on both.

#include <cuda/atomic>
#include <nv/target>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../../config.hpp"
#include "../../detail/bounded_wait.cuh"
#include "../prm.cuh"

// Group helpers (group_size, group_rank, group_sync) are group.cuh's, __host__ __device__.
#include "../../group.cuh"

namespace gpucomm::verbs_gpu::detail {

/// One 16-byte store of a WQE segment: st.v4.b32 on the device (DOCA and DeepEP do the same), a
/// memcpy on the host. Weak (non-atomic): a later release fence publishes it.
GPUCOMM_HD GPUCOMM_FORCEINLINE void store16(void* dst, seg16 const& v) noexcept {
  NV_IF_ELSE_TARGET(NV_IS_DEVICE, (*static_cast<uint4*>(dst) = make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]);),
                    (std::memcpy(dst, &v, sizeof(v));))
}

/// Reinterprets any 16-byte segment struct as four words.
template <class Seg>
GPUCOMM_HD GPUCOMM_FORCEINLINE seg16 as_seg16(Seg const& s) noexcept {
  static_assert(sizeof(Seg) == 16 && std::is_trivially_copyable_v<Seg>);
  seg16 r;
  std::memcpy(&r, &s, 16);
  return r;
}

/// Scope of the fences that publish WQEs and doorbell records to the NIC. `gpu` suffices when
/// the work queue and doorbell record live in GPU memory (what NVSHMEM, DeepEP and DOCA do for a
/// GPU-resident QP); `system` is needed when they live in host memory (the NIC model, and
/// CPU-visible rings).
enum class nic_scope : std::uint32_t { gpu = 0, system = 1 };

/// Release fence at the given scope.
GPUCOMM_HD GPUCOMM_FORCEINLINE void fence_release(nic_scope s) noexcept {
  if (s == nic_scope::system) {
    cuda::atomic_thread_fence(cuda::memory_order_release, cuda::thread_scope_system);
  } else {
    cuda::atomic_thread_fence(cuda::memory_order_release, cuda::thread_scope_device);
  }
}

/// Host side of a doorbell: the CPU's ordering of its stores to normal memory (WQEs, doorbell
/// record) before a store to device memory (the UAR register), and the flush of a write-combining
/// mapping after it, as rdma-core's mlx5 provider does with its udma barriers (post_send_db:
/// mmio_wc_start before the doorbell, mmio_flush_writes after). The provider maps the register
/// write-combining where the system allows, and a store to write-combining memory may become
/// visible before earlier stores to normal memory: x86 needs `sfence` before it (mmio_wc_start is
/// sfence there) and after it (to empty the write-combining buffer); AArch64 needs `dsb st` on both
/// sides (dmb orders normal memory only). On the model's doorbell page (normal memory) they cost a
/// few cycles.
inline void host_store_to_device_barrier() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("sfence" ::: "memory");
#elif defined(__aarch64__)
  asm volatile("dsb st" ::: "memory");
#else
  asm volatile("" ::: "memory");
#endif
}
inline void host_flush_device_store() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("sfence" ::: "memory");
#elif defined(__aarch64__)
  asm volatile("dsb st" ::: "memory");
#else
  asm volatile("" ::: "memory");
#endif
}

/// The 64-bit doorbell store to the UAR register (or the model's doorbell page). On the device
/// this is `st.mmio.relaxed.sys.global.b64`, the PTX store meant for memory-mapped I/O (DOCA uses
/// it; it exists from PTX ISA 8.2, sm_70). The caller issues the release fence before it. On the
/// host a relaxed system-scope atomic store between the two barriers above.
GPUCOMM_HD GPUCOMM_FORCEINLINE void store_doorbell(std::uint64_t* db, std::uint64_t value) noexcept {
  NV_DISPATCH_TARGET(
      NV_IS_HOST,
      (host_store_to_device_barrier();
       cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system>(*db).store(value, cuda::memory_order_relaxed);
       host_flush_device_store();),
      NV_PROVIDES_SM_70,
      (asm volatile("st.mmio.relaxed.sys.global.b64 [%0], %1;" ::"l"(__cvta_generic_to_global(db)), "l"(value)
                    : "memory");),
      NV_ANY_TARGET,
      (cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system>(*db).store(value, cuda::memory_order_relaxed);))
}

// now_ns, spin_pause and deadline are the library's (detail/bounded_wait.cuh): the command ring of
// ProxyQueue waits the same way.
using gpucomm::detail::deadline;
using gpucomm::detail::now_ns;
using gpucomm::detail::spin_pause;

// ---- groups on host and device ------------------------------------------------------------------
// The posting templates accept any gpucomm::group on the device and, for host tests and host
// producers, any type with the same members (num_threads, thread_rank, sync, shfl).

/// The leader's (rank 0's) value, returned to every thread of g.
GPUCOMM_EXEC_CHECK_DISABLE
template <class G, class T>
GPUCOMM_HD GPUCOMM_FORCEINLINE T grp_broadcast(G const& g, T value) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8);
  if constexpr (gpucomm::group_static_size_v<G> == 1) {
    return value;
  } else if constexpr (gpucomm::shuffling_group<G>) {
    return g.shfl(value, 0u);
  } else {
#if defined(__CUDACC__)
    return gpucomm::broadcast_from_leader(g, value);
#else
    static_assert(sizeof(G) == 0, "gpucomm::verbs_gpu: this group type cannot broadcast on the host");
    return value;
#endif
  }
}

}  // namespace gpucomm::verbs_gpu::detail
