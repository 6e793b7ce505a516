// ProxyQueue's NIC backend on the host, through the same set-up as in a world: the firmware model
// under verbs_gpu's set-up (two modelled devices, a host_qp per peer, an MR per heap block, the
// key table the backend looks keys up in), host memory for two PEs' heaps, each heap two blocks.
// Every command kind end to end (data, signals, every atomic on 32- and 64-bit words with the
// fetched value), refusals (outside the heap, across two blocks), registered local buffers outside
// the heap (nic_local_buffers) both ways, an error completion and the
// queue it leaves in error, dropped doorbells (the backend rings again), and a pass of many
// commands announced to the NIC only at its end (mark()). The expected values are computed here, not by the model.
#include <catch2/catch.hpp>

#include <gpucomm/transport/proxy_queue/detail/nic_backend.hpp>
#include <gpucomm/verbs_gpu/host/setup.hpp>
#include <gpucomm/testing/nic_model/nic_backend.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "verbs_gpu/model_devices.hpp"

namespace {

namespace vm = gpucomm::verbs_gpu::model;
namespace vh = gpucomm::verbs_gpu::host;
using gpucomm::atomic_op;
using gpucomm::detail::heap_keys;
using gpucomm::proxy_queue::command;
using gpucomm::proxy_queue::command_op;

constexpr std::size_t heap_bytes = 1 << 20;
constexpr std::size_t block_bytes = heap_bytes / 2;  // two blocks, two regions, two keys
constexpr std::uint32_t log_page = 12;
constexpr std::uint32_t result_slots = 64;

struct free_deleter {
  void operator()(void* p) const noexcept { std::free(p); }
};

/// Two PEs, each with a modelled device of its own: heaps and result slots in host memory, a
/// backend each, connected.
struct two_pes {
  vm::firmware_fabric fabric;
  vm::model_network net;
  vh::host_control_memory memory;
  std::unique_ptr<vm::nic_backend> nic[2];
  std::unique_ptr<vh::device> dev[2];
  std::unique_ptr<unsigned char, free_deleter> heap[2];
  std::vector<std::uint64_t> results[2];
  std::unique_ptr<vh::memory_region> blocks[2][2], results_mr[2];
  std::vector<std::unique_ptr<vh::host_qp>> qps[2];  // [pe][peer]
  std::vector<std::uint32_t> rows[2];                // each PE's key table
  gpucomm::detail::proxy_failures failures;
  std::unique_ptr<gpucomm::detail::nic_backend> backend[2];
  /// Each PE's registered local memory outside its heap, as the set-up shares it with the backend.
  std::shared_ptr<gpucomm::detail::nic_local_buffers> buffers[2] = {
      std::make_shared<gpucomm::detail::nic_local_buffers>(), std::make_shared<gpucomm::detail::nic_local_buffers>()};
  std::set<std::uint64_t> done[2];

