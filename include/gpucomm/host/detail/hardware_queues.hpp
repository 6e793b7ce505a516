#pragma once
// CUDA_DEVICE_MAX_CONNECTIONS: how many hardware queues CUDA spreads a context's streams over (8 by
// default, 32 at most). Work queued behind a kernel in a shared queue waits for that kernel, so a
// kernel that waits for work on another stream of its GPU (the kernel of a PE sharing the GPU, a
// ProxyQueue copy) may wait forever when the two streams share a queue.
//
// The world sets the variable to 32 when the program left it unset. CUDA reads it early, by the
// time it makes a context (docs/guide/proxyqueue.md: even a cudaGetDeviceCount before the world was too
// late in the test suite), so a program that started CUDA first (a PyTorch program, say) keeps its
// narrower queues. What the world can see is a context that exists: the first world of a process
// records the program's own value and which GPUs had a context already (a driver query that
// starts nothing), and then
//   - a GPU with a context made before, without the program's value of 32 or more, where it
//     matters (several PEs of this process share the GPU; ProxyQueue's copy engines serve it):
//     gpucomm::error, saying to set CUDA_DEVICE_MAX_CONNECTIONS=32 before the first CUDA call;
//   - such a GPU elsewhere: a warning on standard error, and the program goes on.

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "../../error.hpp"
#include "driver.hpp"
#include "pe_placement.hpp"

namespace gpucomm::detail {

/// The hardware queues gpucomm asks for: the most CUDA gives.
inline constexpr long wanted_hardware_queues = 32;

/// CUDA_DEVICE_MAX_CONNECTIONS's text as a count: a positive decimal number; nothing when the
/// variable is unset (null), empty or not such a number.
inline std::optional<long> hardware_queues_from(char const* text) {
  if (text == nullptr) return std::nullopt;
  char* end = nullptr;
  long const v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v <= 0) return std::nullopt;
  return v;
}

enum class hardware_queue_verdict {
  ok,    ///< the GPU's context has the queues the program or gpucomm asked for
  warn,  ///< it may have fewer, where nothing is known to wait across streams: say so, go on
  fail,  ///< it may have fewer, where a kernel waits for work on another stream of its GPU
};

/// The decision for one GPU. `set_before`: CUDA_DEVICE_MAX_CONNECTIONS as the program set it
/// before gpucomm's first world (nothing: unset). `context_existed`: the GPU had a CUDA context
/// then, made with that value (or CUDA's default), not gpucomm's. `matters`: a kernel on the GPU
/// waits for work on another of its streams (PEs of this process share it, or ProxyQueue's copy
/// engines serve it).
constexpr hardware_queue_verdict judge_hardware_queues(std::optional<long> set_before, bool context_existed,
                                                       bool matters) noexcept {
  if (!context_existed) return hardware_queue_verdict::ok;  // made later, with the variable as gpucomm left it
  if (set_before && *set_before >= wanted_hardware_queues) return hardware_queue_verdict::ok;
  return matters ? hardware_queue_verdict::fail : hardware_queue_verdict::warn;
}

/// What the first world of the process found.
struct hardware_queue_start {
  std::optional<long> set_before;  ///< the program's CUDA_DEVICE_MAX_CONNECTIONS
  std::vector<char> had_context;   ///< [GPU]: a context existed
};

/// Which GPUs have a CUDA context now: an active primary context, or the calling thread's current
/// context. Empty when the GPUs or the driver cannot tell (nothing is then said about them).
inline std::vector<char> gpus_with_context() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  std::vector<char> had(static_cast<std::size_t>(count), 0);
  try {
    driver_api const& d = driver();
    std::vector<CUdevice> devices(static_cast<std::size_t>(count), CUdevice{});
    for (int i = 0; i < count; ++i) {
      unsigned flags = 0;
      int active = 0;
      if (d.cuDeviceGet(&devices[static_cast<std::size_t>(i)], i) == CUDA_SUCCESS &&
          d.cuDevicePrimaryCtxGetState(devices[static_cast<std::size_t>(i)], &flags, &active) == CUDA_SUCCESS)
        had[static_cast<std::size_t>(i)] = active != 0;
    }
    CUcontext current = nullptr;
    CUdevice device{};
    if (d.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current != nullptr &&
        d.cuCtxGetDevice(&device) == CUDA_SUCCESS) {
      for (int i = 0; i < count; ++i)
        if (devices[static_cast<std::size_t>(i)] == device) had[static_cast<std::size_t>(i)] = 1;
    }
  } catch (error const&) {
    return {};  // a driver without these functions: the heap's set-up says what is missing
  }
  return had;
}

