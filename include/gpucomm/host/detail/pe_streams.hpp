#pragma once
// The world's streams, one non-blocking stream per local PE on its GPU, and waiting for them
// (world::synchronize's first half: the transports' own checks come after).

#include <cuda_runtime_api.h>

#include <map>
#include <string>
#include <utility>

#include "../../error.hpp"
#include "device_guard.hpp"

namespace gpucomm::detail {

/// A stream destroyed with its owner (also when a constructor throws half way).
class owned_stream {
 public:
  owned_stream(cudaStream_t s, int device) : s_(s), device_(device) {}
  owned_stream(owned_stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)), device_(o.device_) {}
  owned_stream& operator=(owned_stream&&) = delete;
  ~owned_stream() {
    if (s_) {
      cudaSetDevice(device_);
      cudaStreamDestroy(s_);
    }
  }
  cudaStream_t get() const { return s_; }
  int device() const { return device_; }

 private:
  cudaStream_t s_;
  int device_;
};

class pe_streams {
 public:
  /// Local PE `pe`'s stream, on `device`, whose primary context this creates first (the heap's
  /// driver calls need it). Leaves `device` current.
  void create(int pe, int device) {
    GPUCOMM_CUDA_CHECK(cudaSetDevice(device), pe);
    GPUCOMM_CUDA_CHECK(cudaFree(nullptr), pe);  // create the primary context before the driver calls
    cudaStream_t s{};
    GPUCOMM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), pe);
    streams_.emplace(pe, owned_stream(s, device));
  }

  bool contains(int pe) const noexcept { return streams_.count(pe) != 0; }

  /// Local PE `pe`'s stream; throws for a PE this process does not own.
  cudaStream_t get(int pe) const {
    auto const it = streams_.find(pe);
    if (it == streams_.end()) {
      throw error("world::stream", pe, "PE " + std::to_string(pe) + " is not owned by this process",
                  "ask only for the PEs in local_pes()");
    }
    return it->second.get();
  }

  /// Waits for every stream, all of them even when some fail; then throws naming every PE whose
  /// stream failed. The caller's current device stays as it was.
  void synchronize() const {
    current_device_guard const keep;
    std::string failed;
    int first = -1;
    for (auto const& [pe, s] : streams_) {
      cudaError_t rc = cudaSetDevice(s.device());
      if (rc == cudaSuccess) rc = cudaStreamSynchronize(s.get());
      if (rc == cudaSuccess) continue;
      if (first < 0) first = pe;
      failed += (failed.empty() ? "PE " : "; PE ") + std::to_string(pe) + ": " + cudaGetErrorName(rc) + " (" +
                cudaGetErrorString(rc) + ")";
    }
    if (first >= 0) {
      throw error("world::synchronize", first, "a kernel on the world's streams failed: " + failed,
                  "a gpucomm check or a wait that gave up (world_options::wait_timeout) prints a "
                  "\"gpucomm: ...\" line on standard output naming the PE, the operation and the address before it "
                  "traps; a kernel's fault loses the CUDA context of its GPU, so no later CUDA call there can "
                  "succeed: destroy the world and end the process (docs/guide/reliability.md)");
    }
  }

  /// Destroys the streams, each on its GPU (the caller restores its current device).
  void clear() { streams_.clear(); }

 private:
  std::map<int, owned_stream> streams_;  // [local PE]
};

}  // namespace gpucomm::detail
