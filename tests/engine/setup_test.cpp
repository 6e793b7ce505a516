// ProxyQueue's engine backends as a world sets them up (proxy_queue/detail/engine_setup.hpp):
// engines per local PE, addresses and heap slots exchanged through the bootstrap, one proxy thread
// serving every local PE's ring. No GPU: the heap slots are host memory, the agents
// host_memory_agents.
//
//   engine_setup_test SCENARIO   alone: one process with two PEs (their engines connect at once);
//                                under `mpirun -np 2`: one PE per process
// Scenarios:
//   ops          from every PE to every PE (itself included): a put, a put_signal, a signal add and
//                a fetching atomic, then a get back; every byte and every fetched value checked;
//                alone, the engines' closes answered rather than waited out
//   far_memory   ops with the heap slots, the sources and the gets' destinations in memory that
//                only the agents reach (a GPU's, as under a UCX without CUDA): the addresses the
//                commands name are a decoy the host can read, the agents translate them to the
//                real bytes, so whatever the engine reads or writes there itself (not through its
//                agent) shows as poison in the data or as a changed decoy
//   bad_options  named errors on every process: a timeout out of range, registered GPU memory
//                asked of an engine that cannot register it, GPUCOMM_PROXY_ENGINE_DATA misspelt
//   peer_killed  (mpirun, 2 processes) the last process dies by SIGKILL after set-up; the
//                survivor's commands to it complete with engine_peer_failed (or engine_timed_out)
//                within the deadline, the peer is kept as lost (no teardown barrier with it), and
//                its commands to itself still work
// Exit status 0 when every check passed.

#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gpucomm/host/mpi_bootstrap.hpp>
#include <gpucomm/transport/proxy_queue/detail/engine_setup.hpp>
#include <gpucomm/transport/proxy_queue/detail/teardown.hpp>

#include "engine_harness.hpp"

using namespace gpucomm_test;
using gpucomm::atomic_op;
using gpucomm::signal_op;
namespace gd = gpucomm::detail;

namespace {

constexpr std::size_t slot_bytes = 8u << 20;
constexpr std::size_t region_bytes = 64u << 10;  // what PE i puts into every PE's slot, at (i + 1) * region_bytes
constexpr std::uint64_t poison64 = 0xA5A5A5A5A5A5A5A5ull;

std::uint64_t seed_of(int from, int to) {
  return (static_cast<std::uint64_t>(from) << 20) ^ static_cast<std::uint64_t>(to);
}

/// Memory only the agents reach, modelled: ranges [decoy, decoy + bytes) stand for [real, real +
/// bytes). The host can read a decoy (it holds poison), so an engine that reads a source there
/// itself sends poison instead of failing in a way a test cannot tell from another fault.
class far_memory {
 public:
  void add(std::byte* decoy, std::byte* real, std::size_t bytes) { ranges_.push_back({decoy, real, bytes}); }
  /// Where the bytes at `p` really are (p itself outside every decoy).
  void* real(void const* p) const {
    auto const* b = static_cast<std::byte const*>(p);
    for (range const& r : ranges_)
      if (b >= r.decoy && b < r.decoy + r.bytes) return r.real + (b - r.decoy);
    return const_cast<void*>(p);
  }

 private:
  struct range {
    std::byte* decoy;
    std::byte* real;
    std::size_t bytes;
  };
  std::vector<range> ranges_;
};

/// The agent for far_memory: host_memory_agent's work at the real addresses.
class far_memory_agent final : public gpucomm::engine::memory_agent {
 public:
  explicit far_memory_agent(far_memory const& m) : m_(&m) {}
  std::string write(void* dst, void const* src, std::size_t bytes) override {
    return host_.write(m_->real(dst), m_->real(src), bytes);
  }
  std::string read(void* dst, void const* src, std::size_t bytes) override {
    return host_.read(m_->real(dst), m_->real(src), bytes);
  }
  std::string signal(std::uint64_t* word, signal_op op, std::uint64_t value) override {
    return host_.signal(static_cast<std::uint64_t*>(m_->real(word)), op, value);
  }
  std::string atomic(void* word, unsigned width, atomic_op op, std::uint64_t operand, std::uint64_t compare,
                     std::uint64_t& old) override {
    return host_.atomic(m_->real(word), width, op, operand, compare, old);
  }
  std::string commit() override { return host_.commit(); }

