// ProxyQueue's own cases, PEs 0 and 1 (the transport's put_bw, get_bw, put_latency and
// put_signal_pingpong rows come from the shared cases, as proxyqueue_*):
//   proxyqueue_ring          the ring alone: one GPU thread posts a command that asks for nothing
//                            (nop) and waits until the proxy reports it complete; the round trip,
//                            GPU -> pinned host ring -> proxy thread -> completion counter in
//                            pinned host memory -> GPU, per iteration.
//   proxyqueue_command_rate  both PEs at once, each from `threads` GPU threads of one CTA: every
//                            thread posts `iters` commands (nop, or a put_nbi of 8 bytes to the
//                            other PE: contiguous, the CTA's k-th put to word k, which the copy
//                            engine backend joins into one copy per batch; or scattered, to word
//                            8k, which it cannot), then the CTA quiets; k counts modulo `slots`,
//                            so no word is put twice within a batch (which the backend would copy
//                            once); commands per second summed over both PEs, with one proxy
//                            thread for the process (per_process) or one per PE (per_pe): the
//                            measurement behind proxy_options::threads' default. The store path
//                            is off: every put is a command.
// With both PEs on one GPU the figures are smoke.
#include "common.cuh"

#include <string>

namespace gpucomm_bench {
namespace {

using gpucomm::ProxyQueue;
namespace pq = gpucomm::proxy_queue;

__global__ void ring_round_trip_kernel(gpucomm::comm<ProxyQueue> c, int iters) {
  pq::command nop;
  nop.op = pq::command_op::nop;
  for (int i = 0; i < iters; ++i) {
    std::uint64_t ticket = 0;
    if (c.state().ring.post(nop, ticket) != pq::ring_status::ok ||
        c.state().ring.wait_complete(ticket) != pq::ring_status::ok)
      __trap();
  }
}

/// Words between neighbouring puts in the scattered variant.
constexpr int scatter = 8;
/// Puts before a word is put again: more than one batch of the proxy's, so that no batch holds a
/// word twice.
constexpr int slots = 8192;

template <bool Put>
__global__ void __launch_bounds__(1024, 1)
    command_rate_kernel(gpucomm::comm<ProxyQueue> c, gpucomm::sym_ptr<std::uint64_t> buf, int stride, int iters) {
  int const peer = 1 - c.my_pe();
  auto const me = gpucomm::this_thread();
  for (int i = 0; i < iters; ++i) {
    if constexpr (Put) {
      auto const k = (static_cast<unsigned>(i) * blockDim.x + threadIdx.x) % slots;
      auto const slot = buf + static_cast<std::ptrdiff_t>(k) * stride;
      c.put_nbi(me, slot, slot.get(), 1, peer);
    } else {
      pq::command nop;
      nop.op = pq::command_op::nop;
      std::uint64_t ticket = 0;
      if (c.state().ring.post(nop, ticket) != pq::ring_status::ok) __trap();
    }
  }
  c.quiet(cg::this_thread_block());
}

}  // namespace

void proxyqueue_ring(bench::session& s) {
  auto const& o = s.opt();
  gpucomm::world w = make_world(2, 64 * bench::MiB);
  w.configure<ProxyQueue>({.threads = gpucomm::proxy_threads::per_process});
  bench::event_timer timer(w.device(0));
  w.barrier();
  bench::row where = base_row<ProxyQueue>("proxyqueue_ring", 2);
  where.variant = "nop round trip";
  where.scope = "thread";
  where.ctas = 1;
  where.threads = 1;
  where.size = 0;
  where.metric = "latency";
  where.unit = "us";
  where.note = "post a nop, wait for its completion: GPU -> host ring -> proxy thread -> GPU";
  s.point(where, [&] {
    auto run = [&](int iters) {
      BENCH_CUDA(cudaSetDevice(w.device(0)));
      timer.start(w.stream(0));
      ring_round_trip_kernel<<<1, 1, 0, w.stream(0)>>>(w.comm<ProxyQueue>(0), iters);
      BENCH_CUDA(cudaGetLastError());
      timer.stop(w.stream(0));
      return std::vector<double>{timer.ms()};
    };
    auto value = [](std::vector<double> const& ms, int iters) { return bench::us_per_iter(ms[0], iters); };
    return bench::finish(where, bench::measure(bench::latency_plan(o, 2000, 500), s.coll(), run, value));
  });
}

void proxyqueue_command_rate(bench::session& s) {
  auto const& o = s.opt();
  for (auto const mode : {gpucomm::proxy_threads::per_process, gpucomm::proxy_threads::per_pe}) {
    gpucomm::world w = make_world(2, 64 * bench::MiB);
    w.configure<ProxyQueue>({.threads = mode, .store_path_bytes = 0});
    auto buf = w.alloc<std::uint64_t>(slots * scatter);
    std::vector<bench::event_timer> timers;
    for (int pe = 0; pe < 2; ++pe) timers.emplace_back(w.device(pe));
    w.barrier();
    // What each thread posts: nops (stride 0), or 8-byte puts to neighbouring (1) or scattered words.
    for (int const stride : {0, 1, scatter}) {
      bool const put = stride != 0;
      for (int const threads : {1, 32, 256}) {
        bench::row where = base_row<ProxyQueue>("proxyqueue_command_rate", 2);
        where.variant = std::string(!put          ? "nop"
                                    : stride == 1 ? "put_nbi 8 B contiguous"
                                                  : "put_nbi 8 B scattered") +
                        "/" + (mode == gpucomm::proxy_threads::per_pe ? "per_pe" : "per_process");
        where.scope = "thread";
        where.ctas = 1;
        where.threads = threads;
        where.size = put ? 8 : 0;
        where.metric = "rate";
        where.unit = "Mcommands/s";
        where.note = "both PEs post at once; summed over the two PEs' rings";
        s.point(where, [&] {
          auto run = [&](int iters) {
            for (int pe = 0; pe < 2; ++pe) {
              BENCH_CUDA(cudaSetDevice(w.device(pe)));
              timers[pe].start(w.stream(pe));
              if (put)
                command_rate_kernel<true>
                    <<<1, threads, 0, w.stream(pe)>>>(w.comm<ProxyQueue>(pe), buf.ptr(pe), stride, iters);
              else
                command_rate_kernel<false>
                    <<<1, threads, 0, w.stream(pe)>>>(w.comm<ProxyQueue>(pe), buf.ptr(pe), stride, iters);
              BENCH_CUDA(cudaGetLastError());
              timers[pe].stop(w.stream(pe));
            }
            return std::vector<double>{timers[0].ms(), timers[1].ms()};
          };
          auto value = [&](std::vector<double> const& ms, int iters) {
            double total = 0;
            for (double const t : ms) total += static_cast<double>(threads) * iters / (t * 1e3);
            return total;
          };
          bench::plan p = bench::bandwidth_plan(o);
          p.target_ms = o.quick ? 5 : 10;
          return bench::finish(where, bench::measure(p, s.coll(), run, value));
        });
      }
    }
  }
}

}  // namespace gpucomm_bench
