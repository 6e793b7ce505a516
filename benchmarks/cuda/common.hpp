#pragma once
// What bench_cuda's cases share: GPUs 0 and 1 with peer access, one stream on each, and the
// isolating variants' cases (limits.cu).

#include <string>
#include <vector>

#include "../harness/harness.hpp"

namespace bench_cuda {

/// Throws unless GPUs 0 and 1 exist and can map each other's memory; enables it both ways.
inline void require_peer_access() {
  int count = 0;
  BENCH_CUDA(cudaGetDeviceCount(&count));
  if (count < 2) throw bench::failure("needs 2 GPUs, " + std::to_string(count) + " visible");
  for (int d = 0; d < 2; ++d) {
    int can = 0;
    BENCH_CUDA(cudaDeviceCanAccessPeer(&can, d, 1 - d));
    if (!can) throw bench::failure("GPU " + std::to_string(d) + " cannot access GPU " + std::to_string(1 - d));
    BENCH_CUDA(cudaSetDevice(d));
    cudaError_t const rc = cudaDeviceEnablePeerAccess(1 - d, 0);
    if (rc == cudaErrorPeerAccessAlreadyEnabled)
      cudaGetLastError();
    else
      BENCH_CUDA(rc);
  }
}

/// One non-blocking stream on each of GPUs 0 and 1 (both on GPU 0 of a one-GPU machine, where
/// copy_limits writes local -> local), destroyed at the end.
struct stream_pair {
  cudaStream_t s[2]{};
  int device[2]{0, 1};
  stream_pair() {
    int count = 0;
    BENCH_CUDA(cudaGetDeviceCount(&count));
    if (count < 2) device[1] = 0;
    for (int d = 0; d < 2; ++d) {
      BENCH_CUDA(cudaSetDevice(device[d]));
      BENCH_CUDA(cudaStreamCreateWithFlags(&s[d], cudaStreamNonBlocking));
    }
  }
  stream_pair(stream_pair const&) = delete;
  stream_pair& operator=(stream_pair const&) = delete;
  ~stream_pair() {
    for (int d = 0; d < 2; ++d) {
      cudaSetDevice(device[d]);
      cudaStreamDestroy(s[d]);
    }
  }
};

/// Launches `launch(device, stream)` on GPU 1 (the responder) first, then on GPU 0 (the initiator)
/// between the timer's events; returns GPU 0's time in ms once both kernels are done.
template <class Launch>
std::vector<double> time_initiator(stream_pair& st, bench::event_timer& timer, Launch&& launch) {
  for (int d = 1; d >= 0; --d) {
    BENCH_CUDA(cudaSetDevice(d));
    if (d == 0) timer.start(st.s[0]);
    launch(d, st.s[d]);
    BENCH_CUDA(cudaGetLastError());
    if (d == 0) timer.stop(st.s[0]);
  }
  std::vector<double> ms{timer.ms()};
  BENCH_CUDA(cudaSetDevice(1));
  BENCH_CUDA(cudaStreamSynchronize(st.s[1]));
  return ms;
}

/// copy_limits, copy_profile, pingpong_limits, quiet_limits, barrier_limits (limits.cu).
std::vector<bench::case_entry> limit_cases();

}  // namespace bench_cuda
