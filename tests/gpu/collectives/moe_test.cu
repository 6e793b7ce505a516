// The collectives suite (every transport under test): MoE dispatch and combine through the host
// launchers (host/moe.cuh), on every team shape. Routing random (some slots -1), sparse (most
// experts receive nothing), every token to one expert, every slot of a token to the same expert;
// k = 1 to 8; bf16 and fp8 e4m3; int32 and int64 ids; a bound on received rows that is exceeded;
// a token count from device memory, and CUDA graphs replayed. Every output is poisoned first; every
// received row, count, source and weight, and every combined element is checked against the host
// reference (moe_reference.hpp): bf16 rows and combined elements bitwise, fp8 elements within
// e4m3's rounding given their block's scale. Combine is checked bitwise identical across runs.
#include <gpucomm/host/moe.cuh>

#include <algorithm>
#include <cstring>
#include <map>

#include "moe_reference.hpp"
#include "shapes.cuh"

using namespace gpucomm::test::coll;
namespace ref = gpucomm::test::moe;
using gpucomm::moe_index_dtype;
using gpucomm::moe_shape;
using gpucomm::moe_token_dtype;
using gpucomm::test::error_of;

namespace {

enum class routing { random, sparse, one_expert, same_expert };

struct moe_case {
  int experts_per_rank;
  int hidden;
  int top_k;
  moe_token_dtype dtype;
  moe_index_dtype index;
  int max_tokens;
  routing how;
  std::uint64_t salt;
  int slack = 3;              ///< max_recv_rows = the most rows a member receives + slack
  bool device_count = false;  ///< the token count from device memory
  bool graphs = false;        ///< the second and third runs replayed from CUDA graphs
  int threads = 0;            ///< the device calls from kernels of this many threads (0: the launchers)
};

std::string describe(moe_case const& c, team const& t) {
  return "moe E=" + std::to_string(c.experts_per_rank) + " H=" + std::to_string(c.hidden) +
         " k=" + std::to_string(c.top_k) + (c.dtype == moe_token_dtype::fp8_e4m3 ? " fp8" : " bf16") +
         (c.index == moe_index_dtype::int64 ? " int64" : " int32") + " Tm=" + std::to_string(c.max_tokens) +
         " routing " + std::to_string(static_cast<int>(c.how)) + " slack " + std::to_string(c.slack) + " team(" +
         std::to_string(t.start) + "," + std::to_string(t.stride) + "," + std::to_string(t.size) + ")";
}

/// Every member's tokens, ids and weights (any process recomputes any member's).
ref::moe_inputs make_inputs(moe_case const& c, int members) {
  ref::moe_inputs in;
  in.members = members;
  in.experts_per_rank = c.experts_per_rank;
  in.top_k = c.top_k;
  int const X = members * c.experts_per_rank, k = c.top_k;
  for (int s = 0; s < members; ++s) {
    auto const us = static_cast<std::uint64_t>(s);
    // Member 0 has the bound, member 2 none, the others anything up to it.
    int const T = s == 0 ? c.max_tokens : s == 2 ? 0 : static_cast<int>(mix(c.salt, us, 999) % (c.max_tokens + 1));
    in.tokens.push_back(T);
    std::vector<long long> ids(static_cast<std::size_t>(T * k), -1);
    std::vector<float> weights(static_cast<std::size_t>(T * k));
    for (int t = 0; t < T; ++t) {
      for (int j = 0; j < k; ++j) {
        std::size_t const i = static_cast<std::size_t>(t * k + j);
        weights[i] = static_cast<float>(mix(c.salt + 1, us, i) % 1000 + 1) / 1024.f;
        long long id = -1;
        switch (c.how) {
          case routing::random:
          case routing::sparse:
            for (std::uint64_t attempt = 0; attempt < 64 && id < 0; ++attempt) {
              std::uint64_t const m = mix(c.salt + 2, us, i * 64 + attempt);
              long long const pick = static_cast<long long>(m % static_cast<std::uint64_t>(X + 1));
              if (pick == X) break;  // a slot routed nowhere now and then
              if (c.how == routing::sparse && pick % 3 != 0) continue;
              bool const taken =
                  std::find(ids.begin() + t * k, ids.begin() + t * k + j, pick) != ids.begin() + t * k + j;
              if (!taken) id = pick;
            }
            break;
          case routing::one_expert:
            id = j == 0 ? X - 1 : -1;
            break;
          case routing::same_expert:
            id = static_cast<long long>(mix(c.salt + 3, us, static_cast<std::uint64_t>(t)) %
                                        static_cast<std::uint64_t>(X));
            break;
        }
        ids[i] = id;
      }
    }
    in.ids.push_back(std::move(ids));
    in.weights.push_back(std::move(weights));
  }
  return in;
}

/// Token t's element h at member s, as bf16 bits: blocks of 128 are now and then all zero (scale 1).
std::uint16_t token_value(std::uint64_t salt, int s, int t, int h, int hidden) {
  if ((t + h / 128) % 5 == 0) return 0;
  std::uint64_t const m = mix(salt + 4, static_cast<std::uint64_t>(s), static_cast<std::uint64_t>(t * hidden + h));
  float const magnitude = static_cast<float>(1 << (h / 128 % 4));
  return ref::bf16_bits(static_cast<float>(static_cast<int>(m % 2001) - 1000) / 256.f * magnitude);
}
/// The expert output for a row (global expert, source, token), element h, as bf16 bits.
std::uint16_t expert_value(std::uint64_t salt, long long expert, int s, int t, int h) {
  std::uint64_t const m = mix(salt + 5, static_cast<std::uint64_t>(expert) * 1000 + static_cast<std::uint64_t>(s),
                              static_cast<std::uint64_t>(t) * 65536 + static_cast<std::uint64_t>(h));
  return ref::bf16_bits(static_cast<float>(static_cast<int>(m % 513) - 256) / 32.f);
}

/// The device calls from the test's own kernels (CTA k: part k), as a user who writes kernels would.
__global__ void __launch_bounds__(512) user_dispatch(comm_t c, gpucomm::moe_view v, gpucomm::moe_dispatch_args a) {
  extern __shared__ int scratch[];
  gpucomm::moe_dispatch(c, cooperative_groups::this_thread_block(), v.part(static_cast<int>(blockIdx.x)), a, scratch);
}
__global__ void __launch_bounds__(512) user_combine(comm_t c, gpucomm::moe_view v, gpucomm::moe_combine_args a) {
  extern __shared__ int scratch[];
  gpucomm::moe_combine(c, cooperative_groups::this_thread_block(), v.part(static_cast<int>(blockIdx.x)), a, scratch);
}

/// The buffers of one case, at every PE (symmetric, though only local memory is used).
struct moe_buffers {
  sym_array<std::uint16_t> tokens, expert_rows, out;
  sym_array<std::int64_t> ids;  // int32 ids use the first half
  sym_array<float> weights, scales, recv_weights;
  sym_array<unsigned char> rows;
  sym_array<int> counts, count;
  sym_array<gpucomm::moe_source> sources;
  moe_buffers(gpucomm::world& w, moe_shape const& s)
      : tokens(w.alloc<std::uint16_t>(static_cast<std::size_t>(s.max_tokens * s.hidden))),
        expert_rows(w.alloc<std::uint16_t>(static_cast<std::size_t>(s.max_recv_rows) * s.hidden)),
        out(w.alloc<std::uint16_t>(static_cast<std::size_t>(s.max_tokens * s.hidden))),
        ids(w.alloc<std::int64_t>(static_cast<std::size_t>(s.max_tokens * s.top_k))),
        weights(w.alloc<float>(static_cast<std::size_t>(s.max_tokens * s.top_k))),
        scales(w.alloc<float>(static_cast<std::size_t>(s.max_recv_rows) * (s.hidden / 128))),
        recv_weights(w.alloc<float>(static_cast<std::size_t>(s.max_recv_rows))),
        rows(w.alloc<unsigned char>(gpucomm::moe_recv_sizes(s).rows)),
        counts(w.alloc<int>(static_cast<std::size_t>(s.experts_per_rank))),
        count(w.alloc<int>(1)),
        sources(w.alloc<gpucomm::moe_source>(static_cast<std::size_t>(s.max_recv_rows))) {}

