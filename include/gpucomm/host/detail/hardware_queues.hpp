#pragma once
// CUDA_DEVICE_MAX_CONNECTIONS: how many hardware queues CUDA spreads a context's streams over (8 by
// default, 32 at most). Work queued behind a kernel in a shared queue waits for that kernel, so a
// kernel that waits for work on another stream of its GPU (the kernel of a PE sharing the GPU, a
// ProxyQueue copy) may wait forever when the two streams share a queue.
//
// The world sets the variable to 32 when the program left it unset (hardware_queues_to_ask: CUDA's
// default of 8 for a process with one PE per GPU that MPS serves). CUDA reads it early, by the
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

#include <sys/stat.h>

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
/// CUDA's count when the variable is unset.
inline constexpr long default_hardware_queues = 8;

/// The queues to ask for when the program has not set the variable: 32, except for a process with
/// one PE per GPU that MPS serves, which keeps CUDA's default. Under MPS all clients of a GPU take
/// their queues from one pool (NVIDIA's MPS documentation, CUDA_DEVICE_MAX_CONNECTIONS), so 32 for
/// every client runs it dry with a few processes per GPU, and their contexts then fail to start
/// (cudaErrorMemoryAllocation). Such a process's kernels wait for other processes' work (other
/// clients, with queues of their own) and for ProxyQueue's copies, whose streams the proxy fits into
/// the queues there are (proxy_queue/host.hpp).
constexpr long hardware_queues_to_ask(bool one_pe_per_process, bool under_mps) noexcept {
  return one_pe_per_process && under_mps ? default_hardware_queues : wanted_hardware_queues;
}

/// Whether an MPS control daemon's socket is where CUDA looks for one ($CUDA_MPS_PIPE_DIRECTORY, else
/// /tmp/nvidia-mps): CUDA then makes this process's contexts as clients of its server. A socket
/// that a dead daemon left behind reads as MPS too (CUDA then makes ordinary contexts).
bool mps_control_present();

/// CUDA_DEVICE_MAX_CONNECTIONS's text as a count: a positive decimal number; nothing when the
/// variable is unset (null), empty or not such a number.
std::optional<long> hardware_queues_from(char const* text);

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
std::vector<char> gpus_with_context();

/// Sets CUDA_DEVICE_MAX_CONNECTIONS to hardware_queues_to_ask(...) unless it is set.
void ask_hardware_queues(bool one_pe_per_process);

/// What the first world of the process found; the first call records it (the program's value:
/// before asking for queues, ask_hardware_queues(one_pe_per_process)).
hardware_queue_start const& hardware_queue_record(bool one_pe_per_process);

/// Called by every world before it makes any context: the record, then ask_hardware_queues.
hardware_queue_start const& widen_hardware_queues(bool one_pe_per_process);

/// The verdict for GPU `device` (widen_hardware_queues must have run).
hardware_queue_verdict hardware_queues_of(int device, bool matters);

/// Why GPU `device`'s queues may be too few, for the error and the warning.
std::string narrow_queues_reason(int device);

inline constexpr char const* widen_queues_hint =
    "set CUDA_DEVICE_MAX_CONNECTIONS=32 in the environment before the program's first CUDA call (in the shell or "
    "the launcher, or before the first import that starts CUDA, such as torch)";

/// The world's check of its local PEs' GPUs, before it makes their contexts: throws for a GPU
/// that several of them share, warns on standard error for the others.
void check_hardware_queues(std::vector<local_pe> const& locals, char const* call);

/// For a host half whose work a kernel on the same GPU waits for, on streams of its own
/// (ProxyQueue's copy engines): throws unless local PE `pe`'s GPU `device` has its queues widened.
void require_hardware_queues(char const* call, int pe, int device);

}  // namespace gpucomm::detail

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "hardware_queues.inl"
#endif
