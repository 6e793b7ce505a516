// Where one thread's post -> doorbell time goes, queues where hardware keeps them (ring, CQ and
// doorbell records in GPU memory, on a QP the set-up made through the firmware model; the NIC
// model drains it). Prints a table; for the analysis in docs/guide/verbs_gpu.md, "Posting cost".
//
//   A  send_queue::post, as IBGDAPost calls it (one WQE, ring now), timed with %globaltimer
//   B  the same steps written out, with clock64 between them: (1) reserve + error and space
//      checks, (2) build the WQE, (3) the ticket (acquire load of `ready`), (4) producer store,
//      release fence, doorbell-record store, (5) release fence, (6) doorbell store, (7) the ticket
//      handed on (release store of `ready`)
//   C..F B with one ordering left out, to price each. They are NOT correct protocols (each drops
//      an order the NIC or the next ticket holder needs: send_queue.cuh says which) and exist only
//      to measure what that order costs:
//      C  step 7's release fence left out (a relaxed store of `ready`)
//      D  step 5's fence left out (doorbell record and doorbell unordered)
//      E  both, so one fence (step 4's) is left
//      F  B with fence.release.gpu (PTX 8.6, sm_90: no L1 invalidation) for every release fence
//
// usage: bench_post_steps [rounds]
#include <gpucomm/group.cuh>
#include <gpucomm/verbs_gpu/host/setup.hpp>
#include <gpucomm/testing/nic_model/nic_backend.hpp>
#include <gpucomm/testing/nic_model/nic_model.hpp>
#include <gpucomm/verbs_gpu/verbs_gpu.cuh>

#include "bench_common.cuh"

#include <cuda_runtime.h>
#include <nv/target>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

namespace vg = gpucomm::verbs_gpu;
namespace vm = gpucomm::verbs_gpu::model;
namespace vh = gpucomm::verbs_gpu::host;

namespace {

constexpr int iters = 1500;
constexpr int warm_up = 100;
constexpr int steps = 7;

enum : int { no_handoff_fence = 1, no_doorbell_fence = 2, release_only_fences = 4 };

template <int Variant>
__device__ __forceinline__ void release_fence() {
  if constexpr ((Variant & release_only_fences) != 0) {
    // fence.release needs PTX 8.6 and sm_90; elsewhere the ordinary release fence.
    NV_IF_ELSE_TARGET(NV_PROVIDES_SM_90,
                      (asm volatile("fence.release.gpu;"
                                    :
                                    :
                                    : "memory");),
                      (cuda::atomic_thread_fence(cuda::memory_order_release, cuda::thread_scope_device);))
  } else {
    cuda::atomic_thread_fence(cuda::memory_order_release, cuda::thread_scope_device);
  }
}

__global__ void post_kernel(vg::send_queue sq, unsigned long long* ns) {
  for (int i = 0; i < iters; ++i) {
    unsigned long long const t0 = verbs_bench::globaltimer();
    sq.post(gpucomm::single_thread{}, 1, 1, verbs_bench::write_builder{});
    ns[i] = verbs_bench::globaltimer() - t0;
  }
}

template <int Variant>
__global__ void steps_kernel(vg::send_queue sq, unsigned long long* ns, long long* cycles, int* failed) {
  using vg::detail::dev_ref;
  for (int i = 0; i < iters; ++i) {
    unsigned long long const t0 = verbs_bench::globaltimer();
    long long c[steps + 1];
    c[0] = clock64();
    std::uint64_t const base = sq.reserve(1);
    if (sq.has_error() || !sq.has_space(base, 1)) {
      atomicAdd(failed, 1);
      return;
    }
    c[1] = clock64();
    verbs_bench::write_builder{}(sq.slot(base, vg::ctrl_cq_update), 0);
    c[2] = clock64();
    if (!sq.holds_ticket(base)) {  // one thread posts: it always holds the ticket
      atomicAdd(failed, 1);
      return;
    }
    c[3] = clock64();
    std::uint64_t const end = base + 1;
    dev_ref(sq.counters->producer).store(end, cuda::memory_order_relaxed);
    release_fence<Variant>();
    vg::detail::sys_ref(*sq.dbrec).store(vg::to_be32(static_cast<std::uint32_t>(end) & 0xffffu),
                                         cuda::memory_order_relaxed);
    c[4] = clock64();
    if constexpr ((Variant & no_doorbell_fence) == 0) release_fence<Variant>();
    c[5] = clock64();
    vg::detail::store_doorbell(sq.doorbell, vg::make_doorbell(end, sq.qpn));
    c[6] = clock64();
    if constexpr ((Variant & no_handoff_fence) == 0) release_fence<Variant>();
    dev_ref(sq.counters->ready).store(end, cuda::memory_order_relaxed);
    c[7] = clock64();
    ns[i] = verbs_bench::globaltimer() - t0;
    for (int k = 0; k < steps; ++k) cycles[static_cast<long long>(i) * steps + k] = c[k + 1] - c[k];
  }
}

}  // namespace

