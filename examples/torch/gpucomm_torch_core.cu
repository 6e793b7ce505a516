// The gpucomm side of the PyTorch example: a process-per-PE world bootstrapped through the caller's
// allgather and barrier (torch.distributed's store, in the binding), the world team's workspace,
// allreduce-sum and MoE dispatch and combine launched on the caller's stream. No torch header here
// (see the interface).
#include <gpucomm/gpucomm.cuh>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gpucomm_torch_core.hpp"

namespace gpucomm_torch {

struct communicator::state {
  gpucomm::world world;
  gpucomm::team_workspace workspace;
  std::vector<moe_plan*> plans;  ///< the MoE plans open, in the order they were made
  state(gpucomm::callback_bootstrap boot, int device, communicator_options const& o)
      : world(std::move(boot), device, world_options(o)), workspace(world, world.team_world(), workspace_options(o)) {
    // The transport's host half is set up collectively on first use: do it here, with the rest of
    // the collective set-up, rather than in the first all_reduce.
    (void)world.comm<gpucomm::NVLinkStore>(world.local_pes().front());
  }
  // 0: gpucomm's default (communicator_options).
  static gpucomm::workspace_options workspace_options(communicator_options const& o) {
    gpucomm::workspace_options w;
    if (o.block_bytes != 0) w.block_bytes = o.block_bytes;
    if (o.parts != 0) w.parts = o.parts;
    return w;
  }
  static gpucomm::world_options world_options(communicator_options const& o) {
    gpucomm::world_options w;
    w.heap_bytes = o.heap_bytes;
    return w;
  }
};

namespace {

// gpucomm::error is a std::runtime_error whose type lives in this library: hand the binding a plain
// one (pybind11 turns it into RuntimeError with the same message). Other exceptions (the bootstrap
// callbacks' own, a Python error among them) pass through unchanged.
template <class F>
decltype(auto) translated(F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (gpucomm::error const& e) {
    throw std::runtime_error(e.what());
  }
}

/// Makes `device` current for the scope (kernels, allocations), then restores the caller's.
class on_device {
 public:
  on_device(int device, int pe) {
    GPUCOMM_CUDA_CHECK(cudaGetDevice(&before_), pe);
    GPUCOMM_CUDA_CHECK(cudaSetDevice(device), pe);
  }
  on_device(on_device const&) = delete;
  on_device& operator=(on_device const&) = delete;
  ~on_device() { cudaSetDevice(before_); }