  gpucomm::moe_dispatch_args dispatch_args(int pe, int T, bool device_count) const {
    return {.tokens = reinterpret_cast<__nv_bfloat16 const*>(tokens.ptr(pe).get()),
            .topk_ids = ids.ptr(pe).get(),
            .topk_weights = weights.ptr(pe).get(),
            .num_tokens = device_count ? 0 : T,
            .num_tokens_device = device_count ? count.ptr(pe).get() : nullptr,
            .recv_rows = rows.ptr(pe).get(),
            .recv_scales = scales.ptr(pe).get(),
            .recv_counts = counts.ptr(pe).get(),
            .recv_sources = sources.ptr(pe).get(),
            .recv_weights = recv_weights.ptr(pe).get()};
  }
  gpucomm::moe_combine_args combine_args(int pe) const {
    return {.expert_rows = reinterpret_cast<__nv_bfloat16 const*>(expert_rows.ptr(pe).get()),
            .out = reinterpret_cast<__nv_bfloat16*>(out.ptr(pe).get())};
  }
};

/// Uploads member q's inputs at PE pe and poisons every output there.
void upload_inputs(gpucomm::world& w, int pe, moe_case const& c, moe_shape const& s, ref::moe_inputs const& in, int q,
                   moe_buffers const& b) {
  int const T = in.tokens[static_cast<std::size_t>(q)], H = s.hidden;
  std::vector<std::uint16_t> tokens(static_cast<std::size_t>(s.max_tokens * H), 0);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) tokens[static_cast<std::size_t>(t * H + h)] = token_value(c.salt, q, t, h, H);
  upload(w, pe, b.tokens.ptr(pe), tokens);
  std::vector<long long> const& ids = in.ids[static_cast<std::size_t>(q)];
  std::vector<std::int64_t> packed(static_cast<std::size_t>(s.max_tokens * s.top_k), 0);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (s.index_dtype == moe_index_dtype::int64) {
      packed[i] = ids[i];
    } else {
      auto const id = static_cast<std::int32_t>(ids[i]);
      std::memcpy(reinterpret_cast<unsigned char*>(packed.data()) + 4 * i, &id, 4);
    }
  }
  upload(w, pe, b.ids.ptr(pe), packed);
  std::vector<float> weights = in.weights[static_cast<std::size_t>(q)];
  weights.resize(static_cast<std::size_t>(s.max_tokens * s.top_k), 0.f);
  upload(w, pe, b.weights.ptr(pe), weights);
  upload(w, pe, b.count.ptr(pe), std::vector<int>{T});
  fill_bytes(w, pe, b.rows.ptr(pe).get(), poison_byte, b.rows.size_bytes());
  fill_bytes(w, pe, b.scales.ptr(pe).get(), poison_byte, b.scales.size_bytes());
  fill_bytes(w, pe, b.counts.ptr(pe).get(), poison_byte, b.counts.size_bytes());
  fill_bytes(w, pe, b.sources.ptr(pe).get(), poison_byte, b.sources.size_bytes());
  fill_bytes(w, pe, b.recv_weights.ptr(pe).get(), poison_byte, b.recv_weights.size_bytes());
  fill_bytes(w, pe, b.out.ptr(pe).get(), poison_byte, b.out.size_bytes());
  fill_bytes(w, pe, b.expert_rows.ptr(pe).get(), poison_byte, b.expert_rows.size_bytes());
}

