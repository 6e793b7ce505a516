#pragma once
// IBGDAPost's NIC set-up: per local PE, the NIC opened with the shared endpoints
// (transport/nic/endpoints.hpp: the firmware model or rdma-core under verbs_gpu's set-up, an MR per block of
// the symmetric heap with its rkeys exchanged as the block is allocated), `qps_per_peer` RC QPs to
// every PE (itself included) whose rings, CQs and doorbell records live in GPU memory, connected
// through the bootstrap; the result slots of fetching operations, and the device tables the kernels
// read (the heap key table among them, a copy of the endpoints' host table: heap_keys.hpp).
//
// The NIC is the one IBGDAPost's options (ibgda_options::nic) or GPUCOMM_NIC name: the model (a
// test and development tool) or hardware (docs/guide/ibgda.md: "Running on a real NIC", and what has run
// where in "Limits and known problems").
//
// Compiled only into programs that link the CMake target gpucomm::nic: its registration unit
// installs this class behind nic_link.hpp, through which IBGDAPost's host half (host.cuh) uses it.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../../error.hpp"
#include "../../host/detail/device_guard.hpp"
#include "../../host/world.hpp"
#include "../../verbs_gpu/host/setup.hpp"
#include "../../verbs_gpu/send_queue.cuh"
#include "nic_link.hpp"
#include "options.hpp"
#include "settings.hpp"
#include "../nic/heap_keys.hpp"
#include "../nic/local_regions.hpp"
#include "state.hpp"
#include "../nic/endpoints.hpp"
#include "../nic/select.hpp"

namespace gpucomm::detail {

static_assert(local_regions::capacity >= world::max_registered_buffers,
              "IBGDAPost's device table holds every buffer the world lets a PE register");

class ibgda_host final : public ibgda_nic {
 public:
  /// log2 of each send queue's depth in WQEBBs.
  static constexpr std::uint32_t log_depth = 12;

  ibgda_host(world& w, ibgda_options const& options) : world_(&w) {
    int const first = w.local_pes().front();
    nic_endpoints_config config;
    config.choice = resolve_nic_choice(options.nic, std::getenv("GPUCOMM_NIC"), first);
    config.nic_name = options.nic_name;
    config.model_faults = options.model_faults;
    qps_per_peer_ = qps_per_peer_from(options.qps_per_peer, first);
    try {
      endpoints_ = std::make_unique<nic_endpoints>(w, config);
      set_up();
      for (registered_buffer const& b : w.registered_buffers()) {
        if (w.is_local(b.pe)) on_register_buffer(b);
      }
    } catch (verbs_gpu::host::setup_error const& e) {
      release();
      throw nic_setup_failed(config, first, e);
    } catch (...) {
      release();
      throw;
    }
  }

  ibgda_host(ibgda_host const&) = delete;
  ibgda_host& operator=(ibgda_host const&) = delete;

  ~ibgda_host() override {
    // Peers' models may still execute operations on our memory until every process is here.
    if (world_->one_process_per_gpu()) world_->bootstrap().barrier();
    release();
  }

  ibgda_state device_state_for(int pe) const override {
    local const& l = local_of(pe);
    ibgda_state s;
    s.queues = l.queues;
    s.peer_bases = l.peer_bases;
    s.keys = endpoints_->keys();
    s.keys.rows = l.key_rows;
    s.local_base = l.at->slot;
    s.local_bytes = world_->heap_layout().stride;
    s.qps_per_peer = static_cast<std::uint32_t>(qps_per_peer_);
    s.results = l.results;
    s.result_owners = l.result_owners;
    s.results_lkey_wire = verbs_gpu::to_be32(l.results_mr->lkey());
    s.staging = l.staging;
    s.staging_slots = l.staging_slots;
    s.staging_lkey_wire = verbs_gpu::to_be32(l.staging_mr->lkey());
    s.regions = l.regions;
    return s;
  }

  /// world::register_buffer: the NIC learns the buffer (an MR), and PE b.pe's kernels find its key
  /// in the device table (rewritten whole: no kernel of that PE uses it meanwhile, as the world says).
  void on_register_buffer(registered_buffer const& b) override {
    local& l = local_of(b.pe);
    current_device_guard const keep;
    GPUCOMM_CUDA_CHECK(cudaSetDevice(l.device), l.pe);
    auto mr = std::make_unique<verbs_gpu::host::memory_region>(
        *l.at->nic, const_cast<void*>(b.ptr), b.bytes, b.cuda_device >= 0, verbs_gpu::host::access::local_write);
    l.registered.push_back({reinterpret_cast<std::uint64_t>(b.ptr), b.bytes, verbs_gpu::to_be32(mr->lkey()), 0});
    l.registered_mrs.push_back(std::move(mr));
    upload_local_regions(l.regions, l.registered, l.device, l.pe);
  }