  /// flush: the placement's flush_gpu_writes of each PE (called with the PE), as the proxy sets it
  /// on a GPU that does not order the NIC's writes with their completions; none by default.
  explicit two_pes(vm::nic_config config = {}, std::uint32_t bad_rkey_of_pe1 = 0,
                   std::function<std::string(int)> const& flush = {})
      : fabric({gpucomm_test::ib_device("mlx5_0", 1), gpucomm_test::ib_device("mlx5_1", 2)}), net(config) {
    for (int pe = 0; pe < 2; ++pe) {
      heap[pe].reset(static_cast<unsigned char*>(std::aligned_alloc(4096, heap_bytes)));
      std::memset(heap[pe].get(), 0, heap_bytes);
      results[pe].assign(result_slots + 1, 0);
      nic[pe] = std::make_unique<vm::nic_backend>(fabric, net, memory);
      vh::device_options o;
      o.name = pe == 0 ? "mlx5_0" : "mlx5_1";
      dev[pe] = std::make_unique<vh::device>(*nic[pe], o);
      for (int b = 0; b < 2; ++b)
        blocks[pe][b] =
            std::make_unique<vh::memory_region>(*dev[pe], heap[pe].get() + b * block_bytes, block_bytes, false);
      results_mr[pe] = std::make_unique<vh::memory_region>(*dev[pe], results[pe].data(), results[pe].size() * 8, false,
                                                           vh::access::local_write);
      for (int peer = 0; peer < 2; ++peer)
        qps[pe].push_back(std::make_unique<vh::host_qp>(*dev[pe], gpucomm::detail::nic_backend::log_depth));
    }
    for (int pe = 0; pe < 2; ++pe)
      for (int peer = 0; peer < 2; ++peer) qps[pe][peer]->connect(qps[peer][pe]->local_info());
    heap_keys shape;
    shape.log_page = log_page;
    shape.pages = heap_bytes >> log_page;
    shape.row_words = 3;
    for (int pe = 0; pe < 2; ++pe) {
      rows[pe].assign(shape.pages * shape.row_words, heap_keys::none);
      for (int b = 0; b < 2; ++b) {
        std::uint32_t const rkey1 = bad_rkey_of_pe1 != 0 ? bad_rkey_of_pe1 : blocks[1][b]->rkey();
        std::uint32_t const rkeys[2] = {gpucomm::verbs_gpu::to_be32(blocks[0][b]->rkey()),
                                        gpucomm::verbs_gpu::to_be32(rkey1)};
        heap_keys::fill_block(rows[pe].data() + (b * block_bytes >> log_page) * shape.row_words,
                              block_bytes >> log_page, gpucomm::verbs_gpu::to_be32(blocks[pe][b]->lkey()), rkeys,
                              shape.row_words);
      }
      gpucomm::detail::nic_backend::placement at;
      at.pe = pe;
      at.npes = 2;
      at.slot = reinterpret_cast<std::uint64_t>(heap[pe].get());
      at.slot_bytes = heap_bytes;
      at.keys = shape;
      at.keys.rows = rows[pe].data();
      at.bases = {reinterpret_cast<std::uint64_t>(heap[0].get()), reinterpret_cast<std::uint64_t>(heap[1].get())};
      at.results = results[pe].data();
      at.results_lkey = results_mr[pe]->lkey();
      at.result_slots = result_slots;
      at.paths = {3, 3};
      at.buffers = buffers[pe];
      if (flush) at.flush_gpu_writes = [flush, pe] { return flush(pe); };
      std::vector<gpucomm::verbs_gpu::send_queue> queues;
      for (auto const& q : qps[pe]) queues.push_back(q->send_queue());
      backend[pe] = std::make_unique<gpucomm::detail::nic_backend>(queues, std::move(at), failures);
    }
    net.data_path().start();
  }
  ~two_pes() { net.data_path().stop(); }

  std::uint64_t addr(int pe, std::size_t offset) const {
    return reinterpret_cast<std::uint64_t>(heap[pe].get()) + offset;
  }
  template <class T>
  T& at(int pe, std::size_t offset) {
    return *reinterpret_cast<T*>(heap[pe].get() + offset);
  }

