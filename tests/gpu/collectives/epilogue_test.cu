// The collectives suite (every transport under test): allreduce with an element epilogue, on every
// algorithm, in place and out of place, against the plain allreduce's result passed through the
// same function on the host; and allreduce_rows with residual add and RMSNorm in bf16, against the
// unfused sequence (plain allreduce, then a kernel of its own) bit for bit and against a host
// reference; both called from a kernel of more parts than rows; rows that are not a multiple of 16
// bytes are refused.
#include <cuda_bf16.h>

#include <bit>

#include <gpucomm/collectives/allreduce_rows.cuh>

#include "../../../examples/add_rmsnorm.cuh"
#include "shapes.cuh"

using namespace gpucomm::test::coll;
using gpucomm::test::error_of;

namespace {

using bf16 = __nv_bfloat16;

/// Inputs whose sums over up to 8 members are exact in bf16 and float: multiples of 1/8 in [-1, 1].
float input_of(int pe, std::size_t i) {
  return static_cast<float>(static_cast<int>((static_cast<std::size_t>(pe) * 31 + i * 7) % 17) - 8) / 8.f;
}
float exact_sum(team const& t, std::size_t i) {
  float s = 0;
  for (int r = 0; r < t.size; ++r) s += input_of(t.pe_of(r), i);
  return s;
}

/// v / 2 + bias[i % 61] (the product is exact, so the device's fused multiply-add gives the
/// host's bits). 61 divides no chunk or part size: an index off by a chunk's or a part's offset
/// shows.
constexpr std::size_t bias_period = 61;
struct half_plus_bias {
  float const* bias;  // bias_period values, the same at every member
  __device__ float operator()(std::size_t i, float v) const { return v * 0.5f + bias[i % bias_period]; }
};
float bias_of(std::size_t i) { return static_cast<float>(i % bias_period) - 20.f; }

// The row function: examples/add_rmsnorm.cuh's residual add and RMSNorm (the sum of squares folded
// per warp and then over the warps in order, so that every member, and the unfused kernel with as
// many threads, gets the same bits).
static_assert(std::is_trivially_copyable_v<add_rmsnorm>);

/// The device forms, CTA k running part k: allreduce with an epilogue, then allreduce_rows (with
/// more parts than rows, some parts get no row).
__global__ void __launch_bounds__(1024)
    device_forms(comm_t c, collective_workspace ws, float* out, float const* src, std::size_t n, half_plus_bias epi,
                 bf16* rows_out, bf16 const* rows_src, std::size_t rows, add_rmsnorm norm) {
  auto const block = cg::this_thread_block();
  collective_workspace const part = ws.part(static_cast<int>(blockIdx.x));
  gpucomm::allreduce(c, block, part, out, src, n, reduction::sum{}, epi);
  gpucomm::allreduce_rows(c, block, part, rows_out, rows_src, rows, norm.hidden, reduction::sum{}, norm);
}

/// The unfused second kernel: block b runs fn on row b.
__global__ void rows_kernel(add_rmsnorm fn, bf16* x) {
  auto const block = cg::this_thread_block();
  fn(block, blockIdx.x, x + blockIdx.x * fn.hidden);
}

float residual_of(std::size_t i) { return static_cast<float>(static_cast<int>(i % 13) - 6) / 4.f; }
float weight_of(std::size_t i) { return 0.5f + static_cast<float>(i % 5) / 8.f; }

/// Whether the transport under test runs algorithm A (packets needs load/store to every member).
template <gpucomm::allreduce_algorithm A>
inline constexpr bool runs = A != gpucomm::allreduce_algorithm::packets || gpucomm::test::load_store_everywhere;

template <gpucomm::allreduce_algorithm A>
void check_epilogue(gpucomm::world& w, team_workspace const& ws, team const& t, std::size_t n, bool in_place) {
  if constexpr (runs<A>) {
    auto src = w.alloc<float>(n);
    auto plain = w.alloc<float>(n);
    auto out = w.alloc<float>(n);
    auto bias = w.alloc<float>(bias_period);
    for (int pe : w.local_pes()) {
      std::vector<float> in(n), b(bias_period);
      for (std::size_t i = 0; i < n; ++i) in[i] = input_of(pe, i);
      for (std::size_t i = 0; i < bias_period; ++i) b[i] = bias_of(i);
      upload(w, pe, src.ptr(pe), in);
      upload(w, pe, bias.ptr(pe), b);
      if (in_place) upload(w, pe, out.ptr(pe), in);
      fill_bytes(w, pe, plain.ptr(pe).get(), poison_byte, plain.size_bytes());
      if (!in_place) fill_bytes(w, pe, out.ptr(pe).get(), poison_byte, out.size_bytes());
    }
    w.barrier();
    // The plain call finishes before the first call of another kernel: with PEs sharing a GPU, a
    // kernel's first launch loads its code, and the load waits for the kernels already running,
    // which may wait for another PE's launch or for ProxyQueue's proxy (docs/guide/collectives.md).
    for_each_local_pe(w, [&](int pe) {
      gpucomm::allreduce<transport_under_test, A>(w, ws, pe, plain.ptr(pe).get(), src.ptr(pe).get(), n,
                                                  reduction::sum{}, w.stream(pe));
    });
    finish(w);
    for_each_local_pe(w, [&](int pe) {
      float const* from = in_place ? out.ptr(pe).get() : src.ptr(pe).get();
      gpucomm::allreduce<transport_under_test, A>(w, ws, pe, out.ptr(pe).get(), from, n, reduction::sum{},
                                                  half_plus_bias{bias.ptr(pe).get()}, w.stream(pe));
    });
    finish(w);
    for (int pe : w.local_pes()) {
      auto const p = download(w, pe, plain.ptr(pe), n);
      auto const o = download(w, pe, out.ptr(pe), n);
      std::size_t bad_plain = 0, bad_out = 0;
      for (std::size_t i = 0; i < n; ++i) {
        float const sum = exact_sum(t, i);
        bad_plain += p[i] != sum;
        bad_out += o[i] != sum * 0.5f + bias_of(i);
      }
      INFO("PE " << pe << ", n " << n << (in_place ? ", in place" : ""));
      CHECK(bad_plain == 0);
      CHECK(bad_out == 0);
    }
    w.barrier();
  }
}

/// Elements of one PE's fused output (out) and residual output (res), rows x cols, that differ from
/// the host reference: exact sums, bf16 roundings where the layer rounds, the norm in double.
std::size_t rows_misses(team const& t, std::size_t rows, std::size_t cols, float eps, std::vector<bf16> const& out,
                        std::vector<bf16> const& res) {
  std::size_t bad = 0;
  std::vector<float> sum(cols);
  for (std::size_t row = 0; row < rows; ++row) {
    double ss = 0;
    for (std::size_t j = 0; j < cols; ++j) {
      std::size_t const i = row * cols + j;
      float const reduced = __bfloat162float(__float2bfloat16(exact_sum(t, i)));
      sum[j] = __bfloat162float(__float2bfloat16(reduced + __bfloat162float(__float2bfloat16(residual_of(i)))));
      ss += static_cast<double>(sum[j]) * sum[j];
      bad += __bfloat162float(res[i]) != sum[j];
    }
    double const scale = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
    for (std::size_t j = 0; j < cols; ++j) {
      double const want = sum[j] * scale * __bfloat162float(__float2bfloat16(weight_of(j)));
      bad += std::fabs(__bfloat162float(out[row * cols + j]) - want) > std::fabs(want) / 64 + 1e-3;
    }
  }
  return bad;
}

/// Uploads the row tests' inputs at every local PE: src (rows x cols), residual, weight.
void upload_rows(gpucomm::world& w, std::size_t rows, std::size_t cols, sym_array<bf16> const& src,
                 sym_array<bf16> const& residual, sym_array<bf16> const& weight) {
  std::size_t const n = rows * cols;
  for (int pe : w.local_pes()) {
    std::vector<bf16> in(n), res(n), wt(cols);
    for (std::size_t i = 0; i < n; ++i) in[i] = __float2bfloat16(input_of(pe, i));
    for (std::size_t i = 0; i < n; ++i) res[i] = __float2bfloat16(residual_of(i));
    for (std::size_t i = 0; i < cols; ++i) wt[i] = __float2bfloat16(weight_of(i));
    upload(w, pe, src.ptr(pe), in);
    upload(w, pe, residual.ptr(pe), res);
    upload(w, pe, weight.ptr(pe), wt);
  }
}

template <gpucomm::allreduce_algorithm A>
void check_rows(gpucomm::world& w, team_workspace const& ws, team const& t, std::size_t rows, std::size_t cols) {
  if constexpr (runs<A>) {
    std::size_t const n = rows * cols;
    float const eps = 1e-5f;
    auto src = w.alloc<bf16>(n);
    auto fused = w.alloc<bf16>(n);
    auto unfused = w.alloc<bf16>(n);
    auto residual = w.alloc<bf16>(n);
    auto residual_fused = w.alloc<bf16>(n);
    auto residual_unfused = w.alloc<bf16>(n);
    auto weight = w.alloc<bf16>(cols);
    upload_rows(w, rows, cols, src, residual, weight);
    for (int pe : w.local_pes())
      for (auto* a : {&fused, &unfused, &residual_fused, &residual_unfused})
        fill_bytes(w, pe, a->ptr(pe).get(), poison_byte, a->size_bytes());
    w.barrier();
    // The unfused kernel runs as many threads per row as the fused one, so the sums of squares fold
    // alike.
    int const threads = gpucomm::allreduce_rows_launch_shape<bf16, transport_under_test, A>(ws, rows, cols).threads;
    // Each call finishes before the next kernel's first launch (as in check_epilogue).
    for_each_local_pe(w, [&](int pe) {
      add_rmsnorm const fn{residual.ptr(pe).get(), residual_fused.ptr(pe).get(), weight.ptr(pe).get(), cols, eps};
      gpucomm::allreduce_rows<transport_under_test, A>(w, ws, pe, fused.ptr(pe).get(), src.ptr(pe).get(), rows, cols,
                                                       reduction::sum{}, fn, w.stream(pe));
    });
    finish(w);
    for_each_local_pe(w, [&](int pe) {
      gpucomm::allreduce<transport_under_test>(w, ws, pe, unfused.ptr(pe).get(), src.ptr(pe).get(), n, reduction::sum{},
                                               w.stream(pe));
    });
    for_each_local_pe(w, [&](int pe) {
      add_rmsnorm const fn{residual.ptr(pe).get(), residual_unfused.ptr(pe).get(), weight.ptr(pe).get(), cols, eps};
      if (rows > 0)
        rows_kernel<<<static_cast<unsigned>(rows), static_cast<unsigned>(threads), 0, w.stream(pe)>>>(
            fn, unfused.ptr(pe).get());
    });
    finish(w);
    auto bits = [](bf16 v) { return std::bit_cast<std::uint16_t>(v); };
    for (int pe : w.local_pes()) {
      auto const f = download(w, pe, fused.ptr(pe), n);
      auto const u = download(w, pe, unfused.ptr(pe), n);
      auto const rf = download(w, pe, residual_fused.ptr(pe), n);
      auto const ru = download(w, pe, residual_unfused.ptr(pe), n);
      std::size_t bad_bits = 0;
      for (std::size_t i = 0; i < n; ++i) bad_bits += bits(f[i]) != bits(u[i]) || bits(rf[i]) != bits(ru[i]);
      INFO("PE " << pe << ", " << rows << " rows of " << cols);
      CHECK(bad_bits == 0);
      CHECK(rows_misses(t, rows, cols, eps, f, rf) == 0);
    }
    w.barrier();
  }
}

}  // namespace

