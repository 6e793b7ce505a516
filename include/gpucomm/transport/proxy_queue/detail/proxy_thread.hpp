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

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "../../../detail/bounded_wait.cuh"
#include "../../../error.hpp"
#include "../../../host/detail/os_thread.hpp"
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
std::string one_cpu_warning();

class proxy_thread {
 public:
  /// Commands read from one ring before the thread marks, polls and moves to the next ring.
  static constexpr int batch = commands_per_pass;

  /// Starts serving `rings`; pinned to `cpu` unless it is negative.
  proxy_thread(std::vector<proxy_ring*> rings, int cpu);

  proxy_thread(proxy_thread const&) = delete;
  proxy_thread& operator=(proxy_thread const&) = delete;
  ~proxy_thread() { stop(); }

  /// Ends the thread after its current pass. What is still in flight stays so: drain first.
  void stop();

 private:
  void run();

  /// One pass over ring r; true when it had work (read, or still in flight).
  static bool serve(proxy_ring& r);

  /// Hands c to the first backend that takes it; true when it is complete already. A command no
  /// backend takes is recorded and completed.
  static bool issue(proxy_ring& r, proxy_queue::command const& c, std::uint64_t ticket);

  /// Busy-waits for `d` (a sleep would oversleep short delays by tens of microseconds).
  static void wait_for(std::chrono::microseconds d);

  std::vector<proxy_ring*> rings_;
  std::atomic<bool> stop_{false};
  os_thread thread_;
};

}  // namespace gpucomm::detail

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "proxy_thread.inl"
#endif
