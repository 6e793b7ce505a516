#pragma once
// ProxyQueue's NIC backend set up for a world's local PEs: each PE's NIC opened (the shared
// endpoints, transport/nic/endpoints.hpp: the firmware model, or rdma-core's ordinary verbs on
// hardware), the heap's blocks, the result slots, the staging area and the buffers of
// world::register_buffer registered, a host-posted QP to every PE
// connected across the world, and a nic_backend per PE over them. Host only.
//
// Compiled only into programs that link the CMake target gpucomm::nic: its registration unit
// installs this class behind nic_link.hpp, through which ProxyQueue's host half (host.hpp) uses it.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../../../callback.hpp"
#include "../../../error.hpp"
#include "../../../host/detail/device_guard.hpp"
#include "../../../detail/staging.hpp"
#include "../../../host/world.hpp"
#include "../../../verbs_gpu/host/setup.hpp"
#include "../../nic/endpoints.hpp"
#include "../../nic/select.hpp"
#include "../options.hpp"
#include "backend.hpp"
#include "failures.hpp"
#include "nic_backend.hpp"
#include "nic_link.hpp"

namespace gpucomm::detail {

class proxy_nic_setup final : public proxy_nic {
 public:
  /// Sets up the NIC backend of every PE in `pes` (collective over the world's processes); every
  /// process's NIC serves when it returns. Throws gpucomm::error.
  proxy_nic_setup(world& w, proxy_options const& options, std::vector<proxy_nic_pe> pes, proxy_failures& failures) {
    int const first = w.local_pes().front();
    nic_endpoints_config config;
    config.who = "ProxyQueue";
    config.fabric = "proxy";
    config.docs = "docs/guide/proxyqueue.md, \"The NIC backend\"";
    config.option = "proxy_options::nic";
    config.choice =
        resolve_nic_choice(options.nic, std::getenv("GPUCOMM_NIC"), first, "ProxyQueue", "proxy_options::nic");
    config.model_faults = options.model_faults;
    config.posted_by = verbs_gpu::host::poster::host;
    endpoints_ = std::make_unique<nic_endpoints>(w, config);
    auto const npes = static_cast<std::size_t>(w.npes());
    for (proxy_nic_pe& p : pes) locals_.emplace_back(std::move(p));
    current_device_guard const keep;
    int at_pe = first;  // the PE whose set-up failed, for the error (the connection: the first)
    try {
      for (auto& e : endpoints_->endpoints()) {
        at_pe = e.pe;
        local& l = local_of(e.pe);
        GPUCOMM_CUDA_CHECK(cudaSetDevice(l.at.device), l.at.pe);
        l.results_mr = std::make_unique<verbs_gpu::host::memory_region>(
            *e.nic, l.at.results, (l.at.result_slots + std::size_t{1}) * sizeof(std::uint64_t), true,
            verbs_gpu::host::access::local_write);
        l.staging_mr = std::make_unique<verbs_gpu::host::memory_region>(*e.nic, l.at.staging, staging_layout::bytes,
                                                                        true, verbs_gpu::host::access::local_write);
        l.buffers->add({reinterpret_cast<std::uint64_t>(l.at.staging), staging_layout::bytes,
                        verbs_gpu::to_be32(l.staging_mr->lkey()), 0});
        for (std::size_t peer = 0; peer < npes; ++peer)
          l.qps.push_back(std::make_unique<verbs_gpu::host::host_qp>(*e.nic, nic_backend::log_depth));
      }
      at_pe = first;
      endpoints_->connect(
          1, [&](nic_endpoints::endpoint const& e) -> auto& { return local_of(e.pe).qps; });
    } catch (verbs_gpu::host::setup_error const& e) {
      throw nic_setup_failed(config, at_pe, e);
    }
    // The blocks allocated before this transport (gpucomm's control block at least); later ones
    // come through world::allocate.
    for (auto const& b : w.heap_blocks()) endpoints_->add_heap_block(b.offset, b.bytes);
    for (auto& e : endpoints_->endpoints()) {
      local& l = local_of(e.pe);
      nic_backend::placement at;
      at.pe = l.at.pe;
      at.npes = w.npes();
      at.slot = reinterpret_cast<std::uint64_t>(e.slot);
      at.slot_bytes = w.heap_layout().stride;
      at.keys = endpoints_->keys_of(e);
      at.bases = endpoints_->bases();
      at.results = l.at.results;
      at.results_lkey = l.results_mr->lkey();
      at.result_slots = l.at.result_slots;
      at.paths = l.at.paths;
      at.buffers = l.buffers;
      if (config.choice == nic_choice::hardware) at.flush_gpu_writes = gpu_write_flush(l.at.pe, l.at.device);
      std::vector<verbs_gpu::send_queue> queues;
      for (auto const& q : l.qps) queues.push_back(q->send_queue());
      l.backend = make_proxy_backend<nic_backend>(queues, std::move(at), failures);
    }
    endpoints_->start();  // every process's NIC serves before any kernel posts
  }

  proxy_nic_setup(proxy_nic_setup const&) = delete;
  proxy_nic_setup& operator=(proxy_nic_setup const&) = delete;

