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
  ~owned_stream();
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
  void create(int pe, int device);

  bool contains(int pe) const noexcept { return streams_.count(pe) != 0; }

  /// Local PE `pe`'s stream; throws for a PE this process does not own.
  cudaStream_t get(int pe) const;

  /// Waits for every stream, all of them even when some fail; then throws naming every PE whose
  /// stream failed. The caller's current device stays as it was.
  void synchronize() const;

  /// Destroys the streams, each on its GPU (the caller restores its current device).
  void clear() { streams_.clear(); }

 private:
  std::map<int, owned_stream> streams_;  // [local PE]
};

}  // namespace gpucomm::detail

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "pe_streams.inl"
#endif
