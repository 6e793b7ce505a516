// Completion latencies and atomic rate, PE 0 -> PE 1, with NVSHMEM's perftest semantics:
//   put_latency     1 CTA; the group (thread, warp or 1024-thread block) does put_nbi + quiet per
//                   iteration; time per iteration.
//   p_latency       1 CTA of 512 threads; each thread stores its share of `size` bytes of ints to
//                   the peer (gpucomm has no `p`: a single-element store through comm::remote is
//                   what `p` is on a load/store transport), then quiet(block); time per iteration.
//   atomic_latency  1 thread; fetching ops back to back (each waits for its value), one quiet at
//                   the end; non-fetching ops as op + quiet per iteration; uint64.
//   atomic_rate     C CTAs x 1024 threads, each a non-fetching uint64 add per element per
//                   iteration (shmem_atomic_bw -a inc), grid barrier per iteration, quiet at the end;
//                   millions of atomics per second.
#include "common.cuh"

namespace gpucomm_bench {
namespace {

template <class Transport, scope S>
__global__ void __launch_bounds__(1024, 1)
    put_latency_kernel(gpucomm::comm<Transport> c, gpucomm::sym_ptr<std::byte> buf, std::size_t n, int peer,
                       int iters) {
  auto const g = make_group<S>();
  for (int i = 0; i < iters; ++i) {
    c.put_nbi(g, buf, buf.get(), n, peer);
    c.quiet(g);
  }
}

template <class Transport>
__global__ void __launch_bounds__(1024, 1)
    p_latency_kernel(gpucomm::comm<Transport> c, gpucomm::sym_ptr<int> buf, std::size_t n, int peer, int iters) {
  auto const block = cg::this_thread_block();
  int* const remote = c.remote(buf, peer);
  for (int i = 0; i < iters; ++i) {
    for (std::size_t j = threadIdx.x; j < n; j += blockDim.x) remote[j] = static_cast<int>(j) + i;
    c.quiet(block);
  }
}

enum class amo { fetch_add, fetch, compare_swap, swap, add, set };
constexpr amo all_amos[] = {amo::fetch_add, amo::fetch, amo::compare_swap, amo::swap, amo::add, amo::set};
constexpr char const* amo_name(amo a) {
  switch (a) {
    case amo::fetch_add:
      return "fetch_add";
    case amo::fetch:
      return "fetch";
    case amo::compare_swap:
      return "compare_swap";
    case amo::swap:
      return "swap";
    case amo::add:
      return "add";
    case amo::set:
      return "set";
  }
  return "?";
}
__host__ __device__ constexpr bool fetching(amo a) { return a != amo::add && a != amo::set; }

template <class Transport, amo A>
__global__ void atomic_latency_kernel(gpucomm::comm<Transport> c, gpucomm::sym_ptr<std::uint64_t> word, int peer,
                                      int iters, std::uint64_t* sink) {
  auto const me = gpucomm::this_thread();
  std::uint64_t acc = 0;
  for (int i = 0; i < iters; ++i) {
    auto const v = static_cast<std::uint64_t>(i);
    if constexpr (A == amo::fetch_add)
      acc += c.fetch_add(me, word, std::uint64_t{1}, peer);
    else if constexpr (A == amo::fetch)
      acc += c.fetch(me, word, peer);
    else if constexpr (A == amo::compare_swap)
      acc += c.compare_swap(me, word, v, v + 1, peer);
    else if constexpr (A == amo::swap)
      acc += c.swap(me, word, v, peer);
    else if constexpr (A == amo::add)
      c.add(me, word, std::uint64_t{1}, peer);
    else
      c.set(me, word, v, peer);
    if constexpr (!fetching(A)) c.quiet(me);
  }
  if constexpr (fetching(A)) c.quiet(me);
  bench::keep(acc, sink, iters < 0);
}

template <class Transport>
__global__ void __launch_bounds__(1024, 1)
    atomic_rate_kernel(gpucomm::comm<Transport> c, gpucomm::sym_ptr<std::uint64_t> words, std::size_t n, int peer,
                       int iters, unsigned* counter) {
  auto const me = gpucomm::this_thread();
  std::size_t const first = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  std::size_t const stride = std::size_t{gridDim.x} * blockDim.x;
  for (int i = 0; i < iters; ++i) {
    for (std::size_t j = first; j < n; j += stride)
      c.add(me, words + static_cast<std::ptrdiff_t>(j), std::uint64_t{1}, peer);
    bench::grid_barrier(counter, static_cast<unsigned>(i + 1) * gridDim.x);
  }
  c.quiet(me);
}

/// One timed launch on PE 0 (the other PE idles), as the one-sided latency tests do.
struct pe0_runner {
  gpucomm::world& w;
  bench::event_timer& timer;
  template <class Launch>
  std::vector<double> operator()(Launch&& launch) {
    BENCH_CUDA(cudaSetDevice(w.device(0)));
    timer.start(w.stream(0));
    launch(w.stream(0));
    BENCH_CUDA(cudaGetLastError());
    timer.stop(w.stream(0));
    return {timer.ms()};
  }
};

auto const latency_value = [](std::vector<double> const& ms, int iters) { return bench::us_per_iter(ms[0], iters); };

}  // namespace

/// `store_path_bytes`: ProxyQueue's proxy_options::store_path_bytes (-1: its default).
template <class Transport>
void put_latency_with(bench::session& s, long long store_path_bytes) {
  auto const& o = s.opt();
  constexpr std::size_t max_size = 64 * bench::KiB;  // NVSHMEM's -e 64K
  gpucomm::world w = make_world(2, 64 * bench::MiB);
  if constexpr (std::is_same_v<Transport, gpucomm::ProxyQueue>)
    w.configure<gpucomm::ProxyQueue>({.store_path_bytes = store_path_bytes});
  auto buf = w.alloc<std::byte>(max_size);
  bench::event_timer timer(w.device(0));
  w.barrier();
  pe0_runner launch0{w, timer};
  bench::plan const plan = bench::latency_plan(o, 200, 100);  // NVSHMEM's -n 200 -w 20
  for (scope const sc : all_scopes) {
    int const threads = bench::latency_threads(sc);
    for (std::size_t const size : bench::geometric(4, max_size, o.quick ? 4 : 2)) {
      bench::row where = base_row<Transport>(case_for<Transport>("put_latency"), 2);
      where.variant = store_path_bytes == 0 ? "put_nbi+quiet, store path off" : "put_nbi+quiet";
      where.scope = name(sc);
      where.ctas = 1;
      where.threads = threads;
      where.size = size;
      where.metric = "latency";
      where.unit = "us";
      s.point(where, [&] {
        auto const m = with_scope(sc, [&]<scope S>() {
          auto run = [&](int iters) {
            return launch0([&](cudaStream_t st) {
              put_latency_kernel<Transport, S><<<1, threads, 0, st>>>(w.comm<Transport>(0), buf.ptr(0), size, 1, iters);
            });
          };
          return bench::measure(plan, s.coll(), run, latency_value);
        });
        return finish(where, m);
      });
    }
  }
}

/// ProxyQueue's put_latency runs twice: with its store path (the default: small puts are the
/// group's stores) and with it off (every put a command to the proxy), which shows where the two
/// paths cross (proxy_options::store_path_bytes).
template <class Transport>
void put_latency(bench::session& s) {
  if constexpr (std::is_same_v<Transport, gpucomm::ProxyQueue>) {
    put_latency_with<Transport>(s, -1);
    put_latency_with<Transport>(s, 0);
  } else {
    put_latency_with<Transport>(s, -1);
  }
}

template <class Transport>
void p_latency(bench::session& s) {
  auto const& o = s.opt();
  constexpr std::size_t max_size = 64 * bench::KiB;  // NVSHMEM's -e 64K -t 512
  constexpr int threads = 512;
  gpucomm::world w = make_world(2, 64 * bench::MiB);
  auto buf = w.alloc<int>(max_size / sizeof(int));
  bench::event_timer timer(w.device(0));
  w.barrier();
  pe0_runner launch0{w, timer};
  bench::plan const plan = bench::latency_plan(o, 200, 100);
  for (std::size_t const size : bench::geometric(4, max_size, o.quick ? 4 : 2)) {
    bench::row where = base_row<Transport>("p_latency", 2);
    where.variant = "p+quiet";
    where.scope = "block";
    where.ctas = 1;
    where.threads = threads;
    where.size = size;
    where.metric = "latency";
    where.unit = "us";
    where.note = "p = one int stored through comm::remote per element";
    s.point(where, [&] {
      auto run = [&](int iters) {
        return launch0([&](cudaStream_t st) {
          p_latency_kernel<Transport>
              <<<1, threads, 0, st>>>(w.comm<Transport>(0), buf.ptr(0), size / sizeof(int), 1, iters);
        });
      };
      return finish(where, bench::measure(plan, s.coll(), run, latency_value));
    });
  }
}

template <class Transport>
void atomic_latency(bench::session& s) {
  auto const& o = s.opt();
  gpucomm::world w = make_world(2, 64 * bench::MiB);
  auto word = w.alloc<std::uint64_t>(1);
  bench::device_buffer<std::uint64_t> sink(w.device(0), 1);
  bench::event_timer timer(w.device(0));
  w.barrier();
  pe0_runner launch0{w, timer};
  bench::plan const plan = bench::latency_plan(o, 500, 200);
  for (amo const a : all_amos) {
    bench::row where = base_row<Transport>("atomic_latency", 2);
    where.variant = amo_name(a);
    where.scope = "thread";
    where.ctas = 1;
    where.threads = 1;
    where.size = 8;
    where.metric = "latency";
    where.unit = "us";
    where.note =
        fetching(a) ? "fetching: back to back, one quiet at the end" : "non-fetching: op + quiet per iteration";
    s.point(where, [&] {
      auto run = [&](int iters) {
        return launch0([&](cudaStream_t st) {
          auto const c = w.comm<Transport>(0);
          switch (a) {
            case amo::fetch_add:
              atomic_latency_kernel<Transport, amo::fetch_add><<<1, 1, 0, st>>>(c, word.ptr(0), 1, iters, sink.get());
              break;
            case amo::fetch:
              atomic_latency_kernel<Transport, amo::fetch><<<1, 1, 0, st>>>(c, word.ptr(0), 1, iters, sink.get());
              break;
            case amo::compare_swap:
              atomic_latency_kernel<Transport, amo::compare_swap>
                  <<<1, 1, 0, st>>>(c, word.ptr(0), 1, iters, sink.get());
              break;
            case amo::swap:
              atomic_latency_kernel<Transport, amo::swap><<<1, 1, 0, st>>>(c, word.ptr(0), 1, iters, sink.get());
              break;
            case amo::add:
              atomic_latency_kernel<Transport, amo::add><<<1, 1, 0, st>>>(c, word.ptr(0), 1, iters, sink.get());
              break;
            case amo::set:
              atomic_latency_kernel<Transport, amo::set><<<1, 1, 0, st>>>(c, word.ptr(0), 1, iters, sink.get());
              break;
          }
        });
      };
      return finish(where, bench::measure(plan, s.coll(), run, latency_value));
    });
  }
}

template <class Transport>
void atomic_rate(bench::session& s) {
  auto const& o = s.opt();
  constexpr int threads = 1024;
  constexpr std::size_t max_size = 512 * bench::KiB;
  gpucomm::world w = make_world(2, 64 * bench::MiB);
  auto words = w.alloc<std::uint64_t>(max_size / 8);
  bench::device_buffer<unsigned> counter(w.device(0), 1);
  bench::event_timer timer(w.device(0));
  w.barrier();
  pe0_runner launch0{w, timer};
  bench::plan const plan = bench::bandwidth_plan(o);
  int const resident = bench::max_resident_ctas(atomic_rate_kernel<Transport>, threads, w.device(0));
  for (int const ctas : o.quick ? std::vector<int>{4} : std::vector<int>{1, 4, 32}) {
    if (ctas > resident) continue;
    for (std::size_t const size :
         o.quick ? std::vector<std::size_t>{64 * bench::KiB} : bench::geometric(8 * bench::KiB, max_size, 4)) {
      std::size_t const n = size / 8;
      bench::row where = base_row<Transport>("atomic_rate", 2);
      where.variant = "add";
      where.scope = "thread";
      where.ctas = ctas;
      where.threads = threads;
      where.size = size;
      where.metric = "rate";
      where.unit = "Mops/s";
      where.grid_barrier = true;
      s.point(where, [&] {
        auto run = [&](int iters) {
          counter.zero(w.stream(0));
          return launch0([&](cudaStream_t st) {
            atomic_rate_kernel<Transport>
                <<<ctas, threads, 0, st>>>(w.comm<Transport>(0), words.ptr(0), n, 1, iters, counter.get());
          });
        };
        auto value = [&](std::vector<double> const& ms, int iters) {
          return ms[0] > 0 ? n * iters / (ms[0] * 1e3) : 0.0;
        };
        return finish(where, bench::measure(plan, s.coll(), run, value));
      });
    }
  }
}

template void put_latency<gpucomm::NVLinkStore>(bench::session&);
template void put_latency<gpucomm::ProxyQueue>(bench::session&);
template void p_latency<gpucomm::NVLinkStore>(bench::session&);
template void atomic_latency<gpucomm::NVLinkStore>(bench::session&);
template void atomic_rate<gpucomm::NVLinkStore>(bench::session&);

}  // namespace gpucomm_bench
