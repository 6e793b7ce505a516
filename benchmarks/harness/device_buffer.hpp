#pragma once
// A cudaMalloc'd buffer on one device, freed on destruction (used by the cases for counters,
// flags and plain device memory).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "harness.hpp"

namespace bench {

template <class T>
class device_buffer {
 public:
  device_buffer() = default;
  device_buffer(int device, std::size_t n) : device_(device), n_(n) {
    BENCH_CUDA(cudaSetDevice(device));
    void* p = nullptr;
    BENCH_CUDA(cudaMalloc(&p, n * sizeof(T)));
    ptr_ = static_cast<T*>(p);
    if (cudaError_t const rc = cudaMemset(ptr_, 0, n * sizeof(T)); rc != cudaSuccess) {
      cudaFree(ptr_);
      ptr_ = nullptr;
      BENCH_CUDA(rc);
    }
  }
  device_buffer(device_buffer&& o) noexcept : device_(o.device_), n_(o.n_), ptr_(std::exchange(o.ptr_, nullptr)) {}
  device_buffer& operator=(device_buffer&& o) noexcept {
    std::swap(device_, o.device_);
    std::swap(n_, o.n_);
    std::swap(ptr_, o.ptr_);
    return *this;
  }
  device_buffer(device_buffer const&) = delete;
  device_buffer& operator=(device_buffer const&) = delete;
  ~device_buffer() {
    if (ptr_) {
      cudaSetDevice(device_);
      cudaFree(ptr_);
    }
  }
  T* get() const { return ptr_; }
  std::size_t size() const { return n_; }
  int device() const { return device_; }
  /// Zero it on `stream` (asynchronously).
  void zero(cudaStream_t stream) const {
    BENCH_CUDA(cudaSetDevice(device_));
    BENCH_CUDA(cudaMemsetAsync(ptr_, 0, n_ * sizeof(T), stream));
  }

 private:
  int device_ = 0;
  std::size_t n_ = 0;
  T* ptr_ = nullptr;
};

}  // namespace bench
