#pragma once
// The NIC of every local PE, opened for a transport that moves data by RDMA: IBGDAPost (its GPU
// threads post) and ProxyQueue's NIC backend (its proxy thread posts). Host only. Both run the same
// set-up, verbs_gpu/host/setup.hpp; only the backend under it differs:
//   model     the firmware model driving the software NIC (test support: the CMake target
//             gpucomm::nic_model plugs it in through model_hook.hpp), a test and development
//             tool: every firmware command is decoded and checked, and the QPs the set-up made
//             run on the NIC model. Each PE has a modelled device of its own
//             ("gpucomm_model_<pe>", LID pe + 1). A single-process world runs one NIC model for all
//             its PEs; with one process per GPU each process runs one for its PE, the other PEs'
//             devices are remote in its fabric, and the models serve each other's RDMA over
//             host-local sockets, so every operation on a PE's memory is executed by that PE's model
//             (one atomicity domain). Each transport has its own model and fabric addresses.
//   hardware  rdma-core (verbs_gpu/host/rdma_core_backend.hpp; built with GPUCOMM_HAVE_RDMA_CORE,
//             which linking gpucomm::verbs defines): the configured device name, else the mlx5
//             device closest to each GPU (docs/guide/ibgda.md, "Running on a real NIC").
//
// What the endpoints hold per local PE: the backend and its control memory, the opened device (a
// DEVX context for GPU-posted QPs; an ordinary verbs context for host-posted ones on hardware),
// and an MR per block of the symmetric heap (made when the block is allocated, every PE's rkey of
// it exchanged then) with the PE's key table (heap_keys.hpp) in host memory. The transports make
// their own QPs on the devices and connect them with connect().

#include <cuda_runtime_api.h>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "../../error.hpp"
#include "../../host/bootstrap.hpp"
#include "../../host/detail/device_guard.hpp"
#include "choice.hpp"
#include "../../host/world.hpp"
#include "../../verbs_gpu/host/setup.hpp"
#include "../../verbs_gpu/send_queue.cuh"
#include "heap_keys.hpp"
#include "model_faults.hpp"
#include "model_hook.hpp"
#include "select.hpp"
#if defined(GPUCOMM_HAVE_RDMA_CORE)
#include "../../verbs_gpu/host/rdma_core_backend.hpp"
#endif

namespace gpucomm::detail {

/// Which transport the endpoints serve, and how.
struct nic_endpoints_config {
  char const* who = "IBGDAPost";  ///< the transport, in errors ("world::comm<IBGDAPost>")
  char const* fabric = "ibgda";   ///< the model's fabric addresses: two transports' models never meet
  char const* docs = "docs/guide/ibgda.md, \"Running on a real NIC\"";  ///< what a hardware failure points to
  char const* option = "ibgda_options::nic";                            ///< the option that chose the NIC, in errors
  nic_choice choice = nic_choice::model;
  std::string nic_name{};  ///< hardware: the ibv device; empty: the mlx5 device closest to each GPU
  nic_model_faults model_faults{};
  /// The QPs' poster: GPU threads (queues in GPU memory, a DEVX context) or a host thread (host_qps:
  /// ordinary verbs on hardware, host-memory queues on the model).
  verbs_gpu::host::poster posted_by = verbs_gpu::host::poster::gpu;
};

/// The fabric address of PE `pe`'s model for the transport whose fabric is `fabric`.
inline std::string model_address(world const& w, char const* fabric, int pe) {
  char name[128];
  std::snprintf(name, sizeof(name), "gpucomm-%s-%016llx-%d", fabric, static_cast<unsigned long long>(w.session_id()),
                pe);
  return name;
}

/// A verbs_gpu set-up failure as the transport's gpucomm::error.
inline error nic_setup_failed(nic_endpoints_config const& config, int pe, verbs_gpu::host::setup_error const& e) {
  bool const model = config.choice == nic_choice::model;
  return error(std::string("world::comm<") + config.who + ">", pe,
               std::string("setting up the ") + (model ? "NIC model" : "NIC") + " failed: " + e.what(),
               model ? "this is a defect of gpucomm's set-up or of its models; please report it"
                     : std::string(config.docs) + ", says what each step needs");
}

class nic_endpoints {
 public:
  struct endpoint {
    int pe = 0;
    int device = 0;
    char* slot = nullptr;  ///< the PE's symmetric heap slot
    // Made in this order, destroyed in reverse (the MRs before the device and its PD, the device
    // before its backend and control memory).
    std::unique_ptr<verbs_gpu::host::control_memory> memory;
    std::unique_ptr<verbs_gpu::host::backend> backend;
    std::unique_ptr<verbs_gpu::host::device> nic;
    std::unique_ptr<verbs_gpu::host::region_registry> heap_regions;  ///< an MR per heap block
    std::vector<std::uint32_t> key_rows;  ///< the PE's key table (heap_keys), wire order, in host memory
  };

