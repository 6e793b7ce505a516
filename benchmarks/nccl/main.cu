// bench_nccl: NCCL's all_reduce latency the way it is used in low-latency inference, K calls
// captured in a CUDA graph (nccl-tests -G), one process over GPUs 0..npes-1 (ncclCommInitAll),
// float sum; time per call. It stands next to gpucomm's all_reduce case.
//
// Capture follows nccl-tests: uncaptured warm-up calls first (NCCL sets up connections and
// per-size resources on first use, with calls a capturing thread may not make; captured with no
// warm-up, every size failed with cudaErrorStreamCaptureUnsupported), then one thread-local
// capture per GPU's stream, the per-GPU calls of each all-reduce in one ncclGroupStart/End.
//   bench_nccl --case all_reduce --npes 4 --out rows.jsonl [--quick] [--budget-s S]
// The collective cases allreduce, allgather, alltoall, reduce_scatter (float32 sum; allreduce also
// bf16) follow nccl-tests' semantics (harness/collectives.cuh: size = the buffer nccl-tests counts,
// algbw, busbw), next to gpucomm's cases of the same names; alltoall is ncclAlltoAll (NCCL >= 2.28,
// else nccl-tests' ncclSend/ncclRecv group). With fewer GPUs than --npes they write one skipped row
// each: NCCL cannot put two ranks on one GPU.
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "../harness/collectives.cuh"
#include "../harness/device_buffer.hpp"
#include "../harness/harness.hpp"

