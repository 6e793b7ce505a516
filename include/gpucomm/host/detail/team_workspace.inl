#pragma once
// The bodies of team_workspace.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm {

inline team_workspace::team_workspace(world& w, team const& t, workspace_options o) {
  constexpr char const* call = "team_workspace";
  // On every process together: one that threw alone would leave the others waiting below.
  detail::checked_on_every_rank(w.bootstrap(), call, [&] { check(w, t, o); });
  if (w.one_process_per_gpu()) agree_across_processes(w, t, o);
  int const smallest_gpu = detail::smallest_sm_count(w);
  view_.members = t;
  view_.parts = o.parts;
  view_.block_bytes = collective_workspace::round_block_bytes(o.block_bytes);
  view_.channel_block_bytes = channel_block_for(t.size, o);
  members_per_gpu_ = detail::most_members_per_gpu(w, t);
  cta_limit_ = detail::co_residency_cap(smallest_gpu, members_per_gpu_);
  programmatic_ = o.programmatic_launch;
  memory_ = w.alloc<std::byte>(size_for(t.size, o));
  detail::current_device_guard const keep;
  for (int pe : w.local_pes()) {
    GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
    GPUCOMM_CUDA_CHECK(cudaMemsetAsync(memory_.ptr(pe).get(), 0, memory_.size_bytes(), w.stream(pe)), pe);
  }
  w.barrier();
}

inline collective_workspace team_workspace::view(int pe) const {
  if (!memory_.get()) {
    throw error("team_workspace::view", pe, "the workspace holds nothing (it was moved from)",
                "use the workspace it was moved to");
  }
  collective_workspace v = view_;
  v.base = memory_.ptr(pe);
  return v;
}

inline std::size_t team_workspace::size_for(int team_size, workspace_options const& o) {
  return collective_workspace::bytes(team_size, collective_workspace::round_block_bytes(o.block_bytes),
                                     channel_block_for(team_size, o), o.parts);
}

inline void team_workspace::check(world& w, team const& t, workspace_options const& o) {
  constexpr char const* call = "team_workspace";
  int const pe = w.local_pes().front();
  if (!w.is_live(t)) throw error(call, pe, "the team is not a live team of this world", "pass a team the world made");
  if (o.parts < 1 || o.parts > 4096)
    throw error(call, pe, "parts " + std::to_string(o.parts) + " (at least 1, at most 4096)");
  if (o.block_bytes == 0) throw error(call, pe, "block_bytes 0", "give each round at least one byte");
  // The slots' blocks per part, compared before the size_t product, which could wrap.
  long double const blocks = static_cast<long double>(collective_workspace::block_slots) * o.block_bytes * t.size;
  std::size_t const channel_block = channel_block_for(t.size, o);
  long double const channel =
      static_cast<long double>(collective_workspace::channel_slots) * channel_block * (t.size > 1 ? t.size - 1 : 0);
  long double const need = (blocks + channel) * o.parts;
  if (need > static_cast<long double>(w.heap_capacity())) {
    throw error(call, pe,
                std::to_string(o.parts) + " parts of " + std::to_string(o.block_bytes) + "-byte blocks and " +
                    std::to_string(channel_block) + "-byte channel blocks" +
                    (o.channel_block_bytes ? std::string() : std::string(" (automatic)")) + " for " +
                    std::to_string(t.size) + " members need more than the heap's " + std::to_string(w.heap_capacity()) +
                    " bytes",
                "give smaller blocks or fewer parts: rounds of 64 KiB to a few MiB are what collectives use");
  }
}

inline std::size_t team_workspace::channel_block_for(int team_size, workspace_options const& o) {
  if (o.channel_block_bytes != 0) return collective_workspace::round_block_bytes(o.channel_block_bytes);
  return collective_workspace::automatic_channel_block_bytes(
      team_size, collective_workspace::round_block_bytes(o.block_bytes), o.parts);
}

inline void team_workspace::agree_across_processes(world& w, team const& t, workspace_options const& o) {
  struct arguments {
    team members;
    int parts;
    std::size_t block_bytes;
    std::size_t channel_block_bytes;
  };
  auto const all = w.bootstrap().allgather_value(arguments{t, o.parts, o.block_bytes, o.channel_block_bytes});
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (all[r].members != all[0].members || all[r].parts != all[0].parts || all[r].block_bytes != all[0].block_bytes ||
        all[r].channel_block_bytes != all[0].channel_block_bytes) {
      throw error("team_workspace", static_cast<int>(r),
                  "the team or options differ from PE 0's: team slot " + std::to_string(all[r].members.slot) +
                      " of size " + std::to_string(all[r].members.size) + ", " + std::to_string(all[r].parts) +
                      " parts of " + std::to_string(all[r].block_bytes) + "-byte blocks against slot " +
                      std::to_string(all[0].members.slot) + " of size " + std::to_string(all[0].members.size) + ", " +
                      std::to_string(all[0].parts) + " parts of " + std::to_string(all[0].block_bytes),
                  "make workspaces on every process in the same order with the same team and options");
    }
  }
}

}  // namespace gpucomm
