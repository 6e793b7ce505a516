#pragma once
// team: a subset of the world's PEs, `start + i * stride` for i < size (OpenSHMEM 1.5 and NVSHMEM
// strided teams), as a small trivially copyable value that kernels take by value.
//
//   gpucomm::team const evens = w.team_split(w.team_world(), 0, 2, (w.npes() + 1) / 2);
//   my_kernel<<<...>>>(w.comm<NVLinkStore>(pe), evens);   // in the kernel: c.barrier(block, evens)
//
// Teams are made on the host, collectively (world.hpp: team_split, team_destroy); the predefined
// ones are the world team, the node team (PEs on this host) and the shared-GPU team (PEs on this
// PE's GPU). A team's rank r is world PE pe_of(r); rank_of(pe) goes back (-1 for a non-member).
// Each team has its own barrier state in gpucomm's control block (`slot`), so several teams may
// be in barriers at the same time; within one team, one group per PE is in a barrier at a time.

#include "config.hpp"

namespace gpucomm {

struct team {
  int start = 0;   ///< world PE of team rank 0
  int stride = 1;  ///< world PEs between consecutive team ranks (>= 1)
  int size = 0;    ///< number of PEs; 0: no team (what a PE outside a split gets)
  int slot = -1;   ///< the team's barrier state in the control block; -1: no team

  /// Whether this is a team (not the empty value a PE outside a split gets).
  GPUCOMM_HD constexpr bool valid() const noexcept { return size > 0 && slot >= 0; }
  /// The world PE of team rank `rank` (0 <= rank < size).
  GPUCOMM_HD constexpr int pe_of(int rank) const noexcept { return start + rank * stride; }
  /// The team rank of world PE `pe`, or -1 when pe is not a member.
  GPUCOMM_HD constexpr int rank_of(int pe) const noexcept {
    int const offset = pe - start;
    if (offset < 0 || offset % stride != 0) return -1;
    int const rank = offset / stride;
    return rank < size ? rank : -1;
  }
  /// Whether world PE `pe` is a member.
  GPUCOMM_HD constexpr bool contains(int pe) const noexcept { return rank_of(pe) >= 0; }

  friend GPUCOMM_HD constexpr bool operator==(team const&, team const&) noexcept = default;
};

}  // namespace gpucomm