  /// Opens every local PE's NIC (steps 1-4 of the set-up). Throws gpucomm::error.
  nic_endpoints(world& w, nic_endpoints_config config) : world_(&w), config_(std::move(config)) {
    keys_.log_page = heap_keys::log_page_for(w.heap_granularity());
    keys_.pages = w.heap_layout().stride >> keys_.log_page;
    keys_.row_words = static_cast<std::uint32_t>(w.npes()) + 1;
    current_device_guard const keep;
    int pe = w.local_pes().front();
    try {
      if (model()) open_model();
      endpoints_.reserve(w.local_pes().size());
      for (int const local : w.local_pes()) {
        pe = local;
        GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
        open(pe);
      }
    } catch (verbs_gpu::host::setup_error const& e) {
      release();
      throw nic_setup_failed(config_, pe, e);
    } catch (...) {
      release();
      throw;
    }
  }
  nic_endpoints(nic_endpoints const&) = delete;
  nic_endpoints& operator=(nic_endpoints const&) = delete;
  ~nic_endpoints() { release(); }

  nic_endpoints_config const& config() const noexcept { return config_; }
  bool model() const noexcept { return config_.choice == nic_choice::model; }
  std::vector<endpoint>& endpoints() noexcept { return endpoints_; }
  std::vector<endpoint> const& endpoints() const noexcept { return endpoints_; }
  /// The key tables' shape, the same for every local PE (rows: nullptr; keys_of() gives a PE's).
  heap_keys const& keys() const noexcept { return keys_; }
  /// Endpoint e's key table, in host memory.
  heap_keys keys_of(endpoint const& e) const noexcept {
    heap_keys k = keys_;
    k.rows = e.key_rows.data();
    return k;
  }
  /// Where every PE's heap slot starts in its own address space ([pe]; after connect()).
  std::vector<std::uint64_t> const& bases() const noexcept { return bases_; }

  /// Connects the transport's QPs across the world: `qps_of(e)` is endpoint e's vector of QPs
  /// (unique_ptrs), [to * k + j] its j-th QP to PE `to` (itself included: loopback), each with
  /// local_info() and connect(). PE p's j-th QP to `to` meets PE to's j-th QP to p. Also exchanges
  /// where every heap slot starts (bases()). Collective over the world's processes.
  template <class QpsOf>
  void connect(int k, QpsOf&& qps_of) {
    world& w = *world_;
    int const npes = w.npes();
    std::size_t const nq = static_cast<std::size_t>(npes) * static_cast<std::size_t>(k);
    current_device_guard const keep;
    std::vector<verbs_gpu::host::connection_info> infos(static_cast<std::size_t>(npes) * nq);  // [pe][to * k + j]
    bases_.assign(static_cast<std::size_t>(npes), 0);
    for (endpoint& e : endpoints_) {
      bases_[static_cast<std::size_t>(e.pe)] = reinterpret_cast<std::uint64_t>(e.slot);
      auto const& qps = qps_of(e);
      for (std::size_t i = 0; i < nq; ++i) infos[static_cast<std::size_t>(e.pe) * nq + i] = qps[i]->local_info();
    }
    if (w.one_process_per_gpu()) {
      int const me = endpoints_.front().pe;
      std::vector<verbs_gpu::host::connection_info> mine(infos.begin() + static_cast<std::ptrdiff_t>(me * nq),
                                                         infos.begin() + static_cast<std::ptrdiff_t>((me + 1) * nq));
      w.bootstrap().allgather(mine.data(), infos.data(), nq * sizeof(verbs_gpu::host::connection_info));
      bases_ = w.bootstrap().allgather_value(bases_[static_cast<std::size_t>(me)]);
    }
    endpoint const* at = nullptr;
    try {
      for (endpoint& e : endpoints_) {
        at = &e;
        GPUCOMM_CUDA_CHECK(cudaSetDevice(e.device), e.pe);
        auto& qps = qps_of(e);
        for (int to = 0; to < npes; ++to)
          for (int j = 0; j < k; ++j)
            qps[static_cast<std::size_t>(to * k + j)]->connect(
                infos[static_cast<std::size_t>(to) * nq + static_cast<std::size_t>(e.pe * k + j)]);
      }
    } catch (verbs_gpu::host::setup_error const& err) {
      throw nic_setup_failed(config_, at->pe, err);
    }
  }

