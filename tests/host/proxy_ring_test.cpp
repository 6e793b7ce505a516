// ProxyQueue's command ring (transport/proxy_queue/command_ring.cuh) on the host: CPU threads run
// the producers' protocol, another CPU thread the reader's, on a small ring so that it wraps and
// fills all the time. Checked against what the producers recorded, not against the ring's own
// bookkeeping: every command read exactly once, whole, in ticket order, each producer's commands
// in the order it posted them; nothing overwritten while unread; completion waits that end only
// once the reader says so.
#include <gpucomm/transport/proxy_queue/command_ring.cuh>
#include <gpucomm/transport/proxy_queue/completion_window.hpp>
#include <gpucomm/transport/proxy_queue/detail/proxy_thread.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <stdexcept>
#include <thread>
#include <vector>

using gpucomm::proxy_queue::command;
using gpucomm::proxy_queue::command_op;
using gpucomm::proxy_queue::command_ring;
using gpucomm::proxy_queue::producer_words;
using gpucomm::proxy_queue::ring_counters;
using gpucomm::proxy_queue::ring_reader;
using gpucomm::proxy_queue::ring_status;
using namespace std::chrono_literals;

namespace {

/// A ring in ordinary host memory (the proxy's host half puts it in pinned memory).
struct host_ring {
  std::unique_ptr<command[]> slots;
  std::unique_ptr<ring_counters> counters = std::make_unique<ring_counters>();
  std::unique_ptr<producer_words> producers = std::make_unique<producer_words>();
  command_ring ring;
  explicit host_ring(unsigned log_depth, std::uint64_t timeout_ns = 0)
      : slots(new command[std::size_t{1} << log_depth]) {
    ring.slots = slots.get();
    ring.log_depth = log_depth;
    ring.counters = counters.get();
    ring.producers = producers.get();
    ring.timeout_ns = timeout_ns;
  }
};

/// The command producer `p` posts as its k-th: every field derived from (p, k), so the reader can
/// check it whole.
command make_command(int p, std::uint64_t k) {
  command c;
  c.dst = 0x1000'0000ull * static_cast<std::uint64_t>(p + 1) + k;
  c.src = k * 2654435761ull ^ static_cast<std::uint64_t>(p);
  c.bytes = k % 4097;
  c.signal = ~c.dst;
  c.value = k;
  c.aux = c.src + c.bytes;
  c.pe = p;
  c.op = static_cast<command_op>(1 + k % 6);
  c.signal_op = static_cast<std::uint8_t>(k & 1);
  c.atomic_op = static_cast<std::uint8_t>(k % 7);
  return c;
}

bool same_payload(command const& a, command const& b) {
  return a.dst == b.dst && a.src == b.src && a.bytes == b.bytes && a.signal == b.signal && a.value == b.value &&
         a.aux == b.aux && a.pe == b.pe && a.op == b.op && a.signal_op == b.signal_op && a.atomic_op == b.atomic_op &&
         a.flags == b.flags;
}

}  // namespace