/// Mismatches in member r's dispatch outputs at PE pe.
std::size_t check_dispatch(gpucomm::world& w, int pe, moe_case const& c, moe_shape const& s,
                           std::vector<ref::moe_row> const& rows, moe_buffers const& b) {
  std::size_t const R = static_cast<std::size_t>(s.max_recv_rows), H = static_cast<std::size_t>(s.hidden);
  std::size_t const kept = std::min(rows.size(), R);
  bool const fp8 = s.token_dtype == moe_token_dtype::fp8_e4m3;
  std::size_t bad = 0;
  auto const counts = download(w, pe, b.counts.ptr(pe), static_cast<std::size_t>(s.experts_per_rank));
  std::vector<int> want(static_cast<std::size_t>(s.experts_per_rank), 0);
  for (std::size_t i = 0; i < kept; ++i) ++want[static_cast<std::size_t>(rows[i].expert)];
  bad += counts != want;
  auto const got = download(w, pe, b.rows.ptr(pe), b.rows.size_bytes());
  auto const scales = download(w, pe, b.scales.ptr(pe), b.scales.size());
  auto const sources = download(w, pe, b.sources.ptr(pe), R);
  auto const weights = download(w, pe, b.recv_weights.ptr(pe), R);
  std::size_t const row_bytes = fp8 ? H : 2 * H;
  for (std::size_t i = 0; i < kept; ++i) {
    ref::moe_row const& r = rows[i];
    bad += sources[i].rank != r.rank || sources[i].token != r.token || sources[i].slot != r.slot;
    bad += weights[i] != r.weight;
    for (std::size_t h = 0; h < H; ++h) {
      std::uint16_t const x = token_value(c.salt, r.rank, r.token, static_cast<int>(h), s.hidden);
      if (!fp8) {
        std::uint16_t y;
        std::memcpy(&y, got.data() + i * row_bytes + 2 * h, 2);
        bad += y != x;
        continue;
      }
      float const scale = scales[i * (H / 128) + h / 128];
      float amax = 0.f;  // the block's, from the reference's own values
      for (std::size_t q = h / 128 * 128; q < h / 128 * 128 + 128; ++q)
        amax = std::max(
            amax, std::fabs(ref::bf16_float(token_value(c.salt, r.rank, r.token, static_cast<int>(q), s.hidden))));
      float const want_scale = amax > 0.f ? amax / 448.f : 1.f;
      bad += scale != want_scale;
      float const v = ref::bf16_float(x);
      float const q = ref::e4m3_float(got[i * row_bytes + h]) * scale;
      // Half an e4m3 step at the scaled value, and the float rounding of scaling (a few ulp of v).
      float const tolerance = ref::e4m3_half_ulp(v / want_scale) * want_scale + std::fabs(v) * 0x1p-20f + 1e-30f;
      bad += !(std::fabs(q - v) <= tolerance);
    }
  }
  for (std::size_t i = kept * row_bytes; i < got.size(); ++i) bad += got[i] != poison_byte;
  gpucomm::moe_source poison_source;
  std::memset(&poison_source, poison_byte, sizeof(poison_source));
  for (std::size_t i = kept; i < R; ++i) bad += std::memcmp(&sources[i], &poison_source, sizeof(poison_source)) != 0;
  return bad;
}

