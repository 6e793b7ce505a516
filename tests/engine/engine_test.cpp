// The network engine under ProxyQueue's engine backend, between processes over a real network
// stack (UCX; over TCP on the loopback interface under mpirun, or across network namespaces with
// tcp_bootstrap.hpp: tests/engine/netns.sh). No GPU: the heap is host memory.
//
//   engine_test SCENARIO      under `mpirun -np 2`, or with GPUCOMM_TEST_BOOTSTRAP=HOST:PORT,
//                             GPUCOMM_TEST_RANK and GPUCOMM_TEST_SIZE set (tcp_bootstrap.hpp)
// Scenarios:
//   ops          every command kind to every PE (itself included), every byte and every fetched
//                value checked against an independent reference, outputs poisoned first
//   order        put_signal's data before its signal and fence's order, many iterations, the
//                target's agent delayed (GPUCOMM_TEST_AGENT_DELAY_US); GPUCOMM_TEST_BREAK=fence
//                (fences posted as nops) or =agent (an agent that sets the signal before it writes
//                the data) must make it fail
//   bad_input    refused commands (PE out of range, addresses outside the heap or the registered
//                memory, bad widths, unknown operations): a named error each, on every process,
//                and each command completes
//   peer_killed  the last rank dies by SIGKILL; the others report engine_peer_failed (or
//                engine_timed_out) within the deadline, complete every command, and carry on
//   peer_stopped the last rank stops (SIGSTOP): its sockets stay open and nothing answers, so only
//                the engine's op_timeout (GPUCOMM_TEST_OP_TIMEOUT_MS) can report it; then the
//                others kill it
//   unreachable  every peer's address replaced by a dead engine's: connect() throws
//                engine_peer_unreachable within its timeout on every process
// Exit status 0 when every check passed.

#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
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

#include <gpucomm/host/mpi_bootstrap.hpp>

#include "engine_harness.hpp"
#include "tcp_bootstrap.hpp"

using namespace gpucomm_test;
using gpucomm::atomic_op;
using gpucomm::signal_op;

namespace {

constexpr std::uint64_t poison64 = 0xA5A5A5A5A5A5A5A5ull;
constexpr std::byte poison{0xA5};

std::uint64_t seed_of(int from, int to, int what) {
  return (static_cast<std::uint64_t>(from) << 40) ^ (static_cast<std::uint64_t>(to) << 20) ^
         static_cast<std::uint64_t>(what);
}

std::uint64_t load(std::byte const* heap, std::size_t offset) {
  return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(const_cast<std::byte*>(heap) + offset))
      .load(std::memory_order_acquire);
}

std::string failure_text(rank_env& env, std::uint64_t& count) {
  auto const f = env.take_failure(count);
  return f ? f->op_name() + " to PE " + std::to_string(f->peer) + ": " + f->what : std::string();
}

// ---- ops ------------------------------------------------------------------------------------------
// Heap layout (offsets), per source rank s:
//   words      [0, 64 KiB): signal words 8 * (kind * 64 + s); atomic words 16 KiB + s * 1 KiB + op * 64 +
//              (width 8: 0, width 4: 32); the contended word at 60 KiB (rank 0's)
//   puts       1 MiB + s * 8 MiB: sizes[k] at put_at[k], 64 poisoned guard bytes after each
//   put_signal 1 MiB + size * 8 MiB + s * 1 MiB
//   many       1 MiB + size * 9 MiB + s * 256 KiB
//   get source 1 MiB + size * 10 MiB (4 MiB + 3, the owner's pattern); get results at + 5 MiB + s * 5 MiB
constexpr std::size_t put_sizes[] = {1, 7, 8, 4096, 65539, (1u << 20) + 5, (4u << 20) + 3};
constexpr std::size_t get_bytes = (4u << 20) + 3;
constexpr int many = 2000;
constexpr int contended_adds = 200;
constexpr atomic_op all_ops[] = {atomic_op::fetch_add,    atomic_op::add,       atomic_op::fetch_and,
                                 atomic_op::fetch_or,     atomic_op::fetch_xor, atomic_op::swap,
                                 atomic_op::compare_swap, atomic_op::fetch,     atomic_op::set};