/// Called by every world before it makes any context: sets CUDA_DEVICE_MAX_CONNECTIONS to 32 unless
/// the program set it, and the first time in the process records what hardware_queue_start holds.
inline hardware_queue_start const& widen_hardware_queues() {
  static hardware_queue_start const start = [] {
    hardware_queue_start s;
    s.set_before = hardware_queues_from(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"));
    ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    s.had_context = gpus_with_context();
    return s;
  }();
  ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  return start;
}

/// The verdict for GPU `device` (widen_hardware_queues must have run).
inline hardware_queue_verdict hardware_queues_of(int device, bool matters) {
  hardware_queue_start const& s = widen_hardware_queues();
  bool const existed = device >= 0 && static_cast<std::size_t>(device) < s.had_context.size() &&
                       s.had_context[static_cast<std::size_t>(device)] != 0;
  return judge_hardware_queues(s.set_before, existed, matters);
}

/// Why GPU `device`'s queues may be too few, for the error and the warning.
inline std::string narrow_queues_reason(int device) {
  std::optional<long> const set = widen_hardware_queues().set_before;
  return "GPU " + std::to_string(device) +
         " had a CUDA context before gpucomm's first world (CUDA reads CUDA_DEVICE_MAX_CONNECTIONS by the time it "
         "makes a context), and CUDA_DEVICE_MAX_CONNECTIONS was " +
         (set ? std::to_string(*set) : std::string("unset (CUDA's default: 8)")) +
         ", so that GPU's streams may share hardware queues, and work queued behind a kernel waits for it";
}

inline constexpr char const* widen_queues_hint =
    "set CUDA_DEVICE_MAX_CONNECTIONS=32 in the environment before the program's first CUDA call (in the shell or "
    "the launcher, or before the first import that starts CUDA, such as torch)";

/// The world's check of its local PEs' GPUs, before it makes their contexts: throws for a GPU
/// that several of them share, warns on standard error for the others.
inline void check_hardware_queues(std::vector<local_pe> const& locals, char const* call) {
  std::string narrow;
  for (std::size_t i = 0; i < locals.size(); ++i) {
    int const device = locals[i].device;
    bool seen = false;
    std::string sharing;
    for (std::size_t j = 0; j < locals.size(); ++j) {
      if (locals[j].device != device) continue;
      seen |= j < i;
      sharing += (sharing.empty() ? "" : ", ") + std::to_string(locals[j].pe);
    }
    if (seen) continue;  // each GPU once
    bool const shared = sharing.find(',') != std::string::npos;
    switch (hardware_queues_of(device, shared)) {
      case hardware_queue_verdict::fail:
        throw error(call, locals[i].pe,
                    narrow_queues_reason(device) + ": PEs " + sharing +
                        " share it, and a kernel queued behind another PE's kernel that waits for it would never start",
                    widen_queues_hint);
      case hardware_queue_verdict::warn:
        narrow += (narrow.empty() ? "" : ", ") + std::to_string(device);
        break;
      case hardware_queue_verdict::ok:
        break;
    }
  }
  if (!narrow.empty()) {
    std::fprintf(stderr,
                 "gpucomm: warning: GPU(s) %s had a CUDA context before gpucomm's first world, made without "
                 "CUDA_DEVICE_MAX_CONNECTIONS=32, so their streams may share hardware queues; a kernel that waits for "
                 "work on another stream of its GPU may then wait forever. To be safe, %s.\n",
                 narrow.c_str(), widen_queues_hint);
  }
}

/// For a host half whose work a kernel on the same GPU waits for, on streams of its own
/// (ProxyQueue's copy engines): throws unless local PE `pe`'s GPU `device` has its queues widened.
inline void require_hardware_queues(char const* call, int pe, int device) {
  if (hardware_queues_of(device, true) == hardware_queue_verdict::fail) {
    throw error(
        call, pe,
        narrow_queues_reason(device) + ": a proxy copy queued behind a kernel that waits for it would never run",
        widen_queues_hint);
  }
}

}  // namespace gpucomm::detail