/// Member r's expert outputs, in its received rows' order (the rows it kept).
std::vector<std::uint16_t> expert_outputs(moe_case const& c, moe_shape const& s, int r,
                                          std::vector<ref::moe_row> const& rows) {
  std::size_t const R = static_cast<std::size_t>(s.max_recv_rows), H = static_cast<std::size_t>(s.hidden);
  std::vector<std::uint16_t> y(R * H, 0xA5A5);
  for (std::size_t i = 0; i < std::min(rows.size(), R); ++i) {
    long long const expert = static_cast<long long>(r) * s.experts_per_rank + rows[i].expert;
    for (std::size_t h = 0; h < H; ++h)
      y[i * H + h] = expert_value(c.salt, expert, rows[i].rank, rows[i].token, static_cast<int>(h));
  }
  return y;
}

/// Runs dispatch and combine of case c on team t and checks everything (collective).
void check_moe(moe_case const& c, team const& t) {
  auto& w = gpucomm::test::the_world();
  INFO(describe(c, t));
  ref::moe_inputs const in = make_inputs(c, t.size);
  std::vector<std::vector<ref::moe_row>> rows_at;
  std::size_t most = 0;
  for (int r = 0; r < t.size; ++r) {
    rows_at.push_back(ref::expected_rows(in, r));
    most = std::max(most, rows_at.back().size());
  }
  moe_shape const s{.experts_per_rank = c.experts_per_rank,
                    .hidden = c.hidden,
                    .top_k = c.top_k,
                    .token_dtype = c.dtype,
                    .index_dtype = c.index,
                    .max_tokens = c.max_tokens,
                    .max_recv_rows = std::max(1, static_cast<int>(most) + c.slack)};
  bool const overflow = most > static_cast<std::size_t>(s.max_recv_rows);
  gpucomm::moe_plan plan(w, t, s);
  moe_buffers b(w, s);
  gpucomm::moe_prepare<transport_under_test>(w);
  w.prepare(user_dispatch, user_combine);
  for (int pe : w.local_pes())
    if (t.contains(pe)) upload_inputs(w, pe, c, s, in, t.rank_of(pe), b);
  w.barrier();

  // Through the launchers, or the device calls from kernels of c.threads threads.
  std::map<int, gpucomm::moe_handle> handles;
  auto const dispatch_at = [&](int pe) {
    int const T = in.tokens[static_cast<std::size_t>(t.rank_of(pe))];
    if (c.threads == 0) {
      handles[pe] = gpucomm::moe_dispatch<transport_under_test>(w, plan, pe, b.dispatch_args(pe, T, c.device_count),
                                                                w.stream(pe));
      return;
    }
    user_dispatch<<<static_cast<unsigned>(plan.ctas()), static_cast<unsigned>(c.threads), plan.block_scratch_bytes(),
                    w.stream(pe)>>>(w.comm<transport_under_test>(pe), plan.view(pe),
                                    b.dispatch_args(pe, T, c.device_count));
  };
  auto const combine_at = [&](int pe) {
    if (c.threads == 0) {
      gpucomm::moe_combine<transport_under_test>(w, plan, pe, handles[pe], b.combine_args(pe), w.stream(pe));
      return;
    }
    user_combine<<<static_cast<unsigned>(plan.ctas()), static_cast<unsigned>(c.threads), plan.block_scratch_bytes(),
                   w.stream(pe)>>>(w.comm<transport_under_test>(pe), plan.view(pe), b.combine_args(pe));
  };
  for_each_local_pe(w, [&](int pe) {
    if (t.contains(pe)) dispatch_at(pe);
  });
  std::string const error = error_of([&] { finish(w); });
  bool overflow_here = false;  // some local member received more than the bound
  for (int pe : w.local_pes())
    if (t.contains(pe))
      overflow_here = overflow_here || rows_at[static_cast<std::size_t>(t.rank_of(pe))].size() >
                                           static_cast<std::size_t>(s.max_recv_rows);
  if (overflow_here) {
    CHECK_THAT(error, Catch::Contains("max_recv_rows") && Catch::Contains("dropped"));
  } else {
    CHECK(error == "(no error)");
  }
  w.barrier();
  for (int pe : w.local_pes()) {
    if (!t.contains(pe)) continue;
    int const r = t.rank_of(pe);
    std::size_t const bad = check_dispatch(w, pe, c, s, rows_at[static_cast<std::size_t>(r)], b);
    INFO("dispatch at PE " << pe << " (rank " << r << ", " << rows_at[static_cast<std::size_t>(r)].size()
                           << " rows, overflow " << overflow << "): " << bad << " wrong");
    CHECK(bad == 0);
    upload(w, pe, b.expert_rows.ptr(pe), expert_outputs(c, s, r, rows_at[static_cast<std::size_t>(r)]));
  }
  w.barrier();

  // Combine; then, twice more, dispatch and combine again (from graphs where asked): bitwise the same.
  for_each_local_pe(w, [&](int pe) {
    if (t.contains(pe)) combine_at(pe);
  });
  finish(w);
  w.barrier();
  std::map<int, std::vector<std::uint16_t>> first;
  std::size_t const H = static_cast<std::size_t>(s.hidden);
  for (int pe : w.local_pes()) {
    if (!t.contains(pe)) continue;
    int const q = t.rank_of(pe);
    auto const uses = ref::token_uses(in, rows_at, q);
    auto const got = download(w, pe, b.out.ptr(pe), b.out.size());
    std::size_t bad = 0;
    auto const y = [&](int r, std::size_t row, int h) {
      ref::moe_row const& x = rows_at[static_cast<std::size_t>(r)][row];
      return expert_value(c.salt, static_cast<long long>(r) * s.experts_per_rank + x.expert, x.rank, x.token, h);
    };
    auto const kept = [&](int, std::size_t row) { return row < static_cast<std::size_t>(s.max_recv_rows); };
    auto const weight = [&](int r, std::size_t row) { return rows_at[static_cast<std::size_t>(r)][row].weight; };
    for (std::size_t tk = 0; tk < uses.size(); ++tk)
      for (std::size_t h = 0; h < H; ++h)
        bad += got[tk * H + h] != ref::combined(uses[tk], static_cast<int>(h), y, kept, weight);
    for (std::size_t i = uses.size() * H; i < got.size(); ++i) bad += got[i] != 0xA5A5;
    INFO("combine at PE " << pe << " (rank " << q << ", " << uses.size() << " tokens): " << bad << " wrong");
    CHECK(bad == 0);
    first[pe] = got;
  }
  w.barrier();
  std::map<int, cudaGraphExec_t> graphs;
  for (int run = 0; run < 2; ++run) {
    for (int pe : w.local_pes())
      if (t.contains(pe)) fill_bytes(w, pe, b.out.ptr(pe).get(), poison_byte, b.out.size_bytes());
    w.barrier();
    if (c.graphs && run == 0) {
      for_each_local_pe(w, [&](int pe) {
        if (!t.contains(pe)) return;
        int const T = in.tokens[static_cast<std::size_t>(t.rank_of(pe))];
        cudaGraph_t graph;
        GPUCOMM_TEST_CUDA(cudaStreamBeginCapture(w.stream(pe), cudaStreamCaptureModeThreadLocal));
        auto const h = gpucomm::moe_dispatch<transport_under_test>(w, plan, pe, b.dispatch_args(pe, T, c.device_count),
                                                                   w.stream(pe));
        gpucomm::moe_combine<transport_under_test>(w, plan, pe, h, b.combine_args(pe), w.stream(pe));
        GPUCOMM_TEST_CUDA(cudaStreamEndCapture(w.stream(pe), &graph));
        GPUCOMM_TEST_CUDA(cudaGraphInstantiate(&graphs[pe], graph, 0));
        GPUCOMM_TEST_CUDA(cudaGraphDestroy(graph));
      });
    }
    for_each_local_pe(w, [&](int pe) {
      if (!t.contains(pe)) return;
      if (c.graphs) {
        GPUCOMM_TEST_CUDA(cudaGraphLaunch(graphs[pe], w.stream(pe)));
        return;
      }
      dispatch_at(pe);
      combine_at(pe);
    });
    std::string const again = error_of([&] { finish(w); });
    CHECK(again == (overflow_here ? error : std::string("(no error)")));
    w.barrier();
    for (int pe : w.local_pes()) {
      if (!t.contains(pe)) continue;
      INFO("run " << run + 2 << (c.graphs ? " (graph)" : "") << " at PE " << pe);
      CHECK(download(w, pe, b.out.ptr(pe), b.out.size()) == first[pe]);
    }
    w.barrier();
  }
  for (auto const& [pe, exec] : graphs) {
    GPUCOMM_TEST_CUDA(cudaSetDevice(w.device(pe)));
    GPUCOMM_TEST_CUDA(cudaGraphExecDestroy(exec));
  }
}

