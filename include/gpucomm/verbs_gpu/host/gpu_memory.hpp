#pragma once
// host::control_memory in GPU memory: what the set-up's rings, CQs and doorbell records live in on
// hardware (shared/reference/ibgda-notes.md section 3, steps 3 and 5). The CUDA runtime only; the
// driver API entry points (dma-buf export, SYNC_MEMOPS) are looked up through the runtime, so
// nothing links libcuda and binaries start on machines without a GPU driver.
//
// The memory is on the GPU that is current when the set-up allocates (cudaSetDevice first).

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "backend.hpp"

namespace gpucomm::verbs_gpu::host {

namespace detail {
/// A CUDA driver API entry point through the runtime; nullptr if unavailable.
template <class Fn>
Fn driver_fn(char const* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<Fn>(p);
}
using cu_device_get_attribute_fn = CUresult (*)(int*, CUdevice_attribute, CUdevice);
using cu_mem_get_handle_fn = CUresult (*)(void*, CUdeviceptr, std::size_t, CUmemRangeHandleType, unsigned long long);
using cu_pointer_set_attribute_fn = CUresult (*)(void const*, CUpointer_attribute, CUdeviceptr);
}  // namespace detail

/// Control memory from cudaMalloc, 64 KiB aligned (the GPU's page: dma-buf export and peer memory
/// work on whole pages, and NVSHMEM aligns the same way).
class cuda_control_memory final : public control_memory {
 public:
  static constexpr std::size_t gpu_page = 65536;

  cuda_control_memory() = default;
  cuda_control_memory(cuda_control_memory const&) = delete;
  cuda_control_memory& operator=(cuda_control_memory const&) = delete;
  ~cuda_control_memory() override {
    for (auto const& [aligned, raw] : raw_) cudaFree(raw);
  }

  char const* name() const noexcept override { return "GPU memory"; }
  bool gpu() const noexcept override { return true; }

  void* allocate(std::size_t bytes, std::size_t alignment, std::string* error) override {
    std::size_t const align = alignment > gpu_page ? alignment : gpu_page;
    std::size_t const size = (bytes + gpu_page - 1) / gpu_page * gpu_page;
    void* raw = nullptr;
    if (cudaError_t const e = cudaMalloc(&raw, size + align); e != cudaSuccess) {
      cudaGetLastError();
      if (error) *error = std::string("cudaMalloc: ") + cudaGetErrorString(e);
      return nullptr;
    }
    void* p = reinterpret_cast<void*>((reinterpret_cast<std::uintptr_t>(raw) + align - 1) & ~(align - 1));
    // SYNC_MEMOPS: memory operations on this range are synchronous, so copies never reorder the
    // GPU's and the NIC's accesses to it (NVSHMEM sets it on its control memory).
    unsigned one = 1;
    if (auto const set_attr = detail::driver_fn<detail::cu_pointer_set_attribute_fn>("cuPointerSetAttribute"))
      set_attr(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, reinterpret_cast<CUdeviceptr>(p));
    std::lock_guard<std::mutex> lock(mutex_);
    raw_[p] = raw;
    return p;
  }
  void deallocate(void* p) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = raw_.find(p);
    if (it == raw_.end()) return;
    cudaFree(it->second);
    raw_.erase(it);
  }
  bool fill(void* p, unsigned char value, std::size_t bytes, std::string* error) override {
    // cudaMemset may return before it is done; the NIC may read the memory as soon as the set-up
    // creates the object, so wait for it.
    cudaError_t e = cudaMemset(p, value, bytes);
    if (e == cudaSuccess) e = cudaStreamSynchronize(nullptr);
    if (e != cudaSuccess) {
      cudaGetLastError();
      if (error) *error = std::string("cudaMemset: ") + cudaGetErrorString(e);
      return false;
    }
    return true;
  }
  int dmabuf_fd(void const* p, std::size_t bytes) override {
    int fd = -1;
    auto const get_handle = detail::driver_fn<detail::cu_mem_get_handle_fn>("cuMemGetHandleForAddressRange");
    if (get_handle == nullptr || get_handle(&fd, reinterpret_cast<CUdeviceptr>(p), bytes,
                                            CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0) != CUDA_SUCCESS)
      return -1;
    return fd;
  }
  bool dmabuf_supported() override {
    int dev = 0, supported = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    auto const get_attr = detail::driver_fn<detail::cu_device_get_attribute_fn>("cuDeviceGetAttribute");
    return get_attr != nullptr &&
           get_attr(&supported, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, static_cast<CUdevice>(dev)) == CUDA_SUCCESS &&
           supported != 0 &&
           detail::driver_fn<detail::cu_mem_get_handle_fn>("cuMemGetHandleForAddressRange") != nullptr;
  }
  bool peer_memory() override {
    // The files nvidia-peermem (and the older nv_peer_mem) create (NVSHMEM's check).
    return ::access("/sys/kernel/mm/memory_peers/nv_mem/version", F_OK) == 0 ||
           ::access("/sys/kernel/mm/memory_peers/nvidia-peermem/version", F_OK) == 0 ||
           ::access("/sys/module/nvidia_peermem/version", F_OK) == 0;
  }
  std::string pci_bus_id() override {
    int dev = 0;
    char bus[32] = {};
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetPCIBusId(bus, sizeof bus, dev) != cudaSuccess) {
      cudaGetLastError();
      return {};
    }
    std::string s(bus);
    for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s;
  }

 private:
  std::mutex mutex_;
  std::map<void*, void*> raw_;  ///< aligned pointer -> what cudaMalloc returned
};

}  // namespace gpucomm::verbs_gpu::host
