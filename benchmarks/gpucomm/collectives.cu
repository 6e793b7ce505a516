// gpucomm's device collectives next to NCCL's (benchmarks/nccl/main.cu runs the same cases):
//   allreduce, allgather, alltoall, reduce_scatter, alltoallv   the host launchers of
//                                                               host/collectives.cuh
// with nccl-tests' semantics (harness/collectives.cuh: the size axis, algbw, busbw), float32 sum
// (allreduce also bf16), out of place, on the world team of one process over --npes PEs (PE i on
// GPU i mod the GPUs visible; with fewer GPUs than PEs the PEs share them and the rows say smoke).
//
// One point: fill every PE's send buffer and poison its receive buffer; one uncaptured call on
// every PE (the first iteration, also loading the kernels), every element of every PE checked
// against the host reference; then K calls per PE captured in one CUDA graph per PE's stream (the
// launchers only launch kernels, so they capture as they are), the graphs replayed `launches` times
// on every PE with PE 0's stream timed between CUDA events (harness measure: the median of R
// repetitions); then every element checked again, so the figure comes from replays that computed
// the right result. A wrong result ends the case with an error row (exit status 3).
//
// The headline is what a program gets with no tuning: the default team_workspace (64 parts of 16
// KiB blocks, automatic channel blocks) and the launchers' own choice, per call, of algorithm and launch shape
// (allreduce, allgather, alltoall, reduce_scatter: packets in CTAs of 256 threads, 1 to 64 CTAs by size, up to the
// packet limit; the round protocols: every part, up to the co-residency cap, in CTAs of 1024), with programmatic
// dependent launch (PDL) where the workspace allows it. The rows carry the CTAs and threads the launcher chose as
// `ctas` and `threads`, and the workspace, the algorithm and PDL in the note. allreduce float32 also runs with PDL off
// (variant "float32-no-pdl") up to 1 MiB, where launch latency shows. GPUCOMM_BENCH_COLL_PARTS=k and
// GPUCOMM_BENCH_COLL_BLOCK=bytes and GPUCOMM_BENCH_COLL_CHANNEL=bytes replace the workspace's parts,
// block or channel block (to sweep them by hand); GPUCOMM_BENCH_COLL_PDL=0 turns PDL off for every
// row; GPUCOMM_BENCH_COLL_ALGO=packets|one_shot|two_shot forces allreduce's algorithm.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <memory>
#include <type_traits>

#include "../harness/collectives.cuh"
#include "common.cuh"

