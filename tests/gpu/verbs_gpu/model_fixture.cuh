#pragma once
// GPU-side fixture of the verbs_gpu tests and benchmark: QPs whose ring, doorbell record,
// doorbell word and CQ live in mapped pinned host memory (the NIC model reads them from the
// host, the GPU writes them over PCIe), counters in GPU memory, data buffers in GPU memory.
#include <gpucomm/testing/nic_model/nic_model.hpp>
#include <gpucomm/verbs_gpu/verbs_gpu.cuh>

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

namespace verbs_gpu_test {

namespace vg = gpucomm::verbs_gpu;
namespace vm = gpucomm::verbs_gpu::model;

inline void cuda_check(cudaError_t e, char const* what, int line) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string("CUDA call failed: ") + what + " (line " + std::to_string(line) +
                             "): " + cudaGetErrorString(e));
  }
}
#define VG_CUDA(expr) ::verbs_gpu_test::cuda_check((expr), #expr, __LINE__)

/// Mapped pinned host memory, zeroed (or filled), freed on destruction.
struct mapped {
  void* host = nullptr;
  void* dev = nullptr;
  std::size_t bytes = 0;
  mapped(std::size_t n, int fill = 0) : bytes(n) {
    VG_CUDA(cudaHostAlloc(&host, n, cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(host, fill, n);
    VG_CUDA(cudaHostGetDevicePointer(&dev, host, 0));
  }
  mapped(mapped const&) = delete;
  mapped& operator=(mapped const&) = delete;
  ~mapped() {
    if (host) cudaFreeHost(host);
  }
};

/// GPU memory on one device, freed on destruction.
struct device_mem {
  void* ptr = nullptr;
  int dev = 0;
  device_mem(int d, std::size_t n) : dev(d) {
    VG_CUDA(cudaSetDevice(d));
    VG_CUDA(cudaMalloc(&ptr, n));
  }
  device_mem(device_mem const&) = delete;
  device_mem& operator=(device_mem const&) = delete;
  ~device_mem() {
    if (ptr) {
      cudaSetDevice(dev);
      cudaFree(ptr);
    }
  }
};

/// One QP posted to from GPU `dev`, on the model.
struct gpu_qp {
  mapped ring, cqes, misc;
  device_mem counters;
  vg::send_queue sq{};
  std::uint32_t qpn = 0;

  gpu_qp(vm::nic& n, std::uint32_t pd, int dev, std::uint32_t log_depth, vg::cq_mode mode, std::uint32_t log_ncqe = 0,
         std::uint32_t recv_cqn = 0)
      : ring(std::size_t{64} << log_depth),
        cqes((mode == vg::cq_mode::collapsed ? 1u : (1u << log_ncqe)) * sizeof(vg::cqe64), 0xff),
        misc(4096),
        counters(dev, sizeof(vg::qp_counters)) {
    VG_CUDA(cudaMemset(counters.ptr, 0, sizeof(vg::qp_counters)));
    std::uint32_t const lg = mode == vg::cq_mode::collapsed ? 0 : log_ncqe;
    auto* mh = static_cast<unsigned char*>(misc.host);
    auto* md = static_cast<unsigned char*>(misc.dev);
    // misc: [0] QP doorbell record, [64] CQ doorbell record, [128] doorbell word.
    vm::cq_config cc{mode, static_cast<vg::cqe64*>(cqes.host), lg, reinterpret_cast<std::uint32_t*>(mh + 64)};
    std::uint32_t const cqn = n.create_cq(cc);
    vm::qp_config qc{pd,
                     static_cast<std::byte*>(ring.host),
                     log_depth,
                     reinterpret_cast<std::uint32_t*>(mh) + vg::dbr_snd,
                     reinterpret_cast<std::uint64_t*>(mh + 128),
                     cqn,
                     recv_cqn};
    qpn = n.create_qp(qc);
    sq.ring = static_cast<std::byte*>(ring.dev);
    sq.log_depth = log_depth;
    sq.qpn = qpn;
    sq.dbrec = reinterpret_cast<std::uint32_t*>(md) + vg::dbr_snd;
    sq.doorbell = reinterpret_cast<std::uint64_t*>(md + 128);
    sq.counters = static_cast<vg::qp_counters*>(counters.ptr);
    sq.cq = vg::completion_queue{static_cast<vg::cqe64*>(cqes.dev), reinterpret_cast<std::uint32_t*>(md + 64), lg, mode,
                                 cqn};
    sq.scope = vg::nic_scope::system;  // the ring and records are in host memory
  }

  vg::qp_counters read_counters() const {
    vg::qp_counters c{};
    VG_CUDA(cudaMemcpy(&c, counters.ptr, sizeof(c), cudaMemcpyDeviceToHost));
    return c;
  }
};

/// An owner-bit receive CQ in mapped memory, for RDMA WRITE with immediate.
struct gpu_recv_cq {
  mapped cqes, dbrec;
  vg::completion_queue cq{};
  gpu_recv_cq(vm::nic& n, std::uint32_t log_ncqe)
      : cqes((std::size_t{1} << log_ncqe) * sizeof(vg::cqe64), 0xff), dbrec(64) {
    cq = vg::completion_queue{static_cast<vg::cqe64*>(cqes.dev), static_cast<std::uint32_t*>(dbrec.dev), log_ncqe,
                              vg::cq_mode::owner_bit, 0};
    cq.cqn = n.create_cq(vm::cq_config{vg::cq_mode::owner_bit, static_cast<vg::cqe64*>(cqes.host), log_ncqe,
                                       static_cast<std::uint32_t*>(dbrec.host)});
  }
};

}  // namespace verbs_gpu_test
