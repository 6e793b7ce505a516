#pragma once
// IBGDAPost's host half: per local PE, a protection domain, the symmetric heap registered with the
// NIC, `qps_per_peer` RC QPs to every PE (itself included) connected through the bootstrap, the
// result slots of fetching operations, and the device tables the kernels read.
//
// The NIC is the one IBGDAPost's options (ibgda_options::nic) or GPUCOMM_NIC name:
//   model     the software NIC (verbs_gpu/model), a test and development tool. Its QPs' rings,
//             doorbell records, doorbells and CQs live in mapped pinned host memory, which the
//             model reads and the GPU writes; counters and result slots live in GPU memory. A
//             single-process world uses one model for all its PEs; with one process per GPU each
//             process runs one, and they serve each other's RDMA over host-local sockets, so every
//             operation on a PE's memory is executed by that PE's model (one atomicity domain).
//   hardware  the mlx5 device closest to each GPU. Not available in this version: the error says
//             which device was found; see docs/ibgda.md.

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
#include "../../verbs_gpu/model/nic_model.hpp"
#include "../../verbs_gpu/send_queue.cuh"
#include "../ibgda_post/options.hpp"
#include "env_settings.hpp"
#include "ibgda_state.hpp"
#include "model_mesh.hpp"
#include "nic_select.hpp"

namespace gpucomm::detail {

static_assert(ibgda_regions::capacity >= world::max_registered_buffers,
              "IBGDAPost's device table holds every buffer the world lets a PE register");

class ibgda_host {
 public:
  /// log2 of each send queue's depth in WQEBBs.
  static constexpr std::uint32_t log_depth = 12;

  ibgda_host(world& w, ibgda_options const& options) : world_(&w) {
    int const first = w.local_pes().front();
    nic_choice const choice = resolve_nic_choice(options.nic, std::getenv("GPUCOMM_NIC"), first);
    qps_per_peer_ = qps_per_peer_from(options.qps_per_peer, first);
    if (choice != nic_choice::model) refuse_hardware(w, first);
    set_up_model(options.model_faults);
    for (registered_buffer const& b : w.registered_buffers()) {
      if (w.is_local(b.pe)) on_register_buffer(b);
    }
  }

  ibgda_host(ibgda_host const&) = delete;
  ibgda_host& operator=(ibgda_host const&) = delete;

  ~ibgda_host() {
    current_device_guard const keep;
    // Peers' models may still execute operations on our memory until every process is here.
    if (world_->one_process_per_gpu()) world_->bootstrap().barrier();
    nic_.reset();  // stops the model's threads before the memory they read goes
    for (auto& l : locals_) {
      cudaSetDevice(l.device);
      for (void* p : {static_cast<void*>(l.queues), static_cast<void*>(l.peers), static_cast<void*>(l.results),
                      static_cast<void*>(l.counters), static_cast<void*>(l.staging),
                      static_cast<void*>(l.staging_slots), static_cast<void*>(l.regions)}) {
        cudaFree(p);
      }
      if (l.queue_memory != nullptr) cudaFreeHost(l.queue_memory);
    }
  }

  ibgda_state device_state_for(int pe) const {
    local const& l = local_of(pe);
    ibgda_state s;
    s.queues = l.queues;
    s.peers = l.peers;
    s.local_base = l.slot;
    s.local_bytes = world_->heap_layout().stride;
    s.lkey_wire = verbs_gpu::to_be32(l.heap_key.lkey);
    s.qps_per_peer = static_cast<std::uint32_t>(qps_per_peer_);
    s.results = l.results;
    s.result_owners = l.result_owners;
    s.results_lkey_wire = verbs_gpu::to_be32(l.results_key.lkey);
    s.staging = l.staging;
    s.staging_slots = l.staging_slots;
    s.staging_lkey_wire = verbs_gpu::to_be32(l.staging_key.lkey);
    s.regions = l.regions;
    return s;
  }