namespace gpucomm_bench {
namespace {

namespace coll = bench::coll;
using coll::op;
using Tr = gpucomm::NVLinkStore;

struct workspace_choice {
  int parts = gpucomm::workspace_options{}.parts;
  std::size_t block_bytes = gpucomm::workspace_options{}.block_bytes;
  std::size_t channel_block_bytes = 0;  // automatic
  bool is_default() const {
    gpucomm::workspace_options const d;
    return parts == d.parts && block_bytes == d.block_bytes && channel_block_bytes == d.channel_block_bytes;
  }
  gpucomm::workspace_options options() const {
    return {.block_bytes = block_bytes, .parts = parts, .channel_block_bytes = channel_block_bytes};
  }
};

std::size_t env_size(char const* name) {
  char const* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 0) : 0;
}

/// The run's workspace: team_workspace's defaults, or the environment's overrides.
workspace_choice choose_workspace() {
  workspace_choice c;
  if (std::size_t const p = env_size("GPUCOMM_BENCH_COLL_PARTS")) c.parts = static_cast<int>(p);
  if (std::size_t const b = env_size("GPUCOMM_BENCH_COLL_BLOCK")) c.block_bytes = b;
  if (std::size_t const b = env_size("GPUCOMM_BENCH_COLL_CHANNEL")) c.channel_block_bytes = b;
  return c;
}

/// Whether the run allows PDL (GPUCOMM_BENCH_COLL_PDL=0 turns it off).
bool pdl_allowed() {
  char const* v = std::getenv("GPUCOMM_BENCH_COLL_PDL");
  return !(v && std::string(v) == "0");
}

/// One case: collective `k` on element type T, each size of the sweep. `skewed`: alltoallv's
/// skewed counts (variant "<type>-skewed").
template <op k, class T>
void collective_sweep(bench::session& s, gpucomm::world& w, gpucomm::team_workspace& ws, bool skewed,
                      std::size_t max_bytes, bool pdl) {
  auto const& o = s.opt();
  int const npes = w.npes();
  int gpus = 0;
  BENCH_CUDA(cudaGetDeviceCount(&gpus));
  bool const smoke = gpus < npes;
  // Buffers for the largest point, on each PE's GPU.
  coll::shape const biggest = coll::shape_of(k, max_bytes, sizeof(T), npes, skewed);
  std::vector<bench::device_buffer<T>> src, dst;
  std::vector<bench::device_buffer<std::size_t>> counts;  // alltoallv: send counts, offsets, recv counts
  for (int pe = 0; pe < npes; ++pe) {
    src.emplace_back(w.device(pe), biggest.send);
    dst.emplace_back(w.device(pe), biggest.recv);
    if (k == op::alltoallv) counts.emplace_back(w.device(pe), 3 * static_cast<std::size_t>(npes));
  }
  bench::event_timer timer(w.device(0));
  bench::plan const plan = coll::graph_plan(o);
  ws.set_programmatic_launch(pdl && pdl_allowed());
  std::string const variant =
      std::string(coll::type_name<T>()) + (skewed ? "-skewed" : "") + (pdl || !pdl_allowed() ? "" : "-no-pdl");
  std::string const workspace_note = std::to_string(ws.parts()) + " parts x " +
                                     std::to_string(ws.block_bytes() / bench::KiB) + " KiB blocks, " +
                                     std::to_string(ws.channel_block_bytes() / bench::KiB) + " KiB channel blocks" +
                                     (choose_workspace().is_default() ? " (the default)" : "");
  gpucomm::allreduce_algorithm const requested = forced_allreduce();

  for (std::size_t const size : coll::sizes(o, max_bytes)) {
    coll::shape const sh = coll::shape_of(k, size, sizeof(T), npes, skewed);
    if (sh.count == 0) continue;  // less than one element per rank
    int const calls = coll::calls_per_graph(sh.bytes);
    // What the launcher runs for this call.
    gpucomm::launch_shape launch = gpucomm::rounds_launch_shape(ws);
    std::size_t most = 0;  // alltoallv: the largest pair, the bound its caller gives the launcher
    if constexpr (k == op::alltoallv) {
      for (int p = 0; p < npes; ++p)
        for (int r = 0; r < npes; ++r) most = std::max(most, sh.pair_count(p, r));
      launch = gpucomm::alltoallv_launch_shape<T, Tr>(ws, most);
    }
    std::string algorithm;
    constexpr bool data = k == op::allgather || k == op::alltoall || k == op::reduce_scatter;
    if constexpr (data) {
      launch = gpucomm::data_launch_shape<T, Tr>(ws, sh.count);
      algorithm = gpucomm::detail::data_protocol<Tr, T>(sh.count, npes) == gpucomm::detail::collective_protocol::packets
                      ? "packets"
                      : "channel steps";
    }
    if constexpr (k == op::allreduce) {
      with_allreduce_algorithm(
          [&]<gpucomm::allreduce_algorithm A>() { launch = gpucomm::allreduce_launch_shape<T, Tr, A>(ws, sh.count); });
      switch (gpucomm::detail::chosen_allreduce<Tr, T>(requested, sh.count, npes)) {
        case gpucomm::allreduce_algorithm::packets:
          algorithm = "packets";
          break;
        case gpucomm::allreduce_algorithm::one_shot:
          algorithm = "one_shot";
          break;
        default:
          algorithm = "two_shot";
          break;
      }
    }
    bench::row where = base_row<Tr>(coll::name(k), npes);
    where.variant = variant;
    where.scope = "block";
    where.ctas = launch.ctas;
    where.threads = launch.threads;
    where.size = sh.bytes;
    where.metric = "latency";
    where.unit = "us";
    where.note =
        std::string("host launcher gpucomm::") + coll::name(k) +
        (k == op::alltoallv ? " (counts in device memory; most = the largest pair)" : "") +
        (k == op::allreduce ? requested == gpucomm::allreduce_algorithm::automatic
                                  ? " (allreduce_algorithm::automatic: the library chose " + algorithm + ")"
                                  : " (allreduce_algorithm::" + algorithm + ", forced by GPUCOMM_BENCH_COLL_ALGO)"
                            : "") +
        (data ? " (the library chose " + algorithm + ")" : "") +
        (k == op::allreduce || k == op::reduce_scatter ? ", sum" : "") + ", out of place; " +
        std::to_string(launch.ctas) + " CTA(s) of " + std::to_string(launch.threads) +
        " threads per PE, chosen by the launcher; workspace " + workspace_note + "; PDL " +
        (ws.programmatic_launch() ? "on" : "off") + "; " + std::to_string(calls) +
        " calls per CUDA graph; time per call; every element checked before and after timing";
    if (smoke)
      where.note = "smoke: " + std::to_string(npes) + " PEs share " + std::to_string(gpus) + " GPU(s); " + where.note;

    bench::row measured_row;
    bool const done = s.point(where, [&] {
      // Inputs, poisoned outputs (all ones: NaN in float and bf16), alltoallv's counts.
      auto prepare = [&] {
        for (int pe = 0; pe < npes; ++pe) {
          BENCH_CUDA(cudaSetDevice(w.device(pe)));
          coll::fill(src[pe].get(), sh.send, pe, w.stream(pe));
          BENCH_CUDA(cudaMemsetAsync(dst[pe].get(), 0xff, sh.recv * sizeof(T), w.stream(pe)));
          if (k == op::alltoallv) {
            std::vector<std::size_t> h(3 * static_cast<std::size_t>(npes), ~std::size_t{0});
            for (int r = 0; r < npes; ++r) {
              h[static_cast<std::size_t>(r)] = sh.pair_count(pe, r);
              h[static_cast<std::size_t>(npes + r)] = sh.pair_offset(pe, r);
            }
            BENCH_CUDA(cudaMemcpy(counts[pe].get(), h.data(), h.size() * sizeof(std::size_t), cudaMemcpyHostToDevice));
          }
        }
        w.synchronize();
      };
      // One call for PE `pe` on `st`.
      auto issue = [&](int pe, cudaStream_t st) {
        T* const d = dst[pe].get();
        T const* const x = src[pe].get();
        if constexpr (k == op::allreduce) {
          with_allreduce_algorithm([&]<gpucomm::allreduce_algorithm A>() {
            gpucomm::allreduce<Tr, A>(w, ws, pe, d, x, sh.count, gpucomm::reduction::sum{}, st);
          });
        } else if constexpr (k == op::allgather) {
          gpucomm::allgather<Tr>(w, ws, pe, d, x, sh.count, st);
        } else if constexpr (k == op::alltoall) {
          gpucomm::alltoall<Tr>(w, ws, pe, d, x, sh.count, st);
        } else if constexpr (k == op::reduce_scatter) {
          gpucomm::reduce_scatter<Tr>(w, ws, pe, d, x, sh.count, gpucomm::reduction::sum{}, st);
        } else {
          static_assert(k == op::alltoallv);
          std::size_t* const c = counts[pe].get();  // send counts, send offsets, recv counts
          gpucomm::alltoallv<Tr>(w, ws, pe, d, c + 2 * npes, sh.recv, x, c, c + npes, most, st);
        }
      };
      auto check_all = [&](char const* when) {
        for (int pe = 0; pe < npes; ++pe) {
          BENCH_CUDA(cudaSetDevice(w.device(pe)));
          std::vector<std::size_t> recv_counts;
          if (k == op::alltoallv) {
            recv_counts.resize(static_cast<std::size_t>(npes));
            BENCH_CUDA(cudaMemcpy(recv_counts.data(), counts[pe].get() + 2 * npes, npes * sizeof(std::size_t),
                                  cudaMemcpyDeviceToHost));
          }
          coll::verify(sh, pe, dst[pe].get(), recv_counts, when);
        }
      };

      prepare();
      for (int pe = npes - 1; pe >= 0; --pe) issue(pe, w.stream(pe));
      w.synchronize();
      check_all("after the first (uncaptured) call");
      for (int pe = 0; pe < npes; ++pe) {
        BENCH_CUDA(cudaSetDevice(w.device(pe)));
        BENCH_CUDA(cudaMemsetAsync(dst[pe].get(), 0xff, sh.recv * sizeof(T), w.stream(pe)));
      }
      w.synchronize();
      std::vector<graph_exec> const graphs = capture_calls(w, calls, issue);
      auto run = [&](int launches) { return replay_timed(w, timer, graphs, launches); };
      auto value = [calls](std::vector<double> const& ms, int launches) {
        return bench::us_per_iter(ms[0], launches * calls);
      };
      auto const m = bench::measure(plan, s.coll(), run, value);
      check_all("after the timed graph replays");
      bench::row r = finish(where, m);
      r.iterations = m.iters * calls;
      measured_row = r;
      return r;
    });
    if (done)
      for (bench::row const& r : coll::bandwidth_rows(measured_row, sh)) s.out().write(r);
  }
}

/// Heap for the run's workspace (sized by the library's own layout), plus room for the world's own
/// needs.
gpucomm::world collective_world(int npes) {
  workspace_choice const c = choose_workspace();
  return make_world(npes, 64 * bench::MiB + gpucomm::team_workspace::size_for(npes, c.options()));
}

template <op K>
void collective_case(bench::session& s) {
  auto const& o = s.opt();
  if (o.npes > coll::max_checked_ranks)
    throw bench::failure("at most " + std::to_string(coll::max_checked_ranks) + " PEs (exact reference sums)");
  gpucomm::world w = collective_world(o.npes);
  workspace_choice const c = choose_workspace();
  gpucomm::team_workspace ws(w, w.team_world(), c.options());
  std::size_t const max_bytes = coll::max_bytes(o, coll::full_max_bytes, coll::quick_max_bytes);
  collective_sweep<K, float>(s, w, ws, false, max_bytes, true);
  if constexpr (K == op::allreduce) {
    collective_sweep<K, __nv_bfloat16>(s, w, ws, false, max_bytes, true);
    // The same with PDL off, where it can be on, for the sizes where launch latency shows.
    if (ws.programmatic_launch())
      collective_sweep<K, float>(s, w, ws, false, max_bytes < bench::MiB ? max_bytes : bench::MiB, false);
  }
  if constexpr (K == op::alltoallv) collective_sweep<K, float>(s, w, ws, true, max_bytes, true);
}

}  // namespace

void allreduce(bench::session& s) { collective_case<op::allreduce>(s); }
void allgather(bench::session& s) { collective_case<op::allgather>(s); }
void alltoall(bench::session& s) { collective_case<op::alltoall>(s); }
void reduce_scatter(bench::session& s) { collective_case<op::reduce_scatter>(s); }
void alltoallv(bench::session& s) { collective_case<op::alltoallv>(s); }

}  // namespace gpucomm_bench
