// put_bw and get_bw with NVSHMEM's shmem_put_bw semantics: `size` bytes per iteration for the
// whole grid, split evenly over the grid's groups (CTAs, warps or threads; each share rounded down
// to 8 bytes, NVSHMEM's double elements); a grid barrier after every iteration; one quiet at the
// end; PE 0 -> PE 1 (uni) or both ways at once with the two PEs' GB/s summed (bidir).
#include "common.cuh"

namespace gpucomm_bench {
namespace {

constexpr int threads_per_cta = 1024;  // NVSHMEM's -t 1024
constexpr std::size_t max_size = bench::GiB;

template <class Transport, scope S, bool Get>
__global__ void __launch_bounds__(threads_per_cta, 1)
    bw_kernel(gpucomm::comm<Transport> c, gpucomm::sym_ptr<std::byte> buf, std::size_t chunk, int peer, int iters,
              unsigned* counter) {
  auto const g = make_group<S>();
  std::size_t const offset = group_index<S>() * chunk;
  for (int i = 0; i < iters; ++i) {
    if constexpr (Get) {
      c.get_nbi(g, buf.get() + offset, gpucomm::sym_ptr<std::byte const>(buf + offset), chunk, peer);
    } else {
      c.put_nbi(g, buf + offset, buf.get() + offset, chunk, peer);
    }
    bench::grid_barrier(counter, static_cast<unsigned>(i + 1) * gridDim.x);
  }
  c.quiet(g);
}

template <class Transport>
void bandwidth(bench::session& s, char const* case_name, bool get) {
  auto const& o = s.opt();
  gpucomm::world w = make_world(2, max_size + 64 * bench::MiB);
  auto buf = w.alloc<std::byte>(max_size);
  std::vector<bench::device_buffer<unsigned>> counters;
  std::vector<bench::event_timer> timers;
  for (int pe = 0; pe < 2; ++pe) {
    BENCH_CUDA(cudaSetDevice(w.device(pe)));
    BENCH_CUDA(cudaMemset(buf.ptr(pe).get(), 0, max_size));
    counters.emplace_back(w.device(pe), 1);
    timers.emplace_back(w.device(pe));
  }
  w.barrier();

  std::vector<std::size_t> const sizes = bench::geometric(4, max_size, o.quick ? 16 : 2);
  std::vector<int> const grid = o.quick ? std::vector<int>{1, 4, 32, 132} : std::vector<int>{1, 4, 16, 32, 132};
  bench::plan const plan = bench::bandwidth_plan(o);

  for (bool const bidir : {false, true}) {
    int const senders = bidir ? 2 : 1;
    for (scope const sc : all_scopes) {
      with_scope(sc, [&]<scope S>() {
        auto const kernel = bw_kernel<Transport, S, /*Get=*/false>;
        auto const kernel_get = bw_kernel<Transport, S, /*Get=*/true>;
        auto const k = get ? kernel_get : kernel;
        int const resident = bench::max_resident_ctas(k, threads_per_cta, w.device(0));
        for (int const ctas : grid) {
          std::size_t const units =
              static_cast<std::size_t>(ctas) * (threads_per_cta / group_threads(sc, threads_per_cta));
          for (std::size_t const size : sizes) {
            std::size_t const chunk = size / units / 8 * 8;
            if (chunk == 0) continue;  // fewer bytes than groups: NVSHMEM moves nothing there either
            bench::row where = base_row<Transport>(case_for<Transport>(case_name), 2);
            where.variant = bidir ? "bidir" : "uni";
            where.scope = name(sc);
            where.ctas = ctas;
            where.threads = threads_per_cta;
            where.size = size;
            where.metric = "bandwidth";
            where.unit = "GB/s";
            where.grid_barrier = true;
            if (ctas > resident) {
              s.skip(where, std::to_string(ctas) + " CTAs of " + std::to_string(threads_per_cta) +
                                " threads cannot all be resident (at most " + std::to_string(resident) +
                                "); a grid barrier would hang");
              continue;
            }
            std::size_t const moved = chunk * units;
            s.point(where, [&] {
              auto run = [&](int iters) {
                for (int pe = 0; pe < senders; ++pe) counters[pe].zero(w.stream(pe));
                for (int pe = 0; pe < senders; ++pe) {
                  BENCH_CUDA(cudaSetDevice(w.device(pe)));
                  timers[pe].start(w.stream(pe));
                  k<<<ctas, threads_per_cta, 0, w.stream(pe)>>>(w.comm<Transport>(pe), buf.ptr(pe), chunk, 1 - pe,
                                                                iters, counters[pe].get());
                  BENCH_CUDA(cudaGetLastError());
                  timers[pe].stop(w.stream(pe));
                }
                std::vector<double> ms;
                for (int pe = 0; pe < senders; ++pe) ms.push_back(timers[pe].ms());
                return ms;
              };
              auto value = [&](std::vector<double> const& ms, int iters) {
                double total = 0;
                for (double const t : ms) total += bench::gbps(static_cast<double>(moved), t, iters);
                return total;
              };
              auto const m = bench::measure(plan, s.coll(), run, value);
              bench::row r = where;
              r.value = m.value.median;
              r.min = m.value.min;
              r.max = m.value.max;
              r.iterations = m.iters;
              r.repetitions = m.reps;
              r.note = "message " + std::to_string(chunk) + " B per " + name(sc) +
                       (moved != size ? ", " + std::to_string(moved) + " B moved per iteration" : std::string());
              return r;
            });
          }
        }
      });
    }
  }
}

}  // namespace

template <class Transport>
void put_bw(bench::session& s) {
  bandwidth<Transport>(s, "put_bw", false);
}

template <class Transport>
void get_bw(bench::session& s) {
  bandwidth<Transport>(s, "get_bw", true);
}

template void put_bw<gpucomm::NVLinkStore>(bench::session&);
template void get_bw<gpucomm::NVLinkStore>(bench::session&);
template void put_bw<gpucomm::ProxyQueue>(bench::session&);
template void get_bw<gpucomm::ProxyQueue>(bench::session&);

}  // namespace gpucomm_bench