int main(int argc, char** argv) {
  int const rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  CK(cudaSetDevice(0));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  int clock_khz = 0;
  CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  vm::nic_config cfg;
  cfg.drain_only = true;
  verbs_bench::gpu_queue_nic nic(cfg);
  vm::model_network& net = nic.network;
  // A fresh QP per run (each run posts `iters` WQEs into a ring of 4096, so nothing waits).
  std::vector<std::unique_ptr<vh::qp>> qps;
  for (int k = 0; k < rounds * 6; ++k) {
    vh::qp_options o;
    o.log_sq_depth = 12;
    qps.push_back(std::make_unique<vh::qp>(nic.device, o));
    qps.back()->connect(qps.back()->local_info());  // loopback
  }
  net.data_path().start();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));

  unsigned long long* d_ns = nullptr;
  long long* d_cycles = nullptr;
  int* d_failed = nullptr;
  CK(cudaMalloc(&d_ns, sizeof(unsigned long long) * iters));
  CK(cudaMalloc(&d_cycles, sizeof(long long) * steps * iters));
  CK(cudaMalloc(&d_failed, sizeof(int)));
  CK(cudaMemset(d_failed, 0, sizeof(int)));
  std::vector<unsigned long long> ns(iters);
  std::vector<long long> cycles(static_cast<std::size_t>(steps) * iters);
  std::printf("# %s, %d SMs, clock %d MHz; medians of %d posts after %d warm-up; cycles per step (B's list)\n",
              prop.name, prop.multiProcessorCount, clock_khz / 1000, iters - warm_up, warm_up);
  std::printf("%-44s %9s  %s\n", "case", "ns", "cycles: reserve+checks build ticket dbrec+fence fence db handoff");
  auto report = [&](char const* name, bool with_cycles) {
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(ns.data(), d_ns, sizeof(unsigned long long) * iters, cudaMemcpyDeviceToHost));
    std::vector<unsigned long long> v(ns.begin() + warm_up, ns.end());
    std::sort(v.begin(), v.end());
    std::printf("%-44s %9llu ", name, v[v.size() / 2]);
    if (with_cycles) {
      CK(cudaMemcpy(cycles.data(), d_cycles, sizeof(long long) * cycles.size(), cudaMemcpyDeviceToHost));
      for (int k = 0; k < steps; ++k) {
        std::vector<long long> c;
        for (int i = warm_up; i < iters; ++i) c.push_back(cycles[static_cast<std::size_t>(i) * steps + k]);
        std::sort(c.begin(), c.end());
        std::printf(" %5lld", c[c.size() / 2]);
      }
    }
    std::printf("\n");
  };
  std::size_t next = 0;
  auto queue = [&] { return qps[next++]->send_queue(); };
  for (int r = 0; r < rounds; ++r) {
    post_kernel<<<1, 1>>>(queue(), d_ns);
    report("A send_queue::post", false);
    steps_kernel<0><<<1, 1>>>(queue(), d_ns, d_cycles, d_failed);
    report("B its steps, timed", true);
    steps_kernel<no_handoff_fence><<<1, 1>>>(queue(), d_ns, d_cycles, d_failed);
    report("C B without the hand-off fence (unsafe)", true);
    steps_kernel<no_doorbell_fence><<<1, 1>>>(queue(), d_ns, d_cycles, d_failed);
    report("D B without the record->doorbell fence (unsafe)", true);
    steps_kernel<no_handoff_fence | no_doorbell_fence><<<1, 1>>>(queue(), d_ns, d_cycles, d_failed);
    report("E one fence only (unsafe)", true);
    steps_kernel<release_only_fences><<<1, 1>>>(queue(), d_ns, d_cycles, d_failed);
    report("F B with fence.release.gpu", true);
  }
  int failed = 0;
  CK(cudaMemcpy(&failed, d_failed, sizeof(int), cudaMemcpyDeviceToHost));
  net.data_path().stop();
  CK(cudaFree(d_ns));
  CK(cudaFree(d_cycles));
  CK(cudaFree(d_failed));
  if (failed != 0) std::fprintf(stderr, "%d runs stopped early (no space or no ticket)\n", failed);
  return failed == 0 ? 0 : 3;
}
