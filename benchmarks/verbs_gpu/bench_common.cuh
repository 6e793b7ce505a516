#pragma once
// What the verbs_gpu benchmarks share: a CUDA call check that exits, the WQE they post, the GPU's
// nanosecond clock, and a NIC for QPs the set-up makes with every queue in GPU memory.
#include <gpucomm/verbs_gpu/host/setup.hpp>
#include <gpucomm/testing/nic_model/nic_backend.hpp>
#include <gpucomm/testing/nic_model/nic_model.hpp>
#include <gpucomm/verbs_gpu/verbs_gpu.cuh>

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(expr)                                                                                         \
  do {                                                                                                   \
    cudaError_t const e_ = (expr);                                                                       \
    if (e_ != cudaSuccess) {                                                                             \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(2);                                                                                      \
    }                                                                                                    \
  } while (0)

namespace verbs_bench {

/// An RDMA WRITE WQE with fixed operands (never executed: the NIC model drains it).
struct write_builder {
  __device__ std::uint32_t operator()(gpucomm::verbs_gpu::wqe_slot const& s, std::uint32_t i) const {
    return gpucomm::verbs_gpu::build_rdma_write(s, {0x1000 + 8ull * i, 8, 0x1234}, {0x2000 + 8ull * i, 0x5678});
  }
};

/// %globaltimer, in nanoseconds.
__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// A modelled device for set-up QPs (ring, CQ, both doorbell records in GPU memory, where hardware
/// keeps them): the firmware model in front of a NIC model configured by `config`. Start the data
/// path (`network.data_path().start()`) once the QPs are made.
struct gpu_queue_nic {
  gpucomm::verbs_gpu::model::model_network network;
  gpucomm::verbs_gpu::model::model_gpu_memory memory;
  gpucomm::verbs_gpu::model::nic_backend backend;
  gpucomm::verbs_gpu::host::device device;

  explicit gpu_queue_nic(gpucomm::verbs_gpu::model::nic_config const& config)
      : network(config), backend(firmware(), network, memory), device(backend, options(memory)) {}

 private:
  static constexpr char const* name = "bench_model";
  static gpucomm::verbs_gpu::model::firmware_fabric firmware() {
    gpucomm::verbs_gpu::model::firmware_config c;
    c.name = name;
    return gpucomm::verbs_gpu::model::firmware_fabric({c});
  }
  static gpucomm::verbs_gpu::host::device_options options(gpucomm::verbs_gpu::host::control_memory& m) {
    gpucomm::verbs_gpu::host::device_options o;
    o.name = name;
    o.memory = &m;
    return o;
  }
};

}  // namespace verbs_bench