struct layout {
  int size;
  static std::size_t signal_word(int kind, int s) { return 8 * (static_cast<std::size_t>(kind) * 64 + s); }
  static std::size_t atomic_word(int s, int op, unsigned width) {
    return (16u << 10) + static_cast<std::size_t>(s) * 1024 + static_cast<std::size_t>(op) * 64 + (width == 8 ? 0 : 32);
  }
  static constexpr std::size_t contended = 60u << 10;
  static std::size_t put_at(int s, int k) {
    std::size_t at = (1u << 20) + static_cast<std::size_t>(s) * (8u << 20);
    for (int i = 0; i < k; ++i) at += (put_sizes[i] + 64 + 63) / 64 * 64;
    return at;
  }
  std::size_t zero_put(int s) const { return put_at(s, 7) + 64; }
  std::size_t put_signal_at(int s) const {
    return (1u << 20) + size * (8u << 20) + static_cast<std::size_t>(s) * (1u << 20);
  }
  std::size_t many_at(int s) const {
    return (1u << 20) + size * (9u << 20) + static_cast<std::size_t>(s) * (256u << 10);
  }
  std::size_t get_source() const { return (1u << 20) + size * (10u << 20); }
  std::size_t get_result(int s) const { return get_source() + (5u << 20) + static_cast<std::size_t>(s) * (5u << 20); }
  std::size_t heap_bytes() const { return get_result(size) + (1u << 20); }
};

/// The value `op` leaves in a word holding `old` (width bytes), operand v, compare c.
std::uint64_t apply_reference(atomic_op op, std::uint64_t old, std::uint64_t v, std::uint64_t c, unsigned width) {
  std::uint64_t const mask = width == 8 ? ~0ull : 0xFFFFFFFFull;
  old &= mask, v &= mask, c &= mask;
  switch (op) {
    case atomic_op::fetch_add:
    case atomic_op::add:
      return (old + v) & mask;
    case atomic_op::fetch_and:
      return old & v;
    case atomic_op::fetch_or:
      return old | v;
    case atomic_op::fetch_xor:
      return old ^ v;
    case atomic_op::swap:
    case atomic_op::set:
      return v;
    case atomic_op::compare_swap:
      return old == c ? v : old;
    case atomic_op::fetch:
      return old;
  }
  return old;
}

/// The engine alone, driven from this thread (the proxy thread stopped): puts to the next rank,
/// then flush(peer), whose completion must come after every put's; then each rank signals the
/// other and serves until it has both its own signal's answer and the other's signal, so that
/// neither stops serving while the other still needs it.
void engine_flush(rank_env& env, layout const& L, checker& check) {
  env.stop();
  int const me = env.rank(), n = env.size(), to = (me + 1) % n, from = (me + n - 1) % n;
  gpucomm::engine::net_engine& e = env.engine();
  constexpr int puts = 32;
  std::vector<std::byte> data(4096);
  fill(data.data(), seed_of(me, to, 500), data.size());
  std::uint64_t const peer_base = env.peer_base(to);
  bool posted = true;
  for (int i = 0; i < puts; ++i)
    posted = posted && e.put(to, data.data(), peer_base + L.many_at(me) + 4096 * static_cast<std::size_t>(i),
                             data.size(), static_cast<gpucomm::engine::token>(i))
                           .ok();
  posted = posted && e.flush(to, 1000).ok();
  check(posted, "the engine accepts the puts and the flush");
  std::vector<gpucomm::engine::completion> done;
  int puts_done = 0, puts_after_flush = 0;
  bool flushed = false, signalled = false, sent = false, failed = false;
  auto* const word = reinterpret_cast<std::uint64_t*>(env.heap() + layout::signal_word(3, from));
  auto const until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!(flushed && signalled && std::atomic_ref<std::uint64_t>(*word).load() == 7) &&
         std::chrono::steady_clock::now() < until) {
    done.clear();
    e.progress(done);
    for (auto const& c : done) {
      failed = failed || c.code != gpucomm::engine::errc::ok;
      if (c.id < static_cast<gpucomm::engine::token>(puts)) {
        ++puts_done;
        puts_after_flush += flushed;
      } else if (c.id == 1000) {
        flushed = true;
      } else if (c.id == 2000) {
        signalled = true;
      }
    }
    if (flushed && !sent) {
      sent = e.signal(to, peer_base + layout::signal_word(3, me), gpucomm::signal_op::set, 7, 2000).ok();
      check(sent, "the engine accepts the signal");
      if (!sent) break;
    }
  }
  check(!failed, "the engine completed every operation without error");
  check(flushed && puts_done == puts && puts_after_flush == 0,
        "flush(peer) completes after all " + std::to_string(puts) + " puts (" + std::to_string(puts_done) +
            " completed, " + std::to_string(puts_after_flush) + " of them after the flush)");
  check(signalled && std::atomic_ref<std::uint64_t>(*word).load() == 7, "the signals after the flushes arrive");
  for (int i = 0; i < puts; ++i)
    check(first_mismatch(env.heap() + L.many_at(from) + 4096 * static_cast<std::size_t>(i), seed_of(from, me, 500),
                         4096) == 4096,
          "put " + std::to_string(i) + " before the flush arrived");
}