TEST_CASE("proxy ring: several producers, a slow reader, a ring that wraps and fills", "[proxy][ring]") {
  constexpr int producers = 4;
  constexpr std::uint64_t per_producer = 5000;
  host_ring r(3);  // 8 slots: full most of the time
  std::vector<std::vector<std::uint64_t>> tickets(producers);
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      for (std::uint64_t k = 0; k < per_producer; ++k) {
        std::uint64_t t = 0;
        if (r.ring.post(make_command(p, k), t) != ring_status::ok) return;
        tickets[static_cast<std::size_t>(p)].push_back(t);
      }
    });
  }
  // The reader: slow now and then (every 97th command sleeps), so producers wait for space.
  std::vector<std::uint64_t> next_k(producers, 0);
  std::vector<std::pair<int, std::uint64_t>> read_order;  // (producer, k) by ticket
  std::uint64_t bad = 0;
  ring_reader reader(r.ring);
  auto const total = producers * per_producer;
  auto const give_up = std::chrono::steady_clock::now() + 60s;
  while (read_order.size() < total && std::chrono::steady_clock::now() < give_up) {
    command const* c = reader.peek();
    if (c == nullptr) {
      std::this_thread::yield();
      continue;
    }
    command const copy = *c;
    bool const known = copy.pe >= 0 && copy.pe < producers;
    if (known) {
      auto& k = next_k[static_cast<std::size_t>(copy.pe)];
      bad += !same_payload(copy, make_command(copy.pe, k));  // whole, and the producer's next in order
      read_order.emplace_back(copy.pe, k);
      ++k;
    } else {
      ++bad;
      read_order.emplace_back(-1, 0);
    }
    if (read_order.size() % 97 == 0) std::this_thread::sleep_for(20us);
    reader.pop();
    reader.publish_completed(reader.next_ticket());
  }
  for (auto& t : threads) t.join();
  REQUIRE(read_order.size() == total);
  CHECK(bad == 0);
  // Every ticket handed out once, and ticket i is what the reader read i-th.
  std::vector<int> owner(total, -1);
  for (int p = 0; p < producers; ++p) {
    auto const& ts = tickets[static_cast<std::size_t>(p)];
    REQUIRE(ts.size() == per_producer);
    for (std::size_t k = 0; k < ts.size(); ++k) {
      REQUIRE(ts[k] < total);
      CHECK(owner[ts[k]] == -1);
      owner[ts[k]] = p;
      CHECK(read_order[ts[k]] == std::make_pair(p, static_cast<std::uint64_t>(k)));
      if (k > 0) CHECK(ts[k] > ts[k - 1]);
    }
  }
  CHECK(r.producers->reserved == total);
  CHECK(r.producers->free_below <= total);
  CHECK(r.counters->consumed == total);
  CHECK(r.counters->completed == total);
}

TEST_CASE("proxy ring: a full ring blocks the producer and keeps every unread command", "[proxy][ring]") {
  host_ring r(2);  // 4 slots
  std::uint64_t t = 0;
  for (std::uint64_t k = 0; k < 4; ++k) {
    REQUIRE(r.ring.post(make_command(0, k), t) == ring_status::ok);
    CHECK(t == k);
  }
  auto blocked = std::async(std::launch::async, [&] {
    std::uint64_t ticket = 0;
    auto const s = r.ring.post(make_command(0, 4), ticket);
    return std::make_pair(s, ticket);
  });
  CHECK(blocked.wait_for(100ms) == std::future_status::timeout);  // no space: it waits
  for (std::uint64_t k = 0; k < 4; ++k) {                         // the four unread commands are intact in their slots
    CHECK(r.slots[k].seq == k + 1);
    CHECK(same_payload(r.slots[k], make_command(0, k)));
  }
  ring_reader reader(r.ring);
  REQUIRE(reader.peek() == &r.slots[0]);
  CHECK(blocked.wait_for(50ms) == std::future_status::timeout);  // peeking frees nothing
  reader.pop();                                                  // slot 0 is free
  REQUIRE(blocked.wait_for(5s) == std::future_status::ready);
  auto const [status, ticket] = blocked.get();
  CHECK(status == ring_status::ok);
  CHECK(ticket == 4);
  for (std::uint64_t k = 1; k <= 4; ++k) {
    command const* c = reader.peek();
    REQUIRE(c != nullptr);
    CHECK(same_payload(*c, make_command(0, k)));
    reader.pop();
  }
  CHECK(reader.peek() == nullptr);  // slot 1 holds ticket 1's command: an old lap, not ticket 5
}