constexpr moe_token_dtype bf16 = moe_token_dtype::bf16;
constexpr moe_token_dtype fp8 = moe_token_dtype::fp8_e4m3;
constexpr moe_index_dtype i32 = moe_index_dtype::int32;
constexpr moe_index_dtype i64 = moe_index_dtype::int64;

}  // namespace

TEST_CASE("moe dispatch and combine: random routing, k = 1 to 8, bf16 and fp8, on every team shape",
          "[gpu][collectives][moe]") {
  team_set const set;
  std::uint64_t salt = 5600;
  int const tokens = std::max(4, 40 / gpucomm::test::model_slowdown);
  for (team const& t : set.teams) {
    check_moe({3, 256, 2, bf16, i32, tokens, routing::random, salt++}, t);
    check_moe({4, 128, 8, bf16, i64, tokens / 2 + 1, routing::random, salt++}, t);
    check_moe({2, 384, 4, fp8, i32, tokens, routing::random, salt++}, t);
    check_moe({1, 128, 1, fp8, i64, tokens, routing::random, salt++}, t);
  }
}

TEST_CASE("moe dispatch and combine: experts that receive nothing, one expert for all, repeated experts",
          "[gpu][collectives][moe]") {
  auto& w = gpucomm::test::the_world();
  std::uint64_t salt = 5700;
  int const tokens = std::max(4, 40 / gpucomm::test::model_slowdown);
  check_moe({3, 256, 3, bf16, i32, tokens, routing::sparse, salt++}, w.team_world());
  check_moe({2, 128, 1, bf16, i32, tokens, routing::one_expert, salt++}, w.team_world());
  check_moe({2, 128, 8, fp8, i64, tokens, routing::one_expert, salt++}, w.team_world());
  check_moe({2, 256, 4, bf16, i32, tokens, routing::same_expert, salt++}, w.team_world());
}

