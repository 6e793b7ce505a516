#pragma once
// Restores the calling thread's current CUDA device on scope exit, so that host calls which visit
// several GPUs (world::synchronize, a transport's set-up) leave the caller's device as it was.

#include <cuda_runtime_api.h>

namespace gpucomm::detail {

class current_device_guard {
 public:
  current_device_guard() noexcept { ok_ = cudaGetDevice(&device_) == cudaSuccess; }
  current_device_guard(current_device_guard const&) = delete;
  current_device_guard& operator=(current_device_guard const&) = delete;
  ~current_device_guard() {
    if (ok_) cudaSetDevice(device_);
  }

 private:
  int device_ = 0;
  bool ok_ = false;
};

}  // namespace gpucomm::detail