  /// world::allocate: every local PE registers the new block (heap offset `offset`, `bytes`) with
  /// its NIC, every PE learns every PE's rkey of it (nic_endpoints), and the kernels' key tables
  /// get its rows. Collective; where a registration fails anywhere, every process throws and none
  /// keeps one.
  void on_heap_block(std::size_t offset, std::size_t bytes) override {
    endpoints_->add_heap_block(offset, bytes);
    try {
      for (auto const& l : locals_) upload_rows(l, offset, bytes);
    } catch (...) {
      on_heap_block_freed(offset, bytes);
      throw;
    }
  }

  /// world::deallocate, the kernels done (or world::allocate undoing a block): its rows cleared in
  /// the kernels' tables, then its regions deregistered. Never throws.
  void on_heap_block_freed(std::size_t offset, std::size_t bytes) noexcept override {
    current_device_guard const keep;
    for (auto const& l : locals_) {
      if (!l.at->heap_regions->contains(l.at->slot + offset)) continue;
      cudaSetDevice(l.at->device);
      try {
        std::vector<std::uint32_t> const none(
            static_cast<std::size_t>(bytes >> endpoints_->keys().log_page) * endpoints_->keys().row_words,
            heap_keys::none);
        copy_rows(l, offset, none.data(), none.size());
      } catch (...) {
        // The GPU failed; the kernels that could read the rows are gone with it.
      }
    }
    endpoints_->remove_heap_block(offset, bytes);
  }

  void on_unregister_buffer(registered_buffer const& b) override {
    local& l = local_of(b.pe);
    for (std::size_t i = 0; i < l.registered.size(); ++i) {
      if (l.registered[i].base != reinterpret_cast<std::uint64_t>(b.ptr)) continue;
      l.registered.erase(l.registered.begin() + static_cast<std::ptrdiff_t>(i));
      l.registered_mrs.erase(l.registered_mrs.begin() + static_cast<std::ptrdiff_t>(i));
      upload_local_regions(l.regions, l.registered, l.device, l.pe);
      return;
    }
  }

  /// What this process's NIC model did so far (faults injected included). For tests (the
  /// differential soak counts faults); zeros on hardware.
  nic_model_stats model_stats() const override { return endpoints_->model_stats(); }

  /// Throws a gpucomm::error for the first failed operation recorded on any local QP: the PE, the
  /// peer, the operation and the completion's syndrome. world::synchronize() calls it.
  void check_errors() const override {
    current_device_guard const keep;
    // Errors no completion carries: the NIC's asynchronous events (a CQ overrun, a QP in error, a
    // port down, a fatal device error).
    endpoints_->check_async_events();
    for (auto const& l : locals_) {
      std::vector<verbs_gpu::qp_counters> counters(l.qps.size());
      GPUCOMM_CUDA_CHECK(cudaSetDevice(l.device), l.pe);
      GPUCOMM_CUDA_CHECK(cudaMemcpy(counters.data(), l.counters, counters.size() * sizeof(verbs_gpu::qp_counters),
                                    cudaMemcpyDeviceToHost),
                         l.pe);
      for (std::size_t i = 0; i < counters.size(); ++i) {
        if (counters[i].error == 0) continue;
        verbs_gpu::cq_error const e = verbs_gpu::cq_error::unpack(counters[i].error);
        int const peer = static_cast<int>(i) / qps_per_peer_;
        char vendor[8];
        std::snprintf(vendor, sizeof(vendor), "0x%02x", e.vendor_syndrome);
        throw error("IBGDAPost", l.pe,
                    std::string("the ") + e.wqe_opcode_str() + " from PE " + std::to_string(l.pe) + " to PE " +
                        std::to_string(peer) + " (QP " + std::to_string(i % qps_per_peer_) + ") completed with " +
                        e.opcode_str() + ", syndrome " + e.syndrome_str() + " (vendor syndrome " + vendor + ", WQE " +
                        std::to_string(e.wqe_counter) + ")",
                    std::string(e.syndrome == static_cast<std::uint8_t>(verbs_gpu::cqe_syndrome::wr_flush_err)
                                    ? "a flush error means an earlier operation on this queue failed and a later "
                                      "completion overwrote its own (the CQ keeps one entry); "
                                    : "") +
                        "the target must lie inside the symmetric heap of a world that is still alive; the queue "
                        "stays in error, so build a new world to go on");
      }
    }
  }

