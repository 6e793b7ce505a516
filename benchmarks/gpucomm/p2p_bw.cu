// p2pcopy_put_bw: P2PCopy's put_bw, PE 0 -> PE 1, with put_bw's shape (`size` bytes per iteration
// for the whole grid, split evenly over the grid's groups, each share rounded down to 16 bytes; a
// grid barrier after every iteration; one quiet at the end) and two sources:
//   global  the share is read from the heap and pipelined through the group's staging by its
//           leader (bulk loads into shared memory, bulk stores to the peer);
//   shared  the share is pushed from a tile in the group's shared memory by bulk stores (a share
//           larger than the tile is sent as consecutive puts of the tile; the bytes are whatever
//           the tile holds: this measures the transfer, not the data).
// Scopes differ in CTA shape, since every group needs its own shared memory:
//   block   1024 threads per CTA, one group: one issuing thread per CTA. Staging: P2PCopy's
//           default, and other shapes of 32 to 48 KiB and of 128 KiB (variants "global
//           <stages>x<KiB>/<stores in flight>", with " L2+<chunks>" where the source is prefetched
//           into L2 that many chunks ahead of the loads); tile 64 KiB.
//   warp    256 threads per CTA, 8 warps, each with BasicP2PCopy<4096, 4> staging; tile 16 KiB.
//   thread  32 threads per CTA, each with BasicP2PCopy<1024, 2> staging; tile 2 KiB.
// The row's note gives the shape. With both PEs on one GPU the figures are smoke.
#include "common.cuh"

#include <string>
#include <type_traits>

