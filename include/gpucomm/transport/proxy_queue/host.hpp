#pragma once
// ProxyQueue, host half: per local PE a command ring and its backends (detail/backend.hpp: the
// copy engines, and where some peer is not reached through the mapped heap a network backend, the
// NIC or a network engine, proxy_options::network), and the proxy thread(s) that serve them,
// started when the world first hands out a comm<ProxyQueue> and stopped, after draining, when the
// world goes. The device side is proxy_queue/device.cuh.
//
// Memory per local PE: the ring's slots and its reader counters in pinned host memory mapped into
// the GPU (cudaHostAlloc, mapped and portable); its producer words in the PE's GPU memory.
// Threads: options.threads (per_process: one thread for every local PE; per_pe: one each), each
// busy-polling, optionally pinned (options.cpu). world::synchronize() waits until every command
// the kernels posted is complete, then reports the first failed one (PE, peer, operation, ticket,
// the failing call) as a gpucomm::error.

#include <cuda_runtime_api.h>

#include <cuda/atomic>

#include <chrono>
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
#include "../../host/detail/hardware_queues.hpp"
#include "../../detail/bounded_wait.cuh"
#include "../../host/world_options.hpp"
#include "../../detail/staging.hpp"
#include "../nic/local_regions.hpp"
#include "command_ring.cuh"
#include "detail/copy_engine.hpp"
#include "settings.hpp"
#include "detail/backend.hpp"
#include "detail/engine_link.hpp"
#include "detail/failures.hpp"
#include "detail/nic_link.hpp"
#include "detail/proxy_thread.hpp"
#include "detail/teardown.hpp"
#include "options.hpp"
#include "state.hpp"

namespace gpucomm::detail {

/// A template on the world (ProxyQueue::host_state is proxy_queue_host_of<world>) only so that it
/// needs the world's definition where world::comm instantiates it, and its body is compiled there,
/// not in every file that includes the transport.
template <class World>
class proxy_queue_host_of {
 public:
  proxy_queue_host_of(World& w, proxy_options const& options);

  proxy_queue_host_of(proxy_queue_host_of const&) = delete;
  proxy_queue_host_of& operator=(proxy_queue_host_of const&) = delete;

  /// Drains: waits for the kernels on the world's streams, then until every command they posted is
  /// complete (bounded: a kernel that died leaves tickets nobody publishes); peers may still be
  /// copying into this PE's heap until every process is here (teardown_barrier: not when a peer
  /// was found gone); then stops the threads.
  ~proxy_queue_host_of();

  /// Whether PE `from`'s commands reach PE `to` (world::reaches): the copy engines carry them where
  /// `from` maps `to`'s heap, and the network backend, set up whenever some pair needs it, the others.
  bool reaches(int from, int to) const { return !paths_.empty() || world_->can_load_store(from, to); }

  proxy_queue_state device_state_for(int pe) const;

  /// world::deallocate(), before the block goes: waits for the kernels, as cudaFree does, and then
  /// until the proxy has carried out every command they posted (a copy may still read the block).
  void on_deallocate() const;

  /// What the NIC backend's model did so far in this process (faults injected included); zeros
  /// when no peer goes through the NIC. For tests (the differential soak counts faults).
  nic_model_stats model_stats() const { return nic_ ? nic_->model_stats() : nic_model_stats{}; }

  /// world::allocate: with a NIC backend, every local PE's NIC registers the new block and learns
  /// every PE's rkey of it (nic_link.hpp); collective, undone everywhere when it fails anywhere.
  void on_heap_block(std::size_t offset, std::size_t bytes);
  /// world::deallocate, after on_deallocate drained the proxy: the block's regions go.
  void on_heap_block_freed(std::size_t offset, std::size_t bytes) noexcept;

  /// world::synchronize(), after the streams: every command posted is complete; then the first
  /// failure recorded since the last call, thrown.
  void on_synchronize() const;

  /// world::register_buffer: with a network backend, PE b.pe's kernels find the buffer in their
  /// table and send from it (or receive into it) without staging; the NIC backend registers it.
  void on_register_buffer(registered_buffer const& b);
  /// world::unregister_buffer: the proxy drained, the buffer leaves the table and the NIC.
  void on_unregister_buffer(registered_buffer const& b);

 private:
  template <class T>
  struct host_free {
    void operator()(T* p) const { cudaFreeHost(p); }
  };
  template <class T>
  struct device_free {
    int device;
    void operator()(T* p) const {
      cudaSetDevice(device);
      cudaFree(p);
    }
  };

