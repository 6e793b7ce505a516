#pragma once
// The bodies of kernel_preload.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::detail {

inline void preload_kernels(std::vector<local_pe> const& locals, std::initializer_list<void const*> kernels,
                            std::size_t stack_bytes) {
  current_device_guard const keep;
  std::vector<int> done;
  for (auto const& l : locals) {
    bool seen = false;
    for (int d : done) seen |= d == l.device;
    if (seen) continue;
    done.push_back(l.device);
    GPUCOMM_CUDA_CHECK(cudaSetDevice(l.device), l.pe);
    std::size_t wanted = stack_bytes;
    for (void const* kernel : kernels) {
      cudaFuncAttributes attributes{};
      GPUCOMM_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel), l.pe);  // loads its module
      if (wanted < attributes.localSizeBytes) wanted = attributes.localSizeBytes;
    }
    std::size_t reserved = 0;
    GPUCOMM_CUDA_CHECK(cudaDeviceGetLimit(&reserved, cudaLimitStackSize), l.pe);
    if (wanted > reserved) GPUCOMM_CUDA_CHECK(cudaDeviceSetLimit(cudaLimitStackSize, wanted), l.pe);
  }
}

}  // namespace gpucomm::detail