TEST_CASE("allreduce stores what its epilogue makes of each reduced element", "[gpu][collectives][epilogue]") {
  auto& w = gpucomm::test::the_world();
  team const world_team = w.team_world();
  team_workspace ws(w, world_team, {.block_bytes = 2048, .parts = 4});
  using enum gpucomm::allreduce_algorithm;
  for (std::size_t n : {std::size_t{1}, std::size_t{37}, 5000 / static_cast<std::size_t>(model_slowdown) + 3}) {
    for (bool in_place : {false, true}) {
      check_epilogue<automatic>(w, ws, world_team, n, in_place);
      check_epilogue<one_shot>(w, ws, world_team, n, in_place);
      check_epilogue<two_shot>(w, ws, world_team, n, in_place);
      check_epilogue<packets>(w, ws, world_team, n, in_place);
    }
  }
}

TEST_CASE("allreduce_rows: residual add and RMSNorm fused, bit for bit the unfused sequence",
          "[gpu][collectives][epilogue]") {
  auto& w = gpucomm::test::the_world();
  w.prepare(rows_kernel);
  team const world_team = w.team_world();
  using enum gpucomm::allreduce_algorithm;
  {
    // Small blocks: rows take several steps each, and more parts than rows leave parts idle.
    team_workspace ws(w, world_team, {.block_bytes = 1024, .parts = 8});
    check_rows<automatic>(w, ws, world_team, 3, 1024);
    check_rows<one_shot>(w, ws, world_team, 3, 1024);
    check_rows<automatic>(w, ws, world_team, 0, 8);
  }
  {
    team_workspace ws(w, world_team);  // the default: the launchers' automatic shapes
    check_rows<automatic>(w, ws, world_team, 17 / model_slowdown + 1, 4096);
    check_rows<one_shot>(w, ws, world_team, 17 / model_slowdown + 1, 4096);
    check_rows<packets>(w, ws, world_team, 40, 8);
  }
}

