#pragma once
// Bounded waits that run on the host and on the device: a monotonic clock, a pause inside a spin
// loop, and a deadline that expires only in debug builds (GPUCOMM_DEBUG). verbs_gpu's send and
// completion queues and ProxyQueue's command ring wait with them, on either side.

#include <nv/target>

#include <cstdint>

#include "../config.hpp"

#if !defined(__CUDA_ARCH__)
#include <chrono>
#include <thread>
#endif

namespace gpucomm::detail {

/// Nanoseconds from a monotonic clock: %globaltimer on the device, steady_clock on the host.
GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint64_t now_ns() noexcept {
  NV_IF_ELSE_TARGET(NV_IS_DEVICE,
                    (std::uint64_t t; asm volatile("mov.u64 %0, %%globaltimer;"
                                                   : "=l"(t));
                     return t;),
                    (return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                           std::chrono::steady_clock::now().time_since_epoch())
                                                           .count());))
}

/// Backs off inside a spin loop: nanosleep on the device, a yield on the host (the NIC model runs
/// on host threads that must get the CPU).
GPUCOMM_HD GPUCOMM_FORCEINLINE void spin_pause() noexcept {
  NV_IF_ELSE_TARGET(NV_PROVIDES_SM_70, (__nanosleep(64);), (NV_IF_TARGET(NV_IS_HOST, (std::this_thread::yield();))))
}

/// A wait's deadline. In debug builds (GPUCOMM_DEBUG) a wait gives up after `timeout_ns` (0: never)
/// and its caller reports the timeout; in release builds deadlines never expire.
struct deadline {
  std::uint64_t start = 0;
  std::uint64_t timeout_ns = 0;
  GPUCOMM_HD GPUCOMM_FORCEINLINE explicit deadline(std::uint64_t timeout) noexcept : timeout_ns(timeout) {
#if GPUCOMM_DEBUG
    start = now_ns();
#endif
  }
  GPUCOMM_HD GPUCOMM_FORCEINLINE bool expired() const noexcept {
#if GPUCOMM_DEBUG
    return timeout_ns != 0 && now_ns() - start > timeout_ns;
#else
    return false;
#endif
  }
};

/// Says when a wait that sees nothing happen should act again (ring a doorbell again, kick its
/// transport): first after `initial` (default 50 us), then after twice as long each time, up to
/// every 10 ms, so a slow peer or NIC is prodded a few times, not flooded. restart() begins again
/// at `initial` (call it when something happened). The clock is read on the first call, not before.
struct patience_timer {
  static constexpr std::uint64_t first_ns = 50'000, max_ns = 10'000'000;
  std::uint64_t since = 0, initial = first_ns, patience = first_ns;

  GPUCOMM_HD GPUCOMM_FORCEINLINE explicit patience_timer(std::uint64_t first = first_ns) noexcept
      : initial(first), patience(first) {}

  GPUCOMM_HD GPUCOMM_FORCEINLINE bool due() noexcept {
    std::uint64_t const t = now_ns();
    if (since == 0) {
      since = t;
      return false;
    }
    if (t - since < patience) return false;
    since = t;
    patience = patience * 2 < max_ns ? patience * 2 : max_ns;
    return true;
  }
  GPUCOMM_HD GPUCOMM_FORCEINLINE void restart() noexcept {
    since = 0;
    patience = initial;
  }
};

}  // namespace gpucomm::detail
