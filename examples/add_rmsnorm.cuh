#pragma once
// The row function of examples/fused_rmsnorm.cu (and of the benchmark's allreduce_rmsnorm case):
// residual add and RMSNorm of one bf16 row, for gpucomm::allreduce_rows.
#include <cuda_bf16.h>

#include <cstddef>

/// residual_out = x + residual, and x = (x + residual) * rsqrt(mean((x + residual)^2) + eps) *
/// weight (each sum rounded to bf16 first): the row function allreduce_rows calls with the whole
/// CTA for each reduced row. residual_out may be residual (the next layer's residual, in place).
struct add_rmsnorm {
  __nv_bfloat16 const* residual;  // tokens x hidden, the same at every PE
  __nv_bfloat16* residual_out;    // tokens x hidden
  __nv_bfloat16 const* weight;    // hidden
  std::size_t hidden;
  float eps;
  template <class G>
  __device__ void operator()(G const& g, std::size_t row, __nv_bfloat16* x) const {
    __shared__ float partial[32];  // the row function's own scratch: one sum per warp
    std::size_t const at = row * hidden;
    float ss = 0;
    for (std::size_t i = g.thread_rank(); i < hidden; i += g.num_threads()) {
      __nv_bfloat16 const sum = __float2bfloat16(__bfloat162float(x[i]) + __bfloat162float(residual[at + i]));
      residual_out[at + i] = x[i] = sum;
      ss += __bfloat162float(sum) * __bfloat162float(sum);
    }
    for (int d = 16; d > 0; d /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, d);
    if (g.thread_rank() % 32 == 0) partial[g.thread_rank() / 32] = ss;
    g.sync();
    float total = 0;
    for (unsigned k = 0; k < (g.num_threads() + 31) / 32; ++k) total += partial[k];  // the same order everywhere
    g.sync();
    float const scale = rsqrtf(total / float(hidden) + eps);
    for (std::size_t i = g.thread_rank(); i < hidden; i += g.num_threads())
      x[i] = __float2bfloat16(__bfloat162float(x[i]) * scale * __bfloat162float(weight[i]));
  }
};