namespace {

constexpr int calls_per_graph = 20;

void check_nccl(ncclResult_t rc, char const* expr, int line) {
  if (rc != ncclSuccess) {
    throw bench::failure(std::string(expr) + " failed: " + ncclGetErrorString(rc) +
                         " at nccl/main.cu:" + std::to_string(line));
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

std::string cuda_text(cudaError_t rc) {
  return std::string(cudaGetErrorName(rc)) + " (" + cudaGetErrorString(rc) + ")";
}

/// One float-sum all-reduce of `n` elements on every GPU, the per-GPU calls in one NCCL group (one
/// thread drives all GPUs, so without the group the first call would wait for the others). The
/// group is always closed, even when a call in it fails.
ncclResult_t grouped_all_reduce(communicators const& c, std::vector<bench::device_buffer<float>> const& in,
                                std::vector<bench::device_buffer<float>> const& out, std::size_t n) {
  if (ncclResult_t const rc = ncclGroupStart(); rc != ncclSuccess) return rc;
  ncclResult_t rc = ncclSuccess;
  for (std::size_t d = 0; d < c.comms.size() && rc == ncclSuccess; ++d)
    rc = ncclAllReduce(in[d].get(), out[d].get(), n, ncclFloat, ncclSum, c.comms[d], c.streams[d]);
  ncclResult_t const ended = ncclGroupEnd();
  return rc != ncclSuccess ? rc : ended;
}

void synchronize(communicators const& c) {
  for (std::size_t d = 0; d < c.streams.size(); ++d) {
    BENCH_CUDA(cudaSetDevice(static_cast<int>(d)));
    BENCH_CUDA(cudaStreamSynchronize(c.streams[d]));
  }
}

/// Stream captures on every GPU's stream, ended on every path out (the destructor ends what is
/// still open): a capture left open would fail every later call on that stream, and would keep
/// forbidding this thread's unsafe calls (cudaMalloc, synchronisation) for the rest of the process.
class multi_capture {
 public:
  explicit multi_capture(std::vector<cudaStream_t> const& streams) : streams_(streams), open_(streams.size(), false) {}
  multi_capture(multi_capture const&) = delete;
  multi_capture& operator=(multi_capture const&) = delete;
  ~multi_capture() {
    for (std::size_t d = 0; d < streams_.size(); ++d) {
      if (!open_[d]) continue;
      cudaSetDevice(static_cast<int>(d));
      cudaGraph_t g = nullptr;
      cudaStreamEndCapture(streams_[d], &g);
      if (g) cudaGraphDestroy(g);
    }
  }

  void begin(cudaStreamCaptureMode mode) {
    for (std::size_t d = 0; d < streams_.size(); ++d) {
      BENCH_CUDA(cudaSetDevice(static_cast<int>(d)));
      BENCH_CUDA(cudaStreamBeginCapture(streams_[d], mode));
      open_[d] = true;
    }
  }

  /// Empty while every capture is still active, else which GPU's capture is no longer.
  std::string broken() const {
    for (std::size_t d = 0; d < streams_.size(); ++d) {
      cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
      cudaError_t const rc = cudaStreamIsCapturing(streams_[d], &st);
      if (rc != cudaSuccess) return "cudaStreamIsCapturing on GPU " + std::to_string(d) + ": " + cuda_text(rc);
      if (st == cudaStreamCaptureStatusInvalidated)
        return "the capture on GPU " + std::to_string(d) + " was invalidated";
      if (st == cudaStreamCaptureStatusNone)
        return "the stream of GPU " + std::to_string(d) + " is no longer capturing";
    }
    return {};
  }

  /// Ends every capture, then instantiates each graph; throws, naming the first failure and where,
  /// only after all captures are ended.
  std::vector<graph_exec> end_and_instantiate() {
    std::vector<graph_exec> execs;
    std::string problem;
    for (std::size_t d = 0; d < streams_.size(); ++d) {
      cudaSetDevice(static_cast<int>(d));
      cudaGraph_t g = nullptr;
      cudaError_t rc = cudaStreamEndCapture(streams_[d], &g);
      open_[d] = false;
      if (rc != cudaSuccess && problem.empty())
        problem = "cudaStreamEndCapture on GPU " + std::to_string(d) + ": " + cuda_text(rc);
      cudaGraphExec_t exec = nullptr;
      if (rc == cudaSuccess) {
        rc = cudaGraphInstantiate(&exec, g, 0);
        if (rc != cudaSuccess && problem.empty())
          problem = "cudaGraphInstantiate on GPU " + std::to_string(d) + ": " + cuda_text(rc);
      }
      if (g) cudaGraphDestroy(g);
      execs.emplace_back(exec);
    }
    if (!problem.empty()) throw bench::failure(problem);
    return execs;
  }

 private:
  std::vector<cudaStream_t> streams_;
  std::vector<bool> open_;
};

/// `calls` grouped collectives (`grouped()`: one call on every GPU in one NCCL group) captured into
/// one graph per GPU, as nccl-tests -G does (one capture per GPU's stream). After each call the
/// captures are checked, so an error names the call that broke them.
template <class Grouped>
std::vector<graph_exec> capture_calls(communicators const& c, Grouped&& grouped, char const* what, int calls,
                                      cudaStreamCaptureMode mode) {
  multi_capture cap(c.streams);
  cap.begin(mode);
  for (int k = 0; k < calls; ++k) {
    if (ncclResult_t const rc = grouped(); rc != ncclSuccess) {
      throw bench::failure(std::string(what) + " " + std::to_string(k + 1) + " of " + std::to_string(calls) +
                           " inside the capture: " + ncclGetErrorString(rc) + " (" + ncclGetLastError(c.comms[0]) +
                           ")");
    }
    if (std::string const why = cap.broken(); !why.empty()) {
      throw bench::failure(std::string("after ") + what + " " + std::to_string(k + 1) + " of " + std::to_string(calls) +
                           " inside the capture, " + why);
    }
  }
  return cap.end_and_instantiate();
}

std::vector<graph_exec> capture_all_reduces(communicators const& c, std::vector<bench::device_buffer<float>> const& in,
                                            std::vector<bench::device_buffer<float>> const& out, std::size_t n,
                                            cudaStreamCaptureMode mode) {
  return capture_calls(
      c, [&] { return grouped_all_reduce(c, in, out, n); }, "ncclAllReduce", calls_per_graph, mode);
}

/// Clears what a failed capture left: the streams' work done, this thread's last error reset.
void recover(communicators const& c) {
  for (std::size_t d = 0; d < c.streams.size(); ++d) {
    cudaSetDevice(static_cast<int>(d));
    cudaStreamSynchronize(c.streams[d]);
    cudaGetLastError();
  }
}

char const* mode_name(cudaStreamCaptureMode m) {
  return m == cudaStreamCaptureModeThreadLocal ? "thread-local"
         : m == cudaStreamCaptureModeRelaxed   ? "relaxed"
                                               : "global";
}

void all_reduce(bench::session& s) {
  auto const& o = s.opt();
  int const npes = o.npes;
  int count = 0;
  BENCH_CUDA(cudaGetDeviceCount(&count));
  if (count < npes)
    throw bench::failure("needs " + std::to_string(npes) + " GPUs, " + std::to_string(count) + " visible");
  communicators c(npes);
  constexpr std::size_t max_bytes = 64 * bench::MiB;
  std::vector<bench::device_buffer<float>> in, out;
  for (int d = 0; d < npes; ++d) {
    in.emplace_back(d, max_bytes / sizeof(float));
    out.emplace_back(d, max_bytes / sizeof(float));
  }
  bench::event_timer timer(0);
  std::vector<std::size_t> const sizes = bench::all_reduce_sizes(o.quick, max_bytes);
  bench::plan plan = bench::latency_plan(o, 25, 10);  // graph launches
  plan.warmup_iters = 2;
  int version = 0;
  BENCH_NCCL(ncclGetVersion(&version));
  // Warm-up outside any capture, at the largest and the smallest size, as nccl-tests does: NCCL
  // sets up a communicator's connections (NCCL_RUNTIME_CONNECT, the default since 2.22) and other
  // per-algorithm resources on their first use, with calls that a capturing thread may not make.
  for (std::size_t const size : {sizes.back(), sizes.front()}) {
    BENCH_NCCL(grouped_all_reduce(c, in, out, size / sizeof(float)));
    synchronize(c);
  }
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
    where.note = "ncclAllReduce float sum, " + std::to_string(calls_per_graph) +
                 " calls per CUDA graph (one per GPU, captured thread-local after an uncaptured call at the same size)";
    s.point(where, [&] {
      // An uncaptured call at this size first (nccl-tests' "sync" call): the algorithm and protocol
      // NCCL picks for this size may need connections the warm-up did not set up.
      BENCH_NCCL(grouped_all_reduce(c, in, out, n));
      synchronize(c);
      std::vector<graph_exec> graphs;
      std::string note = where.note;
      try {
        graphs = capture_all_reduces(c, in, out, n, cudaStreamCaptureModeThreadLocal);
      } catch (bench::fatal const&) {
        throw;
      } catch (bench::failure const& first) {
        // An NCCL build that still makes an unsafe call inside the capture: relaxed mode lets this
        // thread make it (it runs eagerly, outside the graph); the graph's contents are the same.
        recover(c);
        try {
          graphs = capture_all_reduces(c, in, out, n, cudaStreamCaptureModeRelaxed);
        } catch (bench::fatal const&) {
          throw;
        } catch (bench::failure const& second) {
          throw bench::failure(std::string(mode_name(cudaStreamCaptureModeThreadLocal)) + " capture: " + first.what() +
                               "; " + mode_name(cudaStreamCaptureModeRelaxed) + " capture: " + second.what());
        }
        note += "; captured in relaxed mode, thread-local capture failed: " + std::string(first.what());
      }
      auto run = [&](int launches) {
        for (int d = npes - 1; d >= 0; --d) {
          BENCH_CUDA(cudaSetDevice(d));
          if (d == 0) timer.start(c.streams[0]);
          for (int l = 0; l < launches; ++l)
            BENCH_CUDA(cudaGraphLaunch(graphs[static_cast<std::size_t>(d)].get(), c.streams[d]));
          if (d == 0) timer.stop(c.streams[0]);
        }
        std::vector<double> ms{timer.ms()};
        synchronize(c);
        return ms;
      };
      auto value = [](std::vector<double> const& ms, int launches) {
        return bench::us_per_iter(ms[0], launches * calls_per_graph);
      };
      auto const m = bench::measure(plan, s.coll(), run, value);
      bench::row r = where;
      r.note = note;
      r.value = m.value.median;
      r.min = m.value.min;
      r.max = m.value.max;
      r.iterations = m.iters * calls_per_graph;
      r.repetitions = m.reps;
      return r;
    });
  }
}

// ---- the collective cases: allreduce, allgather, alltoall, reduce_scatter ------------------------
// nccl-tests' semantics (harness/collectives.cuh), next to gpucomm's cases of the same names; the
// capture as all_reduce's above. Every element of every GPU's result is checked after the
// uncaptured call that precedes each size's capture and again after the timed replays.

namespace coll = bench::coll;

template <class T>
ncclDataType_t nccl_type() {
  if constexpr (std::is_same_v<T, float>)
    return ncclFloat;
  else
    return ncclBfloat16;
}

/// One call of the collective on every GPU, the per-GPU calls in one NCCL group, always closed.
template <class T>
ncclResult_t grouped_collective(communicators const& c, coll::shape const& sh,
                                std::vector<bench::device_buffer<T>> const& src,
                                std::vector<bench::device_buffer<T>> const& dst) {
  if (ncclResult_t const rc = ncclGroupStart(); rc != ncclSuccess) return rc;
  ncclResult_t rc = ncclSuccess;
  ncclDataType_t const type = nccl_type<T>();
  for (std::size_t d = 0; d < c.comms.size() && rc == ncclSuccess; ++d) {
    T const* const x = src[d].get();
    T* const y = dst[d].get();
    switch (sh.kind) {
      case coll::op::allreduce:
        rc = ncclAllReduce(x, y, sh.count, type, ncclSum, c.comms[d], c.streams[d]);
        break;
      case coll::op::allgather:
        rc = ncclAllGather(x, y, sh.count, type, c.comms[d], c.streams[d]);
        break;
      case coll::op::reduce_scatter:
        rc = ncclReduceScatter(x, y, sh.count, type, ncclSum, c.comms[d], c.streams[d]);
        break;
      case coll::op::alltoall:
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
        rc = ncclAlltoAll(x, y, sh.count, type, c.comms[d], c.streams[d]);
#else
        // nccl-tests' alltoall: a send and a receive per peer (itself included) in one group.
        for (int r = 0; r < sh.n && rc == ncclSuccess; ++r) {
          rc = ncclSend(x + r * sh.count, sh.count, type, r, c.comms[d], c.streams[d]);
          if (rc == ncclSuccess) rc = ncclRecv(y + r * sh.count, sh.count, type, r, c.comms[d], c.streams[d]);
        }
#endif
        break;
      case coll::op::alltoallv:
        rc = ncclInvalidUsage;  // NCCL has no alltoallv
        break;
    }
  }
  ncclResult_t const ended = ncclGroupEnd();
  return rc != ncclSuccess ? rc : ended;
}

char const* nccl_call_name(coll::op k) {
  switch (k) {
    case coll::op::allreduce:
      return "ncclAllReduce";
    case coll::op::allgather:
      return "ncclAllGather";
    case coll::op::reduce_scatter:
      return "ncclReduceScatter";
    case coll::op::alltoall:
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
      return "ncclAlltoAll";
#else
      return "ncclSend/ncclRecv alltoall";
#endif
    default:
      return "?";
  }
}

std::string nccl_version_name() {
  int version = 0;
  BENCH_NCCL(ncclGetVersion(&version));
  return "NCCL " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
         std::to_string(version % 100);
}

template <class T>
void collective_sweep(bench::session& s, communicators const& c, coll::op k, std::string const& transport) {
  auto const& o = s.opt();
  int const npes = o.npes;
  std::size_t const max_bytes = coll::max_bytes(o, coll::full_max_bytes, coll::quick_max_bytes);
  coll::shape const biggest = coll::shape_of(k, max_bytes, sizeof(T), npes);
  std::vector<bench::device_buffer<T>> src, dst;
  for (int d = 0; d < npes; ++d) {
    src.emplace_back(d, biggest.send);
    dst.emplace_back(d, biggest.recv);
  }
  bench::event_timer timer(0);
  bench::plan const plan = coll::graph_plan(o);
  std::vector<coll::shape> shapes;
  for (std::size_t const size : coll::sizes(o, max_bytes)) {
    coll::shape const sh = coll::shape_of(k, size, sizeof(T), npes);
    if (sh.count > 0) shapes.push_back(sh);  // less than one element per rank: no point
  }
  if (shapes.empty()) return;
  // Warm-up outside any capture, at the largest and the smallest size (as all_reduce's).
  for (coll::shape const* sh : {&shapes.back(), &shapes.front()}) {
    BENCH_NCCL(grouped_collective(c, *sh, src, dst));
    synchronize(c);
  }
  for (coll::shape const& sh : shapes) {
    int const calls = coll::calls_per_graph(sh.bytes);
    bench::row where;
    where.case_name = coll::name(k);
    where.library = "nccl";
    where.transport = transport;
    where.variant = coll::type_name<T>();
    where.npes = npes;
    where.size = sh.bytes;
    where.metric = "latency";
    where.unit = "us";
    where.note = std::string(nccl_call_name(k)) +
                 (k == coll::op::allreduce || k == coll::op::reduce_scatter ? " sum" : "") + ", out of place, " +
                 std::to_string(calls) +
                 " calls per CUDA graph (one per GPU, captured thread-local after an uncaptured call at the same "
                 "size); time per call; every element checked before and after timing";
    bench::row measured_row;
    bool const done = s.point(where, [&] {
      for (int d = 0; d < npes; ++d) {
        BENCH_CUDA(cudaSetDevice(d));
        coll::fill(src[static_cast<std::size_t>(d)].get(), sh.send, d, c.streams[static_cast<std::size_t>(d)]);
        BENCH_CUDA(cudaMemsetAsync(dst[static_cast<std::size_t>(d)].get(), 0xff, sh.recv * sizeof(T),
                                   c.streams[static_cast<std::size_t>(d)]));
      }
      auto check_all = [&](char const* when) {
        for (int d = 0; d < npes; ++d) {
          BENCH_CUDA(cudaSetDevice(d));
          coll::verify(sh, d, dst[static_cast<std::size_t>(d)].get(), {}, when);
        }
      };
      // The uncaptured call at this size (nccl-tests' "sync" call): the first iteration, checked.
      BENCH_NCCL(grouped_collective(c, sh, src, dst));
      synchronize(c);
      check_all("after the first (uncaptured) call");
      for (int d = 0; d < npes; ++d) {
        BENCH_CUDA(cudaSetDevice(d));
        BENCH_CUDA(cudaMemsetAsync(dst[static_cast<std::size_t>(d)].get(), 0xff, sh.recv * sizeof(T),
                                   c.streams[static_cast<std::size_t>(d)]));
      }
      synchronize(c);
      auto grouped = [&] { return grouped_collective(c, sh, src, dst); };
      std::vector<graph_exec> graphs;
      std::string note = where.note;
      try {
        graphs = capture_calls(c, grouped, nccl_call_name(k), calls, cudaStreamCaptureModeThreadLocal);
      } catch (bench::fatal const&) {
        throw;
      } catch (bench::failure const& first) {
        recover(c);
        graphs = capture_calls(c, grouped, nccl_call_name(k), calls, cudaStreamCaptureModeRelaxed);
        note += "; captured in relaxed mode, thread-local capture failed: " + std::string(first.what());
      }
      auto run = [&](int launches) {
        for (int d = npes - 1; d >= 0; --d) {
          BENCH_CUDA(cudaSetDevice(d));
          if (d == 0) timer.start(c.streams[0]);
          for (int l = 0; l < launches; ++l)
            BENCH_CUDA(
                cudaGraphLaunch(graphs[static_cast<std::size_t>(d)].get(), c.streams[static_cast<std::size_t>(d)]));
          if (d == 0) timer.stop(c.streams[0]);
        }
        std::vector<double> ms{timer.ms()};
        synchronize(c);
        return ms;
      };
      auto value = [calls](std::vector<double> const& ms, int launches) {
        return bench::us_per_iter(ms[0], launches * calls);
      };
      auto const m = bench::measure(plan, s.coll(), run, value);
      check_all("after the timed graph replays");
      bench::row r = bench::finish(where, m);
      r.note = note;
      r.iterations = m.iters * calls;
      measured_row = r;
      return r;
    });
    if (done)
      for (bench::row const& r : coll::bandwidth_rows(measured_row, sh)) s.out().write(r);
  }
}

template <coll::op K>
void collective_case(bench::session& s) {
  auto const& o = s.opt();
  int const npes = o.npes;
  int count = 0;
  BENCH_CUDA(cudaGetDeviceCount(&count));
  std::vector<std::string> variants{coll::type_name<float>()};
  if (K == coll::op::allreduce) variants.push_back(coll::type_name<__nv_bfloat16>());
  if (count < npes) {
    // NCCL puts one rank on a GPU: PEs sharing a GPU (gpucomm's smoke mode) have no NCCL rows.
    for (std::string const& v : variants) {
      bench::row where;
      where.case_name = coll::name(K);
      where.library = "nccl";
      where.variant = v;
      where.npes = npes;
      where.metric = "latency";
      where.unit = "us";
      s.skip(where, "NCCL runs one rank per GPU: " + std::to_string(npes) + " ranks need " + std::to_string(npes) +
                        " GPUs, " + std::to_string(count) +
                        " visible (gpucomm's rows with PEs sharing a GPU are smoke)");
    }
    return;
  }
  if (npes > coll::max_checked_ranks)
    throw bench::failure("at most " + std::to_string(coll::max_checked_ranks) + " ranks (exact reference sums)");
  communicators c(npes);
  std::string const transport = nccl_version_name();
  collective_sweep<float>(s, c, K, transport);
  if constexpr (K == coll::op::allreduce) collective_sweep<__nv_bfloat16>(s, c, K, transport);
}

}  // namespace

int main(int argc, char** argv) {
  setenv("NCCL_NVLS_ENABLE", "0", 0);  // NVLink multicast stays off
  // Connections at ncclCommInitAll rather than on first use, so none is set up inside a capture
  // (the uncaptured warm-up calls cover it too; this only moves set-up time, not call latency).
  setenv("NCCL_RUNTIME_CONNECT", "0", 0);
  std::vector<bench::case_entry> const cases{
      {"all_reduce", all_reduce},
      {"allreduce", collective_case<bench::coll::op::allreduce>},
      {"allgather", collective_case<bench::coll::op::allgather>},
      {"alltoall", collective_case<bench::coll::op::alltoall>},
      {"reduce_scatter", collective_case<bench::coll::op::reduce_scatter>},
  };
  int count = 0;
  std::vector<int> devices;
  if (cudaGetDeviceCount(&count) == cudaSuccess)
    for (int d = 0; d < count; ++d) devices.push_back(d);
  return bench::run_main(argc, argv, "nccl", cases, {}, /*writer=*/true, devices);
}