  /// Issues c from PE `pe` as ticket t, as a pass of one command (then mark(), which rings); true
  /// when it completed at once.
  bool issue(int pe, command const& c, std::uint64_t t) {
    bool const now = issue_unrung(pe, c, t);
    backend[pe]->mark();
    return now;
  }
  /// The same without the end of the pass: the WQEs wait for the next mark() (or the ring step).
  bool issue_unrung(int pe, command const& c, std::uint64_t t) {
    bool const now = backend[pe]->issue(c, t);
    if (now) done[pe].insert(t);
    return now;
  }
  /// Polls PE pe's backend until ticket t is done (or 10 s pass).
  bool wait(int pe, std::uint64_t t) {
    auto const give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (done[pe].count(t) == 0) {
      backend[pe]->poll([&](std::uint64_t x) { done[pe].insert(x); });
      if (std::chrono::steady_clock::now() > give_up) return false;
      std::this_thread::yield();
    }
    return true;
  }
};

command make(command_op op, int pe, std::uint64_t dst, std::uint64_t src, std::uint64_t bytes) {
  command c;
  c.op = op;
  c.pe = pe;
  c.dst = dst;
  c.src = src;
  c.bytes = bytes;
  return c;
}

/// What atomic `op` leaves in a word holding `old` (the reference).
template <class U>
U after(atomic_op op, U old, U v, U compare) {
  switch (op) {
    case atomic_op::fetch_add:
    case atomic_op::add:
      return static_cast<U>(old + v);
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
      return old == compare ? v : old;
    case atomic_op::fetch:
      return old;
  }
  return old;
}

template <class U>
U fetched(two_pes const& p, int pe, std::size_t slot) {
  std::uint64_t const raw = p.results[pe][slot];
  if constexpr (sizeof(U) == 4) {
    std::uint32_t w = 0;
    std::memcpy(&w, &raw, 4);
    return gpucomm::verbs_gpu::fetched32(w);
  } else {
    return raw;
  }
}

template <class U>
void check_atomics(two_pes& p, std::uint64_t& ticket, std::mt19937_64& rng) {
  for (int round = 0; round < 40; ++round) {
    for (int op_index = 0; op_index <= static_cast<int>(atomic_op::set); ++op_index) {
      auto const op = static_cast<atomic_op>(op_index);
      std::size_t const offset = 4096 + 8 * static_cast<std::size_t>(op_index);
      U const old = static_cast<U>(rng());
      U const v = static_cast<U>(rng());
      U const compare = round % 2 == 0 ? old : static_cast<U>(rng());  // both outcomes of compare_swap
      p.at<U>(1, offset) = old;
      std::size_t const slot = static_cast<std::size_t>(round + op_index) % result_slots;
      bool const fetching = op != atomic_op::add && op != atomic_op::set;
      p.results[0][slot] = 0x5a5a5a5a5a5a5a5aull;  // poison
      p.results[0][result_slots] = 0x5a5a5a5a5a5a5a5aull;
      command c = make(command_op::atomic, 1, p.addr(0, offset), 0, sizeof(U));
      if (fetching) c.src = reinterpret_cast<std::uint64_t>(&p.results[0][slot]);
      c.atomic_op = static_cast<std::uint8_t>(op);
      c.value = v;
      c.aux = compare;
      std::uint64_t const t = ticket++;
      INFO("op " << op_index << ", " << sizeof(U) << " bytes, round " << round);
      REQUIRE_FALSE(p.issue(0, c, t));
      REQUIRE(p.wait(0, t));
      CHECK(p.at<U>(1, offset) == after<U>(op, old, v, compare));
      if (fetching) {
        CHECK(fetched<U>(p, 0, slot) == old);
        CHECK(p.results[0][result_slots] == 0x5a5a5a5a5a5a5a5aull);  // only the named slot written
      } else {
        CHECK(p.results[0][slot] == 0x5a5a5a5a5a5a5a5aull);  // non-fetching: the discarded word
      }
    }
  }
}

}  // namespace

TEST_CASE("ProxyQueue NIC backend: every command end to end on the NIC model", "[proxy][nic]") {
  two_pes p;
  std::mt19937_64 rng(91);
  std::uint64_t ticket = 0;
  // put 0 -> 1, and get 1 -> 0, of odd sizes; the source pattern from here.
  for (std::size_t bytes : {1u, 7u, 64u, 1000u, 65537u}) {
    for (std::size_t k = 0; k < bytes; ++k) p.at<unsigned char>(0, k) = static_cast<unsigned char>(rng());
    std::memset(p.heap[1].get() + 200000, 0xcd, bytes + 1);
    std::uint64_t const t = ticket++;
    REQUIRE_FALSE(p.issue(0, make(command_op::put, 1, p.addr(0, 200000), p.addr(0, 0), bytes), t));
    REQUIRE(p.wait(0, t));
    CHECK(std::memcmp(p.heap[1].get() + 200000, p.heap[0].get(), bytes) == 0);
    CHECK(p.at<unsigned char>(1, 200000 + bytes) == 0xcd);  // nothing past the end
    std::memset(p.heap[0].get() + 400000, 0xcd, bytes);
    std::uint64_t const g = ticket++;
    REQUIRE_FALSE(p.issue(0, make(command_op::get, 1, p.addr(0, 400000), p.addr(0, 200000), bytes), g));
    REQUIRE(p.wait(0, g));
    CHECK(std::memcmp(p.heap[0].get() + 400000, p.heap[0].get(), bytes) == 0);
  }
  // put_signal set and add, signal set and add, to the other PE and to itself (loopback).
  for (int to : {1, 0}) {
    std::size_t const sig = 600000;
    p.at<std::uint64_t>(to, sig) = 5;
    command c = make(command_op::put_signal, to, p.addr(0, 700000), p.addr(0, 0), 256);
    c.signal = p.addr(0, sig);
    c.value = 40;
    c.signal_op = static_cast<std::uint8_t>(gpucomm::signal_op::add);
    std::uint64_t t = ticket++;
    REQUIRE_FALSE(p.issue(0, c, t));
    REQUIRE(p.wait(0, t));
    CHECK(p.at<std::uint64_t>(to, sig) == 45);
    CHECK(std::memcmp(p.heap[to].get() + 700000, p.heap[0].get(), 256) == 0);
    c.signal_op = static_cast<std::uint8_t>(gpucomm::signal_op::set);
    c.value = 0x1122334455667788ull;
    t = ticket++;
    REQUIRE_FALSE(p.issue(0, c, t));
    REQUIRE(p.wait(0, t));
    CHECK(p.at<std::uint64_t>(to, sig) == 0x1122334455667788ull);
    command s = make(command_op::signal, to, 0, 0, 0);
    s.signal = p.addr(0, sig);
    s.value = 3;
    s.signal_op = static_cast<std::uint8_t>(gpucomm::signal_op::add);
    t = ticket++;
    REQUIRE_FALSE(p.issue(0, s, t));
    REQUIRE(p.wait(0, t));
    CHECK(p.at<std::uint64_t>(to, sig) == 0x112233445566778bull);
  }
  check_atomics<std::uint64_t>(p, ticket, rng);
  check_atomics<std::uint32_t>(p, ticket, rng);
  std::uint64_t count = 0;
  CHECK_FALSE(p.failures.take(count).has_value());
}

