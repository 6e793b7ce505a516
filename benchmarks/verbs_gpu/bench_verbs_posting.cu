// verbs_gpu posting benchmark: how many WQEs per second 1 thread, 1 warp, 1 block and the whole
// GPU reserve, build (RDMA WRITE, 3 segments), publish and ring; and single-WQE post-to-doorbell
// latency. The consumer is the NIC model in drain-only mode (it reads doorbells and completes
// everything at once without touching the WQEs), and every run fits in the rings, so the model is
// not the bottleneck. The rate cases' rings are in GPU memory, their doorbell records and CQs in
// mapped host memory. The "gpu_queues" cases post to a QP the set-up made (verbs_gpu/host/setup.hpp)
// through the firmware model (model/nic_backend.hpp): ring, CQ and both doorbell records in GPU
// memory, where hardware keeps them; only the doorbell page is mapped host memory, standing for the
// UAR page.
//
// usage: bench_verbs_posting <out.json> [device]
#include <gpucomm/group.cuh>
#include <gpucomm/verbs_gpu/host/setup.hpp>
#include <gpucomm/testing/nic_model/nic_backend.hpp>
#include <gpucomm/testing/nic_model/nic_model.hpp>
#include <gpucomm/verbs_gpu/verbs_gpu.cuh>

#include "bench_common.cuh"

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace cg = cooperative_groups;
namespace vg = gpucomm::verbs_gpu;
namespace vm = gpucomm::verbs_gpu::model;
namespace vh = gpucomm::verbs_gpu::host;

namespace {

// Each group of type G posts `iters` batches of `batch` WQEs to QP (group index % nqp).
template <int Kind>  // 0 thread, 1 warp, 2 block
__global__ void post_rate_kernel(vg::send_queue const* sqs, int nqp, int iters, int batch, vg::post_flags flags,
                                 int* failures) {
  auto const block = cg::this_thread_block();
  vg::status st = vg::status::ok;
  if constexpr (Kind == 0) {
    if (threadIdx.x != 0) return;
    vg::send_queue const sq = sqs[blockIdx.x % nqp];
    for (int i = 0; i < iters; ++i) {
      bool const last = i == iters - 1;
      vg::status const s = sq.post(gpucomm::single_thread{}, 1, batch, verbs_bench::write_builder{},
                                   last ? vg::post_flags::none : flags);
      if (s != vg::status::ok) st = s;
    }
  } else if constexpr (Kind == 1) {
    auto const warp = cg::tiled_partition<32>(block);
    int const gw = static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) / 32);
    vg::send_queue const sq = sqs[gw % nqp];
    for (int i = 0; i < iters; ++i) {
      bool const last = i == iters - 1;
      vg::status const s = sq.post(warp, 1, batch, verbs_bench::write_builder{}, last ? vg::post_flags::none : flags);
      if (s != vg::status::ok) st = s;
    }
  } else {
    vg::send_queue const sq = sqs[blockIdx.x % nqp];
    for (int i = 0; i < iters; ++i) {
      bool const last = i == iters - 1;
      vg::status const s = sq.post(block, 1, batch, verbs_bench::write_builder{}, last ? vg::post_flags::none : flags);
      if (s != vg::status::ok) st = s;
    }
  }
  if (st != vg::status::ok) atomicAdd(failures, 1);
}

// One thread: post one WQE and ring, timing reserve -> doorbell store with %globaltimer.
__global__ void latency_kernel(vg::send_queue sq, int iters, unsigned long long* ns) {
  for (int i = 0; i < iters; ++i) {
    unsigned long long const t0 = verbs_bench::globaltimer();
    sq.post(gpucomm::single_thread{}, 1, 1, verbs_bench::write_builder{});
    ns[i] = verbs_bench::globaltimer() - t0;
  }
}