  /// world::allocate: every local PE registers the new block (heap offset `offset`, `bytes`) with
  /// its NIC, every PE learns every PE's rkey of it, and the key tables get its rows. Collective;
  /// where a registration fails anywhere, every process throws and none keeps one.
  void add_heap_block(std::size_t offset, std::size_t bytes) {
    world& w = *world_;
    current_device_guard const keep;
    std::vector<std::uint32_t> rkeys(static_cast<std::size_t>(w.npes()), heap_keys::none);  // host order
    std::string problem;
    for (endpoint& e : endpoints_) {
      try {
        GPUCOMM_CUDA_CHECK(cudaSetDevice(e.device), e.pe);
        verbs_gpu::host::region_entry const& r = e.heap_regions->add(e.slot + offset, bytes, true);
        rkeys[static_cast<std::size_t>(e.pe)] = r.rkey;
        if (r.rkey == heap_keys::none || e.heap_regions->lkey(e.slot + offset, bytes) == heap_keys::none)
          problem = "the NIC gave the region memory key 0, which gpucomm's key table uses for \"no block\"";
      } catch (std::exception const& err) {
        problem = err.what();
      }
      if (!problem.empty()) break;
    }
    try {
      all_ok_or_throw(
          w.bootstrap(), problem.empty(),
          "registering " + std::to_string(bytes) + " bytes of symmetric heap with the NIC failed: " + problem,
          "world::allocate", (std::string(config_.docs) + ", says what registering GPU memory needs").c_str());
      if (w.one_process_per_gpu())
        rkeys = w.bootstrap().allgather_value(rkeys[static_cast<std::size_t>(endpoints_.front().pe)]);
    } catch (...) {
      remove_heap_block(offset, bytes);
      throw;
    }
    std::vector<std::uint32_t> wire(rkeys.size());
    for (std::size_t pe = 0; pe < rkeys.size(); ++pe) wire[pe] = verbs_gpu::to_be32(rkeys[pe]);
    for (endpoint& e : endpoints_) {
      std::uint32_t const lkey = verbs_gpu::to_be32(e.heap_regions->lkey(e.slot + offset, bytes));
      heap_keys::fill_block(rows_of(e, offset), bytes >> keys_.log_page, lkey, wire.data(), keys_.row_words);
    }
  }

  /// world::deallocate, the kernels and the transport's work on the block done (or add_heap_block
  /// undoing it): its rows cleared, then its regions deregistered. Never throws; a region it does
  /// not hold it leaves alone.
  void remove_heap_block(std::size_t offset, std::size_t bytes) noexcept {
    current_device_guard const keep;
    for (endpoint& e : endpoints_) {
      if (!e.heap_regions->contains(e.slot + offset)) continue;
      heap_keys::fill_block(rows_of(e, offset), bytes >> keys_.log_page, heap_keys::none, nullptr, keys_.row_words);
      cudaSetDevice(e.device);
      e.heap_regions->remove(e.slot + offset);
    }
  }
  /// The first row of endpoint e's table for heap offset `offset`.
  std::uint32_t* rows_of(endpoint& e, std::size_t offset) noexcept {
    return e.key_rows.data() + keys_.page_of(offset) * keys_.row_words;
  }

  /// After the transport made and connected its QPs: the model starts executing them, and every
  /// process's NIC serves before any kernel posts.
  void start() {
    if (model_) model_->start();
    if (world_->one_process_per_gpu()) world_->bootstrap().barrier();
  }
  /// The model stops executing: nothing reads memory being released after this.
  void stop() noexcept {
    if (model_) model_->stop();
  }

  /// Throws the first error no completion carries (the NIC's asynchronous events: a CQ overrun, a
  /// QP in error, a port down, a fatal device error) as a gpucomm::error of the transport.
  void check_async_events() const {
    for (endpoint const& e : endpoints_) {
      for (verbs_gpu::host::async_event const& ev : e.backend->async_events()) {
        throw error(config_.who, e.pe,
                    "PE " + std::to_string(e.pe) + "'s NIC (" + e.nic->name() + ") reported " + ev.text(),
                    ev.what == verbs_gpu::host::async_event::kind::cq_error
                        ? "a CQ overran: a set-up defect (collapsed CQs need cqc.oi = 1; owner-bit CQs an entry per "
                          "WQEBB)"
                        : "the queues stay in error; check the port and the NIC (ibv_devinfo, dmesg), then build "
                          "a new world");
      }
    }
  }

  /// What this process's NIC model did so far (faults injected included); zeros on hardware.
  nic_model_stats model_stats() const { return model_ ? model_->stats() : nic_model_stats{}; }

 private:
  /// The modelled device of PE `pe`.
  static std::string model_device_name(int pe) { return "gpucomm_model_" + std::to_string(pe); }

