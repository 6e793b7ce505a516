// bench_nccl: NCCL's all_reduce latency the way it is used in low-latency inference, K calls
// captured in a CUDA graph (nccl-tests -G), one process over GPUs 0..npes-1 (ncclCommInitAll),
// float sum; time per call. It stands next to gpucomm's all_reduce case.
//   bench_nccl --case all_reduce --npes 4 --out rows.jsonl [--quick] [--budget-s S]
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "../harness/device_buffer.hpp"
#include "../harness/harness.hpp"

namespace {

constexpr int calls_per_graph = 20;

void check_nccl(ncclResult_t rc, char const* expr, int line) {
  if (rc != ncclSuccess) {
    throw bench::failure(std::string(expr) + " failed: " + ncclGetErrorString(rc) + " at nccl/main.cu:" + std::to_string(line));
  }
}
#define BENCH_NCCL(expr) check_nccl((expr), #expr, __LINE__)

struct communicators {
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
  explicit communicators(int n) {
    std::vector<int> devices;
    for (int d = 0; d < n; ++d) devices.push_back(d);
    comms.resize(static_cast<std::size_t>(n));
    BENCH_NCCL(ncclCommInitAll(comms.data(), n, devices.data()));
    for (int d = 0; d < n; ++d) {
      BENCH_CUDA(cudaSetDevice(d));
      cudaStream_t s = nullptr;
      BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      streams.push_back(s);
    }
  }
  communicators(communicators const&) = delete;
  communicators& operator=(communicators const&) = delete;
  ~communicators() {
    for (std::size_t d = 0; d < streams.size(); ++d) {
      cudaSetDevice(static_cast<int>(d));
      cudaStreamSynchronize(streams[d]);
      cudaStreamDestroy(streams[d]);
    }
    for (auto c : comms)
      if (c) ncclCommDestroy(c);
  }
};

struct graph_exec_deleter {
  void operator()(cudaGraphExec_t g) const { cudaGraphExecDestroy(g); }
};
using graph_exec = std::unique_ptr<std::remove_pointer_t<cudaGraphExec_t>, graph_exec_deleter>;

void all_reduce(bench::session& s) {
  auto const& o = s.opt();
  int const npes = o.npes;
  int count = 0;
  BENCH_CUDA(cudaGetDeviceCount(&count));
  if (count < npes) throw bench::failure("needs " + std::to_string(npes) + " GPUs, " + std::to_string(count) + " visible");
  communicators c(npes);
  constexpr std::size_t max_bytes = 64 * bench::MiB;
  std::vector<bench::device_buffer<float>> in, out;
  for (int d = 0; d < npes; ++d) {
    in.emplace_back(d, max_bytes / sizeof(float));
    out.emplace_back(d, max_bytes / sizeof(float));
  }
  bench::event_timer timer(0);
  std::vector<std::size_t> const sizes =
      o.quick ? std::vector<std::size_t>{8, 64 * bench::KiB, bench::MiB}
              : std::vector<std::size_t>{8, 64, 512, 4 * bench::KiB, 32 * bench::KiB, 64 * bench::KiB, 256 * bench::KiB,
                                         bench::MiB, 4 * bench::MiB, 16 * bench::MiB, 64 * bench::MiB};
  bench::plan plan = bench::latency_plan(o, 25, 10);  // graph launches
  plan.warmup_iters = 2;
  int version = 0;
  BENCH_NCCL(ncclGetVersion(&version));
  for (std::size_t const size : sizes) {
    std::size_t const n = size / sizeof(float);
    bench::row where;
    where.case_name = "all_reduce";
    where.library = "nccl";
    where.transport = "NCCL " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
                      std::to_string(version % 100);
    where.variant = "graph";
    where.npes = npes;
    where.size = size;
    where.metric = "latency";
    where.unit = "us";
    where.note = "ncclAllReduce float sum, " + std::to_string(calls_per_graph) + " calls per CUDA graph";
    s.point(where, [&] {
      for (int d = 0; d < npes; ++d) {
        BENCH_CUDA(cudaSetDevice(d));
        BENCH_CUDA(cudaStreamBeginCapture(c.streams[d], cudaStreamCaptureModeThreadLocal));
      }
      // Capture errors are checked after every stream's capture has ended, so none stays open.
      ncclResult_t captured = ncclSuccess;
      for (int k = 0; k < calls_per_graph && captured == ncclSuccess; ++k) {
        captured = ncclGroupStart();
        for (int d = 0; d < npes && captured == ncclSuccess; ++d)
          captured = ncclAllReduce(in[d].get(), out[d].get(), n, ncclFloat, ncclSum, c.comms[d], c.streams[d]);
        ncclResult_t const ended = ncclGroupEnd();
        if (captured == ncclSuccess) captured = ended;
      }
      std::vector<graph_exec> graphs;
      cudaError_t capture_rc = cudaSuccess;
      for (int d = 0; d < npes; ++d) {
        BENCH_CUDA(cudaSetDevice(d));
        cudaGraph_t graph = nullptr;
        cudaError_t rc = cudaStreamEndCapture(c.streams[d], &graph);
        cudaGraphExec_t exec = nullptr;
        if (rc == cudaSuccess) rc = cudaGraphInstantiate(&exec, graph, 0);
        if (graph) cudaGraphDestroy(graph);
        if (capture_rc == cudaSuccess) capture_rc = rc;
        graphs.emplace_back(exec);
      }
      BENCH_NCCL(captured);
      BENCH_CUDA(capture_rc);
      auto run = [&](int launches) {
        for (int d = npes - 1; d >= 0; --d) {
          BENCH_CUDA(cudaSetDevice(d));
          if (d == 0) timer.start(c.streams[0]);
          for (int l = 0; l < launches; ++l) BENCH_CUDA(cudaGraphLaunch(graphs[static_cast<std::size_t>(d)].get(), c.streams[d]));
          if (d == 0) timer.stop(c.streams[0]);
        }
        std::vector<double> ms{timer.ms()};
        for (int d = 0; d < npes; ++d) {
          BENCH_CUDA(cudaSetDevice(d));
          BENCH_CUDA(cudaStreamSynchronize(c.streams[d]));
        }
        return ms;
      };
      auto value = [](std::vector<double> const& ms, int launches) {
        return bench::us_per_iter(ms[0], launches * calls_per_graph);
      };
      auto const m = bench::measure(plan, s.coll(), run, value);
      bench::row r = where;
      r.value = m.value.median;
      r.min = m.value.min;
      r.max = m.value.max;
      r.iterations = m.iters * calls_per_graph;
      r.repetitions = m.reps;
      return r;
    });
  }
}

}  // namespace

int main(int argc, char** argv) {
  setenv("NCCL_NVLS_ENABLE", "0", 0);  // NVLink multicast stays off
  std::vector<bench::case_entry> const cases{{"all_reduce", all_reduce}};
  int count = 0;
  std::vector<int> devices;
  if (cudaGetDeviceCount(&count) == cudaSuccess)
    for (int d = 0; d < count; ++d) devices.push_back(d);
  return bench::run_main(argc, argv, "nccl", cases, {}, /*writer=*/true, devices);
}
