#pragma once
// The bodies of heap.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::detail {

inline symmetric_heap::symmetric_heap(any_bootstrap& boot, std::vector<local_pe> locals, int npes,
                                      std::size_t heap_bytes, std::size_t control_bytes,
                                      callback<bool(int, int)> const& allow,
                                      std::vector<std::uint64_t> const& host_of_pe)
    : boot_(&boot),
      locals_(std::move(locals)),
      npes_(npes),
      multi_process_(boot.size() > 1),
      reach_(static_cast<std::size_t>(npes) * npes, 0) {
  int const me = locals_.front().pe;
  // Granularity: the largest any local device recommends, agreed across processes.
  std::size_t gran = 0;
  for (auto const& l : locals_) {
    CUmemAllocationProp const prop = properties(l.device);
    std::size_t g = 0;
    GPUCOMM_CU_CHECK(driver().cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), l.pe);
    if (gran < g) gran = g;
  }
  for (auto g : boot.allgather_value(gran))
    if (gran < g) gran = g;
  granularity_ = gran;
  layout_.control_bytes = round_up(control_bytes, gran);
  layout_.stride = round_up(heap_bytes + layout_.control_bytes, gran);
  allocator_ = offset_allocator(0, layout_.stride, gran);

  CUdeviceptr base = 0;
  GPUCOMM_CU_CHECK(driver().cuMemAddressReserve(&base, layout_.stride * static_cast<std::size_t>(npes), gran, 0, 0),
                   me);
  layout_.base = reinterpret_cast<char*>(base);
  try {
    set_up(allow, host_of_pe);
  } catch (...) {
    tear_down();  // the destructor does not run for a constructor that throws
    throw;
  }
}

inline void symmetric_heap::set_up(callback<bool(int, int)> const& allow,
                                   std::vector<std::uint64_t> const& host_of_pe) {
  int const me = locals_.front().pe;
  int const npes = npes_;
  any_bootstrap& boot = *boot_;
  // Which PE may load and store which. Single process: what the devices report. One process per
  // GPU: peers on the same host that the filter allows, confirmed by mapping the control block.
  for (int i = 0; i < npes; ++i) reach(i, i) = 1;
  if (!multi_process_) {
    for (auto const& a : locals_) {
      for (auto const& b : locals_) {
        if (a.pe == b.pe || !allow(a.pe, b.pe)) continue;
        // PEs sharing a GPU reach each other by load/store as such (there is no peer-access
        // query for a device and itself).
        int can = 1;
        if (a.device != b.device) GPUCOMM_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a.device, b.device), a.pe);
        reach(a.pe, b.pe) = static_cast<char>(can != 0);
      }
    }
  } else {
    std::uint64_t session = 0;
    if (boot.rank() == 0) session = make_session_id();
    session = boot.allgather_value(session)[0];
    session_ = session;
    sockets_ = fd_exchange(session, me);
    boot.barrier();  // every socket is bound before anyone sends
    // Tentative for every pair, from inputs every PE shares, so a sender and its receiver agree on
    // who passes a descriptor to whom; mapping the control block confirms or clears row `me`.
    for (int i = 0; i < npes; ++i) {
      for (int j = 0; j < npes; ++j) {
        if (i != j && host_of_pe[i] == host_of_pe[j] && allow(i, j)) reach(i, j) = 1;
      }
    }
    reach_rows_known_ = false;
    // Processes whose filters answer differently would wait for descriptors nobody sends.
    std::uint64_t digest = 1469598103934665603ull;  // FNV-1a of the tentative table
    for (char c : reach_) digest = (digest ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    agree(boot, digest, "world", "a digest of the load/store filter's answers",
          "give every process the same world_options::load_store_filter");
  }
  // The control block: the first allocation, zeroed, at offset 0 of every slot.
  allocate(layout_.control_bytes, "world (control block)");
  if (multi_process_) {
    // Share the confirmed rows: reach(i, j) for every i.
    std::vector<char> row(reach_.begin() + me * npes, reach_.begin() + (me + 1) * npes);
    std::vector<char> all(reach_.size());
    boot.allgather(row.data(), all.data(), row.size());
    reach_ = std::move(all);
    reach_rows_known_ = true;
  }
  for (auto const& l : locals_) {
    GPUCOMM_CUDA_CHECK(cudaSetDevice(l.device), l.pe);
    GPUCOMM_CU_CHECK(driver().cuMemsetD8(reinterpret_cast<CUdeviceptr>(slot(l.pe)), 0, layout_.control_bytes), l.pe);
    GPUCOMM_CUDA_CHECK(cudaDeviceSynchronize(), l.pe);
  }
  boot.barrier();
}

