#pragma once
// team_workspace: the symmetric memory a team's collectives run in (collectives/workspace.hpp),
// owned on the host; view(pe) is what kernels take.
//
//   gpucomm::team_workspace ws(w, w.team_world());                  // the defaults below
//   gpucomm::team_workspace big(w, t, {.block_bytes = 1 << 20, .parts = 8});
//   kernel<<<...>>>(w.comm<NVLinkStore>(pe), ws.view(pe), ...);
//
// Size: bytes per PE = parts x collective_workspace::part_bytes(team size, block_bytes,
// channel_block_bytes), where part_bytes = slots_offset(team size) + 4 x team size x block_bytes
// (two slots for rounds and two for packet epochs, a block per member each) + 4 x (team size - 1) x
// channel_block_bytes (four slots for channel steps, a block per other member each); slots_offset
// is 256 bytes up to 8 members (a 64-byte local line and two flags per member). The default is 64
// parts of 16 KiB blocks, with the automatic channel block
// (collective_workspace::automatic_channel_block_bytes): the largest multiple of 4 KiB, at most
// 256 KiB and at least block_bytes, that keeps the workspace within 64 MiB per PE: 220 KiB for 2
// members (63 MiB in all), 100 KiB for 3, 60 KiB for 4, 16 KiB for 8 (60 MiB); above 8 members the
// 16 KiB blocks alone pass 64 MiB. It lets the host launchers run up to 64 CTAs per member
// (collectives/launch_shape.hpp); a kernel of one group uses part 0 of it.
//
// Construction and destruction are collective over the whole world, as allocation is (every
// process, same order, same arguments): every PE gets the same symmetric memory, members and not.
// The memory is zeroed once here; collectives never need it reset, so a workspace serves any
// number of collectives, and CUDA graph replays of them, until it is destroyed. One workspace
// belongs to one team; groups that run collectives on one team at the same time (two streams, two
// CTAs of different kernels) need a workspace each, or a part each.

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "../collectives/launch_shape.hpp"
#include "../collectives/workspace.hpp"
#include "../error.hpp"
#include "../team.hpp"
#include "detail/co_residency.hpp"
#include "detail/device_guard.hpp"
#include "world.hpp"

namespace gpucomm {

struct workspace_options {
  /// Bytes each member sends each other member per round (rounded up to a multiple of 128): larger
  /// means fewer rounds for large collectives, and more memory (the size formula above).
  std::size_t block_bytes = std::size_t{16} << 10;
  /// Parts: the most groups that may share each collective (the multi-CTA form), so the most CTAs
  /// a host launcher runs per member.
  int parts = 64;
  /// Bytes each member sends each other member per channel step (the pipelined steps of large
  /// collectives on load/store transports; rounded up to a multiple of 128): 0 for the automatic
  /// size above, which fills the default 64 MiB.
  std::size_t channel_block_bytes = 0;
  /// Whether the host launchers launch with programmatic dependent launch (PDL): the kernel may
  /// start while the stream's previous kernel finishes, and waits for it (cudaGridDependency-
  /// Synchronize) before touching memory. Never used where members share a GPU (see
  /// team_workspace::programmatic_launch). team_workspace::set_programmatic_launch changes it.
  bool programmatic_launch = true;
};

class team_workspace {
 public:
  team_workspace(world& w, team const& t, workspace_options o = {});

  /// What kernels of local PE `pe` take (the whole workspace: pass .part(k) to the k-th group when
  /// parts > 1).
  collective_workspace view(int pe) const;
  team const& members() const noexcept { return view_.members; }
  std::size_t block_bytes() const noexcept { return view_.block_bytes; }
  std::size_t channel_block_bytes() const noexcept { return view_.channel_block_bytes; }
  int parts() const noexcept { return view_.parts; }
  /// Symmetric bytes per PE.
  std::size_t size_bytes() const noexcept { return memory_.size_bytes(); }
  /// The symmetric bytes per PE a workspace of `team_size` members made with `o` takes (its
  /// size_bytes()): to size a world's heap before making one. o must be valid.
  static std::size_t size_for(int team_size, workspace_options const& o);
  /// The most team members that share one GPU (1 when each has its own).
  int members_per_gpu() const noexcept { return members_per_gpu_; }
  /// The most CTAs a host launcher runs per member, whatever the parts: detail::co_residency_cap of
  /// the world's smallest GPU's SMs and members_per_gpu() (collectives/launch_shape.hpp), so that the
  /// CTAs of all members on one GPU, which wait for each other, can all be resident at once, with
  /// an SM per member left free for work they wait on. The same at every member.
  int cta_limit() const noexcept { return cta_limit_; }
  /// Whether the host launchers launch with programmatic dependent launch: as set
  /// (workspace_options::programmatic_launch, set_programmatic_launch), and never where members
  /// share a GPU (a kernel waiting for its predecessor would hold SMs that another member's
  /// kernel, which this member's predecessor waits for, may need).
  bool programmatic_launch() const noexcept { return programmatic_ && members_per_gpu_ == 1; }
  /// Turns programmatic dependent launch on or off for later launches on this workspace (launches
  /// already captured in a graph keep theirs). Local to this process: members need not agree.
  void set_programmatic_launch(bool on) noexcept { programmatic_ = on; }

 private:
  static void check(world& w, team const& t, workspace_options const& o);

  /// The channel block: as asked (rounded up to a multiple of 128), or the automatic one.
  static std::size_t channel_block_for(int team_size, workspace_options const& o);

  /// Every process must pass the same team and options: the memory is symmetric and each member's
  /// collectives index into the others' by the same layout.
  static void agree_across_processes(world& w, team const& t, workspace_options const& o);

  collective_workspace view_;
  sym_array<std::byte> memory_;
  int members_per_gpu_ = 1;
  int cta_limit_ = 1;
  bool programmatic_ = true;
};

}  // namespace gpucomm

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "detail/team_workspace.inl"
#endif