  /// world::register_buffer: the NIC learns the buffer, and PE b.pe's kernels find its key in the
  /// device table (rewritten whole: no kernel of that PE uses it meanwhile, as the world says).
  void on_register_buffer(registered_buffer const& b) {
    local& l = local_of(b.pe);
    verbs_gpu::model::memory_key const key =
        nic_->register_memory(l.pd, b.ptr, b.bytes, verbs_gpu::model::local_write, nullptr, b.cuda_device);
    l.registered.push_back({reinterpret_cast<std::uint64_t>(b.ptr), b.bytes, verbs_gpu::to_be32(key.lkey), 0});
    upload_regions(l);
  }

  void on_unregister_buffer(registered_buffer const& b) {
    local& l = local_of(b.pe);
    for (std::size_t i = 0; i < l.registered.size(); ++i) {
      if (l.registered[i].base != reinterpret_cast<std::uint64_t>(b.ptr)) continue;
      nic_->deregister_memory(verbs_gpu::from_be32(l.registered[i].lkey_wire));
      l.registered.erase(l.registered.begin() + static_cast<std::ptrdiff_t>(i));
      upload_regions(l);
      return;
    }
  }

  /// What this process's NIC model did so far (faults injected included). For tests (the
  /// differential soak counts faults).
  verbs_gpu::model::nic_stats model_stats() const { return nic_->stats(); }

  /// IBGDAPost reaches every PE (composite transports ask).
  bool reaches(int, int) const { return true; }

  /// Throws a gpucomm::error for the first failed operation recorded on any local QP: the PE, the
  /// peer, the operation and the completion's syndrome. world::synchronize() calls it.
  void check_errors() const {
    current_device_guard const keep;
    for (auto const& l : locals_) {
      std::vector<verbs_gpu::qp_counters> counters(l.host_queues.size());
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

 protected:
  world* world_;

 private:
  struct queue_host {
    std::uint32_t qpn = 0;
    verbs_gpu::send_queue sq{};
  };
  struct local {
    int pe = 0;
    int device = 0;
    char* slot = nullptr;
    std::uint32_t pd = 0;
    verbs_gpu::model::memory_key heap_key{}, results_key{};
    void* queue_memory = nullptr;  // mapped pinned: rings, then per queue a 256-byte control block
    verbs_gpu::qp_counters* counters = nullptr;
    verbs_gpu::send_queue* queues = nullptr;
    ibgda_peer* peers = nullptr;
    std::uint64_t* results = nullptr;        // result slots, discard word, owner words: one allocation
    std::uint64_t* result_owners = nullptr;  // inside it
    std::vector<queue_host> host_queues;     // [peer * qps_per_peer + k]
    unsigned char* staging = nullptr;        // ibgda_staging::slots x 2 halves
    ibgda_staging_slot* staging_slots = nullptr;
    verbs_gpu::model::memory_key staging_key{};
    ibgda_regions* regions = nullptr;      // the device's table of registered buffers
    std::vector<ibgda_region> registered;  // what it holds
  };

  void upload_regions(local const& l) {
    current_device_guard const keep;
    GPUCOMM_CUDA_CHECK(cudaSetDevice(l.device), l.pe);
    ibgda_regions table{};
    table.count = static_cast<std::uint32_t>(l.registered.size());
    std::copy(l.registered.begin(), l.registered.end(), table.entries);
    GPUCOMM_CUDA_CHECK(cudaMemcpy(l.regions, &table, sizeof(table), cudaMemcpyHostToDevice), l.pe);
  }

  [[noreturn]] static void refuse_hardware(world& w, int pe) {
    char bus[32] = {};
    GPUCOMM_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), w.device(pe)), pe);
    std::string const nic = closest_nic(bus);
    throw error(
        "world::comm<IBGDAPost>", pe,
        nic.empty() ? std::string("a hardware NIC was asked for (ibgda_options::nic or GPUCOMM_NIC), but no "
                                  "InfiniBand/RoCE device is visible under /sys/class/infiniband")
                    : "the closest NIC to GPU " + std::string(bus) + " is " + nic +
                          ", but this version of IBGDAPost drives only the software NIC model: GPU-posted "
                          "QPs on real mlx5 hardware are not set up yet (docs/ibgda.md)",
        "to test without a NIC set GPUCOMM_NIC=model (or w.configure<IBGDAPost>({.nic = nic_choice::model})); the "
        "model is a test and development tool, never a silent fallback");
  }