 private:
  far_memory const* m_;
  gpucomm::engine::host_memory_agent host_;
};

/// The process's share of a world: its PEs' slots, rings and proxy rings, one proxy thread for all.
/// `far`: the slots are far_memory (decoys named, real bytes behind them).
class world_share {
 public:
  world_share(int npes, std::vector<int> const& pes, std::function<void(void const*, void*, std::size_t)> allgather,
              int processes, gpucomm::proxy_engine_options const& options, bool far = false) {
    gd::engine_world w;
    w.npes = npes;
    w.slot_bytes = slot_bytes;
    w.allgather = std::move(allgather);
    w.processes = processes;
    if (far) {
      w.make_agent = [this](int) { return std::make_unique<far_memory_agent>(far_); };
    } else {
      w.make_agent = [](int) { return std::make_unique<gpucomm::engine::host_memory_agent>(); };
    }
    for (int pe : pes) {
      auto p = std::make_unique<local>();
      p->pe = pe;
      p->slot.reset(static_cast<std::byte*>(std::aligned_alloc(4096, slot_bytes)));
      std::memset(p->slot.get(), 0xA5, slot_bytes);
      if (far) {
        p->real.reset(static_cast<std::byte*>(std::aligned_alloc(4096, slot_bytes)));
        std::memset(p->real.get(), 0xA5, slot_bytes);
        far_.add(p->slot.get(), p->real.get(), slot_bytes);
      }
      p->results.assign(64, poison64);
      gd::engine_world::local_pe l;
      l.pe = pe;
      l.device = -1;
      l.slot = reinterpret_cast<std::uint64_t>(p->slot.get());
      l.results = p->results.data();
      l.result_slots = static_cast<std::uint32_t>(p->results.size());
      l.paths.assign(static_cast<std::size_t>(npes), gd::proxy_data_nic | gd::proxy_atomics_nic);
      w.locals.push_back(std::move(l));
      locals_.push_back(std::move(p));
    }
    engines_ = std::make_unique<gd::proxy_engines>(w, options, failures_);
    std::vector<gd::proxy_ring*> rings;
    for (auto& p : locals_) {
      p->ring.pe = p->pe;
      p->ring.device = -1;
      p->ring.reader = gpucomm::proxy_queue::ring_reader(p->host.ring);
      p->ring.failures = &failures_;
      p->ring.backends.push_back(engines_->backend_for(p->pe));
      rings.push_back(&p->ring);
    }
    thread_ = std::make_unique<gd::proxy_thread>(std::move(rings), -1);  // per_process: one for all
  }

  void stop() {
    if (thread_) thread_->stop();
  }
  ~world_share() { stop(); }

  struct local {
    int pe = 0;
    struct free_slot {
      void operator()(std::byte* p) const { std::free(p); }
    };
    std::unique_ptr<std::byte, free_slot> slot;  // what commands name; far: the decoy
    std::unique_ptr<std::byte, free_slot> real;  // far: the bytes behind the decoy
    std::vector<std::uint64_t> results;
    /// The slot's bytes as the test reads and writes them (far: the real ones).
    std::byte* mem() const { return real ? real.get() : slot.get(); }
    host_ring host;
    gd::proxy_ring ring;
    std::uint64_t at(std::size_t offset) const { return reinterpret_cast<std::uint64_t>(slot.get()) + offset; }
    std::uint64_t post(command const& c) {
      std::uint64_t t = 0;
      if (host.ring.post(c, t) != gpucomm::proxy_queue::ring_status::ok) std::abort();
      return t;
    }
    bool quiet() {
      std::uint64_t const n = host.ring.tickets_issued();
      return n == 0 || host.ring.wait_complete(n - 1) == gpucomm::proxy_queue::ring_status::ok;
    }
    bool wait(std::uint64_t t) { return host.ring.wait_complete(t) == gpucomm::proxy_queue::ring_status::ok; }
  };
  std::vector<std::unique_ptr<local>>& locals() { return locals_; }
  std::optional<gd::proxy_failure> take_failure(std::uint64_t& count) { return failures_.take(count); }
  gd::proxy_failures const& failures() const { return failures_; }
  gd::proxy_engines& engines() { return *engines_; }
  bool far() const { return !locals_.empty() && locals_.front()->real != nullptr; }