 private:
  struct local {
    nic_endpoints::endpoint* at = nullptr;  // the PE's NIC (pe, device, slot, heap MRs, host key table)
    int pe = 0;
    int device = 0;
    // The set-up's objects of the transport's own; released before the endpoints (QPs and MRs
    // before the device and its PD).
    std::unique_ptr<verbs_gpu::host::memory_region> results_mr, staging_mr;
    std::vector<std::unique_ptr<verbs_gpu::host::memory_region>> registered_mrs;  // parallel to `registered`
    std::vector<std::unique_ptr<verbs_gpu::host::qp>> qps;                        // [peer * qps_per_peer + k]
    // GPU memory of the transport's own.
    verbs_gpu::qp_counters* counters = nullptr;  // [peer * qps_per_peer + k]
    verbs_gpu::send_queue* queues = nullptr;
    std::uint64_t* peer_bases = nullptr;     // [pe]
    std::uint32_t* key_rows = nullptr;       // the kernels' copy of the endpoint's key table
    std::uint64_t* results = nullptr;        // result slots, discard word, owner words: one allocation
    std::uint64_t* result_owners = nullptr;  // inside it
    unsigned char* staging = nullptr;        // staging_layout::slots x 2 halves
    staging_slot* staging_slots = nullptr;
    local_regions* regions = nullptr;      // the device's table of registered buffers
    std::vector<local_region> registered;  // what it holds
  };

  /// Copies `count` words of rows, from the first row of heap offset `offset`, into l's device table.
  void copy_rows(local const& l, std::size_t offset, std::uint32_t const* rows, std::size_t count) const {
    heap_keys const& k = endpoints_->keys();
    GPUCOMM_CUDA_CHECK(cudaMemcpy(l.key_rows + k.page_of(offset) * k.row_words, rows, count * sizeof(std::uint32_t),
                                  cudaMemcpyHostToDevice),
                       l.pe);
  }
  /// A block's rows of the endpoint's host table into the kernels' table.
  void upload_rows(local const& l, std::size_t offset, std::size_t bytes) const {
    current_device_guard const keep;
    GPUCOMM_CUDA_CHECK(cudaSetDevice(l.device), l.pe);
    heap_keys const& k = endpoints_->keys();
    copy_rows(l, offset, endpoints_->rows_of(*l.at, offset), (bytes >> k.log_page) * k.row_words);
  }

  local const& local_of(int pe) const { return const_cast<ibgda_host*>(this)->local_of(pe); }
  local& local_of(int pe) {
    for (auto& l : locals_)
      if (l.pe == pe) return l;
    throw error("world::comm<IBGDAPost>", pe, "PE " + std::to_string(pe) + " is not owned by this process",
                "ask only for the PEs in local_pes()");
  }

