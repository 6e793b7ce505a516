// bench_gpucomm: gpucomm's cases on comm<NVLinkStore> (and P2PCopy's: p2pcopy_put_bw,
// p2pcopy_put_signal_pingpong; ProxyQueue's: proxyqueue_put_bw, _get_bw, _put_latency,
// _put_signal_pingpong, _ring, _command_rate), one process over GPUs 0..npes-1.
//   bench_gpucomm --case put_bw --out rows.jsonl [--quick] [--npes N] [--budget-s S]
// Point-to-point cases use PEs 0 and 1; barrier, all_reduce and the device collectives (allreduce,
// allgather, alltoall, reduce_scatter, alltoallv: collectives.cu; allreduce_rmsnorm: fused.cu) use
// --npes PEs.
#include <cstdlib>

#include "common.cuh"

int main(int argc, char** argv) {
  // Before any CUDA call: ProxyQueue's copies must not share a hardware queue with queued kernels
  // (docs/guide/proxyqueue.md#hardware-queues-why-the-world-sets-cuda_device_max_connections).
  gpucomm::request_hardware_queues();
  using T = gpucomm::NVLinkStore;
  namespace gb = gpucomm_bench;
  std::vector<bench::case_entry> const cases{
      {"put_bw", gb::put_bw<T>},
      {"get_bw", gb::get_bw<T>},
      {"put_latency", gb::put_latency<T>},
      {"p_latency", gb::p_latency<T>},
      {"atomic_latency", gb::atomic_latency<T>},
      {"atomic_rate", gb::atomic_rate<T>},
      {"put_signal_pingpong", gb::put_signal_pingpong<T>},
      {"barrier", gb::barrier_latency<T>},
      {"all_reduce", gb::all_reduce<T>},
      {"allreduce", gb::allreduce},
      {"allgather", gb::allgather},
      {"alltoall", gb::alltoall},
      {"reduce_scatter", gb::reduce_scatter},
      {"alltoallv", gb::alltoallv},
      {"allreduce_rmsnorm", gb::allreduce_rmsnorm},
      {"p2pcopy_put_bw", gb::p2pcopy_put_bw},
      {"p2pcopy_put_signal_pingpong", gb::put_signal_pingpong<gpucomm::P2PCopy>},
      {"proxyqueue_put_bw", gb::put_bw<gpucomm::ProxyQueue>},
      {"proxyqueue_get_bw", gb::get_bw<gpucomm::ProxyQueue>},
      {"proxyqueue_put_latency", gb::put_latency<gpucomm::ProxyQueue>},
      {"proxyqueue_put_signal_pingpong", gb::put_signal_pingpong<gpucomm::ProxyQueue>},
      {"proxyqueue_ring", gb::proxyqueue_ring},
      {"proxyqueue_command_rate", gb::proxyqueue_command_rate},
  };
  int count = 0;
  std::vector<int> devices;
  if (cudaGetDeviceCount(&count) == cudaSuccess)
    for (int d = 0; d < count; ++d) devices.push_back(d);
  return bench::run_main(argc, argv, "gpucomm", cases, {}, /*writer=*/true, devices);
}