TEST_CASE("moe dispatch: more rows than the bound are dropped, counted and reported by synchronize",
          "[gpu][collectives][moe]") {
  auto& w = gpucomm::test::the_world();
  int const tokens = std::max(8, 40 / gpucomm::test::model_slowdown);
  moe_case c{2, 128, 4, bf16, i32, tokens, routing::random, 5800};
  c.slack = -5;
  check_moe(c, w.team_world());
  c = {2, 256, 2, fp8, i64, tokens, routing::one_expert, 5801};
  c.slack = -3;
  check_moe(c, w.team_world());
}

TEST_CASE("moe dispatch and combine: a device token count, many CTAs, replayed from CUDA graphs",
          "[gpu][collectives][moe]") {
  auto& w = gpucomm::test::the_world();
  moe_case c{4, 256, 4, fp8, i32, std::max(20, 300 / gpucomm::test::model_slowdown), routing::random, 5900};
  c.device_count = true;
  c.graphs = true;
  check_moe(c, w.team_world());
  c = {2, 128, 2, bf16, i64, std::max(20, 200 / gpucomm::test::model_slowdown), routing::random, 5901};
  c.graphs = true;
  check_moe(c, w.team_world());
}

TEST_CASE("moe dispatch and combine called from kernels of 1, 3 and 16 warps", "[gpu][collectives][moe]") {
  team_set const set;
  std::uint64_t salt = 5950;
  int const tokens = std::max(8, 60 / gpucomm::test::model_slowdown);
  std::size_t shape = 0;  // the team shapes in turn
  for (int threads : {32, 96, 512}) {
    moe_case c{3, 256, 3, threads == 96 ? fp8 : bf16, i32, tokens, routing::random, salt++};
    c.threads = threads;
    check_moe(c, set.teams[shape++ % set.teams.size()]);
  }
}