  void set_up() {
    world& w = *world_;
    int const npes = w.npes();
    int const k = qps_per_peer_;
    std::size_t const nq = static_cast<std::size_t>(npes) * static_cast<std::size_t>(k);
    current_device_guard const keep;
    heap_keys const& keys = endpoints_->keys();
    std::size_t const key_table_bytes = keys.pages * keys.row_words * sizeof(std::uint32_t);
    for (auto& e : endpoints_->endpoints()) {
      locals_.emplace_back();
      local& l = locals_.back();
      l.at = &e;
      l.pe = e.pe;
      l.device = e.device;
      int const pe = e.pe;
      GPUCOMM_CUDA_CHECK(cudaSetDevice(l.device), pe);
      GPUCOMM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&l.key_rows), key_table_bytes), pe);
      GPUCOMM_CUDA_CHECK(cudaMemset(l.key_rows, 0, key_table_bytes), pe);  // heap_keys::none everywhere
      // One allocation: the result slots and the discard word (what the NIC writes), then the
      // slots' owner words (what only the GPU touches), all free.
      std::size_t const slots = nq << log_depth;
      std::size_t const result_bytes = (slots + 1) * sizeof(std::uint64_t);
      GPUCOMM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&l.results), result_bytes + slots * sizeof(std::uint64_t)),
                         pe);
      GPUCOMM_CUDA_CHECK(cudaMemset(l.results, 0, result_bytes + slots * sizeof(std::uint64_t)), pe);
      l.result_owners = l.results + slots + 1;
      l.results_mr = std::make_unique<verbs_gpu::host::memory_region>(*e.nic, l.results, result_bytes, true,
                                                                      verbs_gpu::host::access::local_write);
      // Staging: what puts from, and gets into, memory the NIC does not know go through.
      std::size_t const staging_bytes = staging_layout::bytes;
      GPUCOMM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&l.staging), staging_bytes), pe);
      l.staging_mr = std::make_unique<verbs_gpu::host::memory_region>(*e.nic, l.staging, staging_bytes, true,
                                                                      verbs_gpu::host::access::local_write);
      GPUCOMM_CUDA_CHECK(
          cudaMalloc(reinterpret_cast<void**>(&l.staging_slots), staging_layout::slots * sizeof(staging_slot)), pe);
      GPUCOMM_CUDA_CHECK(cudaMemset(l.staging_slots, 0, staging_layout::slots * sizeof(staging_slot)), pe);
      GPUCOMM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&l.regions), sizeof(local_regions)), pe);
      GPUCOMM_CUDA_CHECK(cudaMemset(l.regions, 0, sizeof(local_regions)), pe);
      GPUCOMM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&l.counters), nq * sizeof(verbs_gpu::qp_counters)), pe);
      GPUCOMM_CUDA_CHECK(cudaMemset(l.counters, 0, nq * sizeof(verbs_gpu::qp_counters)), pe);
      verbs_gpu::host::qp_options qo;
      qo.log_sq_depth = log_depth;
      qo.mode = verbs_gpu::cq_mode::collapsed;
      for (std::size_t i = 0; i < nq; ++i) l.qps.push_back(std::make_unique<verbs_gpu::host::qp>(*e.nic, qo));
    }

    // Connect: PE p's j-th QP to PE `to` with PE to's j-th QP to p (itself for to == p); every
    // heap slot's base comes with it (the blocks' keys follow block by block: on_heap_block).
    endpoints_->connect(
        k, [&](nic_endpoints::endpoint const& e) -> auto& { return local_of(e.pe).qps; });
    std::vector<std::uint64_t> const& bases = endpoints_->bases();

    // Device tables.
    for (auto& l : locals_) {
      GPUCOMM_CUDA_CHECK(cudaSetDevice(l.device), l.pe);
      std::vector<verbs_gpu::send_queue> sqs;
      for (std::size_t i = 0; i < nq; ++i) {
        verbs_gpu::send_queue sq = l.qps[i]->send_queue();
        sq.counters = l.counters + i;                 // one array: check_errors reads it at once
        sq.timeout_ns = world_->wait_timeout_word();  // the world's bound on device waits
        sqs.push_back(sq);
      }
      GPUCOMM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&l.queues), sqs.size() * sizeof(verbs_gpu::send_queue)),
                         l.pe);
      GPUCOMM_CUDA_CHECK(
          cudaMemcpy(l.queues, sqs.data(), sqs.size() * sizeof(verbs_gpu::send_queue), cudaMemcpyHostToDevice), l.pe);
      GPUCOMM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&l.peer_bases), bases.size() * sizeof(std::uint64_t)),
                         l.pe);
      GPUCOMM_CUDA_CHECK(
          cudaMemcpy(l.peer_bases, bases.data(), bases.size() * sizeof(std::uint64_t), cudaMemcpyHostToDevice), l.pe);
    }
    // The blocks allocated before this transport (gpucomm's control block at least); later ones
    // come through world::allocate.
    for (auto const& b : w.heap_blocks()) on_heap_block(b.offset, b.bytes);
    endpoints_->start();  // every process's NIC serves before any kernel posts
  }

  /// Everything, in reverse: the NIC model stops first, so it reads no memory being released; the
  /// QPs and MRs go before the endpoints' devices.
  void release() noexcept {
    current_device_guard const keep;
    if (endpoints_) endpoints_->stop();
    for (auto& l : locals_) {
      cudaSetDevice(l.device);
      l.qps.clear();
      l.registered_mrs.clear();
      l.results_mr.reset();
      l.staging_mr.reset();
      for (void* p : {static_cast<void*>(l.queues), static_cast<void*>(l.peer_bases), static_cast<void*>(l.key_rows),
                      static_cast<void*>(l.results), static_cast<void*>(l.counters), static_cast<void*>(l.staging),
                      static_cast<void*>(l.staging_slots), static_cast<void*>(l.regions)}) {
        cudaFree(p);
      }
    }
    locals_.clear();
    endpoints_.reset();
  }

  world* world_;
  int qps_per_peer_ = 2;
  std::unique_ptr<nic_endpoints> endpoints_;  // the NICs (before locals_: outlives their QPs and MRs)
  std::vector<local> locals_;
};

}  // namespace gpucomm::detail
