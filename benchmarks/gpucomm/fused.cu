// allreduce_rmsnorm: the end of a tensor-parallel layer, allreduce + residual add + RMSNorm of
// tokens x 8192 bf16 (1 to 2048 tokens, 16 KiB to 32 MiB), on the world team of one process over
// --npes PEs (PE i on GPU i mod the GPUs visible; fewer GPUs than PEs: smoke):
//   fused     gpucomm::allreduce_rows with the row function of examples/add_rmsnorm.cuh: one kernel;
//   unfused   gpucomm::allreduce, then a kernel of one CTA per row running the same function.
// Both on the default team_workspace with the launchers' own choices (the unfused norm kernel runs
// as many threads per CTA as the allreduce's launch), captured in CUDA graphs and timed like
// collectives.cu (time per call); every output element and every element of the residual output
// checked against a host reference after the first call and after timing.
#include <cuda_bf16.h>

#include <cmath>
#include <string>
#include <vector>

#include "../../examples/add_rmsnorm.cuh"
#include "../harness/collectives.cuh"
#include "common.cuh"

namespace gpucomm_bench {
namespace {

namespace coll = bench::coll;
using Tr = gpucomm::NVLinkStore;
using bf16 = __nv_bfloat16;
constexpr std::size_t hidden = 8192;

/// The unfused second kernel: CTA b normalises row b.
__global__ void norm_rows(add_rmsnorm fn, bf16* x) {
  fn(cg::this_thread_block(), blockIdx.x, x + blockIdx.x * fn.hidden);
}

/// Calls f.template operator()<A>() with A the fused form's algorithm: automatic, or
/// GPUCOMM_BENCH_COLL_ALGO's (packets or one_shot; allreduce_rows has no two_shot, so two_shot is
/// refused), to place its choice by hand.
template <class F>
void with_rows_algorithm(F&& f) {
  with_allreduce_algorithm<false>(f, "allreduce_rows");
}

float residual_value(std::size_t j) { return static_cast<float>(static_cast<int>(j % 13) - 6) / 4.f; }
float weight_value(std::size_t j) { return 0.5f + static_cast<float>(j % 5) / 8.f; }
float round_bf16(float v) { return __bfloat162float(__float2bfloat16(v)); }

/// Wrong elements of one PE's output and residual output (tokens rows), against the host
/// reference: exact sums of coll::input_value (bf16 holds them), the residual added and rounded to
/// bf16, the norm in double (tolerance: bf16's rounding and the device's float sums).
std::size_t wrong_elements(int npes, std::size_t tokens, std::vector<bf16> const& out,
                           std::vector<bf16> const& residual_out) {
  std::size_t wrong = 0;
  std::vector<float> sum(hidden);
  for (std::size_t row = 0; row < tokens; ++row) {
    double ss = 0;
    for (std::size_t j = 0; j < hidden; ++j) {
      std::size_t const i = row * hidden + j;
      int reduced = 0;
      for (int p = 0; p < npes; ++p) reduced += coll::input_value(p, i);
      sum[j] = round_bf16(static_cast<float>(reduced) + residual_value(j));
      ss += static_cast<double>(sum[j]) * sum[j];
      wrong += __bfloat162float(residual_out[i]) != sum[j];
    }
    double const scale = 1.0 / std::sqrt(ss / static_cast<double>(hidden) + 1e-6);
    for (std::size_t j = 0; j < hidden; ++j) {
      double const want = sum[j] * scale * weight_value(j);
      wrong += std::fabs(__bfloat162float(out[row * hidden + j]) - want) > std::fabs(want) / 64 + 1e-3;
    }
  }
  return wrong;
}

}  // namespace

void allreduce_rmsnorm(bench::session& s) {
  auto const& o = s.opt();
  int const npes = o.npes;
  if (npes > coll::max_checked_ranks)
    throw bench::failure("at most " + std::to_string(coll::max_checked_ranks) + " PEs (exact reference sums)");
  gpucomm::world w = make_world(npes, 64 * bench::MiB + gpucomm::team_workspace::size_for(npes, {}));
  // The unfused pair's second kernel is launched while the first runs and waits for the other
  // PEs: loaded now, since a lazy first load would wait for it (docs/design/architecture.md).
  w.prepare(norm_rows);
  gpucomm::team_workspace ws(w, w.team_world());
  int gpus = 0;
  BENCH_CUDA(cudaGetDeviceCount(&gpus));
  std::size_t const max_tokens = o.quick ? 512 : 2048;
  std::size_t const most = max_tokens * hidden;
  struct buffers {
    bench::device_buffer<bf16> src, out, residual, residual_out, weight;
  };
  std::vector<buffers> b;
  for (int pe = 0; pe < npes; ++pe) {
    int const d = w.device(pe);
    b.push_back({{d, most}, {d, most}, {d, most}, {d, most}, {d, hidden}});
    std::vector<bf16> res(most), wt(hidden);
    for (std::size_t i = 0; i < most; ++i) res[i] = __float2bfloat16(residual_value(i % hidden));
    for (std::size_t j = 0; j < hidden; ++j) wt[j] = __float2bfloat16(weight_value(j));
    BENCH_CUDA(cudaMemcpy(b.back().residual.get(), res.data(), most * sizeof(bf16), cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(b.back().weight.get(), wt.data(), hidden * sizeof(bf16), cudaMemcpyHostToDevice));
    coll::fill(b.back().src.get(), most, pe, w.stream(pe));
  }
  w.synchronize();
  bench::event_timer timer(w.device(0));
  bench::plan const plan = coll::graph_plan(o);

  for (std::size_t tokens = 1; tokens <= max_tokens; tokens *= 2) {
    std::size_t const n = tokens * hidden;
    std::size_t const bytes = n * sizeof(bf16);
    int const calls = coll::calls_per_graph(bytes);
    gpucomm::launch_shape const plain = gpucomm::allreduce_launch_shape<bf16, Tr>(ws, n);
    for (bool const fused : {true, false}) {
      gpucomm::launch_shape launch = plain;
      if (fused)
        with_rows_algorithm([&]<gpucomm::allreduce_algorithm A>() {
          launch = gpucomm::allreduce_rows_launch_shape<bf16, Tr, A>(ws, tokens, hidden);
        });
      bench::row where = base_row<Tr>("allreduce_rmsnorm", npes);
      where.variant = fused ? "fused" : "unfused";
      where.scope = "block";
      where.ctas = launch.ctas;
      where.threads = launch.threads;
      where.size = bytes;
      where.metric = "latency";
      where.unit = "us";
      where.note = std::to_string(tokens) + " x " + std::to_string(hidden) + " bf16, " +
                   (fused ? "gpucomm::allreduce_rows with the add_rmsnorm row function (one kernel)"
                          : "gpucomm::allreduce, then a norm kernel of one CTA per row") +
                   "; the default workspace, the launchers' choices" +
                   (fused && forced_allreduce() != gpucomm::allreduce_algorithm::automatic
                        ? std::string(" (algorithm forced by GPUCOMM_BENCH_COLL_ALGO)")
                        : std::string()) +
                   "; " + std::to_string(calls) +
                   " calls per CUDA graph; time per call; every output element checked before and after timing";
      if (gpus < npes)
        where.note = "smoke: " + std::to_string(npes) + " PEs share " + std::to_string(gpus) + " GPU(s); " + where.note;
      s.point(where, [&] {
        auto issue = [&](int pe, cudaStream_t st) {
          buffers const& x = b[static_cast<std::size_t>(pe)];
          add_rmsnorm const fn{x.residual.get(), x.residual_out.get(), x.weight.get(), hidden, 1e-6f};
          if (fused) {
            with_rows_algorithm([&]<gpucomm::allreduce_algorithm A>() {
              gpucomm::allreduce_rows<Tr, A>(w, ws, pe, x.out.get(), x.src.get(), tokens, hidden,
                                             gpucomm::reduction::sum{}, fn, st);
            });
          } else {
            gpucomm::allreduce<Tr>(w, ws, pe, x.out.get(), x.src.get(), n, gpucomm::reduction::sum{}, st);
            BENCH_CUDA(cudaSetDevice(w.device(pe)));
            norm_rows<<<static_cast<unsigned>(tokens), static_cast<unsigned>(launch.threads), 0, st>>>(fn, x.out.get());
            BENCH_CUDA(cudaGetLastError());
          }
        };
        auto poison = [&] {
          for (int pe = 0; pe < npes; ++pe) {
            BENCH_CUDA(cudaSetDevice(w.device(pe)));
            BENCH_CUDA(cudaMemsetAsync(b[pe].out.get(), 0xff, bytes, w.stream(pe)));
            BENCH_CUDA(cudaMemsetAsync(b[pe].residual_out.get(), 0xff, bytes, w.stream(pe)));
          }
          w.synchronize();
        };
        auto check_all = [&](char const* when) {
          std::vector<bf16> out(n), res(n);
          for (int pe = 0; pe < npes; ++pe) {
            BENCH_CUDA(cudaMemcpy(out.data(), b[pe].out.get(), bytes, cudaMemcpyDeviceToHost));
            BENCH_CUDA(cudaMemcpy(res.data(), b[pe].residual_out.get(), bytes, cudaMemcpyDeviceToHost));
            if (std::size_t const wrong = wrong_elements(npes, tokens, out, res))
              throw bench::failure("PE " + std::to_string(pe) + ": " + std::to_string(wrong) + " wrong elements " +
                                   when);
          }
        };
        poison();
        for (int pe = npes - 1; pe >= 0; --pe) issue(pe, w.stream(pe));
        w.synchronize();
        check_all("after the first (uncaptured) call");
        poison();
        std::vector<graph_exec> const graphs = capture_calls(w, calls, issue);
        auto run = [&](int launches) { return replay_timed(w, timer, graphs, launches); };
        auto const m = bench::measure(plan, s.coll(), run, [calls](std::vector<double> const& ms, int launches) {
          return bench::us_per_iter(ms[0], launches * calls);
        });
        check_all("after the timed graph replays");
        bench::row r = bench::finish(where, m);
        r.iterations = m.iters * calls;
        return r;
      });
    }
  }
}

}  // namespace gpucomm_bench