// On a GPU whose attribute GPUDirectRDMAWritesOrdering is below Owner, the NIC's writes into GPU
// memory (a get's data, an atomic's fetched value) need not be visible to the GPU when the CPU
// sees their completion: the backend flushes before it reports such a command complete, and only
// then; a flush that fails is recorded against the command, which still completes.
TEST_CASE("ProxyQueue NIC backend: NIC writes into GPU memory are flushed before their commands complete",
          "[proxy][nic]") {
  two_pes* self = nullptr;
  std::uint64_t watched = ~std::uint64_t{0};  // the ticket whose completion must follow the flush
  int flushes = 0;
  bool reported_before_flush = false;
  std::string answer;  // what the flush returns: empty, or an error's text
  two_pes p({}, 0, [&](int pe) {
    CHECK(pe == 0);
    ++flushes;
    reported_before_flush |= self->done[0].count(watched) != 0;
    return answer;
  });
  self = &p;
  std::uint64_t ticket = 0;
  auto run = [&](command const& c) {
    watched = ticket++;
    REQUIRE_FALSE(p.issue(0, c, watched));
    REQUIRE(p.wait(0, watched));
  };
  for (int k = 0; k < 256; ++k) p.at<unsigned char>(1, 8192 + k) = static_cast<unsigned char>(k * 7 + 1);
  run(make(command_op::put, 1, p.addr(0, 16384), p.addr(0, 0), 256));
  command sig = make(command_op::signal, 1, 0, 0, 0);
  sig.signal = p.addr(0, 600000);
  sig.value = 1;
  run(sig);
  CHECK(flushes == 0);  // nothing was written into this PE's memory
  run(make(command_op::get, 1, p.addr(0, 32768), p.addr(0, 8192), 256));
  CHECK(flushes == 1);
  CHECK(std::memcmp(p.heap[0].get() + 32768, p.heap[1].get() + 8192, 256) == 0);
  p.at<std::uint64_t>(1, 4096) = 10;
  command fetch = make(command_op::atomic, 1, p.addr(0, 4096), reinterpret_cast<std::uint64_t>(&p.results[0][3]), 8);
  fetch.atomic_op = static_cast<std::uint8_t>(atomic_op::fetch_add);
  fetch.value = 5;
  run(fetch);
  CHECK(flushes == 2);
  CHECK(p.results[0][3] == 10);
  CHECK_FALSE(reported_before_flush);
  std::uint64_t count = 0;
  CHECK_FALSE(p.failures.take(count).has_value());

  answer = "cudaDeviceFlushGPUDirectRDMAWrites failed: an injected error";
  run(make(command_op::get, 1, p.addr(0, 32768), p.addr(0, 8192), 64));
  CHECK(flushes == 3);
  auto const f = p.failures.take(count);
  REQUIRE(f.has_value());
  CHECK(f->op == command_op::get);
  CHECK(f->ticket == watched);
  CHECK(f->peer == 1);
  CHECK_THAT(f->what, Catch::Matchers::Contains("cudaDeviceFlushGPUDirectRDMAWrites failed"));
}

