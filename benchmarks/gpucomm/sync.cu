// Synchronising cases, all PEs launched together:
//   put_signal_pingpong  PE 0 put_signal(set i) -> PE 1 waits, put_signal back -> PE 0 waits; one
//                        CTA per PE, the group of the given scope does each put_signal and wait;
//                        reported: round trip / 2 (one way), like shmem_put_signal_ping_pong_latency.
//   barrier              1 CTA per PE looping barrier(g) on 2..N PEs; time per barrier.
//   all_reduce           a one-shot float-sum all-reduce built from put_signal (every PE pushes its
//                        vector to every PE, waits for all, sums), K calls captured in a CUDA graph,
//                        timed like NCCL's all_reduce in a graph; time per call.
#include "common.cuh"

#include <memory>
#include <type_traits>

namespace gpucomm_bench {
namespace {

template <class Transport, scope S>
__global__ void __launch_bounds__(1024, 1)
    pingpong_kernel(gpucomm::comm<Transport> c, gpucomm::sym_ptr<std::byte> data, std::size_t n,
                    gpucomm::sym_ptr<gpucomm::signal_t> sig, int iters) {
  auto const g = with_cta_staging<Transport>(make_group<S>());
  int const peer = 1 - c.my_pe();
  for (int i = 1; i <= iters; ++i) {
    auto const v = static_cast<gpucomm::signal_t>(i);
    if (c.my_pe() == 0) {
      c.put_signal(g, data, data.get(), n, sig, v, gpucomm::signal_op::set, peer);
      c.wait_until(g, sig, gpucomm::cmp::ge, v);
    } else {
      c.wait_until(g, sig, gpucomm::cmp::ge, v);
      c.put_signal(g, data, data.get(), n, sig, v, gpucomm::signal_op::set, peer);
    }
  }
}

template <class Transport, scope S>
__global__ void __launch_bounds__(1024, 1) barrier_kernel(gpucomm::comm<Transport> c, int iters) {
  auto const g = make_group<S>();
  for (int i = 0; i < iters; ++i) c.barrier(g);
}

constexpr int allreduce_threads = 1024;
constexpr int calls_per_graph = 20;  // all_reduce calls captured in one CUDA graph

/// One all-reduce call. `inbox` holds 2 x npes slots of n floats (slot parity by call number, so a
/// PE one call ahead never overwrites a slot its peer still reads: it cannot get two calls ahead
/// without that peer's next contribution). `calls` is this PE's local call counter.
template <class Transport>
__global__ void __launch_bounds__(allreduce_threads, 1)
    allreduce_kernel(gpucomm::comm<Transport> c, float const* in, float* out, std::size_t n,
                     gpucomm::sym_ptr<float> inbox, gpucomm::sym_ptr<gpucomm::signal_t> arrived,
                     unsigned long long* calls) {
  auto const block = cg::this_thread_block();
  __shared__ unsigned long long call;
  if (threadIdx.x == 0) call = ++*calls;
  block.sync();
  int const npes = c.npes();
  std::size_t const parity = call & 1;
  auto const slot = [&](int pe) { return inbox + static_cast<std::ptrdiff_t>((parity * npes + pe) * n); };
  for (int pe = 0; pe < npes; ++pe) {
    c.put_signal(block, slot(c.my_pe()), in, n, arrived, gpucomm::signal_t{1}, gpucomm::signal_op::add, pe);
  }
  c.wait_until(block, arrived, gpucomm::cmp::ge, static_cast<gpucomm::signal_t>(npes) * call);
  for (std::size_t i = threadIdx.x; i < n; i += blockDim.x) {
    float sum = 0;
    for (int pe = 0; pe < npes; ++pe) sum += slot(pe)[static_cast<std::ptrdiff_t>(i)];
    out[i] = sum;
  }
}

/// Launch on every PE, PE 0 last and timed (the others are already waiting for it).
template <class Launch>
std::vector<double> launch_all_time_pe0(gpucomm::world& w, bench::event_timer& timer, Launch&& launch) {
  for (int pe = w.npes() - 1; pe >= 0; --pe) {
    BENCH_CUDA(cudaSetDevice(w.device(pe)));
    if (pe == 0) timer.start(w.stream(0));
    launch(pe, w.stream(pe));
    BENCH_CUDA(cudaGetLastError());
    if (pe == 0) timer.stop(w.stream(0));
  }
  std::vector<double> ms{timer.ms()};
  w.synchronize();
  return ms;
}

auto const latency_value = [](std::vector<double> const& ms, int iters) { return bench::us_per_iter(ms[0], iters); };

}  // namespace

template <class Transport>
void put_signal_pingpong(bench::session& s) {
  auto const& o = s.opt();
  constexpr std::size_t max_size = bench::MiB;  // NVSHMEM's -e 1M
  gpucomm::world w = make_world(2, 64 * bench::MiB);
  auto data = w.alloc<std::byte>(max_size);
  auto sig = w.alloc<gpucomm::signal_t>(1);
  bench::event_timer timer(w.device(0));
  w.barrier();
  for (scope const sc : all_scopes) {
    int const threads = bench::latency_threads(sc);
    for (std::size_t const size : bench::geometric(8, max_size, o.quick ? 8 : 2)) {
      bench::plan const plan =
          bench::latency_plan(o, size >= 64 * bench::KiB ? 100 : 500, size >= 64 * bench::KiB ? 50 : 200);
      bench::row where = base_row<Transport>(case_for<Transport>("put_signal_pingpong"), 2);
      where.variant = "set";
      where.scope = name(sc);
      where.ctas = 1;
      where.threads = threads;
      where.size = size;
      where.metric = "one_way_latency";
      where.unit = "us";
      where.note = "round trip / 2";
      s.point(where, [&] {
        auto const m = with_scope(sc, [&]<scope S>() {
          auto run = [&](int iters) {
            // Signals start at 0 on both PEs before either kernel runs.
            for (int pe = 0; pe < 2; ++pe) {
              BENCH_CUDA(cudaSetDevice(w.device(pe)));
              BENCH_CUDA(cudaMemsetAsync(sig.ptr(pe).get(), 0, sizeof(gpucomm::signal_t), w.stream(pe)));
            }
            w.synchronize();
            return launch_all_time_pe0(w, timer, [&](int pe, cudaStream_t st) {
              pingpong_kernel<Transport, S>
                  <<<1, threads, 0, st>>>(w.comm<Transport>(pe), data.ptr(pe), size, sig.ptr(pe), iters);
            });
          };
          auto value = [](std::vector<double> const& ms, int iters) { return bench::us_per_iter(ms[0], iters) / 2; };
          return bench::measure(plan, s.coll(), run, value);
        });
        return finish(where, m);
      });
    }
  }
}

template <class Transport>
void barrier_latency(bench::session& s) {
  auto const& o = s.opt();
  gpucomm::world w = make_world(o.npes, 64 * bench::MiB);
  bench::event_timer timer(w.device(0));
  w.barrier();
  bench::plan const plan = bench::latency_plan(o, 1000, 200);
  for (scope const sc : all_scopes) {
    int const threads = bench::latency_threads(sc);
    bench::row where = base_row<Transport>("barrier", o.npes);
    where.variant = "barrier";
    where.scope = name(sc);
    where.ctas = 1;
    where.threads = threads;
    where.metric = "latency";
    where.unit = "us";
    s.point(where, [&] {
      auto const m = with_scope(sc, [&]<scope S>() {
        auto run = [&](int iters) {
          return launch_all_time_pe0(w, timer, [&](int pe, cudaStream_t st) {
            barrier_kernel<Transport, S><<<1, threads, 0, st>>>(w.comm<Transport>(pe), iters);
          });
        };
        return bench::measure(plan, s.coll(), run, latency_value);
      });
      return finish(where, m);
    });
  }
}

template <class Transport>
void all_reduce(bench::session& s) {
  auto const& o = s.opt();
  int const npes = o.npes;
  constexpr std::size_t max_bytes = 4 * bench::MiB;
  gpucomm::world w = make_world(npes, 256 * bench::MiB);
  std::size_t const max_n = max_bytes / sizeof(float);
  auto inbox = w.alloc<float>(2 * static_cast<std::size_t>(npes) * max_n);
  auto arrived = w.alloc<gpucomm::signal_t>(1);
  std::vector<bench::device_buffer<float>> in, out;
  std::vector<bench::device_buffer<unsigned long long>> calls;
  for (int pe = 0; pe < npes; ++pe) {
    in.emplace_back(w.device(pe), max_n);
    out.emplace_back(w.device(pe), max_n);
    calls.emplace_back(w.device(pe), 1);
  }
  bench::event_timer timer(w.device(0));
  w.barrier();
  std::vector<std::size_t> const sizes = bench::all_reduce_sizes(o.quick, max_bytes);
  bench::plan plan = bench::latency_plan(o, 25, 10);  // graph launches of calls_per_graph calls
  plan.warmup_iters = 2;
  for (std::size_t const size : sizes) {
    std::size_t const n = size / sizeof(float);
    bench::row where = base_row<Transport>("all_reduce", npes);
    where.variant = "graph";
    where.scope = "block";
    where.ctas = 1;
    where.threads = allreduce_threads;
    where.size = size;
    where.metric = "latency";
    where.unit = "us";
    where.note =
        "one-shot put_signal all-reduce (float sum), " + std::to_string(calls_per_graph) + " calls per CUDA graph";
    s.point(where, [&] {
      // Every call adds npes to each PE's counter; start both counters at zero.
      for (int pe = 0; pe < npes; ++pe) {
        BENCH_CUDA(cudaSetDevice(w.device(pe)));
        BENCH_CUDA(cudaMemset(arrived.ptr(pe).get(), 0, sizeof(gpucomm::signal_t)));
        BENCH_CUDA(cudaMemset(calls[pe].get(), 0, sizeof(unsigned long long)));
      }
      w.barrier();
      struct graph_exec_deleter {
        void operator()(cudaGraphExec_t g) const { cudaGraphExecDestroy(g); }
      };
      std::vector<std::unique_ptr<std::remove_pointer_t<cudaGraphExec_t>, graph_exec_deleter>> graphs;
      for (int pe = 0; pe < npes; ++pe) {
        BENCH_CUDA(cudaSetDevice(w.device(pe)));
        cudaStream_t const st = w.stream(pe);
        BENCH_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        for (int k = 0; k < calls_per_graph; ++k) {
          allreduce_kernel<Transport><<<1, allreduce_threads, 0, st>>>(
              w.comm<Transport>(pe), in[pe].get(), out[pe].get(), n, inbox.ptr(pe), arrived.ptr(pe), calls[pe].get());
        }
        cudaGraph_t graph = nullptr;
        cudaError_t const launched = cudaGetLastError();
        BENCH_CUDA(cudaStreamEndCapture(st, &graph));
        BENCH_CUDA(launched);
        cudaGraphExec_t exec = nullptr;
        cudaError_t const inst = cudaGraphInstantiate(&exec, graph, 0);
        cudaGraphDestroy(graph);
        BENCH_CUDA(inst);
        graphs.emplace_back(exec);
      }
      auto run = [&](int launches) {
        return launch_all_time_pe0(w, timer, [&](int pe, cudaStream_t st) {
          for (int l = 0; l < launches; ++l)
            BENCH_CUDA(cudaGraphLaunch(graphs[static_cast<std::size_t>(pe)].get(), st));
        });
      };
      auto value = [](std::vector<double> const& ms, int launches) {
        return bench::us_per_iter(ms[0], launches * calls_per_graph);
      };
      auto const m = bench::measure(plan, s.coll(), run, value);
      bench::row r = finish(where, m);
      r.iterations = m.iters * calls_per_graph;
      return r;
    });
  }
}

template void put_signal_pingpong<gpucomm::NVLinkStore>(bench::session&);
template void put_signal_pingpong<gpucomm::P2PCopy>(bench::session&);
template void put_signal_pingpong<gpucomm::ProxyQueue>(bench::session&);
template void barrier_latency<gpucomm::NVLinkStore>(bench::session&);
template void all_reduce<gpucomm::NVLinkStore>(bench::session&);

}  // namespace gpucomm_bench
