#pragma once
// ProxyQueue's proxy thread: busy-polls one or more command rings (one per local PE), hands each
// command to the first of its PE's backends that takes it (backend.hpp: a network backend, the NIC
// or an engine, before the copy engines), and publishes completions. Host only.
//
// One pass over a ring:
//   1. read up to `batch` published commands in ticket order: copy each out of its slot, free the
//      slot (reader steps 1-3 of command_ring.cuh), and issue it to its backend;
//   2. after a batch, every backend's mark() (the copy engines' completion markers, the NIC
//      backend's doorbells);
//   3. collect finished tickets (poll(): of every backend that is busy, and of those that must be
//      polled on every pass) into the completion window, and publish its low-water mark as the
//      ring's `completed` (reader step 4) when it moved.
// A thread with nothing to do on any ring spins, yielding the CPU now and then: the latency of the
// next command is what it is there for. It needs a core of its own: a process that may run on one
// CPU only (a launcher binding each rank to a core, as Open MPI does for few ranks) has the thread
// take turns with the program's threads, and each command waits for a time slice (hundreds of
// microseconds); an unpinned thread warns of that once per process (one_cpu_warning()).

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

#include "../../../error.hpp"
#include "../command_ring.cuh"
#include "../completion_window.hpp"
#include "backend.hpp"
#include "failures.hpp"

namespace gpucomm::detail {

/// One ring and what carries out its commands; served by exactly one proxy thread.
struct proxy_ring {
  int pe = 0;
  int device = 0;
  proxy_queue::ring_reader reader;
  proxy_queue::completion_window window;
  /// In the order they are offered commands: a network backend (when some peer's commands go
  /// through the NIC or an engine), then the copy engines.
  std::vector<std::unique_ptr<proxy_backend>> backends;
  proxy_failures* failures = nullptr;        // where the thread reports what the backend cannot
  std::chrono::microseconds issue_delay{0};  // proxy_options::issue_delay_us: a wait before each command
  std::uint64_t published = 0;               // the `completed` last published
};

/// The warning an unpinned proxy thread started from the calling thread deserves, or "": whether
/// the calling thread (whose CPU set the new thread inherits) may run on one CPU only.
inline std::string one_cpu_warning() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) != 1) return {};
  int cpu = 0;
  while (!CPU_ISSET(cpu, &set)) ++cpu;
  return "gpucomm: warning: this process may run on CPU " + std::to_string(cpu) +
         " only, so ProxyQueue's proxy thread takes turns on it with the program's threads and each command "
         "waits for a time slice (hundreds of microseconds). Let each process run on at least two cores (mpirun "
         "--map-by slot:PE=2 or --bind-to none; srun --cpus-per-task=2).";
}

class proxy_thread {
 public:
  /// Commands read from one ring before the thread marks, polls and moves to the next ring.
  static constexpr int batch = 64;

  /// Starts serving `rings`; pinned to `cpu` unless it is negative.
  proxy_thread(std::vector<proxy_ring*> rings, int cpu) : rings_(std::move(rings)) {
    if (cpu < 0) {
      static std::once_flag warned;
      if (std::string const w = one_cpu_warning(); !w.empty())
        std::call_once(warned, [&w] { std::fprintf(stderr, "%s\n", w.c_str()); });
    }
    thread_ = std::thread([this] { run(); });
    if (cpu >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu, &set);
      if (int const rc = pthread_setaffinity_np(thread_.native_handle(), sizeof(set), &set); rc != 0) {
        stop();
        throw error(
            "ProxyQueue", rings_.front()->pe,
            "pinning the proxy thread to CPU " + std::to_string(cpu) + " failed (error " + std::to_string(rc) + ")",
            "give proxy_options::cpu (or GPUCOMM_PROXY_CPU) a CPU this process may run on, or -1");
      }
    }
  }

  proxy_thread(proxy_thread const&) = delete;
  proxy_thread& operator=(proxy_thread const&) = delete;
  ~proxy_thread() { stop(); }

  /// Ends the thread after its current pass. What is still in flight stays so: drain first.
  void stop() {
    stop_.store(true, std::memory_order_relaxed);
    if (thread_.joinable()) thread_.join();
  }

 private:
  void run() {
    // A thread's current device is its own: each ring sets its GPU before its CUDA calls.
    int idle = 0;
    while (!stop_.load(std::memory_order_relaxed)) {
      bool busy = false;
      for (proxy_ring* r : rings_) busy |= serve(*r);
      if (busy) {
        idle = 0;
      } else if (++idle % 1024 == 0) {
        std::this_thread::yield();
      }
    }
  }

  /// One pass over ring r; true when it had work (read, or still in flight).
  static bool serve(proxy_ring& r) {
    int read = 0;
    for (; read < batch; ++read) {
      proxy_queue::command const* slot = r.reader.peek();
      if (slot == nullptr) break;
      proxy_queue::command const c = *slot;
      std::uint64_t const ticket = r.reader.next_ticket();
      r.reader.pop();
      r.window.read(ticket);
      if (read == 0) cudaSetDevice(r.device);
      if (r.issue_delay.count() != 0) wait_for(r.issue_delay);
      if (issue(r, c, ticket)) r.window.complete(ticket);
    }
    bool in_flight = false;
    for (auto& b : r.backends) {
      if (read != 0) b->mark();
      bool const busy = b->busy();
      in_flight |= busy;
      if (busy || b->polls_always()) b->poll(r.window);
    }
    if (!in_flight && r.window.in_flight() != 0) {
      // Read, not complete, and nothing in flight that will complete them: a bookkeeping fault.
      // Reported and completed, so that no GPU waits on them forever.
      auto const lost = r.window.unfinished();
      r.failures->record(
          {r.pe, -1, proxy_queue::command_op::nop, lost.front(), 0,
           "internal: " + std::to_string(lost.size()) + " commands were read but neither in flight nor complete"});
      for (std::uint64_t t : lost) r.window.complete(t);
    }
    if (r.window.low_water() != r.published) {
      r.published = r.window.low_water();
      r.reader.publish_completed(r.published);
    }
    return read != 0 || in_flight;
  }

  /// Hands c to the first backend that takes it; true when it is complete already. A command no
  /// backend takes is recorded and completed.
  static bool issue(proxy_ring& r, proxy_queue::command const& c, std::uint64_t ticket) {
    for (auto& b : r.backends)
      if (b->takes(c)) return b->issue(c, ticket);
    r.failures->record({r.pe, c.pe, c.op, ticket, c.bytes, "internal: no backend of this PE carries this command"});
    return true;
  }

  /// Busy-waits for `d` (a sleep would oversleep short delays by tens of microseconds).
  static void wait_for(std::chrono::microseconds d) {
    auto const until = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < until) {
    }
  }

  std::vector<proxy_ring*> rings_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace gpucomm::detail
