#pragma once
// The bodies of moe.cuh's functions, read by the host pass only (see the end of that header).

namespace gpucomm {

inline moe_plan::~moe_plan() {
  for (int const key : watch_keys_) watch_->remove(key);
}

inline moe_view moe_plan::view(int pe) const {
  moe_view v = view_;
  v.base = base_of(pe);
  return v;
}

inline moe_plan::moe_plan(world& w, team const& t, moe_shape const& s, sym_array<std::byte> const* given,
                          moe_options o) {
  constexpr char const* call = "gpucomm::moe_plan";
  detail::checked_on_every_rank(w.bootstrap(), call, [&] { check(w, t, s, o); });
  int cap = detail::co_residency_cap(detail::smallest_sm_count(w), detail::most_members_per_gpu(w, t));
  if (o.max_ctas > 0 && o.max_ctas < cap) cap = o.max_ctas;
  view_.members = t;
  view_.shape = s;
  view_.ctas = moe_ctas(s, cap);
  if (w.one_process_per_gpu()) agree_across_processes(w, s, o, view_.ctas);
  std::size_t const need = workspace_bytes();
  detail::checked_on_every_rank(w.bootstrap(), call, [&] {
    if (given != nullptr && given->size_bytes() < need) {
      throw error(call, w.local_pes().front(),
                  "the workspace given holds " + std::to_string(given->size_bytes()) + " bytes; the plan needs " +
                      std::to_string(need),
                  "give a sym_array<std::byte> of at least " + std::to_string(need) +
                      " bytes (moe_workspace_bytes), or let the plan allocate its own");
    }
  });
  if (given == nullptr) owned_ = w.alloc<std::byte>(need);
  memory_ = given != nullptr ? given : &owned_;
  detail::current_device_guard const keep;
  for (int pe : w.local_pes()) {
    GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
    GPUCOMM_CUDA_CHECK(cudaMemsetAsync(memory_->ptr(pe).get(), 0, need, w.stream(pe)), pe);
    calls_.push_back({pe});
  }
  w.barrier();
  watch_ = &w.transport_host<detail::device_error_watch>();
  for (int pe : w.local_pes()) {
    if (!t.contains(pe)) continue;
    auto const* words = reinterpret_cast<std::uint64_t const*>(base_of(pe).get() + view(pe).layout().errors);
    watch_keys_.push_back(watch_->add(pe, words, moe_error_words, reporter(s)));
  }
}

inline std::size_t moe_plan::local_index(int pe) const {
  for (std::size_t i = 0; i < calls_.size(); ++i)
    if (calls_[i].pe == pe) return i;
  throw error("gpucomm::moe_plan", pe, "not a PE of this process", "call with a local PE (world::local_pes)");
}

inline void moe_plan::check(world& w, team const& t, moe_shape const& s, moe_options const& o) {
  constexpr char const* call = "gpucomm::moe_plan";
  int const pe = w.local_pes().front();
  if (!w.is_live(t)) throw error(call, pe, "the team is not a live team of this world", "pass a team the world made");
  if (std::string const why = moe_shape_problem(t.size, s); !why.empty())
    throw error(call, pe, "the shape has " + why, "give a shape within the limits of collectives/moe_shape.hpp");
  if (o.max_ctas < 0) throw error(call, pe, "max_ctas " + std::to_string(o.max_ctas), "give 0 (automatic) or more");
  std::size_t const need = moe_workspace_bytes(t.size, s, moe_ctas(s, o.max_ctas > 0 ? o.max_ctas : 32));
  if (need > w.heap_capacity()) {
    throw error(call, pe,
                "the workspace needs " + std::to_string(need) + " bytes, more than the heap's " +
                    std::to_string(w.heap_capacity()),
                "give a larger world_options::heap_bytes, or smaller max_tokens");
  }
}

inline void moe_plan::agree_across_processes(world& w, moe_shape const& s, moe_options const& o, int ctas) {
  struct arguments {
    moe_shape shape;
    moe_options options;
    int ctas;
  };
  auto const all = w.bootstrap().allgather_value(arguments{s, o, ctas});
  auto const n = [](long long v) { return std::to_string(v); };
  for (std::size_t r = 1; r < all.size(); ++r) {
    moe_shape const &a = all[r].shape, &b = all[0].shape;
    std::string diff;
    auto field = [&](char const* name, long long x, long long y) {
      if (x != y) diff += std::string(diff.empty() ? "" : ", ") + name + " " + n(x) + " against " + n(y);
    };
    field("experts_per_rank", a.experts_per_rank, b.experts_per_rank);
    field("hidden", a.hidden, b.hidden);
    field("top_k", a.top_k, b.top_k);
    field("token_dtype", static_cast<int>(a.token_dtype), static_cast<int>(b.token_dtype));
    field("index_dtype", static_cast<int>(a.index_dtype), static_cast<int>(b.index_dtype));
    field("max_tokens", a.max_tokens, b.max_tokens);
    field("max_recv_rows", a.max_recv_rows, b.max_recv_rows);
    field("max_ctas", all[r].options.max_ctas, all[0].options.max_ctas);
    field("CTAs", all[r].ctas, all[0].ctas);
    if (!diff.empty()) {
      throw error("gpucomm::moe_plan", static_cast<int>(r), "the plan differs from process 0's: " + diff,
                  "make MoE plans on every process in the same order with the same team, shape and options");
    }
  }
}

inline detail::device_error_watch::host_state::report moe_plan::reporter(moe_shape const& s) {
  std::vector<std::uint64_t> seen(moe_error_words, 0);
  return [seen, s](int pe, std::vector<std::uint64_t> const& now) mutable {
    std::vector<std::uint64_t> const before = seen;
    seen = now;
    auto const n = [](std::uint64_t v) { return std::to_string(v); };
    if (now[moe_error_rows_dropped] != before[moe_error_rows_dropped]) {
      throw error("gpucomm::moe_dispatch", pe,
                  n(now[moe_error_rows_dropped] - before[moe_error_rows_dropped]) +
                      " received rows past max_recv_rows (" + n(s.max_recv_rows) +
                      ") were dropped; a call would have received " + n(now[moe_error_largest_recv]),
                  "make the plan's max_recv_rows at least the rows a member can receive (recv_counts say what "
                  "was kept)");
    }
    if (now[moe_error_tokens_over] != before[moe_error_tokens_over]) {
      throw error("gpucomm::moe_dispatch", pe,
                  "a device token count of " + n(now[moe_error_largest_tokens]) + " is above max_tokens (" +
                      n(s.max_tokens) + "); the call took max_tokens",
                  "keep num_tokens_device within the plan's max_tokens");
    }
    if (now[moe_error_bad_ids] != before[moe_error_bad_ids]) {
      throw error(
          "gpucomm::moe_dispatch", pe,
          n(now[moe_error_bad_ids] - before[moe_error_bad_ids]) + " expert ids outside [-1, experts) were ignored",
          "give ids below members x experts_per_rank (-1: no expert)");
    }
    if (now[moe_error_out_of_order] != before[moe_error_out_of_order]) {
      throw error("gpucomm::moe_dispatch", pe, "dispatch and combine did not alternate on the plan",
                  "call dispatch, combine, dispatch, ... on each plan");
    }
  };
}

}  // namespace gpucomm

namespace gpucomm::detail {

inline void moe_refuse(char const* call, int pe, std::string const& what) {
  throw error(call, pe, what, "nothing was launched (docs/guide/collectives.md, MoE dispatch and combine)");
}

}  // namespace gpucomm::detail
