// A small expert-parallel MoE layer: each PE routes its tokens (a linear router, top-k, softmax
// weights), dispatches them to the PEs holding their experts, runs each expert (a bf16 matrix,
// one simple GEMM kernel over the received rows) and combines the outputs back, weighted; then
// checks every output element against the same layer computed without communication on the host.
// Runs in one process with `pes_per_gpu` PEs on every visible GPU (argument 1, default 2).
#include <gpucomm/gpucomm.cuh>

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

using comm_t = gpucomm::comm<gpucomm::NVLinkStore>;

constexpr int tokens = 64, hidden = 256, experts_per_pe = 2, top_k = 2;

/// Deterministic inputs: a token element, a router weight, an expert weight, in [-1, 1).
float token_at(int pe, int t, int h) { return float((pe * 7919 + t * 104729 + h * 1299709) % 2001 - 1000) / 1000.f; }
float router_at(int h, int x) { return float((h * 31 + x * 17) % 41 - 20) / 40.f; }
float expert_at(int x, int h, int n) { return float((x * 13 + h * 7 + n * 3) % 29 - 14) / 64.f; }

/// Thread per token: logits over every expert, the top k, their softmax.
__global__ void route(__nv_bfloat16 const* x, float const* router, int experts, int* ids, float* weights) {
  int const t = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (t >= tokens) return;
  float best[top_k];
  int pick[top_k];
  for (int j = 0; j < top_k; ++j) best[j] = -INFINITY, pick[j] = -1;
  for (int e = 0; e < experts; ++e) {
    float logit = 0.f;
    for (int h = 0; h < hidden; ++h) logit += __bfloat162float(x[t * hidden + h]) * router[h * experts + e];
    for (int j = 0; j < top_k; ++j) {
      if (logit <= best[j]) continue;
      for (int q = top_k - 1; q > j; --q) best[q] = best[q - 1], pick[q] = pick[q - 1];
      best[j] = logit, pick[j] = e;
      break;
    }
  }
  float sum = 0.f;
  for (int j = 0; j < top_k; ++j) sum += expf(best[j] - best[0]);
  for (int j = 0; j < top_k; ++j) {
    ids[t * top_k + j] = pick[j];
    weights[t * top_k + j] = expf(best[j] - best[0]) / sum;
  }
}

/// Block per received row (rows past the count return): y = x W of the row's local expert.
__global__ void run_experts(__nv_bfloat16 const* rows, int const* counts, __nv_bfloat16 const* w, __nv_bfloat16* y) {
  int const i = static_cast<int>(blockIdx.x);
  int e = 0, first = 0;
  while (e < experts_per_pe && i >= first + counts[e]) first += counts[e++];
  if (e == experts_per_pe) return;
  for (int n = static_cast<int>(threadIdx.x); n < hidden; n += static_cast<int>(blockDim.x)) {
    float acc = 0.f;
    for (int h = 0; h < hidden; ++h)
      acc += __bfloat162float(rows[i * hidden + h]) * __bfloat162float(w[(e * hidden + h) * hidden + n]);
    y[i * hidden + n] = __float2bfloat16(acc);
  }
}

