#pragma once
// Bounded waits that run on the host and on the device: a monotonic clock, a pause inside a spin
// loop, and a deadline. verbs_gpu's send and completion queues and ProxyQueue's command ring wait
// with them, on either side; detail/spin.cuh's spins use the same timeout rule.
//
// The timeout rule. A world hands its bound to device code as one encoded word (wait_timeout_word):
// nanoseconds, with the top bit set when the program asked for it (world_options::wait_timeout or
// GPUCOMM_WAIT_TIMEOUT_MS). Debug builds (GPUCOMM_DEBUG) always bound their waits, by the world's
// setting or its default of 20 s; release builds bound them only when the program asked, so a
// release build that sets nothing never pays for a clock read inside a wait.

#include <nv/target>

#include <cstdint>

#include "../config.hpp"

#if !defined(__CUDA_ARCH__)
#include <sched.h>
#include <time.h>
#endif

namespace gpucomm::detail {

/// Nanoseconds from a monotonic clock: %globaltimer on the device (the same clock on every SM),
/// CLOCK_MONOTONIC on the host. (POSIX calls rather than <chrono> and <thread>: this header is on
/// every kernel file's include path, and those two cost each file more to compile than it does.)
GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint64_t now_ns() noexcept {
  NV_IF_ELSE_TARGET(
      NV_IS_DEVICE,
      (std::uint64_t t; asm volatile("mov.u64 %0, %%globaltimer;"
                                     : "=l"(t));
       return t;),
      (timespec ts{}; clock_gettime(CLOCK_MONOTONIC, &ts);
       return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);))
}

/// Backs off inside a spin loop: nanosleep on the device, a yield on the host (the NIC model runs
/// on host threads that must get the CPU).
GPUCOMM_HD GPUCOMM_FORCEINLINE void spin_pause() noexcept {
  NV_IF_ELSE_TARGET(NV_PROVIDES_SM_70, (__nanosleep(64);), (NV_IF_TARGET(NV_IS_HOST, (sched_yield();))))
}

/// The bit of an encoded wait timeout that says the program asked for it (the rule above).
inline constexpr std::uint64_t wait_timeout_requested = std::uint64_t{1} << 63;

/// The encoded word for a bound of `ns` nanoseconds (0: none), `requested` by the program or not.
GPUCOMM_HD constexpr std::uint64_t wait_timeout_word(std::uint64_t ns, bool requested) noexcept {
  return (ns & ~wait_timeout_requested) | (requested ? wait_timeout_requested : 0);
}

/// The bound, in nanoseconds, that an encoded word gives a wait in a build with GPUCOMM_DEBUG =
/// `debug` (0: the wait never gives up).
GPUCOMM_HD constexpr std::uint64_t wait_bound_ns(std::uint64_t word, bool debug) noexcept {
  return debug || (word & wait_timeout_requested) != 0 ? word & ~wait_timeout_requested : 0;
}

/// The same for this translation unit's build.
GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint64_t wait_bound_ns(std::uint64_t word) noexcept {
  return wait_bound_ns(word, GPUCOMM_DEBUG != 0);
}

/// A wait's deadline, from an encoded timeout word (the rule above): it expires after the bound
/// this build gives the word, never when that is 0; its caller then reports the timeout.
struct deadline {
  std::uint64_t start = 0;
  std::uint64_t timeout_ns = 0;
  GPUCOMM_HD GPUCOMM_FORCEINLINE explicit deadline(std::uint64_t word) noexcept : timeout_ns(wait_bound_ns(word)) {
    if (timeout_ns != 0) start = now_ns();
  }
  GPUCOMM_HD GPUCOMM_FORCEINLINE bool expired() const noexcept {
    return timeout_ns != 0 && now_ns() - start > timeout_ns;
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