TEST_CASE("allreduce_rows refuses rows that are not a multiple of 16 bytes", "[gpu][collectives][errors]") {
  auto& w = gpucomm::test::the_world();
  team_workspace ws(w, w.team_world());
  auto buf = w.alloc<bf16>(64);
  add_rmsnorm fn{};
  for (int pe : w.local_pes()) {
    INFO("PE " << pe);
    CHECK_THAT(error_of([&] {
                 gpucomm::allreduce_rows<transport_under_test>(w, ws, pe, buf.ptr(pe).get(), buf.ptr(pe).get(), 4, 12,
                                                               reduction::sum{}, fn, w.stream(pe));
               }),
               Catch::Contains("not a positive multiple of 16 bytes"));
  }
  w.barrier();
}

TEST_CASE("the device forms: allreduce with an epilogue and allreduce_rows, more parts than rows",
          "[gpu][collectives][epilogue]") {
  auto& w = gpucomm::test::the_world();
  team const t = w.team_world();
  w.prepare(device_forms);  // PEs sharing a GPU: loaded before any member's kernel waits for the others
  int const parts = 6;
  team_workspace ws(w, t, {.block_bytes = 1024, .parts = parts});
  std::size_t const n = 3001 / static_cast<std::size_t>(model_slowdown) + 2, rows = 4, cols = 520;
  float const eps = 1e-5f;
  auto src = w.alloc<float>(n);
  auto out = w.alloc<float>(n);
  auto bias = w.alloc<float>(bias_period);
  auto rows_src = w.alloc<bf16>(rows * cols);
  auto rows_out = w.alloc<bf16>(rows * cols);
  auto residual = w.alloc<bf16>(rows * cols);
  auto residual_out = w.alloc<bf16>(rows * cols);
  auto weight = w.alloc<bf16>(cols);
  upload_rows(w, rows, cols, rows_src, residual, weight);
  for (int pe : w.local_pes()) {
    std::vector<float> in(n), b(bias_period);
    for (std::size_t i = 0; i < n; ++i) in[i] = input_of(pe, i);
    for (std::size_t i = 0; i < bias_period; ++i) b[i] = bias_of(i);
    upload(w, pe, src.ptr(pe), in);
    upload(w, pe, bias.ptr(pe), b);
    fill_bytes(w, pe, out.ptr(pe).get(), poison_byte, out.size_bytes());
    fill_bytes(w, pe, rows_out.ptr(pe).get(), poison_byte, rows_out.size_bytes());
    fill_bytes(w, pe, residual_out.ptr(pe).get(), poison_byte, residual_out.size_bytes());
  }
  w.barrier();
  for_each_local_pe(w, [&](int pe) {
    add_rmsnorm const norm{residual.ptr(pe).get(), residual_out.ptr(pe).get(), weight.ptr(pe).get(), cols, eps};
    device_forms<<<parts, 1024, 0, w.stream(pe)>>>(
        w.comm<transport_under_test>(pe), ws.view(pe).first_parts(parts), out.ptr(pe).get(), src.ptr(pe).get(), n,
        half_plus_bias{bias.ptr(pe).get()}, rows_out.ptr(pe).get(), rows_src.ptr(pe).get(), rows, norm);
    GPUCOMM_TEST_CUDA(cudaGetLastError());
  });
  finish(w);
  for (int pe : w.local_pes()) {
    auto const o = download(w, pe, out.ptr(pe), n);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += o[i] != exact_sum(t, i) * 0.5f + bias_of(i);
    INFO("PE " << pe);
    CHECK(bad == 0);
    CHECK(rows_misses(t, rows, cols, eps, download(w, pe, rows_out.ptr(pe), rows * cols),
                      download(w, pe, residual_out.ptr(pe), rows * cols)) == 0);
  }
  w.barrier();
}
