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
    // On every process together: one that threw alone would leave the others waiting below.
    detail::checked_on_every_rank(w.bootstrap(), call, [&] { check(w, t, o); });
    if (w.one_process_per_gpu()) agree_across_processes(w, t, o);
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
    if (!memory_.get()) {
      throw error("team_workspace::view", pe, "the workspace holds nothing (it was moved from)",
                  "use the workspace it was moved to");
    }
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
  static void check(world& w, team const& t, workspace_options const& o) {
    constexpr char const* call = "team_workspace";
    int const pe = w.local_pes().front();
    if (!w.is_live(t)) throw error(call, pe, "the team is not a live team of this world", "pass a team the world made");
    if (o.parts < 1 || o.parts > 4096)
      throw error(call, pe, "parts " + std::to_string(o.parts) + " (at least 1, at most 4096)");
    if (o.block_bytes == 0) throw error(call, pe, "block_bytes 0", "give each round at least one byte");
    // 4 blocks per member per part: compared before the size_t product, which could wrap.
    long double const need = 4.0L * static_cast<long double>(o.block_bytes) * t.size * o.parts;
    if (need > static_cast<long double>(w.heap_capacity())) {
      throw error(call, pe,
                  std::to_string(o.parts) + " parts of " + std::to_string(o.block_bytes) + "-byte blocks for " +
                      std::to_string(t.size) + " members need more than the heap's " +
                      std::to_string(w.heap_capacity()) + " bytes",
                  "give smaller blocks or fewer parts: rounds of 64 KiB to a few MiB are what collectives use");
    }
  }

  /// Every process must pass the same team and options: the memory is symmetric and each member's
  /// collectives index into the others' by the same layout.
  static void agree_across_processes(world& w, team const& t, workspace_options const& o) {
    struct arguments {
      team members;
      int parts;
      std::size_t block_bytes;
    };
    auto const all = w.bootstrap().allgather_value(arguments{t, o.parts, o.block_bytes});
    for (std::size_t r = 1; r < all.size(); ++r) {
      if (all[r].members != all[0].members || all[r].parts != all[0].parts ||
          all[r].block_bytes != all[0].block_bytes) {
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

  collective_workspace view_;
  sym_array<std::byte> memory_;
};

}  // namespace gpucomm