int run_ops(gpucomm::callback_bootstrap& boot, checker& check) {
  layout const L{boot.size()};
  rank_env::options o;
  o.heap_bytes = L.heap_bytes();
  rank_env env(boot, o);
  int const me = env.rank(), n = env.size();
  std::byte* const heap = env.heap();
  fill(heap + L.get_source(), seed_of(me, -1, 99), get_bytes);
  // The contended word starts at 0, set through the engine (its atomicity domain) by its owner.
  if (me == 0) {
    command c = rank_env::make(command_op::atomic, 0, env.at(layout::contended), 0, 8);
    c.atomic_op = static_cast<std::uint8_t>(atomic_op::set);
    c.value = 0;
    check(env.wait(env.post(c)), "the contended word's set completes");
  }
  boot.barrier();

  std::vector<std::vector<std::byte>> sources;  // alive until every put completed
  std::vector<std::uint64_t> contended_fetched;
  for (int p = 0; p < n; ++p) {
    // Puts of every size, and one of zero bytes.
    for (int k = 0; k < 7; ++k) {
      sources.emplace_back(put_sizes[k]);
      fill(sources.back().data(), seed_of(me, p, k), put_sizes[k]);
      env.post(rank_env::make(command_op::put, p, env.at(layout::put_at(me, k)),
                              reinterpret_cast<std::uint64_t>(sources.back().data()), put_sizes[k]));
    }
    env.post(rank_env::make(command_op::put, p, env.at(L.zero_put(me)), env.at(0), 0));
    env.post(rank_env::make(command_op::nop, p, 0, 0, 0));
    // Signals: set, then three adds.
    command s = rank_env::make(command_op::signal, p, 0, 0, 0);
    s.signal = env.at(layout::signal_word(0, me));
    s.signal_op = static_cast<std::uint8_t>(signal_op::set);
    s.value = 1000 + static_cast<std::uint64_t>(me);
    env.post(s);
    for (int i = 0; i < 3; ++i) {
      s.signal = env.at(layout::signal_word(1, me));
      s.signal_op = static_cast<std::uint8_t>(signal_op::add);
      s.value = 5;
      env.post(s);
    }
    // put_signal: a rendezvous-sized one, an eager one, a zero-byte one; each adds 1.
    std::size_t const ps_bytes[] = {300000, 100, 0};
    std::size_t at = L.put_signal_at(me);
    for (int k = 0; k < 3; ++k) {
      sources.emplace_back(ps_bytes[k]);
      fill(sources.back().data(), seed_of(me, p, 10 + k), ps_bytes[k]);
      command c = rank_env::make(command_op::put_signal, p, env.at(at),
                                 reinterpret_cast<std::uint64_t>(sources.back().data()), ps_bytes[k]);
      c.signal = env.at(layout::signal_word(2, me));
      c.signal_op = static_cast<std::uint8_t>(signal_op::add);
      c.value = 1;
      env.post(c);
      at += ps_bytes[k] + 64;
    }
    // Many puts in flight at once.
    for (int i = 0; i < many; ++i) {
      sources.emplace_back(64);
      fill(sources.back().data(), seed_of(me, p, 100 + i), 64);
      env.post(rank_env::make(command_op::put, p, env.at(L.many_at(me) + 64 * static_cast<std::size_t>(i)),
                              reinterpret_cast<std::uint64_t>(sources.back().data()), 64));
    }
    env.post(rank_env::make(command_op::fence, p, 0, 0, 0));
    // Atomics: every operation, both widths, each on its own word: set a start value, apply the
    // operation, fetch; the fetched values checked against the reference.
    for (int k = 0; k < 9; ++k) {
      for (unsigned width : {8u, 4u}) {
        atomic_op const op = all_ops[k];
        std::uint64_t const word = env.at(layout::atomic_word(me, k, width));
        std::uint64_t const start = 0x0123456789ABCDEFull ^ (static_cast<std::uint64_t>(me) << 8) ^ k;
        std::uint64_t const v = 0x00F0F0F0F0F0F0F0ull ^ static_cast<std::uint64_t>(p);
        // compare_swap: k's own value decides success; a second one that fails follows.
        std::uint64_t const compare = start;
        std::uint64_t const mask = width == 8 ? ~0ull : 0xFFFFFFFFull;
        auto atomic = [&](atomic_op a, std::uint64_t value, std::uint64_t cmp, bool fetch) {
          command c = rank_env::make(command_op::atomic, p, word, fetch ? env.result_slot(0) : 0, width);
          c.atomic_op = static_cast<std::uint8_t>(a);
          c.value = value;
          c.aux = cmp;
          return env.wait(env.post(c));
        };
        std::string const what =
            "atomic op " + std::to_string(k) + " width " + std::to_string(width) + " to PE " + std::to_string(p);
        check(atomic(atomic_op::set, start, 0, false), what + ": set completes");
        bool const fetching = op != atomic_op::add && op != atomic_op::set;
        check(atomic(op, v, compare, fetching), what + ": completes");
        // Read as ProxyQueue's device code reads it (state.hpp's slot format: a 4-byte value in
        // network order, as a NIC returns it); host order here gave the GPU byte-swapped values.
        auto const fetched = [&] { return gpucomm::detail::result_slot_value(env.result(0), width) & mask; };
        if (fetching) check(fetched() == (start & mask), what + ": fetched the old value");
        std::uint64_t expect = apply_reference(op, start, v, compare, width);
        if (op == atomic_op::compare_swap) {
          check(atomic(op, 77, compare, true), what + ": failing compare_swap completes");
          check(fetched() == expect, what + ": failing compare_swap fetched the current value");
          expect = apply_reference(op, expect, 77, compare, width);
        }
        check(atomic(atomic_op::fetch, 0, 0, true), what + ": fetch completes");
        check(fetched() == expect, what + ": the word holds the reference value");
      }
    }
    // Contended fetch_add on rank 0's word, from every rank.
    for (int i = 0; p == 0 && i < contended_adds; ++i) {
      command c = rank_env::make(command_op::atomic, 0, env.at(layout::contended), env.result_slot(1), 8);
      c.atomic_op = static_cast<std::uint8_t>(atomic_op::fetch_add);
      c.value = 1;
      check(env.wait(env.post(c)), "contended fetch_add completes");
      contended_fetched.push_back(env.result(1));
    }
    // Gets: all of the peer's get source, and 13 bytes of it, into poisoned memory.
    env.post(rank_env::make(command_op::get, p, env.at(L.get_result(p)), env.at(L.get_source()), get_bytes));
    env.post(rank_env::make(command_op::get, p, env.at(L.get_result(p) + get_bytes + 64), env.at(L.get_source()), 13));
    env.post(rank_env::make(command_op::get, p, env.at(L.get_result(p) + get_bytes + 128), env.at(L.get_source()), 0));
  }
  check(env.quiet(), "every command completes");
  for (int p = 0; p < n; ++p) {
    std::byte const* got = heap + L.get_result(p);
    std::size_t const bad = first_mismatch(got, seed_of(p, -1, 99), get_bytes);
    check(bad == get_bytes, "get of " + std::to_string(get_bytes) + " bytes from PE " + std::to_string(p) +
                                " matches from byte " + std::to_string(bad));
    check(got[get_bytes] == poison, "the byte after the get is untouched");
    check(first_mismatch(got + get_bytes + 64, seed_of(p, -1, 99), 13) == 13, "13-byte get matches");
    check(got[get_bytes + 64 + 13] == poison, "the byte after the 13-byte get is untouched");
    check(got[get_bytes + 128] == poison, "a zero-byte get writes nothing");
  }
  boot.barrier();  // every rank's commands complete: their effects are in place here

  for (int s = 0; s < n; ++s) {
    std::string const from = " from PE " + std::to_string(s);
    for (int k = 0; k < 7; ++k) {
      std::byte const* got = heap + layout::put_at(s, k);
      std::size_t const bad = first_mismatch(got, seed_of(s, me, k), put_sizes[k]);
      check(bad == put_sizes[k],
            "put of " + std::to_string(put_sizes[k]) + " bytes" + from + ": first bad byte " + std::to_string(bad));
      check(got[put_sizes[k]] == poison, "the byte after the put" + from + " is untouched");
    }
    check(heap[L.zero_put(s)] == poison, "a zero-byte put" + from + " writes nothing");
    check(load(heap, layout::signal_word(0, s)) == 1000 + static_cast<std::uint64_t>(s), "signal set" + from);
    check(load(heap, layout::signal_word(1, s)) == poison64 + 15, "three signal adds" + from);
    check(load(heap, layout::signal_word(2, s)) == poison64 + 3, "three put_signal adds" + from);
    std::size_t at = L.put_signal_at(s);
    for (int k = 0; k < 2; ++k) {
      std::size_t const bytes = k == 0 ? 300000 : 100;
      check(first_mismatch(heap + at, seed_of(s, me, 10 + k), bytes) == bytes, "put_signal data" + from);
      check(heap[at + bytes] == poison, "the byte after the put_signal" + from + " is untouched");
      at += bytes + 64;
    }
    check(heap[at] == poison, "a zero-byte put_signal" + from + " writes nothing");
    int bad_many = 0;
    for (int i = 0; i < many; ++i)
      bad_many +=
          first_mismatch(heap + L.many_at(s) + 64 * static_cast<std::size_t>(i), seed_of(s, me, 100 + i), 64) != 64;
    check(bad_many == 0, std::to_string(bad_many) + " of " + std::to_string(many) + " small puts" + from + " differ");
  }
  // Contended fetch_add: the word counts every add, and the fetched values are each one of
  // 0 .. total-1, each once.
  std::vector<std::uint64_t> all(contended_fetched.size() * static_cast<std::size_t>(n));
  boot.allgather(contended_fetched.data(), all.data(), contended_fetched.size() * sizeof(std::uint64_t));
  std::sort(all.begin(), all.end());
  bool permutation = true;
  for (std::size_t i = 0; i < all.size(); ++i) permutation = permutation && all[i] == i;
  check(permutation, "contended fetch_add: every fetched value once");
  if (me == 0) check(load(heap, layout::contended) == all.size(), "contended fetch_add: the word holds the count");
  std::uint64_t count = 0;
  std::string const f = failure_text(env, count);
  check(count == 0, "no command failed (" + std::to_string(count) + ": " + f + ")");
  boot.barrier();
  engine_flush(env, L, check);
  return 0;
}

