#pragma once
// What gpucomm's cases share: the calling-group scopes, the world they run in, and the case entry
// points. Every case is a template on the transport, so another transport is one more
// instantiation in main.cu (comm<Transport> is the only thing the kernels use).

#include <gpucomm/gpucomm.cuh>

#include <cooperative_groups.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "../harness/device.cuh"
#include "../harness/device_buffer.hpp"
#include "../harness/harness.hpp"
#include "../harness/scope.cuh"

namespace gpucomm_bench {

namespace cg = cooperative_groups;

using bench::all_scopes;
using bench::group_index;
using bench::group_threads;
using bench::name;
using bench::scope;
using bench::with_scope;

#if defined(__CUDACC__)
/// The calling group of scope S, for the calling thread.
template <scope S>
__device__ auto make_group() {
  if constexpr (S == scope::thread)
    return gpucomm::this_thread();
  else if constexpr (S == scope::warp)
    return cg::tiled_partition<32>(cg::this_thread_block());
  else
    return cg::this_thread_block();
}

/// The calling group, given staging in shared memory where the transport takes one (P2PCopy), for
/// kernels whose CTA is one group (the latency cases): without it P2PCopy's put from global memory
/// would be the group's own stores.
template <class Transport, class G>
__device__ auto with_cta_staging(G const& g) {
  if constexpr (requires { typename Transport::staging; }) {
    __shared__ typename Transport::staging stages;
    return gpucomm::with_staging(g, stages);
  } else {
    return g;
  }
}
#endif

/// A single-process world of npes PEs, PE i on GPU i % (visible GPUs), with a heap big enough
/// for the 1 GiB points. With fewer GPUs than PEs, PEs share GPUs: such figures are smoke only
/// (the PEs compete for one GPU's SMs and memory), and the run says so on stderr.
inline gpucomm::world make_world(int npes, std::size_t heap_bytes) {
  int count = 0;
  BENCH_CUDA(cudaGetDeviceCount(&count));
  if (count < 1) throw bench::failure("no GPU is visible");
  if (count < npes) {
    std::fprintf(stderr, "bench: smoke: %d PEs share %d GPU(s); figures are not comparable with one PE per GPU\n", npes,
                 count);
  }
  std::vector<int> devices;
  for (int d = 0; d < npes; ++d) devices.push_back(d % count);
  gpucomm::world_options o;
  o.heap_bytes = heap_bytes;
  return gpucomm::world(devices, o);
}

struct graph_exec_deleter {
  void operator()(cudaGraphExec_t g) const { cudaGraphExecDestroy(g); }
};
using graph_exec = std::unique_ptr<std::remove_pointer_t<cudaGraphExec_t>, graph_exec_deleter>;

/// `body()` captured thread-local on `stream` (of `device`) and instantiated; the capture is ended
/// on every path, so a launch that throws inside it leaves the stream usable.
template <class Body>
graph_exec capture(int device, cudaStream_t stream, Body&& body) {
  BENCH_CUDA(cudaSetDevice(device));
  BENCH_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    body();
  } catch (...) {
    cudaGraph_t g = nullptr;
    cudaSetDevice(device);
    cudaStreamEndCapture(stream, &g);
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    throw;
  }
  cudaGraph_t graph = nullptr;
  cudaError_t const launched = cudaGetLastError();
  BENCH_CUDA(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  cudaError_t const inst = launched == cudaSuccess ? cudaGraphInstantiate(&exec, graph, 0) : launched;
  cudaGraphDestroy(graph);
  BENCH_CUDA(inst);
  return graph_exec(exec);
}

/// One graph per PE of the world: `calls` calls of issue(pe, stream) captured on its stream.
template <class Issue>
std::vector<graph_exec> capture_calls(gpucomm::world& w, int calls, Issue&& issue) {
  std::vector<graph_exec> graphs;
  for (int pe = 0; pe < w.npes(); ++pe) {
    graphs.push_back(capture(w.device(pe), w.stream(pe), [&] {
      for (int call = 0; call < calls; ++call) issue(pe, w.stream(pe));
    }));
  }
  return graphs;
}

/// Launches every PE's graph `launches` times on its stream, PE 0 last and timed between events
/// (the others are already waiting for it), and waits for all: PE 0's milliseconds.
inline std::vector<double> replay_timed(gpucomm::world& w, bench::event_timer& timer,
                                        std::vector<graph_exec> const& graphs, int launches) {
  for (int pe = w.npes() - 1; pe >= 0; --pe) {
    BENCH_CUDA(cudaSetDevice(w.device(pe)));
    if (pe == 0) timer.start(w.stream(0));
    for (int l = 0; l < launches; ++l)
      BENCH_CUDA(cudaGraphLaunch(graphs[static_cast<std::size_t>(pe)].get(), w.stream(pe)));
    if (pe == 0) timer.stop(w.stream(0));
  }
  std::vector<double> ms{timer.ms()};
  w.synchronize();
  return ms;
}

/// The case name of Transport's rows: NVLinkStore's are the plain case ("put_bw"), another
/// transport's a case of its own ("p2pcopy_put_bw", "proxyqueue_put_bw"), so that summaries never
/// mix them.
template <class Transport>
std::string case_for(char const* base) {
  if constexpr (std::is_same_v<Transport, gpucomm::NVLinkStore>) {
    return base;
  } else {
    std::string prefix;
    for (char const* c = Transport::name; *c; ++c)
      prefix += static_cast<char>(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
    return prefix + "_" + base;
  }
}

/// A row with the fields every gpucomm row shares.
template <class Transport>
bench::row base_row(std::string const& case_name, int npes) {
  bench::row r;
  r.case_name = case_name;
  r.library = "gpucomm";
  r.transport = Transport::name;
  r.npes = npes;
  return r;
}

/// The allreduce algorithm the run asks for: automatic, or GPUCOMM_BENCH_COLL_ALGO's (packets,
/// one_shot, two_shot), to place the automatic choice's crossovers by hand. collectives.cu and
/// fused.cu both read the knob here.
inline gpucomm::allreduce_algorithm forced_allreduce() {
  char const* v = std::getenv("GPUCOMM_BENCH_COLL_ALGO");
  std::string const a = v ? v : "";
  if (a == "packets") return gpucomm::allreduce_algorithm::packets;
  if (a == "one_shot") return gpucomm::allreduce_algorithm::one_shot;
  if (a == "two_shot") return gpucomm::allreduce_algorithm::two_shot;
  if (!a.empty() && a != "automatic")
    throw bench::failure("GPUCOMM_BENCH_COLL_ALGO=" + a + ": automatic, packets, one_shot or two_shot");
  return gpucomm::allreduce_algorithm::automatic;
}

/// Calls f.template operator()<A>() with A the run's allreduce algorithm (forced_allreduce()) as a
/// template argument. A form without two_shot passes TwoShot = false and names itself in `form`:
/// two_shot is then refused with a failure saying what the form takes, and f is never
/// instantiated with it (allreduce_rows static_asserts against two_shot).
template <bool TwoShot = true, class F>
void with_allreduce_algorithm(F&& f, char const* form = "allreduce") {
  switch (forced_allreduce()) {
    case gpucomm::allreduce_algorithm::packets:
      return f.template operator()<gpucomm::allreduce_algorithm::packets>();
    case gpucomm::allreduce_algorithm::one_shot:
      return f.template operator()<gpucomm::allreduce_algorithm::one_shot>();
    case gpucomm::allreduce_algorithm::two_shot:
      if constexpr (TwoShot)
        return f.template operator()<gpucomm::allreduce_algorithm::two_shot>();
      else
        throw bench::failure(std::string("GPUCOMM_BENCH_COLL_ALGO=two_shot: ") + form +
                             " has no two_shot; it takes automatic, packets or one_shot");
    default:
      return f.template operator()<gpucomm::allreduce_algorithm::automatic>();
  }
}

// Case entry points (bw.cu, latency.cu, sync.cu).
template <class Transport>
void put_bw(bench::session&);
template <class Transport>
void get_bw(bench::session&);
template <class Transport>
void put_latency(bench::session&);
template <class Transport>
void p_latency(bench::session&);
template <class Transport>
void atomic_latency(bench::session&);
template <class Transport>
void atomic_rate(bench::session&);
template <class Transport>
void put_signal_pingpong(bench::session&);
template <class Transport>
void barrier_latency(bench::session&);
template <class Transport>
void all_reduce(bench::session&);
// The device collectives through their host launchers, next to NCCL's (collectives.cu).
void allreduce(bench::session&);
void allgather(bench::session&);
void alltoall(bench::session&);
void reduce_scatter(bench::session&);
void alltoallv(bench::session&);
void allreduce_rmsnorm(bench::session&);
void p2pcopy_put_bw(bench::session&);   // P2PCopy alone (p2p_bw.cu)
void proxyqueue_ring(bench::session&);  // ProxyQueue alone (proxy.cu)
void proxyqueue_command_rate(bench::session&);

}  // namespace gpucomm_bench