namespace gpucomm_bench {
namespace {

template <scope S, class Policy = void>
struct p2p_shape;
template <class Policy>
struct p2p_shape<scope::block, Policy> {
  using policy = std::conditional_t<std::is_void_v<Policy>, gpucomm::P2PCopy, Policy>;
  static constexpr int threads = 1024;
  static constexpr std::size_t tile = 64 * bench::KiB;
};
template <>
struct p2p_shape<scope::warp> {
  using policy = gpucomm::BasicP2PCopy<4096, 4>;
  static constexpr int threads = 256;
  static constexpr std::size_t tile = 16 * bench::KiB;
};
template <>
struct p2p_shape<scope::thread> {
  using policy = gpucomm::BasicP2PCopy<1024, 2>;
  static constexpr int threads = 32;
  static constexpr std::size_t tile = 2 * bench::KiB;
};

template <scope S>
constexpr int groups_per_cta = p2p_shape<S>::threads / (S == scope::block  ? p2p_shape<S>::threads
                                                        : S == scope::warp ? 32
                                                                           : 1);

template <scope S, bool Shared, class Policy>
constexpr std::size_t p2p_smem() {
  using shape = p2p_shape<S, Policy>;
  return groups_per_cta<S> * (Shared ? shape::tile : sizeof(typename shape::policy::staging));
}

template <scope S, bool Shared, class Policy>
__global__ void __launch_bounds__(p2p_shape<S, Policy>::threads, 1)
    p2p_bw_kernel(gpucomm::comm<typename p2p_shape<S, Policy>::policy> c, gpucomm::sym_ptr<std::byte> buf,
                  std::size_t chunk, int peer, int iters, unsigned* counter) {
  using shape = p2p_shape<S, Policy>;
  using staging = typename shape::policy::staging;
  extern __shared__ __align__(128) unsigned char smem[];
  auto const g = make_group<S>();
  unsigned const slot = S == scope::block ? 0u : S == scope::warp ? threadIdx.x / 32 : threadIdx.x;
  std::size_t const offset = (static_cast<std::size_t>(blockIdx.x) * groups_per_cta<S> + slot) * chunk;
  for (int i = 0; i < iters; ++i) {
    if constexpr (Shared) {
      auto const* tile = reinterpret_cast<std::byte const*>(smem + slot * shape::tile);
      for (std::size_t at = 0; at < chunk; at += shape::tile) {
        std::size_t const n = chunk - at < shape::tile ? chunk - at : shape::tile;
        c.put_nbi(g, buf + static_cast<std::ptrdiff_t>(offset + at), tile, n, peer);
      }
    } else {
      auto const sg = gpucomm::with_staging(g, reinterpret_cast<staging*>(smem)[slot]);
      c.put_nbi(sg, buf + static_cast<std::ptrdiff_t>(offset), buf.get() + offset, chunk, peer);
    }
    bench::grid_barrier(counter, static_cast<unsigned>(i + 1) * gridDim.x);
  }
  c.quiet(g);
}

constexpr std::size_t p2p_max_size = bench::GiB;

/// Policy: another staging shape at block scope (a "global <stages>x<bytes>" variant row).
template <scope S, bool Shared, class Policy = void>
void p2p_points(bench::session& s, gpucomm::world& w, gpucomm::sym_array<std::byte> const& buf,
                bench::device_buffer<unsigned>& counter, bench::event_timer& timer) {
  using shape = p2p_shape<S, Policy>;
  using policy = typename shape::policy;
  auto const& o = s.opt();
  auto const kernel = p2p_bw_kernel<S, Shared, Policy>;
  std::size_t const smem = p2p_smem<S, Shared, Policy>();
  BENCH_CUDA(cudaSetDevice(w.device(0)));
  BENCH_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  int per_sm = 0, sms = 0;
  BENCH_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, shape::threads, smem));
  BENCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, w.device(0)));
  int const resident = per_sm * sms;
  std::vector<std::size_t> const sizes = bench::geometric(64 * bench::KiB, p2p_max_size, o.quick ? 16 : 4);
  std::vector<int> const grid = o.quick ? std::vector<int>{1, 4, 8, 32} : std::vector<int>{1, 2, 4, 8, 16, 32, 132};
  bench::plan const plan = bench::bandwidth_plan(o);
  std::string const prefetch = policy::prefetch_ahead == 0 ? "" : " L2+" + std::to_string(policy::prefetch_ahead);
  for (int const ctas : grid) {
    std::size_t const groups = static_cast<std::size_t>(ctas) * groups_per_cta<S>;
    for (std::size_t const size : sizes) {
      std::size_t const chunk = size / groups / 16 * 16;
      if (chunk == 0) continue;
      bench::row where = base_row<policy>("p2pcopy_put_bw", 2);
      where.variant = Shared ? std::string("shared")
                      : std::is_void_v<Policy>
                          ? std::string("global")
                          : "global " + std::to_string(policy::staging::stages) + "x" +
                                std::to_string(policy::staging::stage_bytes / bench::KiB) + "KiB/" +
                                std::to_string(policy::staging::stores_in_flight) + prefetch;
      where.scope = name(S);
      where.ctas = ctas;
      where.threads = shape::threads;
      where.size = size;
      where.metric = "bandwidth";
      where.unit = "GB/s";
      where.grid_barrier = true;
      if (ctas > resident) {
        s.skip(where, std::to_string(ctas) + " CTAs cannot all be resident (at most " + std::to_string(resident) + ")");
        continue;
      }
      std::size_t const moved = chunk * groups;
      s.point(where, [&] {
        auto run = [&](int iters) {
          counter.zero(w.stream(0));
          BENCH_CUDA(cudaSetDevice(w.device(0)));
          timer.start(w.stream(0));
          kernel<<<ctas, shape::threads, smem, w.stream(0)>>>(w.comm<policy>(0), buf.ptr(0), chunk, 1, iters,
                                                              counter.get());
          BENCH_CUDA(cudaGetLastError());
          timer.stop(w.stream(0));
          return std::vector<double>{timer.ms()};
        };
        auto value = [&](std::vector<double> const& ms, int iters) {
          return bench::gbps(static_cast<double>(moved), ms[0], iters);
        };
        bench::row r = bench::finish(where, bench::measure(plan, s.coll(), run, value));
        r.note = "message " + std::to_string(chunk) + " B per " + name(S) + "; " + std::to_string(shape::threads) +
                 " threads per CTA; " +
                 (Shared ? "source: a " + std::to_string(shape::tile) + " B shared-memory tile per group"
                         : "staging " + std::to_string(policy::staging::stages) + " x " +
                               std::to_string(policy::staging::stage_bytes) + " B per group, " +
                               std::to_string(policy::staging::stores_in_flight) + " stores in flight" +
                               (prefetch.empty()
                                    ? ""
                                    : ", L2 prefetch " + std::to_string(policy::prefetch_ahead) + " chunks ahead"));
        return r;
      });
    }
  }
}

}  // namespace