// ---- order ----------------------------------------------------------------------------------------
/// An agent that breaks put_signal's order: the signal at once, the data at commit() after a delay.
class signal_first_agent final : public gpucomm::engine::memory_agent {
 public:
  std::string write(void* dst, void const* src, std::size_t bytes) override {
    pending_.push_back(
        {dst, std::vector<std::byte>(static_cast<std::byte const*>(src), static_cast<std::byte const*>(src) + bytes)});
    return {};
  }
  std::string read(void* dst, void const* src, std::size_t bytes) override { return host_.read(dst, src, bytes); }
  std::string signal(std::uint64_t* word, signal_op op, std::uint64_t value) override {
    return host_.signal(word, op, value);
  }
  std::string atomic(void* word, unsigned width, atomic_op op, std::uint64_t operand, std::uint64_t compare,
                     std::uint64_t& old) override {
    return host_.atomic(word, width, op, operand, compare, old);
  }
  std::string commit() override {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    for (auto& [dst, data] : pending_) std::memcpy(dst, data.data(), data.size());
    pending_.clear();
    return {};
  }

 private:
  gpucomm::engine::host_memory_agent host_;
  std::vector<std::pair<void*, std::vector<std::byte>>> pending_;
};

int run_order(gpucomm::callback_bootstrap& boot, checker& check) {
  int const iters = static_cast<int>(env_long("GPUCOMM_TEST_ORDER_ITERS", 100));
  std::string const broken = std::getenv("GPUCOMM_TEST_BREAK") ? std::getenv("GPUCOMM_TEST_BREAK") : "";
  constexpr std::size_t ps_bytes = 128u << 10, put_bytes = 64u << 10;
  // Words: 3 kinds x iters per source at 64 KiB + s * 32 KiB; data: three areas per source.
  auto word = [&](int kind, int s, int i) {
    return (64u << 10) + static_cast<std::size_t>(s) * (32u << 10) + 8 * static_cast<std::size_t>(kind * iters + i);
  };
  std::size_t const area = static_cast<std::size_t>(iters) * ps_bytes;
  int const n = boot.size();
  auto data_at = [&](int kind, int s, int i) {
    return (1u << 20) + (static_cast<std::size_t>(s) * 3 + kind) * area + static_cast<std::size_t>(i) * ps_bytes;
  };
  signal_first_agent bad_agent;
  rank_env::options o;
  o.heap_bytes = (1u << 20) + 3 * area * static_cast<std::size_t>(n) + (1u << 20);
  o.agent_delay = std::chrono::microseconds(env_long("GPUCOMM_TEST_AGENT_DELAY_US", 200));
  if (broken == "agent") o.agent = &bad_agent;
  rank_env env(boot, o);
  int const me = env.rank(), to = (me + 1) % n, from = (me + n - 1) % n;
  std::byte* const heap = env.heap();
  boot.barrier();

  command_op const fence_op = broken == "fence" ? command_op::nop : command_op::fence;
  std::vector<std::vector<std::byte>> sources;
  auto source = [&](std::size_t bytes, std::uint64_t seed) {
    sources.emplace_back(bytes);
    fill(sources.back().data(), seed, bytes);
    return reinterpret_cast<std::uint64_t>(sources.back().data());
  };
  auto signal_cmd = [&](command_op op, std::size_t w) {
    command c = rank_env::make(op, to, 0, 0, 0);
    c.signal = env.at(w);
    c.signal_op = static_cast<std::uint8_t>(signal_op::set);
    c.value = 1;
    return c;
  };
  for (int i = 0; i < iters; ++i) {
    // (a) put_signal: the data, then its signal.
    command a = signal_cmd(command_op::put_signal, word(0, me, i));
    a.dst = env.at(data_at(0, me, i));
    a.src = source(ps_bytes, seed_of(me, i, 1));
    a.bytes = ps_bytes;
    env.post(a);
    // (b) put; fence; signal.
    env.post(rank_env::make(command_op::put, to, env.at(data_at(1, me, i)), source(put_bytes, seed_of(me, i, 2)),
                            put_bytes));
    env.post(rank_env::make(fence_op, to, 0, 0, 0));
    env.post(signal_cmd(command_op::signal, word(1, me, i)));
    // (c) put_signal (a large one, received asynchronously); fence; signal.
    command c = signal_cmd(command_op::put_signal, word(2, me, i) + 8 * static_cast<std::size_t>(iters) * 3);
    c.dst = env.at(data_at(2, me, i));
    c.src = source(ps_bytes, seed_of(me, i, 3));
    c.bytes = ps_bytes;
    env.post(c);
    env.post(rank_env::make(fence_op, to, 0, 0, 0));
    env.post(signal_cmd(command_op::signal, word(2, me, i)));
  }
  // As the target: each signal seen (acquire) must find its data in place.
  int bad[3] = {0, 0, 0}, missing = 0;
  for (int i = 0; i < iters; ++i) {
    for (int kind = 0; kind < 3; ++kind) {
      auto* w = reinterpret_cast<std::uint64_t*>(heap + word(kind, from, i));
      if (!wait_word(w, [](std::uint64_t v) { return v == 1; })) {
        ++missing;
        continue;
      }
      std::size_t const bytes = kind == 1 ? put_bytes : ps_bytes;
      bad[kind] += first_mismatch(heap + data_at(kind, from, i), seed_of(from, i, kind + 1), bytes) != bytes;
    }
  }
  check(missing == 0, std::to_string(missing) + " signals never arrived");
  check(bad[0] == 0, "put_signal: " + std::to_string(bad[0]) + " of " + std::to_string(iters) +
                         " signals were seen before their data");
  check(bad[1] == 0, "put; fence; signal: " + std::to_string(bad[1]) + " of " + std::to_string(iters) +
                         " signals were seen before the put's data");
  check(bad[2] == 0, "put_signal; fence; signal: " + std::to_string(bad[2]) + " of " + std::to_string(iters) +
                         " signals were seen before the put_signal's data");
  check(env.quiet(), "every command completes");
  std::uint64_t count = 0;
  std::string const f = failure_text(env, count);
  check(count == 0, "no command failed (" + std::to_string(count) + ": " + f + ")");
  boot.barrier();
  return 0;
}