TEST_CASE("ProxyQueue NIC backend: refuses what the NIC cannot reach, and records why", "[proxy][nic]") {
  two_pes p;
  std::vector<unsigned char> outside(64, 1);
  auto const outside_addr = reinterpret_cast<std::uint64_t>(outside.data());
  struct refused {
    command c;
    char const* why;
  };
  command atomic = make(command_op::atomic, 1, p.addr(0, 3), 0, 8);  // misaligned
  command bad_op = make(command_op::atomic, 1, p.addr(0, 8), 0, 8);
  bad_op.atomic_op = 200;
  command bad_slot = make(command_op::atomic, 1, p.addr(0, 8), p.addr(0, 16), 8);  // a heap word, not a slot
  command signal = make(command_op::signal, 1, 0, 0, 0);
  signal.signal = outside_addr;
  std::vector<refused> const cases = {
      {make(command_op::put, 1, p.addr(0, 0), outside_addr, 64), "source is neither in this PE's symmetric heap"},
      {make(command_op::put, 1, outside_addr, p.addr(0, 0), 64), "destination is not in this PE's symmetric heap"},
      {make(command_op::put, 1, p.addr(0, heap_bytes - 8), p.addr(0, 0), 64), "destination is not in this PE's"},
      {make(command_op::put, 1, p.addr(0, block_bytes - 8), p.addr(0, 0), 64),
       "destination is not in this PE's "
       "symmetric heap, in one live allocation"},
      {make(command_op::get, 1, p.addr(0, 0), p.addr(0, block_bytes - 8), 64),
       "source is not in this PE's "
       "symmetric heap, in one live allocation"},
      {make(command_op::get, 1, outside_addr, p.addr(0, 0), 64), "destination is neither in this PE's symmetric heap"},
      {make(command_op::put, 1, p.addr(0, 0), p.addr(0, block_bytes - 8), 64),
       "source is neither in this PE's symmetric heap, in one live allocation"},
      {make(command_op::put, 2, p.addr(0, 0), p.addr(0, 0), 64), "target PE is outside the world"},
      {atomic, "not an aligned 4- or 8-byte word"},
      {bad_op, "atomic operation is unknown"},
      {bad_slot, "result slot is not one of this PE's"},
      {signal, "signal word is not an aligned word"},
      {make(command_op::fence, 1, 0, 0, 0), "does not carry this operation"},
  };
  std::uint64_t ticket = 0;
  for (auto const& r : cases) {
    INFO(r.why);
    CHECK(p.issue(0, r.c, ticket++));
    std::uint64_t count = 0;
    auto const f = p.failures.take(count);
    REQUIRE(f.has_value());
    CHECK(count == 1);
    CHECK(f->what.find(r.why) != std::string::npos);
    CHECK(f->ticket == ticket - 1);
  }
  CHECK(std::all_of(outside.begin(), outside.end(), [](unsigned char b) { return b == 1; }));
}