 private:
  int before_ = 0;
};

template <class T>
void launch_sum(gpucomm::world& w, gpucomm::team_workspace const& ws, void* dst, void const* src, std::size_t n,
                cudaStream_t stream) {
  int const pe = w.local_pes().front();
  gpucomm::allreduce(w, ws, pe, static_cast<T*>(dst), static_cast<T const*>(src), n, gpucomm::reduction::sum{}, stream);
}

}  // namespace

communicator::communicator(int rank, int size, int device, bootstrap_callbacks callbacks, communicator_options options)
    : rank_(rank), size_(size), device_(device) {
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument("gpucomm_torch: rank " + std::to_string(rank) + " of " + std::to_string(size));
  if (!callbacks.allgather || !callbacks.barrier)
    throw std::invalid_argument("gpucomm_torch: the bootstrap needs an allgather and a barrier");
  gpucomm::callback_bootstrap boot{rank, size, std::move(callbacks.allgather), std::move(callbacks.barrier)};
  state_ = translated([&] { return std::make_unique<state>(std::move(boot), device, options); });
  block_bytes_ = state_->workspace.block_bytes();
  parts_ = state_->workspace.parts();
}

communicator::~communicator() {
  // close() may throw (a rank that does not take part); a destructor must not.
  try {
    close();
  } catch (std::exception const& e) {
    std::fprintf(stderr, "gpucomm_torch: closing the communicator of rank %d failed: %s\n", rank_, e.what());
  }
}

std::string communicator::synchronize() {
  if (!state_) throw std::logic_error("gpucomm_torch: synchronize on a closed communicator");
  auto& w = state_->world;
  int const pe = w.local_pes().front();
  try {
    {
      // Every stream of this process on the GPU (torch's among them: they share the primary
      // context), so that the words gpucomm counts in are final; then the world reads and reports them.
      on_device const here(device_, pe);
      GPUCOMM_CUDA_CHECK(cudaDeviceSynchronize(), pe);
    }
    w.synchronize();
  } catch (gpucomm::error const& e) {
    return e.what();  // the report is this call's result: gpucomm_torch.py raises it
  }
  return {};
}

void communicator::close() {
  if (!state_) return;
  // The plans first: their workspaces are the world's memory (each close is collective, and every
  // rank made its plans in the same order).
  while (!state_->plans.empty()) state_->plans.front()->close();
  std::unique_ptr<state> s = std::move(state_);
  // Collective: the workspace's memory is freed through the bootstrap (every rank agrees), after the
  // GPU is done with it (the heap waits for the device). Then the world goes.
  translated([&] { s.reset(); });
}

void communicator::all_reduce(void* dst, void const* src, std::size_t n, element type, std::uintptr_t stream) {
  if (!state_) throw std::logic_error("gpucomm_torch: all_reduce on a closed communicator");
  if (n == 0) return;  // every rank has n == 0: nothing to exchange
  auto const s = reinterpret_cast<cudaStream_t>(stream);
  auto& w = state_->world;
  auto const& ws = state_->workspace;
  translated([&] {
    switch (type) {
      case element::float32:
        return launch_sum<float>(w, ws, dst, src, n, s);
      case element::float16:
        return launch_sum<__half>(w, ws, dst, src, n, s);
      case element::bfloat16:
        return launch_sum<__nv_bfloat16>(w, ws, dst, src, n, s);
      case element::float64:
        return launch_sum<double>(w, ws, dst, src, n, s);
      case element::int32:
        return launch_sum<std::int32_t>(w, ws, dst, src, n, s);
      case element::int64:
        return launch_sum<std::int64_t>(w, ws, dst, src, n, s);
      case element::int8:
        return launch_sum<std::int8_t>(w, ws, dst, src, n, s);
      case element::uint8:
        return launch_sum<std::uint8_t>(w, ws, dst, src, n, s);
    }
    throw std::invalid_argument("gpucomm_torch: unknown element type " + std::to_string(static_cast<int>(type)));
  });
}

// ---- MoE ------------------------------------------------------------------------------------------

namespace {

gpucomm::moe_shape shape_of(moe_plan_shape const& s) {
  return {.experts_per_rank = s.experts_per_rank,
          .hidden = s.hidden,
          .top_k = s.top_k,
          .token_dtype =
              s.tokens == moe_tokens::float8_e4m3 ? gpucomm::moe_token_dtype::fp8_e4m3 : gpucomm::moe_token_dtype::bf16,
          .index_dtype = s.ids == moe_ids::int64 ? gpucomm::moe_index_dtype::int64 : gpucomm::moe_index_dtype::int32,
          .max_tokens = s.max_tokens,
          .max_recv_rows = s.max_recv_rows};
}

constexpr int checked_ids_threads = 256;

/// copy[i] = ids[i] for the first T x k ids, -1 for one outside [-1, experts), each such id counted
/// in *bad (the plan's moe_error_bad_ids word, which world::synchronize reports). T as dispatch
/// takes it: the device count when there is one, clamped to [0, max_tokens].
template <class Id>
__global__ void __launch_bounds__(checked_ids_threads)
    checked_ids(Id const* ids, Id* copy, int num_tokens, int const* num_tokens_device, int max_tokens, int k,
                long long experts, unsigned long long* bad) {
  int t = num_tokens_device != nullptr ? *num_tokens_device : num_tokens;
  t = t < 0 ? 0 : t > max_tokens ? max_tokens : t;
  std::size_t const n = static_cast<std::size_t>(t) * static_cast<std::size_t>(k);
  unsigned long long ignored = 0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    Id const id = ids[i];
    bool const usable = id >= -1 && id < experts;
    copy[i] = usable ? id : Id{-1};
    ignored += usable ? 0 : 1;
  }
  if (ignored != 0) atomicAdd(bad, ignored);
}

}  // namespace

struct moe_plan::state {
  gpucomm::world& world;
  gpucomm::moe_plan plan;
  int pe;
  void* ids = nullptr;  ///< the checked copy of the ids dispatch reads: [max_tokens x top_k]
  state(gpucomm::world& w, moe_plan_shape const& s)
      : world(w),
        plan(w, w.team_world(), shape_of(s), gpucomm::moe_options{.max_ctas = s.max_ctas}),
        pe(w.local_pes().front()) {
    // Kernels loaded before the first launch, as world::prepare asks where PEs share a GPU.
    gpucomm::moe_prepare<gpucomm::NVLinkStore>(w);
    w.prepare(checked_ids<std::int32_t>, checked_ids<std::int64_t>);
    on_device const here(w.device(pe), pe);
    std::size_t const id_bytes = s.ids == moe_ids::int64 ? 8 : 4;
    GPUCOMM_CUDA_CHECK(cudaMalloc(&ids, id_bytes * static_cast<std::size_t>(s.max_tokens) * s.top_k), pe);
  }
  ~state() {
    try {
      on_device const here(world.device(pe), pe);
      cudaFree(ids);                   // waits for the dispatches that read it
    } catch (gpucomm::error const&) {  // the GPU is gone: nothing to free
    }
  }
  state(state const&) = delete;
  state& operator=(state const&) = delete;