// ---- bad_input ------------------------------------------------------------------------------------
int run_bad_input(gpucomm::callback_bootstrap& boot, checker& check) {
  rank_env::options o;
  o.heap_bytes = 4u << 20;
  o.registered_bytes = 2u << 20;  // the upper half: in the heap, not registered with the engine
  rank_env env(boot, o);
  int const me = env.rank(), n = env.size(), to = (me + 1) % n;
  std::size_t const unregistered = (2u << 20) + 4096;
  boot.barrier();
  struct bad_case {
    char const* what;
    command c;
    char const* name;  // the error name its failure must lead with
  };
  auto signal = [&](command c, std::uint64_t word) {
    c.signal = word;
    c.signal_op = static_cast<std::uint8_t>(signal_op::add);
    c.value = 1;
    return c;
  };
  auto atomic = [&](command c, std::uint8_t op) {
    c.atomic_op = op;
    c.value = 1;
    return c;
  };
  std::uint64_t const src = env.at(1u << 20);
  std::vector<bad_case> cases = {
      {"put to PE size", rank_env::make(command_op::put, n, env.at(0), src, 8), "engine_refused"},
      {"put to PE -1", rank_env::make(command_op::put, -1, env.at(0), src, 8), "engine_refused"},
      {"put past the heap", rank_env::make(command_op::put, to, env.at(4u << 20), src, 8), "engine_refused"},
      {"put across the heap's end", rank_env::make(command_op::put, to, env.at((4u << 20) - 4), src, 8),
       "engine_refused"},
      {"get from outside the heap", rank_env::make(command_op::get, to, env.at(0), env.base() - 64, 8),
       "engine_refused"},
      {"put_signal with an unaligned signal word",
       signal(rank_env::make(command_op::put_signal, to, env.at(0), src, 8), env.at(12)), "engine_refused"},
      {"signal outside the heap", signal(rank_env::make(command_op::signal, to, 0, 0, 0), env.base() + (8u << 20)),
       "engine_refused"},
      {"atomic of 3 bytes", atomic(rank_env::make(command_op::atomic, to, env.at(64), 0, 3), 0), "engine_refused"},
      {"unaligned atomic", atomic(rank_env::make(command_op::atomic, to, env.at(68), 0, 8), 0), "engine_refused"},
      {"atomic with a foreign result slot", atomic(rank_env::make(command_op::atomic, to, env.at(64), env.at(0), 8), 0),
       "engine_refused"},
      {"atomic with an unknown operation", atomic(rank_env::make(command_op::atomic, to, env.at(64), 0, 8), 42),
       "engine_refused"},
      {"unknown command", rank_env::make(static_cast<command_op>(9), to, env.at(0), src, 8), "engine_refused"},
      {"put into memory the peer did not register", rank_env::make(command_op::put, to, env.at(unregistered), src, 8),
       "engine_refused"},
      {"get from memory the peer did not register",
       rank_env::make(command_op::get, to, env.at(0), env.at(unregistered), 8), "engine_refused"},
      {"put_signal into memory the peer did not register",
       signal(rank_env::make(command_op::put_signal, to, env.at(unregistered), src, 8), env.at(0)),
       "engine_remote_refused"},
      {"signal on a word the peer did not register",
       signal(rank_env::make(command_op::signal, to, 0, 0, 0), env.at(unregistered)), "engine_remote_refused"},
      {"atomic on a word the peer did not register",
       atomic(rank_env::make(command_op::atomic, to, env.at(unregistered), 0, 8),
              static_cast<std::uint8_t>(atomic_op::fetch_add)),
       "engine_remote_refused"},
  };
  for (bad_case const& b : cases) {
    check(env.wait(env.post(b.c)), std::string(b.what) + ": completes");
    std::uint64_t count = 0;
    auto const f = env.take_failure(count);
    bool const named = f && f->what.rfind(b.name, 0) == 0;
    check(count == 1 && named, std::string(b.what) + ": one failure named " + b.name + " (got " +
                                   std::to_string(count) + ": " + (f ? f->what : std::string("none")) + ")");
    if (f) check(f->op == b.c.op && f->peer == b.c.pe, std::string(b.what) + ": the failure names the command");
    if (f && me == 0 && &b == &cases.back()) std::printf("rank 0: e.g. %s\n", f->what.c_str());
  }
  // The engine works on after all that: a put, checked at its target.
  std::vector<std::byte> data(4096);
  fill(data.data(), seed_of(me, to, 7), data.size());
  check(env.wait(env.post(rank_env::make(command_op::put, to, env.at(8192),
                                         reinterpret_cast<std::uint64_t>(data.data()), data.size()))),
        "a good put after the bad ones completes");
  boot.barrier();
  int const from = (me + n - 1) % n;
  check(first_mismatch(env.heap() + 8192, seed_of(from, me, 7), 4096) == 4096, "the good put's data arrived");
  std::uint64_t count = 0;
  failure_text(env, count);
  check(count == 0, "the good put did not fail");
  boot.barrier();
  return 0;
}

