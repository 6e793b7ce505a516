#pragma once
// The world's teams, seen from the host: the predefined ones (world, node, shared GPU) of each
// local PE, the slots of the control block that team_split's teams hold, the checks that
// team_split and team_destroy make on every process together, and the control block's header.
// Resetting a slot's words on the GPUs is the world's (it owns the heap).

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "../../detail/control_block.hpp"
#include "../../error.hpp"
#include "../../team.hpp"
#include "../bootstrap.hpp"
#include "pe_placement.hpp"

namespace gpucomm::detail {

class team_table {
 public:
  team_table() = default;
  /// The predefined teams of every local PE, and max_teams slots in all.
  team_table(pe_placement const& places, int max_teams);

  int max_teams() const noexcept { return max_teams_; }

  /// Every PE; team rank = world PE.
  team world() const { return {0, 1, npes_, control_block_layout::world_slot}; }
  /// The PEs on local PE `pe`'s host; throws when they are not evenly spaced.
  team node(int pe) const { return predefined(node_, pe, "world::team_node", "host"); }
  /// The PEs on local PE `pe`'s GPU; throws when they are not evenly spaced.
  team shared_gpu(int pe) const { return predefined(gpu_, pe, "world::team_shared_gpu", "GPU"); }

  /// A predefined team, or one that split() made and destroy() has not destroyed.
  bool is_live(team const& t) const;

  /// team_split's checks (collective: every process, in the same order, with the same arguments)
  /// and the team it makes, in a free slot; add() records it once the slot is reset. `me`: the
  /// PE errors name.
  team plan_split(any_bootstrap& boot, int me, team const& parent, int start, int stride, int size) const;
  /// Records a team that plan_split made.
  void add(team const& t);

  /// team_destroy's checks (collective): a live team made by team_split, the same on every process.
  void check_destroy(any_bootstrap& boot, team const& t) const;
  /// Frees a destroyed team's slot for a later split.
  void remove(team const& t) { split_[static_cast<std::size_t>(t.slot)] = team{}; }

  /// The control block's header at local PE `pe` (detail/control_block.hpp), read by device code
  /// in debug reports.
  std::array<std::uint64_t, control_block_layout::header_words> control_header(int pe,
                                                                               std::uint64_t wait_timeout_ns) const;

 private:
  /// The members (PEs q with member(q)) as a strided team in `slot`, or an empty team (size 0)
  /// when they are not evenly spaced.
  template <class Member>
  team strided(Member const& member, int slot) const {
    std::vector<int> pes;
    for (int q = 0; q < npes_; ++q)
      if (member(q)) pes.push_back(q);
    int const stride = pes.size() > 1 ? pes[1] - pes[0] : 1;
    for (std::size_t i = 1; i < pes.size(); ++i)
      if (pes[i] - pes[i - 1] != stride) return {pes.front(), 1, 0, -1};
    return {pes.front(), stride, static_cast<int>(pes.size()), slot};
  }

  static team predefined(std::map<int, team> const& teams, int pe, char const* call, char const* what);

  static std::string describe_split(team const& parent, int start, int stride, int size);

  int npes_ = 0;
  int max_teams_ = 0;
  std::vector<team> split_;     // [slot]: the live team_split team there, or team{} (predefined slots: unused)
  std::uint64_t sequence_ = 0;  // team_split calls so far: must agree across processes
  std::map<int, team> node_;    // [local PE]
  std::map<int, team> gpu_;     // [local PE]
};

}  // namespace gpucomm::detail

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "team_table.inl"
#endif
