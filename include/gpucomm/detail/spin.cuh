#pragma once
// Spin loops. A spin that outlasts its bound prints which PE waited, in which operation, on which
// word and for what, and traps: a lost signal or a peer that died ends the kernel with an error the
// host sees from world::synchronize() instead of hanging the GPU. The bound (detail/bounded_wait.cuh,
// the timeout rule): debug builds (GPUCOMM_DEBUG) always have one, the world's wait timeout
// (world_options::wait_timeout, GPUCOMM_WAIT_TIMEOUT_MS, default 20 s; where no world is known,
// GPUCOMM_SPIN_TIMEOUT_NS); release builds only when the program set world_options::wait_timeout
// or GPUCOMM_WAIT_TIMEOUT_MS, and otherwise spin until the condition holds.

#include <cstdint>
#include <cstdio>

#include "../config.hpp"
#include "bounded_wait.cuh"
#include "control_block.hpp"

#ifndef GPUCOMM_SPIN_TIMEOUT_NS
#define GPUCOMM_SPIN_TIMEOUT_NS 20000000000ull  // 20 s: waits that know no world (their header is null)
#endif

namespace gpucomm::detail {

#if defined(__CUDACC__)

/// Prints which PEs share this PE's GPU, from the control block's header (detail/control_block.hpp):
/// the usual reason a wait never ends when PEs share a GPU is a peer whose kernel is not resident.
__device__ inline void report_shared_gpu(std::uint64_t const* header) {
  if (header == nullptr) return;
  using layout = control_block_layout;
  auto const pe = static_cast<long long>(header[layout::header_pe]);
  auto const start = static_cast<long long>(header[layout::header_gpu_team]),
             stride = static_cast<long long>(header[layout::header_gpu_team + 1]),
             size = static_cast<long long>(header[layout::header_gpu_team + 2]);
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

/// What a wait says when it gives up (debug builds): the operation, and where it watches a word,
/// the word, the condition that would end the wait (`until`, then `value`) and the PE expected to
/// write it (-1: any, or not known). A name alone converts to one.
struct wait_report {
  char const* op;
  std::uint64_t const* word = nullptr;
  char const* until = ">=";
  std::uint64_t value = 0;
  int writer = -1;
  __device__ wait_report(char const* op_name, std::uint64_t const* watched = nullptr,
                         char const* condition = ">=", std::uint64_t target = 0, int written_by = -1)
      : op(op_name), word(watched), until(condition), value(target), writer(written_by) {}
};

/// How long a wait on a PE with control-block header `header` may take in this build, in
/// nanoseconds (0: no bound): the world's encoded setting (bounded_wait.cuh); with no world known,
/// GPUCOMM_SPIN_TIMEOUT_NS in debug builds and no bound in release builds.
__device__ GPUCOMM_FORCEINLINE std::uint64_t wait_timeout_ns(std::uint64_t const* header) {
  std::uint64_t const set = header != nullptr ? header[control_block_layout::header_wait_timeout] : 0;
  return set != 0 ? wait_bound_ns(set) : wait_bound_ns(wait_timeout_word(GPUCOMM_SPIN_TIMEOUT_NS, false));
}

/// Prints the report of a wait that gave up after `waited_ns` (one printf per line: lines of
/// different threads do not mix), then which PEs share the GPU. Out of line: one copy per
/// translation unit, not one per wait.
__device__ inline GPUCOMM_NOINLINE void report_timeout(wait_report const& r, std::uint64_t const* header,
                                                       std::uint64_t waited_ns) {
  long long const pe = header != nullptr ? static_cast<long long>(header[control_block_layout::header_pe]) : -1;
  auto const ms = static_cast<unsigned long long>(waited_ns / 1000000);
  if (r.word == nullptr) {
    printf("gpucomm: PE %lld: %s: still waiting after %llu ms (block %d,%d,%d thread %d,%d,%d); trapping\n", pe, r.op,
           ms, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z);
  } else {
    // A volatile read: what the word holds now, whatever the wait's own loads saw.
    auto const held = static_cast<unsigned long long>(*static_cast<std::uint64_t const volatile*>(r.word));
    auto const value = static_cast<unsigned long long>(r.value);
    if (r.writer >= 0) {
      printf(
          "gpucomm: PE %lld: %s: still waiting after %llu ms for the word at %p, written by PE %d, to become %s %llu "
          "(it holds %llu) (block %d,%d,%d thread %d,%d,%d); trapping\n",
          pe, r.op, ms, r.word, r.writer, r.until, value, held, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x,
          threadIdx.y, threadIdx.z);
    } else {
      printf(
          "gpucomm: PE %lld: %s: still waiting after %llu ms for the word at %p to become %s %llu (it holds %llu) "
          "(block %d,%d,%d thread %d,%d,%d); trapping\n",
          pe, r.op, ms, r.word, r.until, value, held, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y,
          threadIdx.z);
    }
  }
  report_shared_gpu(header);
}

/// Spin until `done()` returns true. `report` says what is awaited, in the timeout report;
/// `header`, when given, is the waiting PE's control-block header: the report names the PE and
/// which PEs share its GPU, and the world's wait timeout applies. `progress`, where active, is
/// called every 1024 polls. The bound is looked at every 1024 polls too, so a wait that ends
/// sooner reads no clock and no header; its clock starts at the first look.
template <class Done, class Progress = no_progress>
__device__ GPUCOMM_FORCEINLINE void spin_until(Done&& done, wait_report const& report,
                                               std::uint64_t const* header = nullptr, Progress progress = {}) {
  std::uint64_t start = 0;
  for (unsigned polls = 1; !done(); ++polls) {
    if ((polls & 1023u) != 0) continue;
    if constexpr (Progress::active) progress();
    std::uint64_t const bound = wait_timeout_ns(header);
    if (bound == 0) continue;
    std::uint64_t const now = now_ns();
    if (start == 0) {
      start = now;
    } else if (now - start > bound) {
      report_timeout(report, header, now - start);
      __trap();
    }
  }
}

#endif  // __CUDACC__

}  // namespace gpucomm::detail