// ---- peer_killed ----------------------------------------------------------------------------------
int run_peer_killed(gpucomm::callback_bootstrap& boot, checker& check, bool stop) {
  long const deadline_s = env_long("GPUCOMM_TEST_DEADLINE_S", 30);
  rank_env::options o;
  o.heap_bytes = 4u << 20;
  o.op_timeout = std::chrono::milliseconds(env_long("GPUCOMM_TEST_OP_TIMEOUT_MS", 20'000));
  rank_env env(boot, o);
  int const me = env.rank(), n = env.size(), victim = n - 1;
  std::vector<pid_t> pids(static_cast<std::size_t>(n));
  pid_t const pid = getpid();
  boot.allgather(&pid, pids.data(), sizeof pid);
  std::vector<std::byte> data(1u << 20);
  fill(data.data(), seed_of(me, victim, 5), data.size());
  auto const put_to = [&](int pe, std::size_t offset) {
    return env.post(
        rank_env::make(command_op::put, pe, env.at(offset), reinterpret_cast<std::uint64_t>(data.data()), data.size()));
  };
  check(env.wait(put_to((me + 1) % n, 1u << 20)), "a put before the kill completes");
  boot.barrier();
  if (me == victim) {
    std::fflush(stdout);
    raise(stop ? SIGSTOP : SIGKILL);
  }
  auto const killed = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // Keep sending to the dead peer until a command fails; each must complete.
  std::optional<gpucomm::detail::proxy_failure> f;
  std::uint64_t count = 0;
  double seconds = 0;
  while (!f) {
    check(env.wait(put_to(victim, 1u << 20)), "a put to the dead peer completes");
    f = env.take_failure(count);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
    if (seconds > static_cast<double>(deadline_s) + 5) break;
  }
  bool const named = f && (f->what.rfind("engine_peer_failed", 0) == 0 || f->what.rfind("engine_timed_out", 0) == 0);
  check(named, "the survivor names the failure (" + (f ? f->what : std::string("none")) + ")");
  check(seconds <= static_cast<double>(deadline_s),
        "reported within " + std::to_string(deadline_s) + " s (" + std::to_string(seconds) + " s)");
  std::printf("rank %d: the dead peer reported after %.3f s: %s\n", me, seconds, f ? f->what.c_str() : "nothing");
  // Later commands to it are refused at once, named, and complete; the rest of the world works.
  command s = rank_env::make(command_op::signal, victim, 0, 0, 0);
  s.signal = env.at(0);
  s.value = 1;
  command a = rank_env::make(command_op::atomic, victim, env.at(64), env.result_slot(0), 8);
  a.atomic_op = static_cast<std::uint8_t>(atomic_op::fetch_add);
  for (command const& c : {s, a}) {
    check(env.wait(env.post(c)), "a command to the dead peer completes");
    auto const g = env.take_failure(count);
    check(g && g->what.rfind("engine_peer_failed", 0) == 0,
          "a later command to the dead peer fails, named (" + (g ? g->what : std::string("none")) + ")");
  }
  if (stop && me == 0) kill(pids[static_cast<std::size_t>(victim)], SIGKILL);
  check(env.wait(put_to(me, 2u << 20)), "a put to itself completes");
  check(first_mismatch(env.heap() + (2u << 20), seed_of(me, victim, 5), data.size()) == data.size(),
        "a put to itself after the failure arrives");
  env.take_failure(count);
  check(count == 0, "the put to itself did not fail");
  env.stop();
  return 0;
}

// ---- unreachable ----------------------------------------------------------------------------------
int run_unreachable(gpucomm::callback_bootstrap& boot, checker& check) {
  rank_env::options o;
  o.heap_bytes = 1u << 20;
  o.dead_peer_addresses = true;
  o.connect_timeout = std::chrono::milliseconds(env_long("GPUCOMM_TEST_CONNECT_TIMEOUT_MS", 5'000));
  auto const start = std::chrono::steady_clock::now();
  std::string what;
  try {
    rank_env env(boot, o);
  } catch (gpucomm::error const& e) {
    what = e.what();
  }
  double const seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  check(what.find("engine_peer_unreachable") != std::string::npos,
        "connect() to a dead address throws engine_peer_unreachable (" + what + ")");
  check(seconds < o.connect_timeout.count() / 1000.0 + 5,
        "within the connect timeout (" + std::to_string(seconds) + " s)");
  std::printf("rank %d: after %.3f s: %s\n", boot.rank(), seconds, what.c_str());
  boot.barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string const scenario = argc > 1 ? argv[1] : "";
  char const* tcp = std::getenv("GPUCOMM_TEST_BOOTSTRAP");
  std::unique_ptr<tcp_bootstrap> tcp_boot;
  std::optional<gpucomm::mpi_bootstrap> mpi_boot;
  gpucomm::callback_bootstrap boot;
  if (tcp != nullptr) {
    std::string const where = tcp;
    auto const colon = where.rfind(':');
    tcp_boot = std::make_unique<tcp_bootstrap>(where.substr(0, colon), std::atoi(where.c_str() + colon + 1),
                                               static_cast<int>(env_long("GPUCOMM_TEST_RANK", 0)),
                                               static_cast<int>(env_long("GPUCOMM_TEST_SIZE", 2)));
    boot = tcp_boot->adapt();
  } else {
    MPI_Init(&argc, &argv);
    mpi_boot.emplace(MPI_COMM_WORLD);
    boot = {mpi_boot->rank(), mpi_boot->size(),
            [&](void const* s, void* r, std::size_t n) { mpi_boot->allgather(s, r, n); }, [&] { mpi_boot->barrier(); }};
  }
  checker check{boot.rank()};
  int rc = 0;
  try {
    if (scenario == "ops") {
      run_ops(boot, check);
    } else if (scenario == "order") {
      run_order(boot, check);
    } else if (scenario == "bad_input") {
      run_bad_input(boot, check);
    } else if (scenario == "peer_killed" || scenario == "peer_stopped") {
      run_peer_killed(boot, check, scenario == "peer_stopped");
      // A peer is dead: no collective (MPI_Finalize included) can finish. Report and leave.
      std::_Exit(check.finish(scenario.c_str()));
    } else if (scenario == "unreachable") {
      run_unreachable(boot, check);
    } else {
      std::fprintf(stderr, "usage: engine_test ops|order|bad_input|peer_killed|peer_stopped|unreachable\n");
      rc = 2;
    }
  } catch (std::exception const& e) {
    check(false, std::string("unexpected exception: ") + e.what());
  }
  if (rc == 0) rc = check.finish(scenario.c_str());
  if (mpi_boot) {
    mpi_boot.reset();
    MPI_Finalize();
  }
  return rc;
}