TEST_CASE("proxy ring: completion waits end when the reader publishes", "[proxy][ring]") {
  host_ring r(4);
  std::uint64_t t0 = 0, t1 = 0;
  REQUIRE(r.ring.post(make_command(1, 0), t0) == ring_status::ok);
  REQUIRE(r.ring.post(make_command(1, 1), t1) == ring_status::ok);
  CHECK_FALSE(r.ring.is_complete(t0));
  auto waiter = std::async(std::launch::async, [&] { return r.ring.wait_complete(t1); });
  ring_reader reader(r.ring);
  REQUIRE(reader.peek() != nullptr);
  reader.pop();
  REQUIRE(reader.peek() != nullptr);
  reader.pop();
  reader.publish_completed(1);  // ticket 0 done, ticket 1 not yet
  CHECK(r.ring.is_complete(t0));
  CHECK_FALSE(r.ring.is_complete(t1));
  CHECK(waiter.wait_for(100ms) == std::future_status::timeout);
  reader.publish_completed(2);
  REQUIRE(waiter.wait_for(5s) == std::future_status::ready);
  CHECK(waiter.get() == ring_status::ok);
}

#if GPUCOMM_DEBUG
TEST_CASE("proxy ring: in debug builds a producer gives up on a ring nobody reads", "[proxy][ring]") {
  host_ring r(1, 20'000'000);  // 2 slots, 20 ms
  std::uint64_t t = 0;
  REQUIRE(r.ring.post(make_command(0, 0), t) == ring_status::ok);
  REQUIRE(r.ring.post(make_command(0, 1), t) == ring_status::ok);
  CHECK(r.ring.post(make_command(0, 2), t) == ring_status::timeout);
  CHECK(t == 2);
  CHECK(r.ring.wait_complete(0) == ring_status::timeout);
}
#endif

TEST_CASE("proxy completion window: completions in any order, a low-water mark in ticket order", "[proxy][ring]") {
  using gpucomm::proxy_queue::completion_window;
  std::mt19937_64 rng(20261124);
  completion_window w;
  constexpr std::uint64_t total = 20000;
  std::vector<std::uint64_t> unfinished;  // read, not completed
  std::vector<bool> done(total, false);
  std::uint64_t next = 0, bad = 0;
  std::uint64_t expect = 0;  // the reference: the first ticket not done (or not yet read)
  while (next < total || !unfinished.empty()) {
    // Read a few, then complete a random one of those in flight.
    for (int r = static_cast<int>(rng() % 4); r > 0 && next < total; --r) {
      w.read(next);
      unfinished.push_back(next++);
    }
    if (unfinished.empty()) continue;
    std::size_t const pick = rng() % unfinished.size();
    std::uint64_t const t = unfinished[pick];
    unfinished[pick] = unfinished.back();
    unfinished.pop_back();
    done[t] = true;
    while (expect < next && done[expect]) ++expect;
    bad += w.complete(t) != expect;
    bad += w.in_flight() != next - expect;
  }
  CHECK(bad == 0);
  CHECK(w.low_water() == total);
  CHECK(w.in_flight() == 0);
  CHECK_THROWS_AS(w.complete(3), std::logic_error);      // completed twice
  CHECK_THROWS_AS(w.complete(total), std::logic_error);  // never read
  CHECK_THROWS_AS(w.read(total + 1), std::logic_error);  // out of order
  w.read(total);
  CHECK(w.complete(total) == total + 1);
}

TEST_CASE("proxy thread: a process that may run on one CPU is warned, naming it", "[proxy][ring]") {
  cpu_set_t all;
  CPU_ZERO(&all);
  REQUIRE(sched_getaffinity(0, sizeof all, &all) == 0);
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  // On a thread of its own, so that this thread's CPU set stays as it was.
  std::string alone, wide;
  std::thread([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
    alone = gpucomm::detail::one_cpu_warning();
  }).join();
  CHECK(alone.find("may run on CPU " + std::to_string(first) + " only") != std::string::npos);
  CHECK(alone.find("--bind-to none") != std::string::npos);
  if (CPU_COUNT(&all) >= 2) {
    std::thread([&] { wide = gpucomm::detail::one_cpu_warning(); }).join();
    CHECK(wide.empty());
  } else {
    WARN("this process may run on one CPU only: the no-warning half is not checked");
  }
}