TEST_CASE("ProxyQueue NIC backend: registered local buffers carry data both ways, others are refused", "[proxy][nic]") {
  two_pes p;
  constexpr std::size_t bytes = 8192;
  std::unique_ptr<unsigned char, free_deleter> outside(static_cast<unsigned char*>(std::aligned_alloc(4096, bytes)));
  auto const base = reinterpret_cast<std::uint64_t>(outside.get());
  auto const mr = std::make_unique<vh::memory_region>(*p.dev[0], outside.get(), bytes, false, vh::access::local_write);
  std::uint64_t ticket = 0;
  auto const refused = [&](command const& c, char const* why) {
    INFO(why);
    CHECK(p.issue(0, c, ticket++));
    std::uint64_t count = 0;
    auto const f = p.failures.take(count);
    REQUIRE(f.has_value());
    CHECK(f->what.find(why) != std::string::npos);
  };
  for (std::size_t k = 0; k < bytes; ++k) outside.get()[k] = static_cast<unsigned char>(k * 7 + 3);
  // Not registered yet: refused, nothing moved.
  refused(make(command_op::put, 1, p.addr(0, 0), base, bytes), "source is neither in this PE's symmetric heap");
  CHECK(p.at<std::uint64_t>(1, 0) == 0);
  p.buffers[0]->add({base, bytes, gpucomm::verbs_gpu::to_be32(mr->lkey()), 0});
  // A put from it, in full; a get into its second half.
  std::uint64_t t = ticket++;
  REQUIRE_FALSE(p.issue(0, make(command_op::put, 1, p.addr(0, 0), base, bytes), t));
  REQUIRE(p.wait(0, t));
  for (std::size_t k = 0; k < bytes; ++k) {
    INFO("byte " << k);
    REQUIRE(p.heap[1].get()[k] == static_cast<unsigned char>(k * 7 + 3));
  }
  for (std::size_t k = 0; k < bytes / 2; ++k) p.heap[1].get()[65536 + k] = static_cast<unsigned char>(k * 5 + 1);
  t = ticket++;
  REQUIRE_FALSE(p.issue(0, make(command_op::get, 1, base + bytes / 2, p.addr(0, 65536), bytes / 2), t));
  REQUIRE(p.wait(0, t));
  for (std::size_t k = 0; k < bytes / 2; ++k) {
    INFO("byte " << k);
    REQUIRE(outside.get()[bytes / 2 + k] == static_cast<unsigned char>(k * 5 + 1));
    REQUIRE(outside.get()[k] == static_cast<unsigned char>(k * 7 + 3));  // the first half untouched
  }
  // Past its end: refused.
  refused(make(command_op::put, 1, p.addr(0, 0), base + bytes - 8, 64), "source is neither");
  refused(make(command_op::get, 1, base + bytes - 8, p.addr(0, 0), 64), "destination is neither");
  // A put_signal of no bytes names no local memory: its signal alone.
  command ps = make(command_op::put_signal, 1, p.addr(0, 128 * 1024), 12345, 0);
  ps.signal = p.addr(0, 4096);
  ps.value = 9;
  ps.signal_op = static_cast<std::uint8_t>(gpucomm::signal_op::set);
  t = ticket++;
  REQUIRE_FALSE(p.issue(0, ps, t));
  REQUIRE(p.wait(0, t));
  CHECK(p.at<std::uint64_t>(1, 4096) == 9);
  // Removed: refused again.
  p.buffers[0]->remove(base);
  refused(make(command_op::put, 1, p.addr(0, 0), base, 64), "source is neither");
  std::uint64_t count = 0;
  CHECK_FALSE(p.failures.take(count).has_value());
}

TEST_CASE("ProxyQueue NIC backend: an error completion fails its commands and the queue, and is reported",
          "[proxy][nic]") {
  two_pes p({}, /*bad_rkey_of_pe1=*/0x7777);
  // A good put first (loopback, another queue), then two to PE 1 with the wrong key.
  REQUIRE_FALSE(p.issue(0, make(command_op::put, 0, p.addr(0, 1000), p.addr(0, 0), 64), 0));
  REQUIRE(p.wait(0, 0));
  REQUIRE_FALSE(p.issue(0, make(command_op::put, 1, p.addr(0, 1000), p.addr(0, 0), 64), 1));
  REQUIRE_FALSE(p.issue(0, make(command_op::put, 1, p.addr(0, 2000), p.addr(0, 0), 64), 2));
  REQUIRE(p.wait(0, 1));
  REQUIRE(p.wait(0, 2));
  std::uint64_t count = 0;
  auto const f = p.failures.take(count);
  REQUIRE(f.has_value());
  INFO(f->what);
  CHECK(f->ticket == 1);
  CHECK(f->peer == 1);
  CHECK(f->op == command_op::put);
  CHECK(f->what.find("the NIC completed it with an error") != std::string::npos);
  CHECK(f->what.find("REMOTE_ACCESS") != std::string::npos);
  CHECK(f->what.find("2 commands on the queue failed with it") != std::string::npos);
  // The queue stays in error: the next command to PE 1 is refused at once; the loopback queue works.
  CHECK(p.issue(0, make(command_op::put, 1, p.addr(0, 3000), p.addr(0, 0), 64), 3));
  CHECK(p.failures.take(count)->what.find("in error since an earlier failure") != std::string::npos);
  REQUIRE_FALSE(p.issue(0, make(command_op::put, 0, p.addr(0, 4000), p.addr(0, 0), 64), 4));
  CHECK(p.wait(0, 4));
  CHECK_FALSE(p.failures.take(count).has_value());
}

