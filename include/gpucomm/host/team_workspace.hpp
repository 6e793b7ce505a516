#pragma once
// team_workspace: the symmetric memory a team's collectives run in (collectives/workspace.hpp),
// owned on the host; view(pe) is what kernels take.
//
//   gpucomm::team_workspace ws(w, w.team_world());                       // 64 KiB blocks, one part
//   gpucomm::team_workspace wide(w, t, {.block_bytes = 1 << 20, .parts = 8});   // 8 CTAs share each
//   kernel<<<...>>>(w.comm<NVLinkStore>(pe), ws.view(pe), ...);
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

#include "../collectives/workspace.hpp"
#include "../error.hpp"
#include "../team.hpp"
#include "detail/device_guard.hpp"
#include "world.hpp"

namespace gpucomm {

struct workspace_options {
  /// Bytes each member sends each other member per round (rounded up to a multiple of 128): larger
  /// means fewer rounds for large collectives, and more memory: 2 x team size x block_bytes per
  /// part and member.
  std::size_t block_bytes = std::size_t{64} << 10;
  /// Groups that share each collective (the multi-CTA form; 1: one group per member).
  int parts = 1;
};

class team_workspace {
 public:
  team_workspace(world& w, team const& t, workspace_options o = {}) {
    constexpr char const* call = "team_workspace";
    if (!t.valid()) throw error(call, -1, "the team is not a live team", "pass a team the world made");
    if (o.parts < 1 || o.parts > 4096)
      throw error(call, -1, "parts " + std::to_string(o.parts) + " (at least 1, at most 4096)");
    if (o.block_bytes == 0) throw error(call, -1, "block_bytes 0", "give each round at least one byte");
    view_.members = t;
    view_.parts = o.parts;
    view_.block_bytes = collective_workspace::round_block_bytes(o.block_bytes);
    memory_ = w.alloc<std::byte>(collective_workspace::bytes(t.size, view_.block_bytes, o.parts));
    detail::current_device_guard const keep;
    for (int pe : w.local_pes()) {
      GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
      GPUCOMM_CUDA_CHECK(cudaMemsetAsync(memory_.ptr(pe).get(), 0, memory_.size_bytes(), w.stream(pe)), pe);
    }
    w.barrier();
  }

  /// What kernels of local PE `pe` take (the whole workspace: pass .part(k) to the k-th group when
  /// parts > 1).
  collective_workspace view(int pe) const {
    collective_workspace v = view_;
    v.base = memory_.ptr(pe);
    return v;
  }
  team const& members() const noexcept { return view_.members; }
  std::size_t block_bytes() const noexcept { return view_.block_bytes; }
  int parts() const noexcept { return view_.parts; }
  /// Symmetric bytes per PE.
  std::size_t size_bytes() const noexcept { return memory_.size_bytes(); }

 private:
  collective_workspace view_;
  sym_array<std::byte> memory_;
};

}  // namespace gpucomm
