#pragma once
// ProxyQueue, host half: per local PE a command ring and a copy-engine backend, and the proxy
// thread(s) that serve them, started when the world first hands out a comm<ProxyQueue> and
// stopped, after draining, when the world goes. The device side is proxy_queue/device.cuh.
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
#include <thread>
#include <vector>

#include "../../error.hpp"
#include "../../host/detail/device_guard.hpp"
#include "../../host/world.hpp"
#include "command_ring.cuh"
#include "detail/copy_engine.hpp"
#include "detail/failures.hpp"
#include "detail/proxy_thread.hpp"
#include "options.hpp"
#include "state.hpp"

namespace gpucomm::detail {

class proxy_queue_host {
 public:
  proxy_queue_host(world& w, proxy_options const& options) : world_(&w) {
    int const first = w.local_pes().front();
    log_depth_ = log_depth_from(options.log_depth, first);
    int const cpu = cpu_from(options.cpu, first);
    proxy_threads const threads = threads_from(options.threads, first);
    for (int pe : w.local_pes()) {
      for (int to = 0; to < w.npes(); ++to) {
        if (!w.can_load_store(pe, to)) {
          throw error("world::comm<ProxyQueue>", pe,
                      "PE " + std::to_string(to) + " cannot be reached through the mapped heap from PE " +
                          std::to_string(pe) +
                          ", and this version of ProxyQueue has only its copy-engine backend (peers on this host "
                          "with peer access); its NIC backend is not written yet (docs/proxyqueue.md)",
                      "run every PE on GPUs of one host with peer access; across hosts use IBGDAPost, or "
                      "route<NVLinkStore, IBGDAPost>");
        }
      }
    }
    for (int pe : w.local_pes()) locals_.push_back(make_local(pe));
    if (threads == proxy_threads::per_pe) {
      for (std::size_t i = 0; i < locals_.size(); ++i) {
        threads_.push_back(std::make_unique<proxy_thread>(std::vector<proxy_ring*>{&locals_[i]->ring},
                                                          cpu < 0 ? -1 : cpu + static_cast<int>(i)));
      }
    } else {
      std::vector<proxy_ring*> rings;
      for (auto& l : locals_) rings.push_back(&l->ring);
      threads_.push_back(std::make_unique<proxy_thread>(std::move(rings), cpu));
    }
  }

  proxy_queue_host(proxy_queue_host const&) = delete;
  proxy_queue_host& operator=(proxy_queue_host const&) = delete;

  /// Drains: waits for the kernels on the world's streams, then until every command they posted is
  /// complete (bounded: a kernel that died leaves tickets nobody publishes); peers may still be
  /// copying into this PE's heap until every process is here; then stops the threads.
  ~proxy_queue_host() {
    current_device_guard const keep;
    for (int pe : world_->local_pes()) {
      cudaSetDevice(world_->device(pe));
      cudaStreamSynchronize(world_->stream(pe));
    }
    std::string const left = drain(std::chrono::seconds(10));
    if (!left.empty()) std::fprintf(stderr, "gpucomm: ProxyQueue teardown: %s\n", left.c_str());
    if (world_->one_process_per_gpu()) world_->bootstrap().barrier();
    threads_.clear();
    std::uint64_t count = 0;
    if (auto const f = failures_.take(count)) std::fprintf(stderr, "%s\n", describe(*f, count).c_str());
  }

  proxy_queue_state device_state_for(int pe) const {
    local const& l = local_of(pe);
    proxy_queue_state s;
    s.ring.slots = l.slots.get();
    s.ring.log_depth = log_depth_;
    s.ring.counters = l.counters.get();
    s.ring.producers = l.producers.get();
    s.stride = world_->heap_layout().stride;
    return s;
  }

  /// world::deallocate(), before the block goes: waits for the kernels, as cudaFree does, and then
  /// until the proxy has carried out every command they posted (a copy may still read the block).
  void on_deallocate() const {
    current_device_guard const keep;
    for (int pe : world_->local_pes()) {
      GPUCOMM_CUDA_CHECK(cudaSetDevice(world_->device(pe)), pe);
      GPUCOMM_CUDA_CHECK(cudaDeviceSynchronize(), pe);
    }
    if (std::string const left = drain(std::chrono::seconds(60)); !left.empty()) {
      throw error("world::deallocate (ProxyQueue)", world_->local_pes().front(), left,
                  "a kernel that took a ticket must publish it: did a kernel trap while posting?");
    }
  }