  std::unique_ptr<proxy_backend> backend_for(int pe) override { return std::move(local_of(pe).backend); }
  void add_heap_block(std::size_t offset, std::size_t bytes) override { endpoints_->add_heap_block(offset, bytes); }
  void remove_heap_block(std::size_t offset, std::size_t bytes) noexcept override {
    endpoints_->remove_heap_block(offset, bytes);
  }
  void add_buffer(registered_buffer const& b) override {
    local& l = local_of(b.pe);
    current_device_guard const keep;
    GPUCOMM_CUDA_CHECK(cudaSetDevice(l.at.device), l.at.pe);
    try {
      auto mr =
          std::make_unique<verbs_gpu::host::memory_region>(*endpoint_of(b.pe).nic, const_cast<void*>(b.ptr), b.bytes,
                                                           b.cuda_device >= 0, verbs_gpu::host::access::local_write);
      l.buffers->add({reinterpret_cast<std::uint64_t>(b.ptr), b.bytes, verbs_gpu::to_be32(mr->lkey()), 0});
      l.buffer_mrs.emplace_back(reinterpret_cast<std::uint64_t>(b.ptr), std::move(mr));
    } catch (verbs_gpu::host::setup_error const& e) {
      throw error("world::register_buffer (ProxyQueue)", b.pe,
                  std::string("the NIC could not register the buffer: ") + e.what(),
                  "pass memory from cudaMalloc or cudaHostAlloc that is not registered already");
    }
  }
  void remove_buffer(registered_buffer const& b) noexcept override {
    for (auto& l : locals_) {
      if (l.at.pe != b.pe) continue;
      auto const base = reinterpret_cast<std::uint64_t>(b.ptr);
      l.buffers->remove(base);
      for (std::size_t i = 0; i < l.buffer_mrs.size(); ++i) {
        if (l.buffer_mrs[i].first != base) continue;
        l.buffer_mrs.erase(l.buffer_mrs.begin() + static_cast<std::ptrdiff_t>(i));
        return;
      }
    }
  }
  void check_async_events() const override { endpoints_->check_async_events(); }
  void stop() noexcept override { endpoints_->stop(); }
  nic_model_stats model_stats() const override { return endpoints_->model_stats(); }

 private:
  struct local {
    explicit local(proxy_nic_pe p) : at(std::move(p)) {}
    proxy_nic_pe at;
    std::unique_ptr<verbs_gpu::host::memory_region> results_mr, staging_mr;
    std::vector<std::unique_ptr<verbs_gpu::host::host_qp>> qps;  // [peer]
    std::unique_ptr<proxy_backend> backend;                      // until backend_for() hands it out
    /// The staging area and the registered buffers, as the backend looks them up; their regions.
    std::shared_ptr<nic_local_buffers> buffers = std::make_shared<nic_local_buffers>();
    std::vector<std::pair<std::uint64_t, std::unique_ptr<verbs_gpu::host::memory_region>>> buffer_mrs;
  };

  nic_endpoints::endpoint const& endpoint_of(int pe) const {
    for (auto const& e : endpoints_->endpoints())
      if (e.pe == pe) return e;
    throw error("world::register_buffer (ProxyQueue)", pe, "PE " + std::to_string(pe) + " has no NIC endpoint here",
                "register buffers only for the PEs in local_pes()");
  }

  /// What makes a NIC's writes into `device`'s memory visible to it before the proxy reports them
  /// complete: nothing where the GPU orders them with their completions (ordering Owner or
  /// AllDevices), else cudaDeviceFlushGPUDirectRDMAWrites to the owner, as NCCL's proxy flushes a
  /// receive into GPU memory on GPUs that need it.
  static callback<std::string()> gpu_write_flush(int pe, int device) {
    int ordering = 0;
    GPUCOMM_CUDA_CHECK(cudaDeviceGetAttribute(&ordering, cudaDevAttrGPUDirectRDMAWritesOrdering, device), pe);
    if (ordering >= cudaGPUDirectRDMAWritesOrderingOwner) return {};
    return [device]() -> std::string {
      cudaError_t e = cudaSetDevice(device);
      if (e == cudaSuccess)
        e = cudaDeviceFlushGPUDirectRDMAWrites(cudaFlushGPUDirectRDMAWritesTargetCurrentDevice,
                                               cudaFlushGPUDirectRDMAWritesToOwner);
      return e == cudaSuccess ? std::string()
                              : std::string("cudaDeviceFlushGPUDirectRDMAWrites failed: ") + cudaGetErrorString(e);
    };
  }

  local& local_of(int pe) {
    for (auto& l : locals_)
      if (l.at.pe == pe) return l;
    throw error("world::comm<ProxyQueue>", pe, "PE " + std::to_string(pe) + " is not owned by this process",
                "ask only for the PEs in local_pes()");
  }

  // Destroyed in reverse: the backends not handed out, the QPs and registrations, then the NICs.
  std::unique_ptr<nic_endpoints> endpoints_;
  std::vector<local> locals_;  // [local PE], in the order given
};

}  // namespace gpucomm::detail