TEST_CASE("ProxyQueue NIC backend: dropped and delayed doorbells, slow completions", "[proxy][nic][faults]") {
  vm::nic_config config;
  config.fault.drop_doorbell = 0.5;
  config.fault.duplicate_doorbell = 0.2;
  config.fault.doorbell_delay = std::chrono::microseconds(50);
  config.fault.completion_delay = std::chrono::microseconds(30);
  config.fault.seed = 7;
  two_pes p(config);
  std::mt19937_64 rng(5);
  for (std::size_t k = 0; k < 4096; ++k) p.at<unsigned char>(0, k) = static_cast<unsigned char>(rng());
  // Commands one at a time (a dropped doorbell with nothing after it is what the re-ring is for),
  // then a burst.
  std::uint64_t ticket = 0;
  for (int k = 0; k < 20; ++k) {
    std::uint64_t const t = ticket++;
    REQUIRE_FALSE(p.issue(0, make(command_op::put, 1, p.addr(0, 8192 + 64 * k), p.addr(0, 64 * k), 64), t));
    REQUIRE(p.wait(0, t));
  }
  for (int k = 20; k < 64; ++k) {
    REQUIRE_FALSE(p.issue(0, make(command_op::put, 1, p.addr(0, 8192 + 64 * k), p.addr(0, 64 * k), 64), ticket++));
  }
  for (std::uint64_t t = 20; t < 64; ++t) REQUIRE(p.wait(0, t));
  CHECK(std::memcmp(p.heap[1].get() + 8192, p.heap[0].get(), 4096) == 0);
  CHECK(p.net.data_path().stats().doorbells_dropped > 0);
  std::uint64_t count = 0;
  CHECK_FALSE(p.failures.take(count).has_value());
}

TEST_CASE("ProxyQueue NIC backend: a pass announces nothing until its end, then all of it", "[proxy][nic]") {
  two_pes p;
  std::mt19937_64 rng(11);
  for (std::size_t k = 0; k < 2048; ++k) p.at<unsigned char>(0, k) = static_cast<unsigned char>(rng());
  // What PE 0's queue to `peer` has published (ready) and announced to the NIC (producer).
  auto const counters = [&](int peer) {
    gpucomm::verbs_gpu::qp_counters& c = *p.qps[0][static_cast<std::size_t>(peer)]->send_queue().counters;
    return std::pair<std::uint64_t, std::uint64_t>{
        gpucomm::verbs_gpu::detail::dev_ref(c.ready).load(cuda::memory_order_acquire),
        gpucomm::verbs_gpu::detail::dev_ref(c.producer).load(cuda::memory_order_acquire)};
  };
  auto const start = counters(1), start_self = counters(0);
  // 20 puts to PE 1 and 10 to PE 0 itself (two queues), one WQEBB each: under the send queue's ring
  // step (32), so nothing is announced before mark().
  constexpr int to_peer = 20, to_self = 10;
  std::uint64_t ticket = 0;
  for (int k = 0; k < to_peer; ++k)
    REQUIRE_FALSE(
        p.issue_unrung(0, make(command_op::put, 1, p.addr(0, 8192 + 64 * k), p.addr(0, 64 * k), 64), ticket++));
  for (int k = 0; k < to_self; ++k)
    REQUIRE_FALSE(
        p.issue_unrung(0, make(command_op::put, 0, p.addr(0, 16384 + 64 * k), p.addr(0, 1024 + 64 * k), 64), ticket++));
  auto const issued = counters(1), issued_self = counters(0);
  CHECK(issued.first == start.first + to_peer);  // published
  CHECK(issued.second == start.second);          // not announced: no doorbell yet
  CHECK(issued_self.first == start_self.first + to_self);
  CHECK(issued_self.second == start_self.second);
  p.backend[0]->mark();  // the end of the pass: one doorbell per queue announces all of them
  CHECK(counters(1).second == issued.first);
  CHECK(counters(0).second == issued_self.first);
  for (std::uint64_t t = 0; t < ticket; ++t) REQUIRE(p.wait(0, t));
  CHECK(std::memcmp(p.heap[1].get() + 8192, p.heap[0].get(), 64 * to_peer) == 0);
  CHECK(std::memcmp(p.heap[0].get() + 16384, p.heap[0].get() + 1024, 64 * to_self) == 0);
  std::uint64_t count = 0;
  CHECK_FALSE(p.failures.take(count).has_value());
}
