#pragma once
// The memory agent for GPU memory (memory_agent.hpp's contract): what peers send through a network
// engine, written into one GPU's memory by the engine's thread. Host only (CUDA runtime).
//
//   write    cudaMemcpyAsync on the agent's stream (the source, the engine's receive buffer, stays
//            valid until commit());
//   read     cudaMemcpyAsync into the host buffer on the same stream (after the writes before
//            it), then cudaStreamSynchronize: the bytes are there when it returns;
//   signal   set: a cudaMemcpyAsync of the value from pinned host memory on the same stream,
//            after the data, so a kernel that sees the value sees the data (stream order: the
//            copy starts after the data's copy finished). add: as an atomic below;
//   atomic   the stream drained, the word read, the operation applied on this thread, the result
//            written back and the stream drained again. Only this thread updates the words the
//            engine updates (memory_agent.hpp, "Atomicity domain"), so the read-modify-write is
//            atomic with respect to every other update through the agent, not with the GPU's own
//            atomics on the same word;
//   commit   cudaStreamSynchronize.
// Every CUDA failure is returned as text naming the call.
//
//   gpucomm::engine::cuda_memory_agent agent(device);
//   config.agent = &agent;  // then make the engine

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "../../error.hpp"
#include "memory_agent.hpp"

namespace gpucomm::engine {

class cuda_memory_agent final : public memory_agent {
 public:
  /// Signals set with no commit() in between, at most; the next one drains the stream first.
  static constexpr std::size_t staging_words = 64;

  /// An agent for CUDA device `device`'s memory; throws gpucomm::error when its stream or its
  /// pinned staging words cannot be made.
  explicit cuda_memory_agent(int device) : device_(device) {
    GPUCOMM_CUDA_CHECK(cudaSetDevice(device), -1);
    GPUCOMM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), -1);
    if (cudaError_t const rc = cudaHostAlloc(reinterpret_cast<void**>(&staging_), staging_words * sizeof(std::uint64_t),
                                             cudaHostAllocDefault);
        rc != cudaSuccess) {
      cudaStreamDestroy(stream_);
      ::gpucomm::detail::check_cuda(rc, "cudaHostAlloc", -1);
    }
  }
  cuda_memory_agent(cuda_memory_agent const&) = delete;
  cuda_memory_agent& operator=(cuda_memory_agent const&) = delete;
  ~cuda_memory_agent() override {
    cudaStreamSynchronize(stream_);
    cudaFreeHost(staging_);
    cudaStreamDestroy(stream_);
  }

  std::string write(void* dst, void const* src, std::size_t bytes) override {
    if (bytes == 0) return {};
    if (std::string e = use_device(); !e.empty()) return e;
    return check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "cudaMemcpyAsync (data)");
  }

  std::string read(void* dst, void const* src, std::size_t bytes) override {
    if (bytes == 0) return {};
    if (std::string e = use_device(); !e.empty()) return e;
    if (std::string e = check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "cudaMemcpyAsync (read)");
        !e.empty())
      return e;
    return check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (read)");
  }

  std::string signal(std::uint64_t* word, signal_op op, std::uint64_t value) override {
    if (op == signal_op::add) {
      std::uint64_t old = 0;
      return atomic(word, 8, atomic_op::add, value, 0, old);
    }
    if (std::string e = use_device(); !e.empty()) return e;
    if (used_ == staging_words) {
      if (std::string e = commit(); !e.empty()) return e;
    }
    std::uint64_t* const v = staging_ + used_++;
    *v = value;
    return check(cudaMemcpyAsync(word, v, sizeof(*v), cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync (signal)");
  }

  std::string atomic(void* word, unsigned width, atomic_op op, std::uint64_t operand, std::uint64_t compare,
                     std::uint64_t& old) override {
    if (width != 4 && width != 8) return "an atomic of " + std::to_string(width) + " bytes (4 or 8 only)";
    if (std::string e = use_device(); !e.empty()) return e;
    if (std::string e = commit(); !e.empty()) return e;
    std::uint64_t value = 0;  // little-endian: a 4-byte word is its low half
    if (std::string e = check(cudaMemcpyAsync(&value, word, width, cudaMemcpyDeviceToHost, stream_),
                              "cudaMemcpyAsync (atomic read)");
        !e.empty())
      return e;
    if (std::string e = commit(); !e.empty()) return e;
    if (width == 8) {
      old = detail::apply_atomic(value, op, operand, compare);
    } else {
      auto low = static_cast<std::uint32_t>(value);
      old = detail::apply_atomic(low, op, static_cast<std::uint32_t>(operand), static_cast<std::uint32_t>(compare));
      value = low;
    }
    if (op == atomic_op::fetch) return {};
    if (std::string e = check(cudaMemcpyAsync(word, &value, width, cudaMemcpyHostToDevice, stream_),
                              "cudaMemcpyAsync (atomic write)");
        !e.empty())
      return e;
    return commit();  // `value` lives on this frame
  }

  std::string commit() override {
    used_ = 0;
    return check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

 private:
  // The engine's thread is not the one that made the agent: its current device is set per call.
  std::string use_device() const { return check(cudaSetDevice(device_), "cudaSetDevice"); }
  std::string check(cudaError_t rc, char const* call) const {
    if (rc == cudaSuccess) return {};
    return std::string(call) + " on device " + std::to_string(device_) + " failed: " + cudaGetErrorName(rc);
  }

  int device_;
  cudaStream_t stream_ = nullptr;
  std::uint64_t* staging_ = nullptr;  // pinned: the values signals set, until commit()
  std::size_t used_ = 0;
};

}  // namespace gpucomm::engine