  local const& local_of(int pe) const { return const_cast<ibgda_host*>(this)->local_of(pe); }
  local& local_of(int pe) {
    for (auto& l : locals_)
      if (l.pe == pe) return l;
    throw error("world::comm<IBGDAPost>", pe, "PE " + std::to_string(pe) + " is not owned by this process",
                "ask only for the PEs in local_pes()");
  }

  void set_up_model(nic_model_faults const& faults) {
    namespace vg = verbs_gpu;
    namespace vm = verbs_gpu::model;
    world& w = *world_;
    int const npes = w.npes();
    std::size_t const nq = static_cast<std::size_t>(npes) * qps_per_peer_;
    std::size_t const ring_bytes = std::size_t{vg::wqebb_size} << log_depth;
    constexpr std::size_t control_bytes = 256;  // cqe [0, 64), QP dbrec 64, CQ dbrec 128, doorbell 192
    vm::nic_config config;
    config.fault = vm::faults_from(faults);
    nic_ = std::make_unique<vm::nic>(config);

    for (int pe : w.local_pes()) {
      local l;
      l.pe = pe;
      l.device = w.device(pe);
      l.slot = w.heap_layout().base + static_cast<std::size_t>(pe) * w.heap_layout().stride;
      GPUCOMM_CUDA_CHECK(cudaSetDevice(l.device), pe);
      l.pd = nic_->alloc_pd();
      l.heap_key = nic_->register_memory(l.pd, l.slot, w.heap_layout().stride, vm::all_access, nullptr, l.device);
      // One allocation: the result slots and the discard word (what the NIC writes), then the
      // slots' owner words (what only the GPU touches), all free.
      std::size_t const slots = nq << log_depth;
      std::size_t const result_bytes = (slots + 1) * sizeof(std::uint64_t);
      GPUCOMM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&l.results), result_bytes + slots * sizeof(std::uint64_t)),
                         pe);
      GPUCOMM_CUDA_CHECK(cudaMemset(l.results, 0, result_bytes + slots * sizeof(std::uint64_t)), pe);
      l.result_owners = l.results + slots + 1;
      l.results_key = nic_->register_memory(l.pd, l.results, result_bytes, vm::local_write, nullptr, l.device);
      // Staging: what puts from, and gets into, memory the NIC does not know go through.
      std::size_t const staging_bytes = ibgda_staging::slots * 2 * ibgda_staging::half_bytes;
      GPUCOMM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&l.staging), staging_bytes), pe);
      l.staging_key = nic_->register_memory(l.pd, l.staging, staging_bytes, vm::local_write, nullptr, l.device);
      GPUCOMM_CUDA_CHECK(
          cudaMalloc(reinterpret_cast<void**>(&l.staging_slots), ibgda_staging::slots * sizeof(ibgda_staging_slot)),
          pe);
      GPUCOMM_CUDA_CHECK(cudaMemset(l.staging_slots, 0, ibgda_staging::slots * sizeof(ibgda_staging_slot)), pe);
      GPUCOMM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&l.regions), sizeof(ibgda_regions)), pe);
      GPUCOMM_CUDA_CHECK(cudaMemset(l.regions, 0, sizeof(ibgda_regions)), pe);
      GPUCOMM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&l.counters), nq * sizeof(vg::qp_counters)), pe);
      GPUCOMM_CUDA_CHECK(cudaMemset(l.counters, 0, nq * sizeof(vg::qp_counters)), pe);
      std::size_t const bytes = nq * (ring_bytes + control_bytes);
      GPUCOMM_CUDA_CHECK(cudaHostAlloc(&l.queue_memory, bytes, cudaHostAllocMapped | cudaHostAllocPortable), pe);
      std::memset(l.queue_memory, 0, bytes);
      auto* mem = static_cast<unsigned char*>(l.queue_memory);
      for (std::size_t i = 0; i < nq; ++i) {
        auto* ring = mem + i * ring_bytes;
        auto* control = mem + nq * ring_bytes + i * control_bytes;
        auto* cqe = reinterpret_cast<vg::cqe64*>(control);
        std::memset(cqe, 0xff, sizeof(vg::cqe64));  // opcode INVALID: nothing completed yet
        auto* qp_dbrec = reinterpret_cast<std::uint32_t*>(control + 64);
        auto* cq_dbrec = reinterpret_cast<std::uint32_t*>(control + 128);
        auto* doorbell = reinterpret_cast<std::uint64_t*>(control + 192);
        std::uint32_t const cqn = nic_->create_cq(vm::cq_config{vg::cq_mode::collapsed, cqe, 0, cq_dbrec});
        queue_host q;
        q.qpn = nic_->create_qp(vm::qp_config{l.pd, reinterpret_cast<std::byte*>(ring), log_depth,
                                              qp_dbrec + vg::dbr_snd, doorbell, cqn, 0});
        // Mapped pinned memory has the same address on the device (unified addressing).
        q.sq.ring = reinterpret_cast<std::byte*>(ring);
        q.sq.log_depth = log_depth;
        q.sq.qpn = q.qpn;
        q.sq.dbrec = qp_dbrec + vg::dbr_snd;
        q.sq.doorbell = doorbell;
        q.sq.counters = l.counters + i;
        q.sq.cq = vg::completion_queue{cqe, cq_dbrec, 0, vg::cq_mode::collapsed, cqn};
        q.sq.scope = vg::nic_scope::system;           // rings and records in host memory
        q.sq.timeout_ns = world_->wait_timeout_ns();  // debug builds: the world's bound on device waits
        l.host_queues.push_back(q);
      }
      locals_.push_back(std::move(l));
    }

    // Connect, and learn every PE's heap as the NIC reaches it.
    std::vector<mesh_member> members;
    for (auto const& l : locals_) {
      mesh_member m{l.pe, {reinterpret_cast<std::uint64_t>(l.slot), l.heap_key.rkey, 0}, {}};
      for (auto const& q : l.host_queues) m.qpns.push_back(q.qpn);
      members.push_back(std::move(m));
    }
    std::vector<nic_heap> const peers = connect_model_mesh(w, *nic_, "ibgda", members, qps_per_peer_);
    // Device tables.
    for (auto& l : locals_) {
      GPUCOMM_CUDA_CHECK(cudaSetDevice(l.device), l.pe);
      std::vector<vg::send_queue> sqs;
      for (auto const& q : l.host_queues) sqs.push_back(q.sq);
      std::vector<ibgda_peer> table;
      for (auto const& p : peers) table.push_back({p.base, vg::to_be32(p.rkey), 0});
      GPUCOMM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&l.queues), sqs.size() * sizeof(vg::send_queue)), l.pe);
      GPUCOMM_CUDA_CHECK(cudaMemcpy(l.queues, sqs.data(), sqs.size() * sizeof(vg::send_queue), cudaMemcpyHostToDevice),
                         l.pe);
      GPUCOMM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&l.peers), table.size() * sizeof(ibgda_peer)), l.pe);
      GPUCOMM_CUDA_CHECK(cudaMemcpy(l.peers, table.data(), table.size() * sizeof(ibgda_peer), cudaMemcpyHostToDevice),
                         l.pe);
    }
    nic_->start();
    // Every process's model serves before any kernel posts.
    if (w.one_process_per_gpu()) w.bootstrap().barrier();
  }

  int qps_per_peer_ = 2;
  std::unique_ptr<verbs_gpu::model::nic> nic_;
  std::vector<local> locals_;
};

}  // namespace gpucomm::detail