void p2pcopy_put_bw(bench::session& s) {
  gpucomm::world w = make_world(2, p2p_max_size + 64 * bench::MiB);
  auto buf = w.alloc<std::byte>(p2p_max_size);
  for (int pe = 0; pe < 2; ++pe) {
    BENCH_CUDA(cudaSetDevice(w.device(pe)));
    BENCH_CUDA(cudaMemset(buf.ptr(pe).get(), 0, p2p_max_size));
  }
  bench::device_buffer<unsigned> counter(w.device(0), 1);
  bench::event_timer timer(w.device(0));
  w.barrier();
  p2p_points<scope::block, false>(s, w, buf, counter, timer);
  p2p_points<scope::block, true>(s, w, buf, counter, timer);
  // Other staging shapes and counts of stores in flight, to choose the default against: shapes of
  // 32 to 48 KiB (about what a static __shared__ variable may hold), and two of 128 KiB.
  p2p_points<scope::block, false, gpucomm::BasicP2PCopy<8192, 5, 1>>(s, w, buf, counter, timer);
  p2p_points<scope::block, false, gpucomm::BasicP2PCopy<8192, 5, 2>>(s, w, buf, counter, timer);
  p2p_points<scope::block, false, gpucomm::BasicP2PCopy<8192, 6, 1>>(s, w, buf, counter, timer);
  p2p_points<scope::block, false, gpucomm::BasicP2PCopy<8192, 6, 3>>(s, w, buf, counter, timer);
  p2p_points<scope::block, false, gpucomm::BasicP2PCopy<12288, 4, 1>>(s, w, buf, counter, timer);
  p2p_points<scope::block, false, gpucomm::BasicP2PCopy<16384, 3, 1>>(s, w, buf, counter, timer);
  p2p_points<scope::block, false, gpucomm::BasicP2PCopy<4096, 8, 1>>(s, w, buf, counter, timer);
  p2p_points<scope::block, false, gpucomm::BasicP2PCopy<4096, 8, 4>>(s, w, buf, counter, timer);
  p2p_points<scope::block, false, gpucomm::BasicP2PCopy<2048, 16, 1>>(s, w, buf, counter, timer);
  p2p_points<scope::block, false, gpucomm::BasicP2PCopy<16384, 8, 1>>(s, w, buf, counter, timer);
  p2p_points<scope::block, false, gpucomm::BasicP2PCopy<8192, 16, 1>>(s, w, buf, counter, timer);
  // The L2 prefetch of the source, 1, 2 and 4 chunks ahead, for the default staging and the
  // recommended one (variants "... L2+<chunks>").
  p2p_points<scope::block, false, gpucomm::BasicP2PCopy<8192, 5, 1, 1>>(s, w, buf, counter, timer);
  p2p_points<scope::block, false, gpucomm::BasicP2PCopy<8192, 5, 1, 2>>(s, w, buf, counter, timer);
  p2p_points<scope::block, false, gpucomm::BasicP2PCopy<8192, 5, 1, 4>>(s, w, buf, counter, timer);
  p2p_points<scope::block, false, gpucomm::BasicP2PCopy<16384, 8, 1, 2>>(s, w, buf, counter, timer);
  p2p_points<scope::warp, false>(s, w, buf, counter, timer);
  p2p_points<scope::warp, true>(s, w, buf, counter, timer);
  p2p_points<scope::thread, false>(s, w, buf, counter, timer);
  p2p_points<scope::thread, true>(s, w, buf, counter, timer);
}

}  // namespace gpucomm_bench