 private:
  far_memory far_;  // before the engines: their agents read it
  gd::proxy_failures failures_;
  std::vector<std::unique_ptr<local>> locals_;
  std::unique_ptr<gd::proxy_engines> engines_;  // after locals_: goes first, before the slots it names
  std::unique_ptr<gd::proxy_thread> thread_;    // last: stops before the rings and engines go
};

// Offsets in every slot: the signal counter, the atomic word, put_signal's flag per source PE;
// far_memory: the sources of PE p's puts to PE t at sources_at + t * region_bytes, the gets'
// destinations at gets_at + t * region_bytes.
constexpr std::size_t counter_at = 0, atomic_at = 8, flags_at = 64;
constexpr std::size_t sources_at = 4u << 20, gets_at = 6u << 20;

void run_ops(world_share& w, int npes, std::function<void()> const& barrier, checker& check) {
  // Every local PE zeroes its words before any peer updates them.
  for (auto& l : w.locals()) std::memset(l->mem(), 0, 4096);
  barrier();
  bool const far = w.far();
  std::vector<std::vector<std::byte>> sources;
  for (auto& l : w.locals()) {
    for (int to = 0; to < npes; ++to) {
      // The sources: host memory, or (far) in the PE's own slot, where only its agent reads them.
      std::size_t const src_offset = sources_at + static_cast<std::size_t>(to) * region_bytes;
      std::byte* const src = far ? l->mem() + src_offset : sources.emplace_back(region_bytes).data();
      fill(src, seed_of(l->pe, to), region_bytes);
      std::uint64_t const src_at = far ? l->at(src_offset) : reinterpret_cast<std::uint64_t>(src);
      // The put into the first half of the region, the put_signal's data into the second half.
      std::uint64_t const region = l->at(static_cast<std::size_t>(l->pe + 1) * region_bytes);
      l->post(rank_env::make(command_op::put, to, region, src_at, region_bytes / 2));
      command ps = rank_env::make(command_op::put_signal, to, region + region_bytes / 2, src_at + region_bytes / 2,
                                  region_bytes / 2);
      ps.signal = l->at(flags_at + 8 * static_cast<std::size_t>(l->pe));
      ps.value = 7;
      ps.signal_op = static_cast<std::uint8_t>(signal_op::set);
      l->post(ps);
      command s = rank_env::make(command_op::signal, to, 0, 0, 0);
      s.signal = l->at(counter_at);
      s.value = 1;
      s.signal_op = static_cast<std::uint8_t>(signal_op::add);
      l->post(s);
      command a =
          rank_env::make(command_op::atomic, to, l->at(atomic_at), reinterpret_cast<std::uint64_t>(&l->results[to]), 8);
      a.atomic_op = static_cast<std::uint8_t>(atomic_op::fetch_add);
      a.value = 1;
      l->post(a);
    }
    check(l->quiet(), "PE " + std::to_string(l->pe) + "'s commands complete");
  }
  barrier();  // every PE's commands complete: their effects are in place everywhere
  std::uint64_t count = 0;
  auto const f = w.take_failure(count);
  check(!f, "no command failed (" + (f ? f->what : std::string()) + ")");
  for (auto& l : w.locals()) {
    for (int from = 0; from < npes; ++from) {
      std::byte const* region = l->mem() + static_cast<std::size_t>(from + 1) * region_bytes;
      check(first_mismatch(region, seed_of(from, l->pe), region_bytes) == region_bytes,
            "PE " + std::to_string(l->pe) + " holds PE " + std::to_string(from) + "'s put and put_signal data");
      std::uint64_t flag = 0;
      std::memcpy(&flag, l->mem() + flags_at + 8 * static_cast<std::size_t>(from), 8);
      check(flag == 7, "PE " + std::to_string(from) + "'s put_signal set its flag at PE " + std::to_string(l->pe));
    }
    std::uint64_t counter = 0, word = 0;
    std::memcpy(&counter, l->mem() + counter_at, 8);
    std::memcpy(&word, l->mem() + atomic_at, 8);
    check(counter == static_cast<std::uint64_t>(npes),
          "every PE's signal add arrived (" + std::to_string(counter) + ")");
    check(word == static_cast<std::uint64_t>(npes), "every PE's fetch_add arrived (" + std::to_string(word) + ")");
    for (int to = 0; to < npes; ++to)
      check(l->results[static_cast<std::size_t>(to)] < static_cast<std::uint64_t>(npes),
            "a fetched value is an earlier count (" + std::to_string(l->results[static_cast<std::size_t>(to)]) + ")");
  }
  // Gets: what this PE put into every PE's slot, back (far: into its own slot).
  for (auto& l : w.locals()) {
    for (int to = 0; to < npes; ++to) {
      std::vector<std::byte> host_back(far ? 0 : region_bytes);
      std::size_t const back_offset = gets_at + static_cast<std::size_t>(to) * region_bytes;
      std::byte* const back = far ? l->mem() + back_offset : host_back.data();
      std::memset(back, 0x5A, region_bytes);
      std::uint64_t const back_at = far ? l->at(back_offset) : reinterpret_cast<std::uint64_t>(back);
      std::uint64_t const region = l->at(static_cast<std::size_t>(l->pe + 1) * region_bytes);
      check(l->wait(l->post(rank_env::make(command_op::get, to, back_at, region, region_bytes))), "a get completes");
      check(first_mismatch(back, seed_of(l->pe, to), region_bytes) == region_bytes,
            "PE " + std::to_string(l->pe) + " gets back what it put at PE " + std::to_string(to));
    }
  }
  auto const g = w.take_failure(count);
  check(!g, "no get failed (" + (g ? g->what : std::string()) + ")");
  barrier();
  // Far: the decoys as they were; a byte written there came from the engine, not its agent.
  for (auto& l : w.locals()) {
    if (!far) break;
    std::size_t changed = 0;
    for (std::size_t i = 0; i < slot_bytes; ++i) changed += l->slot.get()[i] != std::byte{0xA5};
    check(changed == 0, "PE " + std::to_string(l->pe) + "'s decoy is untouched (" + std::to_string(changed) +
                            " bytes written past the agent)");
  }
}

std::string error_text(std::function<void()> const& f) {
  try {
    f();
  } catch (gpucomm::error const& e) {
    return e.what();
  }
  return "(no error)";
}

void run_bad_options(int npes, std::vector<int> const& pes,
                     std::function<void(void const*, void*, std::size_t)> const& ag, int processes, checker& check) {
  auto const attempt = [&](gpucomm::proxy_engine_options const& o) {
    return error_text([&] { world_share w(npes, pes, ag, processes, o); });
  };
  gpucomm::proxy_engine_options o;
  o.op_timeout = std::chrono::milliseconds(0);
  std::string e = attempt(o);
  check(e.find("proxy_engine_options::op_timeout is 0 ms") != std::string::npos, "a zero op_timeout: " + e);
  o = {};
  o.connect_timeout = std::chrono::milliseconds(700'000);
  e = attempt(o);
  check(e.find("proxy_engine_options::connect_timeout is 700000 ms") != std::string::npos,
        "a connect_timeout too long: " + e);
  auto const probe = gpucomm::engine::linked_net_engine_gpu_probe();
  check(probe != nullptr, "gpucomm::ucx installs its GPU-memory probe");
  if (probe != nullptr && !probe()) {
    o = {};
    o.data = gpucomm::proxy_engine_data::registered;
    e = attempt(o);
    check(e.find("cannot register GPU memory (engine_refused)") != std::string::npos,
          "registered GPU memory on an engine without: " + e);
  }
  ::setenv("GPUCOMM_PROXY_ENGINE_DATA", "bounce", 1);
  e = attempt({});
  ::unsetenv("GPUCOMM_PROXY_ENGINE_DATA");
  check(e.find("GPUCOMM_PROXY_ENGINE_DATA=bounce is not one of registered or agents") != std::string::npos,
        "GPUCOMM_PROXY_ENGINE_DATA misspelt: " + e);
  if (processes > 1) {
    // A bad option on one process only: every process gets its error, none waits in an exchange.
    o = {};
    if (pes.front() == 0) o.op_timeout = std::chrono::milliseconds(0);
    e = attempt(o);
    check(e.find("proxy_engine_options::op_timeout is 0 ms") != std::string::npos,
          "a zero op_timeout on process 0 only, seen on every process: " + e);
  }
}

int run_peer_killed(world_share& w, int me, int npes, std::function<void()> const& barrier, checker& check) {
  long const deadline_s = env_long("GPUCOMM_TEST_DEADLINE_S", 30);
  int const victim = npes - 1;
  auto& l = *w.locals().front();
  std::vector<std::byte> data(1u << 20);
  fill(data.data(), seed_of(me, victim), data.size());
  auto const put_to = [&](int pe) {
    return l.post(
        rank_env::make(command_op::put, pe, l.at(1u << 20), reinterpret_cast<std::uint64_t>(data.data()), data.size()));
  };
  check(l.wait(put_to((me + 1) % npes)), "a put before the kill completes");
  barrier();
  if (me == victim) {
    std::fflush(stdout);
    raise(SIGKILL);
  }
  auto const killed = std::chrono::steady_clock::now();
  std::optional<gd::proxy_failure> f;
  std::uint64_t count = 0;
  double seconds = 0;
  while (!f && seconds <= static_cast<double>(deadline_s) + 5) {
    check(l.wait(put_to(victim)), "a put to the dead peer completes");
    f = w.take_failure(count);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  }
  bool const named = f && (f->what.rfind("engine_peer_failed", 0) == 0 || f->what.rfind("engine_timed_out", 0) == 0);
  check(named, "the survivor names the failure (" + (f ? f->what : std::string("none")) + ")");
  check(seconds <= static_cast<double>(deadline_s),
        "reported within " + std::to_string(deadline_s) + " s (" + std::to_string(seconds) + " s)");
  std::printf("rank %d: the dead peer reported after %.3f s: %s\n", me, seconds, f ? f->what.c_str() : "nothing");
  check(l.wait(put_to(me)), "a put to itself completes");
  w.take_failure(count);
  check(count == 0, "the put to itself did not fail");
  // The teardown's barrier (ProxyQueue's host half) is skipped: the victim would never arrive.
  std::optional<std::string> const lost = w.failures().lost_peer();
  check(lost && lost->rfind("PE " + std::to_string(victim) + " (engine_", 0) == 0,
        "the dead peer is kept as lost (" + lost.value_or("nothing") + ")");
  bool barrier_called = false;
  check(!gd::teardown_barrier([&] { barrier_called = true; }, w.failures(), me) && !barrier_called,
        "the teardown holds no barrier with the dead peer");
  w.stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string const scenario = argc > 1 ? argv[1] : "";
  bool const mpi = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
  std::optional<gpucomm::mpi_bootstrap> boot;
  int rank = 0, processes = 1;
  if (mpi) {
    MPI_Init(&argc, &argv);
    boot.emplace(MPI_COMM_WORLD);
    rank = boot->rank();
    processes = boot->size();
  }
  // Alone: two PEs in this process; under mpirun: one PE per process.
  int const npes = mpi ? processes : 2;
  std::vector<int> const pes = mpi ? std::vector<int>{rank} : std::vector<int>{0, 1};
  std::function<void(void const*, void*, std::size_t)> const allgather = [&](void const* s, void* r, std::size_t n) {
    if (boot)
      boot->allgather(s, r, n);
    else
      std::memcpy(r, s, n);
  };
  std::function<void()> const barrier = [&] {
    if (boot) boot->barrier();
  };
  gpucomm::proxy_engine_options options;
  options.op_timeout = std::chrono::milliseconds(env_long("GPUCOMM_TEST_OP_TIMEOUT_MS", 20'000));
  checker check{rank};
  int rc = 0;
  try {
    if (scenario == "ops") {
      std::chrono::steady_clock::time_point closing;
      {
        world_share w(npes, pes, allgather, processes, options);
        check(!w.engines().name().empty(), "the engine names itself");
        run_ops(w, npes, barrier, check);
        closing = std::chrono::steady_clock::now();
      }
      // Closing an endpoint waits for the peer's answer, bounded at 2 s (ucx_engine.hpp), and a PE
      // of this process answers only while its own engine closes: the local engines must close at
      // once (engine_setup.hpp), not one after another waiting out the bound.
      auto const ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - closing);
      if (pes.size() > 1)
        check(ms.count() < 1000, "this process's engines closed at once: answered, not waited out (" +
                                     std::to_string(ms.count()) + " ms)");
    } else if (scenario == "far_memory") {
      gpucomm::proxy_engine_options o = options;
      o.data = gpucomm::proxy_engine_data::agents;  // UCX cannot register what only the agents reach
      world_share w(npes, pes, allgather, processes, o, true);
      run_ops(w, npes, barrier, check);
    } else if (scenario == "bad_options") {
      run_bad_options(npes, pes, allgather, processes, check);
    } else if (scenario == "peer_killed" && mpi && npes >= 2) {
      world_share w(npes, pes, allgather, processes, options);
      run_peer_killed(w, rank, npes, barrier, check);
      std::_Exit(check.finish(scenario.c_str()));  // a peer is dead: no collective can finish
    } else {
      std::fprintf(
          stderr, "usage: engine_setup_test ops|far_memory|bad_options|peer_killed (peer_killed under mpirun -np 2)\n");
      rc = 2;
    }
  } catch (std::exception const& e) {
    check(false, std::string("unexpected exception: ") + e.what());
  }
  if (rc == 0) rc = check.finish(scenario.c_str());
  if (boot) {
    boot.reset();
    MPI_Finalize();
  }
  return rc;
}
