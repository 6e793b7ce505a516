#pragma once
// Registering memory with the NIC (steps 6 and 13 of the host set-up), dma-buf first, peer memory
// (nvidia-peermem) or a plain registration after: memory_region, one MR; region_registry, an MR per
// heap allocation and every PE's (base, length, rkey) table; detail::register_umem, the DEVX UMEM
// under each of a qp's queue objects.

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend.hpp"
#include "detail/setup_common.hpp"
#include "device.hpp"

namespace gpucomm::verbs_gpu::host {

/// A memory region the NIC may access (step 13): GPU memory through dma-buf first, then through
/// peer memory (a plain registration of the device pointer, which needs nvidia-peermem); host
/// memory with a plain registration. Keys are host order (the WQE builders swap them).
class memory_region {
 public:
  static constexpr int default_access =
      access::local_write | access::remote_write | access::remote_read | access::remote_atomic;
  memory_region(device& dev, void* ptr, std::size_t bytes, bool gpu_memory, int flags = default_access)
      : be_(&dev.nic()), addr_(reinterpret_cast<std::uintptr_t>(ptr)), bytes_(bytes) {
    int e = 0;
    if (gpu_memory && dev.dmabuf()) {
      // dma-buf handles cover whole pages: export the page-aligned range, keep ptr as the iova.
      auto const page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
      std::uintptr_t const base = addr_ & ~(page - 1);
      std::size_t const len = ((addr_ + bytes + page - 1) & ~(page - 1)) - base;
      int const fd = dev.memory().dmabuf_fd(reinterpret_cast<void const*>(base), len);
      if (fd >= 0) {
        mr_ = be_->reg_mr(dev.pd(), ptr, bytes, flags, fd, addr_ - base, &e);
        ::close(fd);
      }
    }
    if (!mr_) mr_ = be_->reg_mr(dev.pd(), ptr, bytes, flags, -1, 0, &e);
    if (!mr_) {
      detail::fail("registering " + std::to_string(bytes) + " bytes of " + (gpu_memory ? "GPU" : "host") +
                       " memory at " + detail::hex(addr_) + " on " + dev.name() + " failed: " + detail::errno_text(e) +
                       detail::said(*be_),
                   gpu_memory ? "GPU memory needs dma-buf support or nvidia-peermem, and BAR1 space"
                              : "check `ulimit -l` (locked memory)");
    }
  }
  memory_region(memory_region const&) = delete;
  memory_region& operator=(memory_region const&) = delete;
  ~memory_region() {
    if (mr_) be_->dereg_mr(mr_);
  }
  std::uint32_t lkey() const noexcept { return mr_.lkey; }
  std::uint32_t rkey() const noexcept { return mr_.rkey; }
  std::uint64_t addr() const noexcept { return addr_; }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  backend* be_;
  std::uintptr_t addr_;
  std::size_t bytes_;
  mr_handle mr_{};
};

/// One registered allocation as its peers see it: the wire format of region_registry::exchange.
/// Fixed layout (24 bytes, host byte order; every PE of a job runs on the same architecture).
struct region_entry {
  std::uint64_t base = 0;
  std::uint64_t length = 0;
  std::uint32_t rkey = 0;
  std::uint32_t reserved = 0;
};
static_assert(std::is_trivially_copyable_v<region_entry> && sizeof(region_entry) == 24);

/// An MR per heap allocation and every PE's table of them (step 13; refs section 7, NVSHMEM keeps a
/// key per heap chunk): add() registers an allocation, exchange() gathers the tables of all PEs,
/// find() gives the rkey covering a remote range. IBGDAPost registers each symmetric heap block
/// here and exchanges its rkeys as the block is allocated; its kernels find them by heap offset in
/// a device table (transport/nic/heap_keys.hpp).
class region_registry {
 public:
  explicit region_registry(device& dev) : dev_(dev) {}

  /// Registers [ptr, ptr + bytes), one allocation; it must not overlap one already registered.
  region_entry const& add(void* ptr, std::size_t bytes, bool gpu_memory, int flags = memory_region::default_access) {
    auto const base = reinterpret_cast<std::uint64_t>(ptr);
    if (bytes == 0) detail::fail("region_registry::add: an empty allocation at " + detail::hex(base));
    auto next = regions_.lower_bound(base);
    bool const overlaps =
        (next != regions_.end() && next->first < base + bytes) ||
        (next != regions_.begin() && std::prev(next)->second.entry.base + std::prev(next)->second.entry.length > base);
    if (overlaps)
      detail::fail("region_registry::add: [" + detail::hex(base) + ", " + detail::hex(base + bytes) +
                       ") overlaps a registered allocation",
                   "register each heap allocation once; remove() it before its memory is reused");
    auto mr = std::make_unique<memory_region>(dev_, ptr, bytes, gpu_memory, flags);
    region_entry const e{base, bytes, mr->rkey(), 0};
    return regions_.emplace(base, held{e, std::move(mr)}).first->second.entry;
  }
  /// Deregisters the allocation that starts at ptr.
  void remove(void const* ptr) {
    if (regions_.erase(reinterpret_cast<std::uint64_t>(ptr)) == 0)
      detail::fail("region_registry::remove: no allocation registered at " +
                   detail::hex(reinterpret_cast<std::uint64_t>(ptr)));
  }
  /// Whether an allocation starting at ptr is registered.
  bool contains(void const* ptr) const { return regions_.count(reinterpret_cast<std::uint64_t>(ptr)) != 0; }
  /// This PE's table, by base address.
  std::vector<region_entry> local() const {
    std::vector<region_entry> out;
    for (auto const& [base, h] : regions_) out.push_back(h.entry);
    return out;
  }
  /// The local key of a registered range, for WQEs that read or write it; setup_error if no single
  /// allocation covers it.
  std::uint32_t lkey(void const* ptr, std::size_t bytes) const {
    auto const a = reinterpret_cast<std::uint64_t>(ptr);
    auto it = regions_.upper_bound(a);
    if (it != regions_.begin() && covers((--it)->second.entry, a, bytes)) return it->second.mr->lkey();
    detail::fail("region_registry::lkey: [" + detail::hex(a) + ", +" + std::to_string(bytes) +
                     ") is not inside one registered allocation",
                 "register the allocation with add() first");
  }

