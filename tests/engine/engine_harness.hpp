#pragma once
// What every engine test process sets up: a bootstrap (MPI under mpirun, or tcp_bootstrap.hpp
// across network namespaces), a host-memory "heap" poisoned at the start, the UCX engine behind
// gpucomm::engine::require_net_engine, ProxyQueue's engine backend, and ProxyQueue's own proxy
// thread (proxy_queue/detail/proxy_thread.hpp) draining a command ring in host memory into the
// backend, which it polls on every pass (the engine serves its peers inside it). The test's own
// thread is the "GPU": it posts commands with command_ring::post and waits with wait_complete.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

#include <gpucomm/host/bootstrap.hpp>
#include <gpucomm/transport/engine/cuda_memory_agent.hpp>
#include <gpucomm/transport/engine/engine_hook.hpp>
#include <gpucomm/transport/engine/memory_agent.hpp>
#include <gpucomm/transport/proxy_queue/command_ring.cuh>
#include <gpucomm/transport/proxy_queue/completion_window.hpp>
#include <gpucomm/transport/proxy_queue/detail/backend.hpp>
#include <gpucomm/transport/proxy_queue/detail/engine_backend.hpp>
#include <gpucomm/transport/proxy_queue/detail/proxy_thread.hpp>

namespace gpucomm_test {

using gpucomm::proxy_queue::command;
using gpucomm::proxy_queue::command_op;

/// Checks that count and report; the process's exit status is whether none failed.
struct checker {
  int rank = 0;
  long checks = 0, failed = 0;
  bool operator()(bool ok, std::string const& what) {
    ++checks;
    if (!ok && ++failed <= 20) std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
    return ok;
  }
  int finish(char const* scenario) const {
    std::printf("rank %d: %s: %ld checks, %ld failed: %s\n", rank, scenario, checks, failed, failed ? "FAIL" : "PASS");
    std::fflush(stdout);
    return failed ? 1 : 0;
  }
};

inline long env_long(char const* name, long fallback) {
  char const* v = std::getenv(name);
  return v && *v ? std::strtol(v, nullptr, 10) : fallback;
}

/// Bytes of every rank's value, in rank order, for values of different sizes.
inline std::vector<std::vector<std::byte>> allgather_bytes(gpucomm::callback_bootstrap& boot,
                                                           std::vector<std::byte> const& mine) {
  auto const n = static_cast<std::size_t>(boot.size());
  std::uint64_t const size = mine.size();
  std::vector<std::uint64_t> sizes(n);
  boot.allgather(&size, sizes.data(), sizeof size);
  std::uint64_t largest = 0;
  for (auto s : sizes) largest = std::max(largest, s);
  std::vector<std::byte> padded(largest), all(largest * n);
  std::memcpy(padded.data(), mine.data(), mine.size());
  boot.allgather(padded.data(), all.data(), largest);
  std::vector<std::vector<std::byte>> out(n);
  for (std::size_t r = 0; r < n; ++r)
    out[r].assign(all.begin() + static_cast<std::ptrdiff_t>(r * largest),
                  all.begin() + static_cast<std::ptrdiff_t>(r * largest + sizes[r]));
  return out;
}

/// A ring in host memory with its reader: ProxyQueue's protocol, CPU threads on both sides.
struct host_ring {
  static constexpr unsigned log_depth = 12;
  std::unique_ptr<command[]> slots = std::make_unique<command[]>(std::size_t{1} << log_depth);
  std::unique_ptr<gpucomm::proxy_queue::ring_counters> counters =
      std::make_unique<gpucomm::proxy_queue::ring_counters>();
  std::unique_ptr<gpucomm::proxy_queue::producer_words> producers =
      std::make_unique<gpucomm::proxy_queue::producer_words>();
  gpucomm::proxy_queue::command_ring ring;
  host_ring() {
    ring.slots = slots.get();
    ring.log_depth = log_depth;
    ring.counters = counters.get();
    ring.producers = producers.get();
    ring.timeout_ns = gpucomm::detail::wait_timeout_word(60'000'000'000ull, true);
  }
};

/// The byte `i` of a test pattern named by `seed`: an independent reference (no engine, no memcpy).
inline std::byte pattern(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + i;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<std::byte>((z ^ (z >> 31)) & 0xFF);
}
inline void fill(std::byte* p, std::uint64_t seed, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) p[i] = pattern(seed, i);
}
/// The first index where p differs from the pattern, or n.
inline std::size_t first_mismatch(std::byte const* p, std::uint64_t seed, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (p[i] != pattern(seed, i)) return i;
  return n;
}
/// Frees a test heap: host memory from aligned_alloc, or GPU memory from cudaMalloc.
struct free_heap {
  bool gpu = false;
  void operator()(std::byte* p) const {
    if (gpu) {
      cudaFree(p);
    } else {
      std::free(p);
    }
  }
};

/// One rank's engine, heap, backend and proxy thread.
class rank_env {
 public:
  struct options {
    std::size_t heap_bytes = 64u << 20;
    /// The part of the heap registered with the engine (0: all): less makes the backend accept
    /// addresses the engine refuses, for the engine's own checks.
    std::size_t registered_bytes = 0;
    std::chrono::microseconds agent_delay{};
    gpucomm::engine::memory_agent* agent = nullptr;  // null: a host_memory_agent with agent_delay
    /// The CUDA device whose memory holds the heap (its agent a cuda_memory_agent unless `agent`
    /// is given); negative: host memory. Only fill_heap() and read_heap() touch a GPU heap.
    int gpu = -1;
    std::chrono::milliseconds op_timeout{20'000};
    std::chrono::milliseconds connect_timeout{10'000};
    /// Replaces every peer's address with a dead engine's (the unreachable-peer test).
    bool dead_peer_addresses = false;
  };

  rank_env(gpucomm::callback_bootstrap& boot, options o)
      : rank_(boot.rank()), size_(boot.size()), host_agent_(o.agent_delay) {
    heap_bytes_ = o.heap_bytes;
    if (o.gpu >= 0) {
      void* p = nullptr;
      if (cudaSetDevice(o.gpu) != cudaSuccess || cudaMalloc(&p, heap_bytes_) != cudaSuccess ||
          cudaMemset(p, 0xA5, heap_bytes_) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
        std::fprintf(stderr, "rank %d: no heap of %zu bytes on GPU %d\n", rank_, heap_bytes_, o.gpu);
        std::abort();
      }
      heap_ = std::unique_ptr<std::byte, free_heap>(static_cast<std::byte*>(p), free_heap{true});
      gpu_agent_ = std::make_unique<gpucomm::engine::cuda_memory_agent>(o.gpu);
    } else {
      heap_.reset(static_cast<std::byte*>(std::aligned_alloc(4096, heap_bytes_)));
      std::memset(heap_.get(), 0xA5, heap_bytes_);
    }
    results_.assign(64, 0);
    agent_ = o.agent      ? o.agent
             : gpu_agent_ ? static_cast<gpucomm::engine::memory_agent*>(gpu_agent_.get())
                          : &host_agent_;
    gpucomm::engine::net_engine_config config;
    config.rank = rank_;
    config.size = size_;
    config.agent = agent_;
    config.op_timeout = o.op_timeout;
    config.connect_timeout = o.connect_timeout;
    // GPUCOMM_TEST_ENGINE_AGENTS=1: puts and gets through the memory agents (the bounce path).
    config.data_through_agents = env_long("GPUCOMM_TEST_ENGINE_AGENTS", 0) != 0;
    auto const make = gpucomm::engine::require_net_engine("engine test", rank_);
    engine_ = make(config);
    auto addresses = allgather_bytes(boot, engine_->address());
    if (o.dead_peer_addresses) {
      std::vector<std::byte> dead = make(config)->address();  // its engine is gone at the semicolon
      for (int r = 0; r < size_; ++r)
        if (r != rank_) addresses[static_cast<std::size_t>(r)] = dead;
    }
    engine_->connect(addresses);
    std::size_t const registered = o.registered_bytes ? o.registered_bytes : heap_bytes_;
    auto const key = engine_->register_memory(heap_.get(), registered);
    struct region {
      std::uint64_t base, bytes;
    } const mine{base(), registered};
    std::vector<region> regions(static_cast<std::size_t>(size_));
    boot.allgather(&mine, regions.data(), sizeof mine);
    auto const keys = allgather_bytes(boot, key);
    gpucomm::detail::engine_backend::placement at;
    at.pe = rank_;
    at.npes = size_;
    at.slot = base();
    at.slot_bytes = heap_bytes_;
    for (int r = 0; r < size_; ++r) {
      auto const& g = regions[static_cast<std::size_t>(r)];
      engine_->import_region(r, g.base, g.bytes, keys[static_cast<std::size_t>(r)]);
      at.bases.push_back(g.base);
    }
    bases_ = at.bases;
    at.results = results_.data();
    at.result_slots = static_cast<std::uint32_t>(results_.size());
    proxy_ring_.pe = rank_;
    proxy_ring_.device = o.gpu;  // no GPU (-1): the thread's cudaSetDevice fails, harmlessly
    proxy_ring_.reader = gpucomm::proxy_queue::ring_reader(ring_.ring);
    proxy_ring_.failures = &failures_;
    proxy_ring_.backends.push_back(gpucomm::detail::make_proxy_backend<gpucomm::detail::engine_backend>(
        *engine_, *agent_, std::move(at), failures_));
    thread_ =
        std::make_unique<gpucomm::detail::proxy_thread>(std::vector<gpucomm::detail::proxy_ring*>{&proxy_ring_}, -1);
  }

  rank_env(rank_env const&) = delete;
  rank_env& operator=(rank_env const&) = delete;
  ~rank_env() { stop(); }

  /// Ends the proxy thread (what is in flight stays so).
  void stop() {
    if (thread_) thread_->stop();
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// The heap; in GPU memory with options::gpu (then fill_heap() and read_heap() reach it).
  std::byte* heap() const { return heap_.get(); }
  bool heap_on_gpu() const { return heap_.get_deleter().gpu; }
  /// Writes the test pattern `seed` into the heap's [at, at + n).
  void fill_heap(std::size_t at, std::uint64_t seed, std::size_t n) {
    if (!heap_on_gpu()) return fill(heap() + at, seed, n);
    std::vector<std::byte> host(n);
    fill(host.data(), seed, n);
    if (cudaMemcpy(heap() + at, host.data(), n, cudaMemcpyHostToDevice) != cudaSuccess) std::abort();
  }
  /// The heap's [at, at + n), copied out.
  std::vector<std::byte> read_heap(std::size_t at, std::size_t n) const {
    std::vector<std::byte> out(n);
    if (!heap_on_gpu()) {
      std::memcpy(out.data(), heap() + at, n);
    } else if (cudaMemcpy(out.data(), heap() + at, n, cudaMemcpyDeviceToHost) != cudaSuccess) {
      std::abort();
    }
    return out;
  }
  std::uint64_t base() const { return reinterpret_cast<std::uint64_t>(heap_.get()); }
  std::uint64_t at(std::size_t offset) const { return base() + offset; }
  std::uint64_t result_slot(std::size_t i) const { return reinterpret_cast<std::uint64_t>(&results_[i]); }
  std::uint64_t result(std::size_t i) const {
    return std::atomic_ref<std::uint64_t>(const_cast<std::uint64_t&>(results_[i])).load(std::memory_order_acquire);
  }
  gpucomm::engine::net_engine& engine() { return *engine_; }
  /// Where rank `r`'s heap starts in its own address space.
  std::uint64_t peer_base(int r) const { return bases_[static_cast<std::size_t>(r)]; }

  /// Posts command c (the producer's protocol); its ticket.
  std::uint64_t post(command const& c) {
    std::uint64_t t = 0;
    if (ring_.ring.post(c, t) != gpucomm::proxy_queue::ring_status::ok) {
      std::fprintf(stderr, "rank %d: the ring had no room for 60 s\n", rank_);
      std::abort();
    }
    return t;
  }
  /// Whether every command up to `ticket` completed within the ring's bound (60 s).
  bool wait(std::uint64_t ticket) { return ring_.ring.wait_complete(ticket) == gpucomm::proxy_queue::ring_status::ok; }
  /// Whether every command up to `ticket` has completed (no wait).
  bool is_complete(std::uint64_t ticket) const { return ring_.ring.is_complete(ticket); }
  bool quiet() {
    std::uint64_t const n = ring_.ring.tickets_issued();
    return n == 0 || wait(n - 1);
  }

  /// The first failure recorded since the last call (its count in `count`).
  std::optional<gpucomm::detail::proxy_failure> take_failure(std::uint64_t& count) { return failures_.take(count); }

  static command make(command_op op, int pe, std::uint64_t dst, std::uint64_t src, std::uint64_t bytes) {
    command c{};
    c.op = op;
    c.pe = pe;
    c.dst = dst;
    c.src = src;
    c.bytes = bytes;
    return c;
  }

 private:
  int rank_, size_;
  std::unique_ptr<std::byte, free_heap> heap_;
  std::size_t heap_bytes_ = 0;
  std::vector<std::uint64_t> results_;
  std::vector<std::uint64_t> bases_;
  gpucomm::engine::host_memory_agent host_agent_;
  std::unique_ptr<gpucomm::engine::cuda_memory_agent> gpu_agent_;
  gpucomm::engine::memory_agent* agent_ = nullptr;
  std::unique_ptr<gpucomm::engine::net_engine> engine_;
  gpucomm::detail::proxy_failures failures_;
  host_ring ring_;
  gpucomm::detail::proxy_ring proxy_ring_;  // holds the backend
  std::unique_ptr<gpucomm::detail::proxy_thread> thread_;
};

/// Waits until the word at p, read with acquire, satisfies pred; false after `limit`.
template <class Pred>
bool wait_word(std::uint64_t* p, Pred pred, std::chrono::seconds limit = std::chrono::seconds(30)) {
  auto const until = std::chrono::steady_clock::now() + limit;
  while (!pred(std::atomic_ref<std::uint64_t>(*p).load(std::memory_order_acquire))) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::yield();
  }
  return true;
}

}  // namespace gpucomm_test