  /// world::synchronize(), after the streams: every command posted is complete; then the first
  /// failure recorded since the last call, thrown.
  void on_synchronize() const {
    std::string const left = drain(std::chrono::seconds(60));
    if (!left.empty()) {
      throw error("world::synchronize (ProxyQueue)", world_->local_pes().front(), left,
                  "a kernel that took a ticket must publish it: did a kernel trap while posting?");
    }
    std::uint64_t count = 0;
    if (auto const f = failures_.take(count)) {
      throw error("ProxyQueue", f->pe, describe(*f, count),
                  "the command was completed without effect so that the GPU did not wait on it; pass addresses "
                  "of this world's symmetric heap and local buffers in global memory");
    }
  }

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
    proxy_ring ring;
  };

  template <class T>
  static T* host_mapped(std::size_t count, int pe) {
    void* p = nullptr;
    GPUCOMM_CUDA_CHECK(cudaHostAlloc(&p, count * sizeof(T), cudaHostAllocMapped | cudaHostAllocPortable), pe);
    std::memset(p, 0, count * sizeof(T));
    return static_cast<T*>(p);
  }

  std::unique_ptr<local> make_local(int pe) {
    auto l = std::make_unique<local>();
    l->pe = pe;
    int const device = world_->device(pe);
    GPUCOMM_CUDA_CHECK(cudaSetDevice(device), pe);
    l->slots.reset(host_mapped<proxy_queue::command>(std::size_t{1} << log_depth_, pe));
    l->counters.reset(host_mapped<proxy_queue::ring_counters>(1, pe));
    proxy_queue::producer_words* words = nullptr;
    GPUCOMM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&words), sizeof(*words)), pe);
    l->producers = std::unique_ptr<proxy_queue::producer_words, device_free<proxy_queue::producer_words>>(
        words, device_free<proxy_queue::producer_words>{device});
    GPUCOMM_CUDA_CHECK(cudaMemset(words, 0, sizeof(*words)), pe);
    // Mapped pinned memory has the same address on the device (unified addressing).
    proxy_queue::command_ring ring;
    ring.slots = l->slots.get();
    ring.log_depth = log_depth_;
    ring.counters = l->counters.get();
    ring.producers = words;
    l->ring.pe = pe;
    l->ring.device = device;
    l->ring.reader = proxy_queue::ring_reader(ring);
    l->ring.failures = &failures_;
    l->ring.engine = std::make_unique<copy_engine_backend>(
        copy_engine_backend::placement{pe, device, world_->npes(), world_->heap_layout().base,
                                       world_->heap_layout().stride, stream_per_peer()},
        failures_);
    return l;
  }

  /// Whether every local PE can have a stream per peer without the proxy's streams and the world's
  /// outnumbering the GPU's hardware queues (CUDA_DEVICE_MAX_CONNECTIONS, which the world sets to
  /// 32 unless the program set it; CUDA's default is 8). Beyond that, streams share queues and a
  /// copy may wait behind a kernel that waits for it; one stream per PE keeps the count low.
  /// GPUCOMM_PROXY_STREAMS=per_pe or per_peer overrides the choice (the tests run both).
  bool stream_per_peer() const {
    if (char const* forced = std::getenv("GPUCOMM_PROXY_STREAMS")) {
      std::string const v = forced;
      if (v == "per_pe") return false;
      if (v == "per_peer") return true;
      throw error("ProxyQueue", world_->local_pes().front(), "GPUCOMM_PROXY_STREAMS=" + v + " is not a stream mode",
                  "set it to per_peer or per_pe, or leave it unset");
    }
    long connections = 8;
    if (char const* env = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS")) {
      char* end = nullptr;
      long const v = std::strtol(env, &end, 10);
      if (end != env && *end == '\0' && v > 0) connections = v;
    }
    long const locals = static_cast<long>(world_->local_pes().size());
    return locals * (1 + world_->npes()) <= connections;
  }

  local const& local_of(int pe) const {
    for (auto const& l : locals_)
      if (l->pe == pe) return *l;
    throw error("world::comm<ProxyQueue>", pe, "PE " + std::to_string(pe) + " is not owned by this process",
                "ask only for the PEs in local_pes()");
  }

  /// Waits until every ticket handed out on every local ring is complete; "" when done, else
  /// what is left when `limit` runs out (or why the tickets could not be counted).
  std::string drain(std::chrono::seconds limit) const {
    current_device_guard const keep;
    auto const give_up = std::chrono::steady_clock::now() + limit;
    for (auto const& l : locals_) {
      proxy_queue::producer_words words{};
      cudaSetDevice(l->ring.device);
      if (cudaError_t const rc = cudaMemcpy(&words, l->producers.get(), sizeof(words), cudaMemcpyDeviceToHost);
          rc != cudaSuccess) {
        return "PE " + std::to_string(l->pe) + "'s ticket count could not be read (" + cudaGetErrorName(rc) + ")";
      }
      cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system> completed(l->counters->completed);
      while (completed.load(cuda::memory_order_acquire) < words.reserved) {
        if (std::chrono::steady_clock::now() > give_up) {
          return "PE " + std::to_string(l->pe) + " posted " + std::to_string(words.reserved) + " commands and " +
                 std::to_string(completed.load(cuda::memory_order_acquire)) + " are complete after " +
                 std::to_string(limit.count()) + " s";
        }
        std::this_thread::yield();
      }
    }
    return {};
  }

  static std::string describe(proxy_failure const& f, std::uint64_t count) {
    return "the " + f.op_name() + " of " + std::to_string(f.bytes) + " bytes from PE " + std::to_string(f.pe) +
           (f.peer >= 0 ? " to PE " + std::to_string(f.peer) : std::string(" to its peers")) + " (ticket " +
           std::to_string(f.ticket) + ") failed: " + f.what +
           (count > 1 ? " (" + std::to_string(count - 1) + " more failed commands)" : "");
  }

  static unsigned log_depth_from(unsigned option, int pe) {
    unsigned v = option;
    char const* env = std::getenv("GPUCOMM_PROXY_LOG_DEPTH");
    if (v == 0 && env != nullptr) {
      char* end = nullptr;
      v = static_cast<unsigned>(std::strtoul(env, &end, 10));
      if (end == env || *end != '\0') v = 99;
    }
    if (v == 0) v = 10;
    if (v > 20) {
      throw error("ProxyQueue", pe,
                  "the ring's log2 depth is " + (option != 0 ? std::to_string(option) : std::string(env)) +
                      " (proxy_options::log_depth or GPUCOMM_PROXY_LOG_DEPTH)",
                  "give 1 to 20 (2 to 1,048,576 commands of 64 bytes), or 0 for the default 10");
    }
    return v;
  }

  static int cpu_from(int option, int pe) {
    if (option >= 0) return option;
    char const* env = std::getenv("GPUCOMM_PROXY_CPU");
    if (env == nullptr) return -1;
    char* end = nullptr;
    long const v = std::strtol(env, &end, 10);
    if (end == env || *end != '\0' || v < -1 || v > 1 << 16)
      throw error("ProxyQueue", pe, std::string("GPUCOMM_PROXY_CPU=") + env + " is not a CPU number",
                  "set it to the CPU the proxy thread should run on, or -1 for none");
    return static_cast<int>(v);
  }

  static proxy_threads threads_from(proxy_threads option, int pe) {
    if (option != proxy_threads::automatic) return option;
    char const* env = std::getenv("GPUCOMM_PROXY_THREADS");
    if (env == nullptr) return proxy_threads::per_pe;
    std::string const v = env;
    if (v == "per_process") return proxy_threads::per_process;
    if (v == "per_pe") return proxy_threads::per_pe;
    throw error("ProxyQueue", pe, "GPUCOMM_PROXY_THREADS=" + v + " is not a thread mode",
                "set it to per_process or per_pe");
  }

  world* world_;
  unsigned log_depth_ = 10;
  mutable proxy_failures failures_;
  std::vector<std::unique_ptr<local>> locals_;
  std::vector<std::unique_ptr<proxy_thread>> threads_;  // after locals_: stopped before the rings go
};

}  // namespace gpucomm::detail