  /// Gathers every PE's table: `allgather(mine, all, bytes)` writes every rank's `bytes` bytes, in
  /// rank order, into `all` (the same contract as exchange() below). Collective: every rank calls it.
  /// Tables may differ in length; each is padded to the longest with empty entries.
  template <class AllGather>
  void exchange(AllGather&& allgather, int ranks) {
    std::uint64_t const mine = regions_.size();
    std::vector<std::uint64_t> counts(static_cast<std::size_t>(ranks));
    allgather(static_cast<void const*>(&mine), static_cast<void*>(counts.data()), sizeof mine);
    std::size_t const most = static_cast<std::size_t>(*std::max_element(counts.begin(), counts.end()));
    std::vector<region_entry> send = local();
    send.resize(most);
    std::vector<region_entry> all(most * static_cast<std::size_t>(ranks));
    if (most > 0)
      allgather(static_cast<void const*>(send.data()), static_cast<void*>(all.data()), most * sizeof(region_entry));
    peers_.assign(static_cast<std::size_t>(ranks), {});
    for (std::size_t r = 0; r < peers_.size(); ++r) {
      for (std::size_t i = 0; i < most; ++i)
        if (all[r * most + i].length != 0) peers_[r].push_back(all[r * most + i]);
      std::sort(peers_[r].begin(), peers_[r].end(),
                [](region_entry const& a, region_entry const& b) { return a.base < b.base; });
    }
  }
  /// Rank `rank`'s entry holding [addr, addr + bytes), or nullptr (after exchange()).
  region_entry const* find(int rank, std::uint64_t addr, std::size_t bytes) const {
    if (rank < 0 || static_cast<std::size_t>(rank) >= peers_.size()) return nullptr;
    auto const& t = peers_[static_cast<std::size_t>(rank)];
    auto it =
        std::upper_bound(t.begin(), t.end(), addr, [](std::uint64_t a, region_entry const& e) { return a < e.base; });
    if (it == t.begin() || !covers(*--it, addr, bytes)) return nullptr;
    return &*it;
  }
  int ranks() const noexcept { return static_cast<int>(peers_.size()); }

 private:
  static bool covers(region_entry const& e, std::uint64_t addr, std::size_t bytes) noexcept {
    return addr >= e.base && bytes <= e.length && addr - e.base <= e.length - bytes;
  }
  struct held {
    region_entry entry;
    std::unique_ptr<memory_region> mr;
  };
  device& dev_;
  std::map<std::uint64_t, held> regions_;
  std::vector<std::vector<region_entry>> peers_;
};

namespace detail {
/// Step 6: a UMEM of its own for one object, dma-buf first (refs section 4: NVSHMEM and DOCA give
/// the CQ ring, CQ doorbell record, WQ and QP doorbell record a UMEM each, at offset 0, so the
/// page size the kernel picks for a UMEM can never misalign an object inside it).
inline umem_handle register_umem(device& dev, void* ptr, std::size_t bytes, char const* what) {
  backend& be = dev.nic();
  control_memory& mem = dev.memory();
  umem_handle umem{};
  // Every page size from 4 KiB up, as rdma-core's mlx5dv_devx_umem_reg passes; the kernel picks
  // the largest the memory allows (devx_umem_find_best_pgsize).
  std::uint64_t const page_sizes = ~std::uint64_t{0xfff};
  int e = 0;
  if (mem.gpu() && dev.dmabuf()) {
    int const fd = mem.dmabuf_fd(ptr, bytes);
    if (fd >= 0) {
      umem = be.umem_reg(nullptr, bytes, access::local_write, fd, page_sizes, &e);  // nullptr: offset 0
      ::close(fd);
    }
  }
  if (!umem) umem = be.umem_reg(ptr, bytes, access::local_write, -1, page_sizes, &e);
  if (!umem)
    detail::fail(std::string("registering the ") + what + " (" + std::to_string(bytes) + " bytes of " + mem.name() +
                     ") as a DEVX UMEM failed: " + detail::errno_text(e) + detail::said(be),
                 "GPU-resident queues need dma-buf (EFAULT here often means dma-buf is refused for this "
                 "allocation) or nvidia-peermem");
  return umem;
}
}  // namespace detail

}  // namespace gpucomm::verbs_gpu::host
