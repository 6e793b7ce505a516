#pragma once
// The bodies of team_table.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::detail {

inline team_table::team_table(pe_placement const& places, int max_teams)
    : npes_(places.npes()), max_teams_(max_teams), split_(static_cast<std::size_t>(max_teams), team{}) {
  for (int pe : places.local_pes()) {
    node_[pe] = strided([&](int q) { return places.same_host(pe, q); }, control_block_layout::node_slot);
    gpu_[pe] = strided([&](int q) { return places.same_gpu(pe, q); }, control_block_layout::shared_gpu_slot);
  }
}

inline bool team_table::is_live(team const& t) const {
  if (!t.valid() || t.slot >= max_teams_) return false;
  switch (t.slot) {
    case control_block_layout::world_slot:
      return t == world();
    case control_block_layout::node_slot:
      for (auto const& e : node_)
        if (e.second == t) return true;
      return false;
    case control_block_layout::shared_gpu_slot:
      for (auto const& e : gpu_)
        if (e.second == t) return true;
      return false;
    default:
      return split_[static_cast<std::size_t>(t.slot)] == t;
  }
}

inline team team_table::plan_split(any_bootstrap& boot, int me, team const& parent, int start, int stride,
                                   int size) const {
  constexpr char const* call = "world::team_split";
  struct request {
    team parent;
    int start, stride, size;
    std::uint64_t sequence;
  };
  request const mine{parent, start, stride, size, sequence_};
  if (boot.size() > 1) {
    auto const all = boot.allgather_value(mine);
    for (std::size_t i = 0; i < all.size(); ++i) {
      request const& r = all[i];
      if (r.parent != parent || r.start != start || r.stride != stride || r.size != size || r.sequence != sequence_) {
        throw error(call, me,
                    "PE " + std::to_string(i) + " asked for " + describe_split(r.parent, r.start, r.stride, r.size) +
                        " as its team split number " + std::to_string(r.sequence) + ", this PE for " +
                        describe_split(parent, start, stride, size) + " as number " + std::to_string(sequence_),
                    "make teams on every process in the same order with the same arguments");
      }
    }
  }
  std::string problem;
  if (!is_live(parent))
    problem = "the parent is not a live team of this world";
  else if (stride < 1)
    problem = "stride " + std::to_string(stride) + " (a team's ranks are start + i * stride with stride >= 1)";
  else if (size < 1)
    problem = "size " + std::to_string(size) + " (a team has at least one PE)";
  else if (start < 0 || start >= parent.size)
    problem = "start " + std::to_string(start) + " is outside the parent team (ranks 0.." +
              std::to_string(parent.size - 1) + ")" + (parent.slot == 0 ? ": no such PE in the world" : "");
  else if (static_cast<long long>(start) + static_cast<long long>(size - 1) * stride >= parent.size)
    problem = "size " + std::to_string(size) + " with stride " + std::to_string(stride) + " from rank " +
              std::to_string(start) + " runs past the parent team: its last rank would be " +
              std::to_string(static_cast<long long>(start) + static_cast<long long>(size - 1) * stride) + " of " +
              std::to_string(parent.size) + (parent.slot == 0 ? " (past the world's last PE)" : "");
  if (!problem.empty()) throw error(call, me, problem, "give a start, stride and size that stay inside the parent");
  int slot = -1;
  for (int k = control_block_layout::predefined_slots; k < max_teams_ && slot < 0; ++k)
    if (!split_[static_cast<std::size_t>(k)].valid()) slot = k;
  if (slot < 0) {
    throw error(call, me,
                "more teams than the control block holds: " + std::to_string(max_teams_) +
                    " at once, the 3 predefined ones included",
                "destroy teams you no longer need (world::team_destroy), or raise world_options::max_teams "
                "(or GPUCOMM_MAX_TEAMS)");
  }
  return {parent.pe_of(start), parent.stride * stride, size, slot};
}

inline void team_table::add(team const& t) {
  split_[static_cast<std::size_t>(t.slot)] = t;
  ++sequence_;
}

inline void team_table::check_destroy(any_bootstrap& boot, team const& t) const {
  constexpr char const* call = "world::team_destroy";
  std::string problem;
  if (!is_live(t))
    problem = "the team is not a live team of this world";
  else if (t.slot < control_block_layout::predefined_slots)
    problem = "the world, node and shared-GPU teams cannot be destroyed";
  all_ok_or_throw(boot, problem.empty(), problem, call);
  agree(boot, t.slot, call, "the destroyed team", "destroy teams on every process in the same order");
}

inline std::array<std::uint64_t, control_block_layout::header_words> team_table::control_header(
    int pe, std::uint64_t wait_timeout_ns) const {
  std::array<std::uint64_t, control_block_layout::header_words> header{};
  team const gpu = gpu_.at(pe);
  header[control_block_layout::header_pe] = static_cast<std::uint64_t>(pe);
  header[control_block_layout::header_npes] = static_cast<std::uint64_t>(npes_);
  header[control_block_layout::header_max_teams] = static_cast<std::uint64_t>(max_teams_);
  header[control_block_layout::header_gpu_team + 0] = static_cast<std::uint64_t>(gpu.start);
  header[control_block_layout::header_gpu_team + 1] = static_cast<std::uint64_t>(gpu.stride);
  header[control_block_layout::header_gpu_team + 2] = static_cast<std::uint64_t>(gpu.size);
  header[control_block_layout::header_wait_timeout] = wait_timeout_ns;
  return header;
}

inline team team_table::predefined(std::map<int, team> const& teams, int pe, char const* call, char const* what) {
  team const t = teams.at(pe);
  if (!t.valid()) {
    throw error(call, pe,
                std::string("the PEs on PE ") + std::to_string(pe) + "'s " + what +
                    " are not evenly spaced in the world, so they form no team (a team is start + i * stride)",
                std::string("place the PEs of each ") + what + " at evenly spaced ranks, e.g. consecutive ones");
  }
  return t;
}

inline std::string team_table::describe_split(team const& parent, int start, int stride, int size) {
  return "(parent in slot " + std::to_string(parent.slot) + ", start " + std::to_string(start) + ", stride " +
         std::to_string(stride) + ", size " + std::to_string(size) + ")";
}

}  // namespace gpucomm::detail