TEST_CASE("moe bad input: named errors, nothing launched", "[gpu][collectives][moe]") {
  auto& w = gpucomm::test::the_world();
  team const t = w.team_world();
  moe_shape const s{.experts_per_rank = 2, .hidden = 128, .top_k = 2, .max_tokens = 8, .max_recv_rows = 1024};
  moe_shape odd = s;
  odd.hidden = 100;
  CHECK_THAT(error_of([&] { gpucomm::moe_plan p(w, t, odd); }),
             Catch::Contains("moe_plan") && Catch::Contains("hidden"));
  {
    auto small = w.alloc<std::byte>(1024);
    std::string const need = std::to_string(gpucomm::moe_workspace_bytes(t.size, s, 1));
    CHECK_THAT(error_of([&] { gpucomm::moe_plan p(w, t, s, small); }), Catch::Contains("needs " + need));
  }
  if (w.one_process_per_gpu() && w.bootstrap().size() > 1) {  // a plan that differs across processes
    moe_shape mine = s;
    mine.hidden = 128 * (1 + w.bootstrap().rank() % 2);
    CHECK_THAT(error_of([&] { gpucomm::moe_plan p(w, t, mine); }),
               Catch::Contains("differs from process 0") && Catch::Contains("hidden 256 against 128"));
  }
  gpucomm::moe_plan plan(w, t, s);
  moe_buffers b(w, s);
  gpucomm::moe_prepare<transport_under_test>(w);
  moe_case const c{2, 128, 2, bf16, i32, 8, routing::random, 6000};
  ref::moe_inputs const in = make_inputs(c, t.size);
  for (int pe : w.local_pes()) upload_inputs(w, pe, c, s, in, t.rank_of(pe), b);
  w.barrier();
  int const pe = w.local_pes().front();
  auto const stream = w.stream(pe);
  auto args = b.dispatch_args(pe, 4, false);
  args.num_tokens = 9;
  CHECK_THAT(error_of([&] { gpucomm::moe_dispatch<transport_under_test>(w, plan, pe, args, stream); }),
             Catch::Contains("moe_dispatch") && Catch::Contains("max_tokens = 8"));
  args = b.dispatch_args(pe, 4, false);
  args.tokens += 1;  // 2 bytes off: rows move as 16-byte vectors
  CHECK_THAT(error_of([&] { gpucomm::moe_dispatch<transport_under_test>(w, plan, pe, args, stream); }),
             Catch::Contains("16-byte aligned"));
  args = b.dispatch_args(pe, 4, false);
  args.tokens = nullptr;
  CHECK_THAT(error_of([&] { gpucomm::moe_dispatch<transport_under_test>(w, plan, pe, args, stream); }),
             Catch::Contains("null"));
  CHECK_THAT(error_of([&] {
               gpucomm::moe_combine<transport_under_test>(w, plan, pe, gpucomm::moe_handle{}, b.combine_args(pe),
                                                          stream);
             }),
             Catch::Contains("handle"));
  moe_shape fp = s;
  fp.token_dtype = fp8;
  gpucomm::moe_plan fplan(w, t, fp);
  args = b.dispatch_args(pe, 4, false);
  args.recv_scales = nullptr;
  CHECK_THAT(error_of([&] { gpucomm::moe_dispatch<transport_under_test>(w, fplan, pe, args, stream); }),
             Catch::Contains("recv_scales"));
  CHECK(plan.dispatches(pe) == 0);  // nothing launched, nothing counted

  // A device token count above the bound: the call takes max_tokens, synchronize names it.
  std::map<int, gpucomm::moe_handle> handles;
  for (int q : w.local_pes()) upload(w, q, b.count.ptr(q), std::vector<int>{s.max_tokens + 5});
  for_each_local_pe(w, [&](int q) {
    handles[q] = gpucomm::moe_dispatch<transport_under_test>(w, plan, q, b.dispatch_args(q, 0, true), w.stream(q));
  });
  CHECK_THAT(error_of([&] { finish(w); }), Catch::Contains("above max_tokens"));
  w.barrier();
  CHECK_THAT(error_of([&] {
               gpucomm::moe_dispatch<transport_under_test>(w, plan, pe, b.dispatch_args(pe, 4, false), stream);
             }),
             Catch::Contains("second dispatch"));
  for_each_local_pe(w, [&](int q) {
    gpucomm::moe_combine<transport_under_test>(w, plan, q, handles[q], b.combine_args(q), w.stream(q));
  });
  CHECK(error_of([&] { finish(w); }) == "(no error)");
  w.barrier();
  CHECK_THAT(error_of([&] {
               gpucomm::moe_combine<transport_under_test>(w, plan, pe, handles[pe], b.combine_args(pe), stream);
             }),
             Catch::Contains("handle"));
}