struct mapped_block {
  void* host = nullptr;
  void* dev = nullptr;
  explicit mapped_block(std::size_t n, int fill) {
    CK(cudaHostAlloc(&host, n, cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(host, fill, n);
    CK(cudaHostGetDevicePointer(&dev, host, 0));
  }
  ~mapped_block() { cudaFreeHost(host); }
};

struct bench_qp {
  void* ring = nullptr;
  void* counters = nullptr;
  std::unique_ptr<mapped_block> misc;
  vg::send_queue sq{};
  bench_qp(vm::nic& n, std::uint32_t pd, std::uint32_t log_depth) {
    CK(cudaMalloc(&ring, std::size_t{64} << log_depth));
    CK(cudaMemset(ring, 0, std::size_t{64} << log_depth));
    CK(cudaMalloc(&counters, sizeof(vg::qp_counters)));
    CK(cudaMemset(counters, 0, sizeof(vg::qp_counters)));
    misc = std::make_unique<mapped_block>(4096, 0);
    auto* h = static_cast<unsigned char*>(misc->host);
    auto* d = static_cast<unsigned char*>(misc->dev);
    std::memset(h + 256, 0xff, 64);  // the collapsed CQE: INVALID
    std::uint32_t const cqn = n.create_cq(vm::cq_config{vg::cq_mode::collapsed, reinterpret_cast<vg::cqe64*>(h + 256),
                                                        0, reinterpret_cast<std::uint32_t*>(h + 64)});
    std::uint32_t const qpn = n.create_qp(vm::qp_config{pd, static_cast<std::byte*>(ring), log_depth,
                                                        reinterpret_cast<std::uint32_t*>(h) + vg::dbr_snd,
                                                        reinterpret_cast<std::uint64_t*>(h + 128), cqn, 0});
    sq.ring = static_cast<std::byte*>(ring);
    sq.log_depth = log_depth;
    sq.qpn = qpn;
    sq.dbrec = reinterpret_cast<std::uint32_t*>(d) + vg::dbr_snd;
    sq.doorbell = reinterpret_cast<std::uint64_t*>(d + 128);
    sq.counters = static_cast<vg::qp_counters*>(counters);
    sq.cq = vg::completion_queue{reinterpret_cast<vg::cqe64*>(d + 256), reinterpret_cast<std::uint32_t*>(d + 64), 0,
                                 vg::cq_mode::collapsed, cqn};
    // The doorbell record is in mapped host memory: the fences that publish it are system scope
    // (send_queue.cuh; with 97651fb's GPU-scope fence before the doorbell, gpu here was wrong).
    sq.scope = vg::nic_scope::system;
    sq.ring_step = 32;
  }
  ~bench_qp() {
    cudaFree(ring);
    cudaFree(counters);
  }
};

struct result {
  std::string name;
  std::uint64_t wqes;
  double seconds;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <out.json> [device]\n", argv[0]);
    return 1;
  }
  int const dev = argc > 2 ? std::atoi(argv[2]) : 0;
  CK(cudaSetDevice(dev));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, dev));

  vm::nic_config cfg;
  cfg.drain_only = true;
  vm::nic n(cfg);
  std::uint32_t const pd = n.alloc_pd();

  int const sms = prop.multiProcessorCount;
  int const gpu_blocks = sms * 2, gpu_threads = 256;
  int const nqp = gpu_blocks * gpu_threads / 32;  // one QP per warp for the whole-GPU case
  constexpr std::uint32_t log_depth = 13;         // 8192 WQEBBs per QP
  std::vector<std::unique_ptr<bench_qp>> qps;
  std::vector<vg::send_queue> views;
  for (int q = 0; q < nqp; ++q) {
    qps.push_back(std::make_unique<bench_qp>(n, pd, log_depth));
    views.push_back(qps.back()->sq);
  }
  vg::send_queue* d_sqs = nullptr;
  CK(cudaMalloc(&d_sqs, sizeof(vg::send_queue) * views.size()));
  CK(cudaMemcpy(d_sqs, views.data(), sizeof(vg::send_queue) * views.size(), cudaMemcpyHostToDevice));
  int* d_fail = nullptr;
  CK(cudaMalloc(&d_fail, sizeof(int)));
  CK(cudaMemset(d_fail, 0, sizeof(int)));
  n.start();

  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<result> results;
  // Each case posts at most depth/2 WQEBBs per QP per run, so no run waits for completions.
  auto run = [&](char const* name, auto launch, std::uint64_t wqes) {
    std::vector<float> ms;
    for (int rep = 0; rep < 7; ++rep) {
      // Let the drain-only consumer catch up before each timed run.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      CK(cudaEventRecord(e0));
      launch();
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      CK(cudaGetLastError());
      float t = 0;
      CK(cudaEventElapsedTime(&t, e0, e1));
      if (rep > 0) ms.push_back(t);  // first run is warm-up
    }
    std::sort(ms.begin(), ms.end());
    results.push_back({name, wqes, ms[ms.size() / 2] * 1e-3});
    std::printf("%-28s %12.1f M WQE/s\n", name, static_cast<double>(wqes) / (ms[ms.size() / 2] * 1e-3) / 1e6);
  };
  int const depth_half = (1 << log_depth) / 2;
  run(
      "thread_ring_every_wqe", [&] { post_rate_kernel<0><<<1, 32>>>(d_sqs, 1, 1024, 1, vg::post_flags::none, d_fail); },
      1024);
  run(
      "thread_batched_32",
      [&] { post_rate_kernel<0><<<1, 32>>>(d_sqs, 1, 2048, 1, vg::post_flags::defer_doorbell, d_fail); }, 2048);
  run(
      "warp_batch_32",
      [&] { post_rate_kernel<1><<<1, 32>>>(d_sqs, 1, depth_half / 32, 32, vg::post_flags::none, d_fail); }, depth_half);
  run(
      "block_256_batch_256",
      [&] { post_rate_kernel<2><<<1, 256>>>(d_sqs, 1, depth_half / 256, 256, vg::post_flags::none, d_fail); },
      depth_half);
  run(
      "gpu_warps_qp_per_warp",
      [&] {
        post_rate_kernel<1><<<gpu_blocks, gpu_threads>>>(d_sqs, nqp, depth_half / 32, 32, vg::post_flags::none, d_fail);
      },
      static_cast<std::uint64_t>(nqp) * depth_half);

  // Latency: single WQE post to doorbell, one thread.
  constexpr int lat_iters = 2000;
  unsigned long long* d_ns = nullptr;
  CK(cudaMalloc(&d_ns, sizeof(unsigned long long) * lat_iters));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  latency_kernel<<<1, 1>>>(views[0], lat_iters, d_ns);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<unsigned long long> ns(lat_iters);
  CK(cudaMemcpy(ns.data(), d_ns, sizeof(unsigned long long) * lat_iters, cudaMemcpyDeviceToHost));
  std::sort(ns.begin() + 100, ns.end());  // drop the first 100 (warm-up)
  auto const pct = [&](double p) { return ns[100 + static_cast<std::size_t>(p * (lat_iters - 101))]; };
  std::printf("post->doorbell latency: median %llu ns, p99 %llu ns\n", pct(0.5), pct(0.99));
  unsigned long long const host_dbr_median = pct(0.5), host_dbr_p99 = pct(0.99);
  n.stop();

  // The same on a QP the set-up made, with every queue structure in GPU memory.
  verbs_bench::gpu_queue_nic gpu_nic(cfg);
  vm::model_network& net = gpu_nic.network;
  vh::device& nic_device = gpu_nic.device;
  vh::qp_options qopt;
  qopt.log_sq_depth = log_depth;
  vh::qp setup_qp(nic_device, qopt);
  setup_qp.connect(setup_qp.local_info());  // loopback
  vg::send_queue const gpu_sq = setup_qp.send_queue();
  vg::send_queue* d_gpu_sq = nullptr;
  CK(cudaMalloc(&d_gpu_sq, sizeof(vg::send_queue)));
  CK(cudaMemcpy(d_gpu_sq, &gpu_sq, sizeof(vg::send_queue), cudaMemcpyHostToDevice));
  net.data_path().start();
  run(
      "thread_ring_every_wqe_gpu_queues",
      [&] { post_rate_kernel<0><<<1, 32>>>(d_gpu_sq, 1, 1024, 1, vg::post_flags::none, d_fail); }, 1024);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  latency_kernel<<<1, 1>>>(gpu_sq, lat_iters, d_ns);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(ns.data(), d_ns, sizeof(unsigned long long) * lat_iters, cudaMemcpyDeviceToHost));
  std::sort(ns.begin() + 100, ns.end());
  std::printf("post->doorbell latency, queues in GPU memory: median %llu ns, p99 %llu ns\n", pct(0.5), pct(0.99));
  unsigned long long const gpu_median = pct(0.5), gpu_p99 = pct(0.99);
  net.data_path().stop();
  CK(cudaFree(d_gpu_sq));

  int fails = 0;
  CK(cudaMemcpy(&fails, d_fail, sizeof(int), cudaMemcpyDeviceToHost));

  FILE* f = std::fopen(argv[1], "w");
  if (f == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", argv[1]);
    return 1;
  }
  std::fprintf(f, "{\n  \"benchmark\": \"verbs_gpu_posting\",\n  \"device\": \"%s\",\n  \"sms\": %d,\n", prop.name,
               sms);
  std::fprintf(f, "  \"consumer\": \"nic_model drain_only\",\n  \"failed_posts\": %d,\n  \"rate\": [\n", fails);
  for (std::size_t i = 0; i < results.size(); ++i) {
    auto const& r = results[i];
    std::fprintf(f, "    {\"case\": \"%s\", \"wqes\": %llu, \"seconds\": %.9f, \"wqes_per_second\": %.1f}%s\n",
                 r.name.c_str(), static_cast<unsigned long long>(r.wqes), r.seconds, r.wqes / r.seconds,
                 i + 1 < results.size() ? "," : "");
  }
  std::fprintf(f, "  ],\n  \"post_to_doorbell_ns\": {\"median\": %llu, \"p99\": %llu, \"samples\": %d},\n",
               host_dbr_median, host_dbr_p99, lat_iters - 100);
  std::fprintf(f, "  \"post_to_doorbell_ns_gpu_queues\": {\"median\": %llu, \"p99\": %llu, \"samples\": %d}\n}\n",
               gpu_median, gpu_p99, lat_iters - 100);
  std::fclose(f);
  CK(cudaFree(d_ns));
  CK(cudaFree(d_sqs));
  CK(cudaFree(d_fail));
  return fails == 0 ? 0 : 3;
}