  template <class Id>
  void check_ids(moe_dispatch_buffers const& b, cudaStream_t stream) {
    gpucomm::moe_shape const& s = plan.shape();
    gpucomm::moe_view const v = plan.view(pe);
    auto* const errors = reinterpret_cast<unsigned long long*>(v.base.get() + v.layout().errors);
    on_device const here(world.device(pe), pe);
    long long const n = static_cast<long long>(s.max_tokens) * s.top_k;
    auto const blocks =
        static_cast<unsigned>(std::min<long long>((n + checked_ids_threads - 1) / checked_ids_threads, 64));
    checked_ids<Id><<<blocks, checked_ids_threads, 0, stream>>>(
        static_cast<Id const*>(b.topk_ids), static_cast<Id*>(ids), b.num_tokens, b.num_tokens_device, s.max_tokens,
        s.top_k, gpucomm::moe_experts(plan.members().size, s), errors + gpucomm::moe_error_bad_ids);
    GPUCOMM_CUDA_CHECK(cudaGetLastError(), pe);
  }

  long long dispatch(moe_dispatch_buffers const& b, cudaStream_t stream) {
    if (plan.shape().index_dtype == gpucomm::moe_index_dtype::int64)
      check_ids<std::int64_t>(b, stream);
    else
      check_ids<std::int32_t>(b, stream);
    gpucomm::moe_dispatch_args const a{.tokens = static_cast<__nv_bfloat16 const*>(b.tokens),
                                       .topk_ids = ids,
                                       .topk_weights = b.topk_weights,
                                       .num_tokens = b.num_tokens,
                                       .num_tokens_device = b.num_tokens_device,
                                       .recv_rows = b.recv_rows,
                                       .recv_scales = b.recv_scales,
                                       .recv_counts = b.recv_counts,
                                       .recv_sources = reinterpret_cast<gpucomm::moe_source*>(b.recv_sources),
                                       .recv_weights = b.recv_weights};
    return gpucomm::moe_dispatch<gpucomm::NVLinkStore>(world, plan, pe, a, stream).call;
  }

  void combine(long long call, void const* expert_rows, void* out, cudaStream_t stream) {
    // A rank with no tokens has an empty out, maybe without memory: gpucomm wants a pointer all the
    // same, and writes nothing through it.
    gpucomm::moe_combine_args const a{.expert_rows = static_cast<__nv_bfloat16 const*>(expert_rows),
                                      .out = static_cast<__nv_bfloat16*>(out != nullptr ? out : ids)};
    gpucomm::moe_combine<gpucomm::NVLinkStore>(world, plan, pe, gpucomm::moe_handle{&plan, pe, call}, a, stream);
  }
};
static_assert(sizeof(gpucomm::moe_source) == 3 * sizeof(std::int32_t), "sources are [rows x 3] int32 tensors");

moe_plan::moe_plan(communicator& c, moe_plan_shape const& shape) : comm_(&c), shape_(shape), device_(c.device()) {
  if (!c.state_) throw std::logic_error("gpucomm_torch: moe_plan on a closed communicator");
  state_ = translated([&] { return std::make_unique<state>(c.state_->world, shape); });
  ctas_ = state_->plan.ctas();
  workspace_bytes_ = state_->plan.workspace_bytes();
  c.state_->plans.push_back(this);
}

moe_plan::~moe_plan() {
  try {
    close();
  } catch (std::exception const& e) {
    std::fprintf(stderr, "gpucomm_torch: closing an MoE plan of rank %d failed: %s\n", comm_->rank(), e.what());
  }
}

void moe_plan::close() {
  if (!state_) return;
  std::unique_ptr<state> s = std::move(state_);
  // An open plan's communicator is open: communicator::close closes its plans first.
  auto& plans = comm_->state_->plans;
  plans.erase(std::find(plans.begin(), plans.end(), this));
  translated([&] { s.reset(); });  // collective: the workspace is freed through the bootstrap
}

long long moe_plan::dispatch(moe_dispatch_buffers const& b, std::uintptr_t stream) {
  if (!state_) throw std::logic_error("gpucomm_torch: dispatch on a closed MoE plan");
  long long const call = translated([&] { return state_->dispatch(b, reinterpret_cast<cudaStream_t>(stream)); });
  combine_rows_ = b.num_tokens_device != nullptr ? shape_.max_tokens : b.num_tokens;
  return call;
}

void moe_plan::combine(long long call, void const* expert_rows, void* out, int out_rows, std::uintptr_t stream) {
  if (!state_) throw std::logic_error("gpucomm_torch: combine on a closed MoE plan");
  if (out_rows < combine_rows_) {
    throw std::invalid_argument("gpucomm_torch: combine's output holds " + std::to_string(out_rows) +
                                " rows; the dispatch it undoes has " + std::to_string(combine_rows_) + " tokens");
  }
  translated([&] { state_->combine(call, expert_rows, out, reinterpret_cast<cudaStream_t>(stream)); });
}

}  // namespace gpucomm_torch
