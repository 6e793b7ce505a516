#pragma once
// The symmetric heap on CUDA virtual memory management.
//
// Layout: one virtual range of npes * stride bytes is reserved in every process, and PE i's
// physical memory is mapped at base + i * stride + offset in every address space that can reach
// it. A symmetric object therefore sits at the same offset in every PE's slot, and PE j's copy of
// the local address p is p + (j - i) * stride: translation is arithmetic, with no table on the
// device.
//
// Single-process worlds map every PE's memory once, in the one address space, and grant each
// device access to the PEs it can reach. One-process-per-GPU worlds export each allocation as a
// POSIX file descriptor, pass it to the other processes on the host (fd_exchange.hpp), and each
// process imports and maps its peers' memory into its own reservation.
//
// Every allocation and free is collective: every PE makes the same calls in the same order, so the
// offset allocators agree; each call checks that agreement and throws on every PE together.

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "../../callback.hpp"
#include "../../error.hpp"
#include "../bootstrap.hpp"
#include "driver.hpp"
#include "fd_exchange.hpp"
#include "offset_allocator.hpp"
#include "pe_placement.hpp"

namespace gpucomm::detail {

/// Where the heap lives, as the device code needs it.
struct heap_layout {
  char* base = nullptr;           // PE 0's slot in this process's address space
  std::size_t stride = 0;         // bytes between consecutive PEs' slots
  std::size_t control_bytes = 0;  // gpucomm's control block at offset 0 of each slot
};

class symmetric_heap {
 public:
  /// `allow(i, j)`: whether PE i may map PE j's memory for load/store (when the hardware can).
  /// `control_bytes`: gpucomm's control block at offset 0 of every slot (zeroed), before the
  /// `heap_bytes` users allocate from.
  symmetric_heap(any_bootstrap& boot, std::vector<local_pe> locals, int npes, std::size_t heap_bytes,
                 std::size_t control_bytes, callback<bool(int, int)> const& allow,
                 std::vector<std::uint64_t> const& host_of_pe);

  symmetric_heap(symmetric_heap const&) = delete;
  symmetric_heap& operator=(symmetric_heap const&) = delete;
  ~symmetric_heap() { tear_down(); }

  heap_layout const& layout() const { return layout_; }
  std::size_t granularity() const { return granularity_; }
  /// PE `pe`'s slot in this process's address space.
  char* slot(int pe) const { return layout_.base + static_cast<std::size_t>(pe) * layout_.stride; }
  /// Whether PE `from` can load and store PE `to`'s heap.
  bool can_load_store(int from, int to) const { return reach_[static_cast<std::size_t>(from) * npes_ + to] != 0; }
  std::size_t bytes_in_use() const { return allocator_.bytes_in_use() - layout_.control_bytes; }
  /// The world's session id, the same on every process (0 in a single-process world): names the
  /// host-local sockets of this world.
  std::uint64_t session() const { return session_; }
  std::size_t capacity() const { return allocator_.capacity() - layout_.control_bytes; }

 private:
  void set_up(callback<bool(int, int)> const& allow, std::vector<std::uint64_t> const& host_of_pe);

  void tear_down() noexcept;

 public:
  /// Collective: a new symmetric block of at least `bytes`; returns its offset. `problem`, when not
  /// empty, is what is wrong with the request on this process (e.g. a byte count that overflowed):
  /// it is thrown once the processes agree on `bytes`, so every process throws together.
  std::size_t allocate(std::size_t bytes, char const* call, std::string const& problem = {});

  /// Collective: free the block at `offset`, a pointer's offset in a local slot (none: the pointer is
  /// in no local slot). Checks on every PE first and throws on every PE if any PE's call is wrong;
  /// nothing is changed then. `before_unmap(offset, bytes)`, if given, runs once the checks have
  /// passed and the local GPUs are idle, before the memory goes (a NIC deregisters it there).
  void deallocate(std::optional<std::size_t> where, char const* call,
                  callback<void(std::size_t, std::size_t)> const& before_unmap = {});

  /// Whether heap offset `offset` lies in a live block. (Not "or just past its end": a freed
  /// block's start is often the end of the live one before it.)
  bool in_live_block(std::size_t offset) const { return allocator_.block_containing(offset).has_value(); }

  /// One live block: its heap offset and size (a multiple of the granularity).
  struct block {
    std::size_t offset;
    std::size_t bytes;
  };
  /// Every live block, gpucomm's control block first.
  std::vector<block> blocks() const;
  /// The size of the live block at `offset`.
  std::size_t block_bytes(std::size_t offset) const { return allocator_.size_of(offset); }

 private:
  struct mapping {
    CUdeviceptr va;
    CUmemGenericAllocationHandle handle;
  };
  struct allocation {
    std::size_t offset;
    std::size_t size;
    std::vector<mapping> mappings;
  };

  char& reach(int i, int j) { return reach_[static_cast<std::size_t>(i) * npes_ + j]; }

  static std::size_t round_up(std::size_t x, std::size_t g) { return (x + g - 1) / g * g; }

  static std::uint64_t make_session_id();

  offset_allocator::free_result probe(std::size_t offset) const;

  CUmemAllocationProp properties(int device) const;

  static CUmemAccessDesc access_for(int device);

  void map_one(allocation& a, int pe, CUmemGenericAllocationHandle h);

  void map_block(allocation& a, char const* call);

  /// Whether PE `i` maps PE `j`'s memory (while probing: whether it will try).
  bool wants(int i, int j) const { return can_load_store(i, j); }

  void release(allocation& a);

 private:
  any_bootstrap* boot_;
  std::vector<local_pe> locals_;
  int npes_;
  bool multi_process_;
  std::vector<char> reach_;
  bool reach_rows_known_ = true;
  std::uint64_t session_ = 0;
  std::size_t granularity_ = 0;
  heap_layout layout_{};
  offset_allocator allocator_{0, 0, 1};
  fd_exchange sockets_;
  std::uint64_t sequence_ = 0;
  std::vector<allocation> allocations_;
};

}  // namespace gpucomm::detail

// The bodies of the member functions above: host code, which the device pass (__CUDA_ARCH__
// defined) never runs, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "heap.inl"
#endif