inline void symmetric_heap::tear_down() noexcept {
  for (auto const& l : locals_) {
    cudaSetDevice(l.device);
    cudaDeviceSynchronize();
  }
  for (auto& a : allocations_) release(a);
  allocations_.clear();
  if (layout_.base) {
    driver().cuMemAddressFree(reinterpret_cast<CUdeviceptr>(layout_.base),
                              layout_.stride * static_cast<std::size_t>(npes_));
    layout_.base = nullptr;
  }
}

inline std::size_t symmetric_heap::allocate(std::size_t bytes, char const* call, std::string const& problem) {
  int const me = locals_.front().pe;
  if (multi_process_) {
    agree(*boot_, bytes, call, "the requested size", "every PE must allocate the same size, in the same order");
  }
  if (!problem.empty()) throw error(call, me, problem, "ask for fewer elements");
  auto const offset = allocator_.allocate(bytes);
  if (!offset) {
    throw error(
        call, me,
        "symmetric heap exhausted: asked for " + std::to_string(bytes) + " bytes, the largest free block is " +
            std::to_string(allocator_.largest_free()) + " of " + std::to_string(capacity()) + " bytes",
        "free symmetric memory first, or give world_options::heap_bytes (or GPUCOMM_HEAP_BYTES) a larger value");
  }
  allocation a{*offset, allocator_.size_of(*offset), {}};
  try {
    map_block(a, call);
  } catch (...) {
    release(a);
    allocator_.cancel(*offset);
    throw;
  }
  allocations_.push_back(std::move(a));
  return *offset;
}

inline void symmetric_heap::deallocate(std::optional<std::size_t> where, char const* call,
                                       callback<void(std::size_t, std::size_t)> const& before_unmap) {
  constexpr char const* hint =
      "free each allocation exactly once, on every PE in the same order, through a pointer "
      "that this world's allocate or alloc returned";
  std::string problem;
  std::size_t const offset = where.value_or(0);
  if (!where) {
    problem = "the pointer is not in this world's symmetric heap";
  } else if (offset < layout_.control_bytes) {
    problem = "the pointer is gpucomm's own control block, not a user allocation";
  } else {
    switch (allocator_.size_of(offset) ? offset_allocator::free_result::ok : probe(offset)) {
      case offset_allocator::free_result::ok:
        break;
      case offset_allocator::free_result::double_free:
        problem = "double free: the block at heap offset " + std::to_string(offset) + " was already freed";
        break;
      case offset_allocator::free_result::not_allocated:
        problem = "the pointer is inside the symmetric heap but is not the start of a live allocation (heap offset " +
                  std::to_string(offset) + ")";
        break;
    }
  }
  if (multi_process_) {
    all_ok_or_throw(*boot_, problem.empty(), problem, call, hint);
    agree(*boot_, offset, call, "the freed block's heap offset", hint);
  } else if (!problem.empty()) {
    throw error(call, locals_.front().pe, problem, hint);
  }
  for (auto const& l : locals_) {
    // Kernels still running may use the block: wait for them, as cudaFree does.
    GPUCOMM_CUDA_CHECK(cudaSetDevice(l.device), l.pe);
    GPUCOMM_CUDA_CHECK(cudaDeviceSynchronize(), l.pe);
  }
  auto it = allocations_.begin();
  while (it->offset != offset) ++it;  // the offset was checked to be allocated above
  if (before_unmap) before_unmap(it->offset, it->size);
  release(*it);
  allocations_.erase(it);
  allocator_.deallocate(offset);
}

inline auto symmetric_heap::blocks() const -> std::vector<block> {
  std::vector<block> out;
  for (auto const& a : allocations_) out.push_back({a.offset, a.size});
  return out;
}

inline std::uint64_t symmetric_heap::make_session_id() {
  std::uint64_t const t = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return t ^ (static_cast<std::uint64_t>(::getpid()) << 40) ^ reinterpret_cast<std::uintptr_t>(&t);
}

inline offset_allocator::free_result symmetric_heap::probe(std::size_t offset) const {
  // deallocate() on a copy tells double free from never allocated without touching our state.
  offset_allocator copy = allocator_;
  return copy.deallocate(offset);
}

inline CUmemAllocationProp symmetric_heap::properties(int device) const {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  int rdma = 0;
  if (driver().cuDeviceGetAttribute(&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, device) ==
          CUDA_SUCCESS &&
      rdma) {
    prop.allocFlags.gpuDirectRDMACapable = 1;  // so a NIC can register the heap later
  }
  return prop;
}

inline CUmemAccessDesc symmetric_heap::access_for(int device) {
  CUmemAccessDesc d{};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = device;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return d;
}

