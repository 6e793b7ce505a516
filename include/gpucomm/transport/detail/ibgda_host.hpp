#pragma once
// IBGDAPost's host half: per local PE, the NIC opened and set up with verbs_gpu's set-up
// (verbs_gpu/host/setup.hpp): a protection domain, an MR per block of the symmetric heap (made when
// the block is allocated, its rkeys exchanged then, the kernels' key table updated: heap_keys.hpp),
// `qps_per_peer` RC QPs to every PE (itself included) whose rings, CQs and doorbell records live in
// GPU memory, connected through the bootstrap; the result slots of fetching operations, and the
// device tables the kernels read.
//
// The NIC is the one IBGDAPost's options (ibgda_options::nic) or GPUCOMM_NIC name. Both run the same
// set-up code; only the backend under it differs:
//   model     the firmware model driving the software NIC (verbs_gpu/model/nic_backend.hpp), a test
//             and development tool: every firmware command is decoded and checked, and the QPs the
//             set-up made run on the NIC model, which reads their rings and doorbell records in GPU
//             memory and writes their CQEs there, watching doorbell pages of mapped pinned memory.
//             Each PE has a modelled device of its own ("gpucomm_model_<pe>", LID pe + 1). A
//             single-process world runs one NIC model for all its PEs; with one process per GPU each
//             process runs one for its PE, the other PEs' devices are remote in its fabric, and the
//             models serve each other's RDMA over host-local sockets, so every operation on a PE's
//             memory is executed by that PE's model (one atomicity domain).
//   hardware  rdma-core (verbs_gpu/host/rdma_core_backend.hpp; built with GPUCOMM_HAVE_RDMA_CORE,
//             which linking gpucomm::verbs defines): ibgda_options::nic_name, else the mlx5 device
//             closest to each GPU. This path has never run on a NIC (docs/ibgda.md, "Running on a
//             real NIC").

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
#include "../../verbs_gpu/model/nic_backend.hpp"
#include "../../verbs_gpu/send_queue.cuh"
#include "../ibgda_post/options.hpp"
#include "env_settings.hpp"
#include "heap_keys.hpp"
#include "ibgda_state.hpp"
#include "model_mesh.hpp"
#include "nic_select.hpp"
#if defined(GPUCOMM_HAVE_RDMA_CORE)
#include "../../verbs_gpu/host/rdma_core_backend.hpp"
#endif

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
    try {
      set_up(choice, options);
      for (registered_buffer const& b : w.registered_buffers()) {
        if (w.is_local(b.pe)) on_register_buffer(b);
      }
    } catch (verbs_gpu::host::setup_error const& e) {
      release();
      throw error(
          "world::comm<IBGDAPost>", first,
          std::string("setting up the ") + (choice == nic_choice::model ? "NIC model" : "NIC") + " failed: " + e.what(),
          choice == nic_choice::model ? "this is a defect of gpucomm's set-up or of its models; please report it"
                                      : "docs/ibgda.md, \"Running on a real NIC\", says what each step needs");
    } catch (...) {
      release();
      throw;
    }
  }

  ibgda_host(ibgda_host const&) = delete;
  ibgda_host& operator=(ibgda_host const&) = delete;

  ~ibgda_host() {
    // Peers' models may still execute operations on our memory until every process is here.
    if (world_->one_process_per_gpu()) world_->bootstrap().barrier();
    release();
  }

  ibgda_state device_state_for(int pe) const {
    local const& l = local_of(pe);
    ibgda_state s;
    s.queues = l.queues;
    s.peer_bases = l.peer_bases;
    s.keys = keys_;
    s.keys.rows = l.key_rows;
    s.local_base = l.slot;
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
  void on_register_buffer(registered_buffer const& b) {
    local& l = local_of(b.pe);
    current_device_guard const keep;
    GPUCOMM_CUDA_CHECK(cudaSetDevice(l.device), l.pe);
    auto mr = std::make_unique<verbs_gpu::host::memory_region>(
        *l.nic, const_cast<void*>(b.ptr), b.bytes, b.cuda_device >= 0, verbs_gpu::host::access::local_write);
    l.registered.push_back({reinterpret_cast<std::uint64_t>(b.ptr), b.bytes, verbs_gpu::to_be32(mr->lkey()), 0});
    l.registered_mrs.push_back(std::move(mr));
    upload_regions(l);
  }

  /// world::allocate: every local PE registers the new block (heap offset `offset`, `bytes`) with
  /// its NIC, every PE learns every PE's rkey of it, and the kernels' key tables get its rows.
  /// Collective; where a registration fails anywhere, every process throws and none keeps one.
  void on_heap_block(std::size_t offset, std::size_t bytes) {
    world& w = *world_;
    current_device_guard const keep;
    std::vector<std::uint32_t> rkeys(static_cast<std::size_t>(w.npes()), heap_keys::none);  // host order
    std::string problem;
    for (auto& l : locals_) {
      try {
        GPUCOMM_CUDA_CHECK(cudaSetDevice(l.device), l.pe);
        verbs_gpu::host::region_entry const& e = l.heap_regions->add(l.slot + offset, bytes, true);
        rkeys[static_cast<std::size_t>(l.pe)] = e.rkey;
        if (e.rkey == heap_keys::none || l.heap_regions->lkey(l.slot + offset, bytes) == heap_keys::none)
          problem = "the NIC gave the region memory key 0, which gpucomm's key table uses for \"no block\"";
      } catch (std::exception const& e) {
        problem = e.what();
      }
      if (!problem.empty()) break;
    }
    try {
      all_ok_or_throw(
          w.bootstrap(), problem.empty(),
          "registering " + std::to_string(bytes) + " bytes of symmetric heap with the NIC failed: " + problem,
          "world::allocate", "docs/ibgda.md, \"Running on a real NIC\", says what registering GPU memory needs");
      if (w.one_process_per_gpu()) {
        int const me = w.local_pes().front();
        rkeys = w.bootstrap().allgather_value(rkeys[static_cast<std::size_t>(me)]);
      }
      for (auto const& l : locals_) {
        std::vector<std::uint32_t> wire(rkeys.size());
        for (std::size_t pe = 0; pe < rkeys.size(); ++pe) wire[pe] = verbs_gpu::to_be32(rkeys[pe]);
        write_rows(l, offset, bytes, verbs_gpu::to_be32(l.heap_regions->lkey(l.slot + offset, bytes)), wire.data());
      }
    } catch (...) {
      on_heap_block_freed(offset, bytes);
      throw;
    }
  }

  /// world::deallocate, the kernels done (or world::allocate undoing a block): its rows cleared,
  /// then its regions deregistered. Never throws; a region it does not hold it leaves alone.
  void on_heap_block_freed(std::size_t offset, std::size_t bytes) noexcept {
    current_device_guard const keep;
    for (auto& l : locals_) {
      if (!l.heap_regions->contains(l.slot + offset)) continue;
      cudaSetDevice(l.device);
      try {
        write_rows(l, offset, bytes, heap_keys::none, nullptr);
      } catch (...) {
        // The GPU failed; the kernels that could read the rows are gone with it.
      }
      l.heap_regions->remove(l.slot + offset);
    }
  }

  void on_unregister_buffer(registered_buffer const& b) {
    local& l = local_of(b.pe);
    for (std::size_t i = 0; i < l.registered.size(); ++i) {
      if (l.registered[i].base != reinterpret_cast<std::uint64_t>(b.ptr)) continue;
      l.registered.erase(l.registered.begin() + static_cast<std::ptrdiff_t>(i));
      l.registered_mrs.erase(l.registered_mrs.begin() + static_cast<std::ptrdiff_t>(i));
      upload_regions(l);
      return;
    }
  }

  /// What this process's NIC model did so far (faults injected included). For tests (the
  /// differential soak counts faults); zeros on hardware.
  verbs_gpu::model::nic_stats model_stats() const {
    return net_ ? net_->data_path().stats() : verbs_gpu::model::nic_stats{};
  }

  /// IBGDAPost reaches every PE (composite transports ask).
  bool reaches(int, int) const { return true; }

  /// Throws a gpucomm::error for the first failed operation recorded on any local QP: the PE, the
  /// peer, the operation and the completion's syndrome. world::synchronize() calls it.
  void check_errors() const {
    current_device_guard const keep;
    // Errors no completion carries: the NIC's asynchronous events (a CQ overrun, a QP in error, a
    // port down, a fatal device error).
    for (auto const& l : locals_) {
      for (verbs_gpu::host::async_event const& e : l.nic->nic().async_events()) {
        throw error("IBGDAPost", l.pe,
                    "PE " + std::to_string(l.pe) + "'s NIC (" + l.nic->name() + ") reported " + e.text(),
                    e.what == verbs_gpu::host::async_event::kind::cq_error
                        ? "collapsed CQs need cqc.oi = 1 (verbs_gpu/host/setup.hpp sets it): a set-up defect"
                        : "the queues stay in error; check the port and the NIC (ibv_devinfo, dmesg), then build "
                          "a new world");
      }
    }
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

 protected:
  world* world_;

 private:
  struct local {
    int pe = 0;
    int device = 0;
    char* slot = nullptr;
    // The set-up's objects, in the order they are made; destroyed in reverse (QPs and MRs before
    // the device and its PD, the device before its backend and control memory).
    std::unique_ptr<verbs_gpu::host::control_memory> memory;
    std::unique_ptr<verbs_gpu::host::backend> backend;
    std::unique_ptr<verbs_gpu::host::device> nic;
    std::unique_ptr<verbs_gpu::host::region_registry> heap_regions;  // an MR per heap block
    std::unique_ptr<verbs_gpu::host::memory_region> results_mr, staging_mr;
    std::vector<std::unique_ptr<verbs_gpu::host::memory_region>> registered_mrs;  // parallel to `registered`
    std::vector<std::unique_ptr<verbs_gpu::host::qp>> qps;                        // [peer * qps_per_peer + k]
    // GPU memory of the transport's own.
    verbs_gpu::qp_counters* counters = nullptr;  // [peer * qps_per_peer + k]
    verbs_gpu::send_queue* queues = nullptr;
    std::uint64_t* peer_bases = nullptr;     // [pe]
    std::uint32_t* key_rows = nullptr;       // heap_keys' rows
    std::uint64_t* results = nullptr;        // result slots, discard word, owner words: one allocation
    std::uint64_t* result_owners = nullptr;  // inside it
    unsigned char* staging = nullptr;        // ibgda_staging::slots x 2 halves
    ibgda_staging_slot* staging_slots = nullptr;
    ibgda_regions* regions = nullptr;      // the device's table of registered buffers
    std::vector<ibgda_region> registered;  // what it holds
  };

  /// A block's rows of l's key table: this PE's lkey and every PE's rkey, wire order (none: cleared).
  void write_rows(local const& l, std::size_t offset, std::size_t bytes, std::uint32_t lkey_wire,
                  std::uint32_t const* rkeys_wire) const {
    std::uint64_t const pages = bytes >> keys_.log_page;
    std::vector<std::uint32_t> rows(pages * keys_.row_words);
    heap_keys::fill_block(rows.data(), pages, lkey_wire, rkeys_wire, keys_.row_words);
    GPUCOMM_CUDA_CHECK(cudaMemcpy(l.key_rows + keys_.page_of(offset) * keys_.row_words, rows.data(),
                                  rows.size() * sizeof(std::uint32_t), cudaMemcpyHostToDevice),
                       l.pe);
  }

  void upload_regions(local const& l) {
    current_device_guard const keep;
    GPUCOMM_CUDA_CHECK(cudaSetDevice(l.device), l.pe);
    ibgda_regions table{};
    table.count = static_cast<std::uint32_t>(l.registered.size());
    std::copy(l.registered.begin(), l.registered.end(), table.entries);
    GPUCOMM_CUDA_CHECK(cudaMemcpy(l.regions, &table, sizeof(table), cudaMemcpyHostToDevice), l.pe);
  }

  local const& local_of(int pe) const { return const_cast<ibgda_host*>(this)->local_of(pe); }
  local& local_of(int pe) {
    for (auto& l : locals_)
      if (l.pe == pe) return l;
    throw error("world::comm<IBGDAPost>", pe, "PE " + std::to_string(pe) + " is not owned by this process",
                "ask only for the PEs in local_pes()");
  }

  /// The modelled device of PE `pe`.
  static std::string model_device_name(int pe) { return "gpucomm_model_" + std::to_string(pe); }

  /// The model's fabric: a device per PE with LID pe + 1; with one process per GPU the other
  /// processes' devices are remote (their models check their side of each connection).
  verbs_gpu::model::firmware_fabric model_fabric() const {
    world const& w = *world_;
    verbs_gpu::model::firmware_fabric fabric;
    for (int pe = 0; pe < w.npes(); ++pe) {
      verbs_gpu::model::firmware_config c;
      c.name = model_device_name(pe);
      c.pci_bus_id = w.is_local(pe) ? gpu_bus_id(pe) : std::string();
      c.ports = {verbs_gpu::model::port_config::infiniband(static_cast<std::uint16_t>(pe + 1),
                                                           0x0002c90300000000ull + static_cast<std::uint64_t>(pe))};
      c.remote = w.one_process_per_gpu() && !w.is_local(pe);
      fabric.add_device(std::move(c));
    }
    return fabric;
  }

  std::string gpu_bus_id(int pe) const {
    char bus[32] = {};
    GPUCOMM_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), world_->device(pe)), pe);
    std::string s(bus);
    for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s;
  }

  /// The backend and control memory of PE `pe`'s NIC.
  void open_backend(local& l, nic_choice choice) {
    if (choice == nic_choice::model) {
      l.memory = std::make_unique<verbs_gpu::model::model_gpu_memory>();
      auto be = std::make_unique<verbs_gpu::model::nic_backend>(*fabric_, *net_, *l.memory);
      // The heap slot is mapped piece by piece; the runtime cannot describe all of it.
      be->gpu_range(l.slot, world_->heap_layout().stride, l.device);
      l.backend = std::move(be);
      return;
    }
#if defined(GPUCOMM_HAVE_RDMA_CORE)
    l.memory = std::make_unique<verbs_gpu::host::cuda_control_memory>();
    l.backend = std::make_unique<verbs_gpu::host::rdma_core_backend>();
#else
    char bus[32] = {};
    GPUCOMM_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), l.device), l.pe);
    std::string const nic = closest_nic(bus);
    throw error("world::comm<IBGDAPost>", l.pe,
                nic.empty() ? std::string("a hardware NIC was asked for (ibgda_options::nic or GPUCOMM_NIC), but no "
                                          "InfiniBand/RoCE device is visible under /sys/class/infiniband")
                            : "a hardware NIC was asked for (the closest to GPU " + std::string(bus) + " is " + nic +
                                  "), but this program was built without rdma-core",
                "link the gpucomm::verbs target (it needs libibverbs-dev with infiniband/mlx5dv.h); to test without "
                "a NIC set GPUCOMM_NIC=model (or w.configure<IBGDAPost>({.nic = nic_choice::model})): the model is a "
                "test and development tool, never a silent fallback");