int main(int argc, char** argv) try {
  int const pes_per_gpu = argc > 1 ? std::atoi(argv[1]) : 2;
  int gpus = 0;
  GPUCOMM_CUDA_CHECK(cudaGetDeviceCount(&gpus), -1);
  std::vector<int> devices;
  for (int d = 0; d < gpus; ++d)
    for (int k = 0; k < pes_per_gpu; ++k) devices.push_back(d);
  gpucomm::world w(devices);
  int const npes = w.npes(), experts = npes * experts_per_pe, bound = tokens * top_k * npes;
  gpucomm::moe_shape const shape{.experts_per_rank = experts_per_pe,
                                 .hidden = hidden,
                                 .top_k = top_k,
                                 .max_tokens = tokens,
                                 .max_recv_rows = bound};
  gpucomm::moe_plan plan(w, w.team_world(), shape);
  gpucomm::moe_prepare<gpucomm::NVLinkStore>(w);  // PEs sharing a GPU: kernels loaded before any waits
  w.prepare(route, run_experts);
  auto x = w.alloc<__nv_bfloat16>(tokens * hidden);
  auto router = w.alloc<float>(hidden * experts);
  auto weights_of_experts = w.alloc<__nv_bfloat16>(experts_per_pe * hidden * hidden);
  auto ids = w.alloc<int>(tokens * top_k);
  auto weights = w.alloc<float>(tokens * top_k);
  auto rows = w.alloc<__nv_bfloat16>(static_cast<std::size_t>(bound) * hidden);
  auto counts = w.alloc<int>(experts_per_pe);
  auto y = w.alloc<__nv_bfloat16>(static_cast<std::size_t>(bound) * hidden);
  auto out = w.alloc<__nv_bfloat16>(tokens * hidden);
  std::vector<float> r(hidden * experts);
  for (int h = 0; h < hidden; ++h)
    for (int e = 0; e < experts; ++e) r[h * experts + e] = router_at(h, e);
  for (int pe : w.local_pes()) {
    GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
    std::vector<__nv_bfloat16> xs(tokens * hidden), ws(experts_per_pe * hidden * hidden);
    for (int t = 0; t < tokens; ++t)
      for (int h = 0; h < hidden; ++h) xs[t * hidden + h] = __float2bfloat16(token_at(pe, t, h));
    for (int e = 0; e < experts_per_pe; ++e)
      for (int h = 0; h < hidden; ++h)
        for (int n = 0; n < hidden; ++n)
          ws[(e * hidden + h) * hidden + n] = __float2bfloat16(expert_at(pe * experts_per_pe + e, h, n));
    GPUCOMM_CUDA_CHECK(cudaMemcpy(x.ptr(pe).get(), xs.data(), xs.size() * 2, cudaMemcpyHostToDevice), pe);
    GPUCOMM_CUDA_CHECK(cudaMemcpy(router.ptr(pe).get(), r.data(), r.size() * 4, cudaMemcpyHostToDevice), pe);
    GPUCOMM_CUDA_CHECK(cudaMemcpy(weights_of_experts.ptr(pe).get(), ws.data(), ws.size() * 2, cudaMemcpyHostToDevice),
                       pe);
  }
  w.barrier();

  // The layer: route, dispatch, experts, combine (the launches of each step on every PE first:
  // dispatch and combine wait for the other PEs).
  std::vector<gpucomm::moe_handle> handles(static_cast<std::size_t>(npes));
  for (int pe : w.local_pes()) {
    GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
    route<<<1, tokens, 0, w.stream(pe)>>>(x.ptr(pe).get(), router.ptr(pe).get(), experts, ids.ptr(pe).get(),
                                          weights.ptr(pe).get());
    handles[static_cast<std::size_t>(pe)] = gpucomm::moe_dispatch(w, plan, pe,
                                                                  {.tokens = x.ptr(pe).get(),
                                                                   .topk_ids = ids.ptr(pe).get(),
                                                                   .topk_weights = weights.ptr(pe).get(),
                                                                   .num_tokens = tokens,
                                                                   .recv_rows = rows.ptr(pe).get(),
                                                                   .recv_counts = counts.ptr(pe).get()},
                                                                  w.stream(pe));
  }
  for (int pe : w.local_pes()) {
    GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
    run_experts<<<bound, 128, 0, w.stream(pe)>>>(rows.ptr(pe).get(), counts.ptr(pe).get(),
                                                 weights_of_experts.ptr(pe).get(), y.ptr(pe).get());
    gpucomm::moe_combine(w, plan, pe, handles[static_cast<std::size_t>(pe)],
                         {.expert_rows = y.ptr(pe).get(), .out = out.ptr(pe).get()}, w.stream(pe));
  }
  w.synchronize();

  // The same layer on the host, from the device router's choices: every element within bf16's
  // rounding of the expert outputs and of the partial sums.
  std::size_t bad = 0;
  for (int pe : w.local_pes()) {
    std::vector<int> id(tokens * top_k);
    std::vector<float> wt(tokens * top_k);
    std::vector<__nv_bfloat16> got(tokens * hidden);
    GPUCOMM_CUDA_CHECK(cudaMemcpy(id.data(), ids.ptr(pe).get(), id.size() * 4, cudaMemcpyDeviceToHost), pe);
    GPUCOMM_CUDA_CHECK(cudaMemcpy(wt.data(), weights.ptr(pe).get(), wt.size() * 4, cudaMemcpyDeviceToHost), pe);
    GPUCOMM_CUDA_CHECK(cudaMemcpy(got.data(), out.ptr(pe).get(), got.size() * 2, cudaMemcpyDeviceToHost), pe);
    for (int t = 0; t < tokens; ++t) {
      for (int n = 0; n < hidden; ++n) {
        double want = 0, scale = 0;
        for (int j = 0; j < top_k; ++j) {
          int const e = id[t * top_k + j];
          double acc = 0;
          for (int h = 0; h < hidden; ++h)
            acc += double(__bfloat162float(__float2bfloat16(token_at(pe, t, h)))) *
                   double(__bfloat162float(__float2bfloat16(expert_at(e, h, n))));
          want += wt[t * top_k + j] * acc;
          scale += std::fabs(wt[t * top_k + j] * acc);
        }
        double const diff = std::fabs(double(__bfloat162float(got[t * hidden + n])) - want);
        bad += !(diff <= 3 * 0x1p-8 * (scale + std::fabs(want)) + 1e-3);
      }
    }
  }
  std::printf("MoE layer of %d tokens per PE, %d experts over %d PE(s), top-%d: %s (%zu elements off)\n", tokens,
              experts, npes, top_k, bad ? "WRONG" : "OK", bad);
  return bad ? 1 : 0;
} catch (gpucomm::error const& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