inline void symmetric_heap::map_one(allocation& a, int pe, CUmemGenericAllocationHandle h) {
  CUdeviceptr const va = reinterpret_cast<CUdeviceptr>(slot(pe) + a.offset);
  CUresult const rc = driver().cuMemMap(va, a.size, 0, h, 0);
  if (rc != CUDA_SUCCESS) {
    driver().cuMemRelease(h);
    GPUCOMM_CU_CHECK(rc, pe);
  }
  a.mappings.push_back({va, h});
}

inline void symmetric_heap::map_block(allocation& a, char const* call) {
  if (!multi_process_) {
    for (auto const& l : locals_) {
      GPUCOMM_CUDA_CHECK(cudaSetDevice(l.device), l.pe);
      CUmemAllocationProp const prop = properties(l.device);
      CUmemGenericAllocationHandle h{};
      GPUCOMM_CU_CHECK(driver().cuMemCreate(&h, a.size, &prop, 0), l.pe);
      map_one(a, l.pe, h);
      // Access is granted per device, so each device is named once however many PEs share it.
      std::vector<CUmemAccessDesc> access;
      for (auto const& reader : locals_) {
        bool named = false;
        for (CUmemAccessDesc const& d : access) named |= d.location.id == reader.device;
        if (!named && can_load_store(reader.pe, l.pe)) access.push_back(access_for(reader.device));
      }
      GPUCOMM_CU_CHECK(driver().cuMemSetAccess(a.mappings.back().va, a.size, access.data(), access.size()), l.pe);
    }
    return;
  }
  // One process per GPU. Step 1: create and export; every PE learns whether every PE succeeded.
  local_pe const& l = locals_.front();
  int const me = l.pe;
  std::string problem;
  int fd = -1;
  try {
    GPUCOMM_CUDA_CHECK(cudaSetDevice(l.device), me);
    CUmemAllocationProp const prop = properties(l.device);
    CUmemGenericAllocationHandle h{};
    GPUCOMM_CU_CHECK(driver().cuMemCreate(&h, a.size, &prop, 0), me);
    map_one(a, me, h);
    GPUCOMM_CU_CHECK(driver().cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), me);
    CUmemAccessDesc const access = access_for(l.device);
    GPUCOMM_CU_CHECK(driver().cuMemSetAccess(a.mappings.back().va, a.size, &access, 1), me);
  } catch (error const& e) {
    problem = e.what();
  }
  all_ok_or_throw(*boot_, problem.empty(), problem, call);
  // Step 2: pass descriptors to the peers that map us; import and map theirs.
  std::uint64_t const tag = ++sequence_;
  for (int j = 0; j < npes_; ++j) {
    if (j != me && wants(j, me)) sockets_.send(j, fd, tag);
  }
  ::close(fd);
  for (int j = 0; j < npes_; ++j) {
    if (j == me || !wants(me, j)) continue;
    int const peer_fd = sockets_.receive(j, tag);
    CUmemGenericAllocationHandle h{};
    CUresult rc = driver().cuMemImportFromShareableHandle(
        &h, reinterpret_cast<void*>(static_cast<std::uintptr_t>(peer_fd)), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    ::close(peer_fd);
    CUdeviceptr const va = reinterpret_cast<CUdeviceptr>(slot(j) + a.offset);
    if (rc == CUDA_SUCCESS) {
      rc = driver().cuMemMap(va, a.size, 0, h, 0);
      if (rc != CUDA_SUCCESS) driver().cuMemRelease(h);
    }
    if (rc == CUDA_SUCCESS) {
      CUmemAccessDesc const access = access_for(l.device);
      rc = driver().cuMemSetAccess(va, a.size, &access, 1);
      if (rc != CUDA_SUCCESS) {
        driver().cuMemUnmap(va, a.size);
        driver().cuMemRelease(h);
      }
    }
    if (rc == CUDA_SUCCESS) {
      a.mappings.push_back({va, h});
    } else if (!reach_rows_known_) {
      reach(me, j) = 0;  // probing: this peer is not reachable by load/store from here
    } else if (problem.empty()) {
      char const* name = nullptr;
      driver().cuGetErrorName(rc, &name);
      problem = std::string("mapping PE ") + std::to_string(j) + "'s memory failed: " + (name ? name : "?");
    }
  }
  all_ok_or_throw(*boot_, problem.empty(), problem, call);
}

inline void symmetric_heap::release(allocation& a) {
  for (auto it = a.mappings.rbegin(); it != a.mappings.rend(); ++it) {
    driver().cuMemUnmap(it->va, a.size);
    driver().cuMemRelease(it->handle);
  }
  a.mappings.clear();
}

}  // namespace gpucomm::detail