#endif
  }

  void set_up(nic_choice choice, ibgda_options const& options) {
    world& w = *world_;
    int const npes = w.npes();
    int const k = qps_per_peer_;
    std::size_t const nq = static_cast<std::size_t>(npes) * static_cast<std::size_t>(k);
    bool const multi = w.one_process_per_gpu();
    bool const model = choice == nic_choice::model;
    current_device_guard const keep;
    keys_.log_page = heap_keys::log_page_for(w.heap_granularity());
    keys_.pages = w.heap_layout().stride >> keys_.log_page;
    keys_.row_words = static_cast<std::uint32_t>(npes) + 1;
    std::size_t const key_table_bytes = keys_.pages * keys_.row_words * sizeof(std::uint32_t);
    if (model) {
      verbs_gpu::model::nic_config config;
      config.fault = verbs_gpu::model::faults_from(options.model_faults);
      net_ = std::make_unique<verbs_gpu::model::model_network>(config);
      fabric_ = std::make_unique<verbs_gpu::model::firmware_fabric>(model_fabric());
      if (multi) {
        for (int pe = 0; pe < npes; ++pe) {
          if (!w.is_local(pe)) net_->add_remote(model_device_name(pe), model_address(w, "ibgda", pe));
        }
        net_->data_path().listen(model_address(w, "ibgda", w.local_pes().front()));
      }
    }

    for (int pe : w.local_pes()) {
      locals_.emplace_back();
      local& l = locals_.back();
      l.pe = pe;
      l.device = w.device(pe);
      l.slot = w.heap_layout().base + static_cast<std::size_t>(pe) * w.heap_layout().stride;
      GPUCOMM_CUDA_CHECK(cudaSetDevice(l.device), pe);
      open_backend(l, choice);
      verbs_gpu::host::device_options o;
      o.name = model ? model_device_name(pe) : options.nic_name;
      o.gpu_pci_bus_id = gpu_bus_id(pe);
      o.memory = l.memory.get();
      l.nic = std::make_unique<verbs_gpu::host::device>(*l.backend, o);
      l.heap_regions = std::make_unique<verbs_gpu::host::region_registry>(*l.nic);
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
      l.results_mr = std::make_unique<verbs_gpu::host::memory_region>(*l.nic, l.results, result_bytes, true,
                                                                      verbs_gpu::host::access::local_write);
      // Staging: what puts from, and gets into, memory the NIC does not know go through.
      std::size_t const staging_bytes = ibgda_staging::slots * 2 * ibgda_staging::half_bytes;
      GPUCOMM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&l.staging), staging_bytes), pe);
      l.staging_mr = std::make_unique<verbs_gpu::host::memory_region>(*l.nic, l.staging, staging_bytes, true,
                                                                      verbs_gpu::host::access::local_write);
      GPUCOMM_CUDA_CHECK(
          cudaMalloc(reinterpret_cast<void**>(&l.staging_slots), ibgda_staging::slots * sizeof(ibgda_staging_slot)),
          pe);
      GPUCOMM_CUDA_CHECK(cudaMemset(l.staging_slots, 0, ibgda_staging::slots * sizeof(ibgda_staging_slot)), pe);
      GPUCOMM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&l.regions), sizeof(ibgda_regions)), pe);
      GPUCOMM_CUDA_CHECK(cudaMemset(l.regions, 0, sizeof(ibgda_regions)), pe);
      GPUCOMM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&l.counters), nq * sizeof(verbs_gpu::qp_counters)), pe);
      GPUCOMM_CUDA_CHECK(cudaMemset(l.counters, 0, nq * sizeof(verbs_gpu::qp_counters)), pe);
      verbs_gpu::host::qp_options qo;
      qo.log_sq_depth = log_depth;
      qo.mode = verbs_gpu::cq_mode::collapsed;
      for (std::size_t i = 0; i < nq; ++i) l.qps.push_back(std::make_unique<verbs_gpu::host::qp>(*l.nic, qo));
    }

    // Exchange what peers need: every QP's connection data and where every heap slot starts (the
    // blocks' keys follow block by block: on_heap_block).
    std::vector<verbs_gpu::host::connection_info> infos(static_cast<std::size_t>(npes) * nq);  // [pe][to * k + j]
    std::vector<std::uint64_t> bases(static_cast<std::size_t>(npes));
    for (auto const& l : locals_) {
      bases[static_cast<std::size_t>(l.pe)] = reinterpret_cast<std::uint64_t>(l.slot);
      for (std::size_t i = 0; i < nq; ++i) infos[static_cast<std::size_t>(l.pe) * nq + i] = l.qps[i]->local_info();
    }
    if (multi) {
      local const& l = locals_.front();
      std::vector<verbs_gpu::host::connection_info> mine(infos.begin() + static_cast<std::ptrdiff_t>(l.pe * nq),
                                                         infos.begin() + static_cast<std::ptrdiff_t>((l.pe + 1) * nq));
      w.bootstrap().allgather(mine.data(), infos.data(), nq * sizeof(verbs_gpu::host::connection_info));
      bases = w.bootstrap().allgather_value(bases[static_cast<std::size_t>(l.pe)]);
    }
    // Connect: PE p's j-th QP to PE `to` with PE to's j-th QP to p (itself for to == p).
    for (auto& l : locals_) {
      GPUCOMM_CUDA_CHECK(cudaSetDevice(l.device), l.pe);
      for (int to = 0; to < npes; ++to)
        for (int j = 0; j < k; ++j)
          l.qps[static_cast<std::size_t>(to * k + j)]->connect(
              infos[static_cast<std::size_t>(to) * nq + static_cast<std::size_t>(l.pe * k + j)]);
    }

    // Device tables.
    for (auto& l : locals_) {
      GPUCOMM_CUDA_CHECK(cudaSetDevice(l.device), l.pe);
      std::vector<verbs_gpu::send_queue> sqs;
      for (std::size_t i = 0; i < nq; ++i) {
        verbs_gpu::send_queue sq = l.qps[i]->send_queue();
        sq.counters = l.counters + i;               // one array: check_errors reads it at once
        sq.timeout_ns = world_->wait_timeout_ns();  // debug builds: the world's bound on device waits
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
    if (net_) net_->data_path().start();
    // Every process's NIC serves before any kernel posts.
    if (multi) w.bootstrap().barrier();
  }

  /// Everything, in reverse: the NIC model stops first, so it reads no memory being released.
  void release() noexcept {
    current_device_guard const keep;
    if (net_) net_->data_path().stop();
    for (auto& l : locals_) {
      cudaSetDevice(l.device);
      l.qps.clear();
      l.registered_mrs.clear();
      l.heap_regions.reset();
      l.results_mr.reset();
      l.staging_mr.reset();
      l.nic.reset();
      l.backend.reset();
      l.memory.reset();
      for (void* p : {static_cast<void*>(l.queues), static_cast<void*>(l.peer_bases), static_cast<void*>(l.key_rows),
                      static_cast<void*>(l.results), static_cast<void*>(l.counters), static_cast<void*>(l.staging),
                      static_cast<void*>(l.staging_slots), static_cast<void*>(l.regions)}) {
        cudaFree(p);
      }
    }
    locals_.clear();
    fabric_.reset();
    net_.reset();
  }

  int qps_per_peer_ = 2;
  heap_keys keys_;  // the key tables' shape, the same for every local PE (rows: each PE's own)
  std::unique_ptr<verbs_gpu::model::model_network> net_;       // the model's data path (model only)
  std::unique_ptr<verbs_gpu::model::firmware_fabric> fabric_;  // the model's devices (model only)
  std::vector<local> locals_;
};

}  // namespace gpucomm::detail