  struct local {
    int pe = 0;
    std::unique_ptr<proxy_queue::command[], host_free<proxy_queue::command>> slots;
    std::unique_ptr<proxy_queue::ring_counters, host_free<proxy_queue::ring_counters>> counters;
    std::unique_ptr<proxy_queue::producer_words, device_free<proxy_queue::producer_words>> producers;
    std::unique_ptr<std::uint8_t[], device_free<std::uint8_t>> paths;      // [peer], with a network backend
    std::unique_ptr<std::uint64_t[], device_free<std::uint64_t>> results;  // [slots + 1], with a network backend
    std::unique_ptr<std::uint32_t[], device_free<std::uint32_t>> claims;   // [slots], with a network backend
    // With a network backend: the staging area (staging_layout::bytes), its slots' control words,
    // and the device's table of the registered buffers (detail/staging.hpp), with what it holds.
    std::unique_ptr<unsigned char[], device_free<unsigned char>> staging;
    std::unique_ptr<staging_slot[], device_free<staging_slot>> staging_slots;
    std::unique_ptr<local_regions[], device_free<local_regions>> regions;
    std::vector<local_region> registered;
    proxy_ring ring;
  };

  template <class T>
  static T* host_mapped(std::size_t count, int pe) {
    void* p = nullptr;
    GPUCOMM_CUDA_CHECK(cudaHostAlloc(&p, count * sizeof(T), cudaHostAllocMapped | cudaHostAllocPortable), pe);
    std::memset(p, 0, count * sizeof(T));
    return static_cast<T*>(p);
  }

  std::unique_ptr<local> make_local(int pe);

  /// proxy_path bits, [from * npes + to]; empty when no PE reaches another through the network. A
  /// PE's memory whose data some PE reaches through the network takes every signal and atomic
  /// through the network backend too: one atomicity domain per word, whoever updates it.
  static std::vector<std::uint8_t> choose_paths(World const& w, proxy_backends backends);

  /// A PE's device tables for a network backend: its paths to every peer, the result slots (as
  /// many as the ring has commands: more waiting callers wait for one; and one more word for the
  /// old values nobody reads) with their claims, the staging area and the registered buffers.
  void make_device_tables(local& l);

  /// The engine backend of every local PE (detail/engine_setup.hpp, linked through
  /// detail/engine_link.hpp): an engine per PE, connected and given every PE's heap slot through
  /// the world's bootstrap.
  void set_up_engines(proxy_options const& options);

  /// The NIC backend of every local PE (detail/nic_setup.hpp, linked through detail/nic_link.hpp):
  /// its NIC opened, the heap's blocks and the result slots registered, a host-posted QP to every PE,
  /// connected across the world. The only place the NIC backend is made.
  void set_up_nic(proxy_nic_factory make, proxy_options const& options);

  template <class T>
  static std::unique_ptr<T[], device_free<T>> device_copy(std::vector<T> const& v, int pe, int device) {
    T* p = nullptr;
    GPUCOMM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p), v.size() * sizeof(T)), pe);
    std::unique_ptr<T[], device_free<T>> owned(p, device_free<T>{device});
    GPUCOMM_CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), pe);
    return owned;
  }

  /// Whether every local PE can have a stream per peer without the proxy's streams and the world's
  /// outnumbering the GPU's hardware queues (CUDA_DEVICE_MAX_CONNECTIONS, which the world sets to
  /// 32 unless the program set it; CUDA's default is 8). Beyond that, streams share queues and a
  /// copy may wait behind a kernel that waits for it; one stream per PE keeps the count low.
  /// GPUCOMM_PROXY_STREAMS=per_pe or per_peer overrides the choice (the tests run both).
  bool stream_per_peer() const;

  local const& local_of(int pe) const { return const_cast<proxy_queue_host_of*>(this)->local_of(pe); }
  local& local_of(int pe);

  /// Waits until every ticket handed out on every local ring is complete; "" when done, else
  /// what is left when `limit` runs out (or why the tickets could not be counted).
  std::string drain(std::chrono::seconds limit) const;

  static std::string describe(proxy_failure const& f, std::uint64_t count);

  World* world_;
  unsigned log_depth_ = 10;
  std::chrono::microseconds issue_delay_{0};
  std::uint32_t store_path_bytes_ = 0;
  mutable proxy_failures failures_;
  std::vector<std::uint8_t> paths_;              // [from * npes + to]: proxy_path bits; empty: no network
  proxy_network network_ = proxy_network::nic;   // which network backend, with paths_
  std::unique_ptr<proxy_engines_base> engines_;  // the engine backends' engines (before locals_: outlive the backends)
  std::vector<std::unique_ptr<local>> locals_;
  // The NIC backends' NICs, queues and registrations (after locals_: they go before the result slots
  // they registered; the backends in the rings are idle by then, the threads stopped).
  std::unique_ptr<proxy_nic> nic_;
  std::vector<std::unique_ptr<proxy_thread>> threads_;  // after locals_: stopped before the rings go
};

using proxy_queue_host = proxy_queue_host_of<world>;

}  // namespace gpucomm::detail

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "detail/host.inl"
#endif
