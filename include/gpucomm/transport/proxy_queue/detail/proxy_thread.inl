#pragma once
// The bodies of proxy_thread.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::detail {

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

inline proxy_thread::proxy_thread(std::vector<proxy_ring*> rings, int cpu) : rings_(std::move(rings)) {
  if (cpu < 0) {
    static std::once_flag warned;
    if (std::string const w = one_cpu_warning(); !w.empty())
      std::call_once(warned, [&w] { std::fprintf(stderr, "%s\n", w.c_str()); });
  }
  thread_ = os_thread([this] { run(); });
  if (cpu >= 0) {
    if (int const rc = thread_.pin_to(cpu); rc != 0) {
      stop();
      throw error(
          "ProxyQueue", rings_.front()->pe,
          "pinning the proxy thread to CPU " + std::to_string(cpu) + " failed (error " + std::to_string(rc) + ")",
          "give proxy_options::cpu (or GPUCOMM_PROXY_CPU) a CPU this process may run on, or -1");
    }
  }
}

inline void proxy_thread::stop() {
  stop_.store(true, std::memory_order_relaxed);
  thread_.join();
}

inline void proxy_thread::run() {
  // A thread's current device is its own: each ring sets its GPU before its CUDA calls.
  int idle = 0;
  while (!stop_.load(std::memory_order_relaxed)) {
    bool busy = false;
    for (proxy_ring* r : rings_) busy |= serve(*r);
    if (busy) {
      idle = 0;
    } else if (++idle % 1024 == 0) {
      spin_pause();
    }
  }
}

inline bool proxy_thread::serve(proxy_ring& r) {
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

inline bool proxy_thread::issue(proxy_ring& r, proxy_queue::command const& c, std::uint64_t ticket) {
  for (auto& b : r.backends)
    if (b->takes(c)) return b->issue(c, ticket);
  r.failures->record({r.pe, c.pe, c.op, ticket, c.bytes, "internal: no backend of this PE carries this command"});
  return true;
}

inline void proxy_thread::wait_for(std::chrono::microseconds d) {
  auto const until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

}  // namespace gpucomm::detail