  std::string gpu_bus_id(int pe) const {
    char bus[32] = {};
    GPUCOMM_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), world_->device(pe)), pe);
    std::string s(bus);
    for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s;
  }

  /// The model's network and fabric: a device per PE with LID pe + 1; with one process per GPU the
  /// other processes' devices are remote (their models check their side of each connection).
  void open_model() {
    world const& w = *world_;
    nic_model_factory const make = require_nic_model(config_.who, config_.option, w.local_pes().front());
    nic_model_config config;
    config.faults = config_.model_faults;
    for (int pe = 0; pe < w.npes(); ++pe) {
      nic_model_device d;
      d.name = model_device_name(pe);
      d.pci_bus_id = w.is_local(pe) ? gpu_bus_id(pe) : std::string();
      d.lid = static_cast<std::uint16_t>(pe + 1);
      d.port_guid = 0x0002c90300000000ull + static_cast<std::uint64_t>(pe);
      d.remote = w.one_process_per_gpu() && !w.is_local(pe);
      if (d.remote) config.remotes.emplace_back(d.name, model_address(w, config_.fabric, pe));
      config.devices.push_back(std::move(d));
    }
    if (w.one_process_per_gpu()) config.listen = model_address(w, config_.fabric, w.local_pes().front());
    model_ = make(config);
  }

  /// PE pe's backend, control memory, device and heap registry (the current GPU is pe's).
  void open(int pe) {
    world& w = *world_;
    endpoints_.emplace_back();
    endpoint& e = endpoints_.back();
    e.pe = pe;
    e.device = w.device(pe);
    e.slot = w.heap_layout().base + static_cast<std::size_t>(pe) * w.heap_layout().stride;
    e.key_rows.assign(keys_.pages * keys_.row_words, heap_keys::none);
    bool const host_posted = config_.posted_by == verbs_gpu::host::poster::host;
    verbs_gpu::host::device_options o;
    if (model()) {
      // GPU-posted queues live in GPU memory, as on hardware; host-posted ones in host memory.
      if (host_posted)
        e.memory = std::make_unique<verbs_gpu::host::host_control_memory>();
      else
        e.memory = model_->gpu_control_memory();
      // The heap slot is mapped piece by piece; the runtime cannot describe all of it.
      e.backend = model_->backend(*e.memory, e.slot, w.heap_layout().stride, e.device);
      o.name = model_device_name(pe);
    } else {
      open_hardware(e);
      o.name = config_.nic_name;
      // Host-posted QPs are ordinary verbs QPs: no DEVX, the portable path.
      o.devx = !host_posted;
    }
    o.gpu_pci_bus_id = gpu_bus_id(pe);
    o.memory = e.memory.get();
    e.nic = std::make_unique<verbs_gpu::host::device>(*e.backend, o);
    e.heap_regions = std::make_unique<verbs_gpu::host::region_registry>(*e.nic);
  }

  void open_hardware([[maybe_unused]] endpoint& e) {
#if defined(GPUCOMM_HAVE_RDMA_CORE)
    // GPU memory answers the dma-buf questions for the heap's MRs either way; host-posted QPs take
    // no control memory (rdma-core's provider allocates their rings).
    e.memory = std::make_unique<verbs_gpu::host::cuda_control_memory>();
    e.backend = std::make_unique<verbs_gpu::host::rdma_core_backend>();
#else
    char bus[32] = {};
    GPUCOMM_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), e.device), e.pe);
    std::string const nic = closest_nic(bus);
    std::string const option = config_.option;
    throw error(
        std::string("world::comm<") + config_.who + ">", e.pe,
        nic.empty() ? "a hardware NIC was asked for (" + option +
                          " or GPUCOMM_NIC), but no InfiniBand/RoCE device is visible under /sys/class/infiniband"
                    : "a hardware NIC was asked for (the closest to GPU " + std::string(bus) + " is " + nic +
                          "), but this program was built without rdma-core",
        "link the gpucomm::verbs target (it needs libibverbs-dev with infiniband/mlx5dv.h); to test without "
        "a NIC set GPUCOMM_NIC=model (or " +
            option + " = nic_choice::model): the model is a test and development tool, never a silent fallback");
#endif
  }

  /// Everything, in reverse; the model stops first, so it reads no memory being released.
  void release() noexcept {
    current_device_guard const keep;
    stop();
    while (!endpoints_.empty()) {
      endpoint& e = endpoints_.back();
      cudaSetDevice(e.device);
      e.heap_regions.reset();
      e.nic.reset();
      e.backend.reset();
      e.memory.reset();
      endpoints_.pop_back();
    }
    model_.reset();
  }

  world* world_;
  nic_endpoints_config config_;
  heap_keys keys_;
  std::unique_ptr<nic_model_instance> model_;  // the model's data path and devices (model only)
  std::vector<endpoint> endpoints_;            // [local PE], in local_pes() order
  std::vector<std::uint64_t> bases_;           // [pe]
};

}  // namespace gpucomm::detail
