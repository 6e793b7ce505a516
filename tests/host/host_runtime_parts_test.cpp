// The small parts the host runtime uses in place of heavier standard headers: gpucomm::callback
// (std::function), detail::fifo (std::deque) and detail::os_thread (std::thread). Each is checked
// against what the standard type it stands for does.
#include <gpucomm/callback.hpp>
#include <gpucomm/detail/fifo.hpp>
#include <gpucomm/host/detail/os_thread.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

int twice(int x) { return 2 * x; }

}  // namespace

TEST_CASE("callback: empty until given a callable, and says so when called empty", "[host]") {
  gpucomm::callback<int(int)> c;
  CHECK_FALSE(c);
  CHECK(c == nullptr);
  CHECK_THROWS_AS(c(1), gpucomm::error);
  gpucomm::callback<int(int)> const null_pointer = static_cast<int (*)(int)>(nullptr);
  CHECK_FALSE(null_pointer);
  c = twice;
  REQUIRE(c);
  CHECK(c(21) == 42);
  c = nullptr;
  CHECK_FALSE(c);
}

TEST_CASE("callback: copies own their callable, as std::function's do", "[host]") {
  int calls = 0;
  gpucomm::callback<int()> counter = [n = 0, &calls]() mutable {
    ++calls;
    return ++n;
  };
  CHECK(counter() == 1);
  CHECK(counter() == 2);
  gpucomm::callback<int()> copy = counter;  // a copy of the lambda as it is now (n == 2)
  CHECK(copy() == 3);
  CHECK(copy() == 4);
  CHECK(counter() == 3);  // the original's state did not move with the copy
  std::function<int()> standard = [n = 0]() mutable { return ++n; };
  standard();
  std::function<int()> standard_copy = standard;
  CHECK(standard_copy() == 2);
  CHECK(standard() == 2);  // the same behaviour
  CHECK(calls == 5);
}

TEST_CASE("callback: takes results convertible to its own, arguments by reference, and std::function", "[host]") {
  gpucomm::callback<long(short)> widen = [](int x) { return x + 1; };
  CHECK(widen(short{41}) == 42L);
  std::vector<int> seen;
  gpucomm::callback<void(std::vector<int>&, int)> push = [](std::vector<int>& v, int x) { v.push_back(x); };
  push(seen, 7);
  push(seen, 8);
  CHECK(seen == std::vector<int>{7, 8});
  std::function<bool(int, int)> const filter = [](int i, int j) { return (i + j) % 2 == 0; };
  gpucomm::callback<bool(int, int)> const wrapped = filter;
  CHECK(wrapped(1, 3));
  CHECK_FALSE(wrapped(1, 2));
  static_assert(!std::is_constructible_v<gpucomm::callback<int(int)>, int>, "an int is no callable");
  static_assert(!std::is_constructible_v<gpucomm::callback<int(int)>, std::string (*)(int)>,
                "a result that does not convert is refused");
}

namespace {

// A callable that counts its live copies, and whose copy throws once `fail_copies` is set.
struct counted {
  int* live;
  bool* fail_copies;
  int value;
  counted(int* l, bool* f, int v) : live(l), fail_copies(f), value(v) { ++*live; }
  counted(counted const& o) : live(o.live), fail_copies(o.fail_copies), value(o.value) {
    if (*fail_copies) throw std::runtime_error("copy refused");
    ++*live;
  }
  counted(counted&& o) noexcept : live(o.live), fail_copies(o.fail_copies), value(o.value) { ++*live; }
  ~counted() { --*live; }
  int operator()() const { return value; }
};

}  // namespace

TEST_CASE("callback: owns each callable once through copies, moves, swaps and failed copies", "[host]") {
  int live = 0;
  bool fail = false;
  {
    gpucomm::callback<int()> a = counted(&live, &fail, 1);
    CHECK(live == 1);
    gpucomm::callback<int()> b = a;
    CHECK(live == 2);
    gpucomm::callback<int()> c = std::move(a);
    CHECK(live == 2);
    CHECK_FALSE(a);  // NOLINT(bugprone-use-after-move): a moved-from callback is empty
    CHECK(c() == 1);
    b = counted(&live, &fail, 2);  // the old callable goes, the new one stays
    CHECK(live == 2);
    CHECK(b() == 2);
    b = b;             // NOLINT(clang-diagnostic-self-assign-overloaded)
    c = std::move(c);  // NOLINT(clang-diagnostic-self-move)
    CHECK(live == 2);
    CHECK(b() == 2);
    CHECK(c() == 1);
    b.swap(c);
    CHECK(b() == 1);
    CHECK(c() == 2);
    fail = true;  // a copy that throws leaves the target as it was, and leaks nothing
    CHECK_THROWS_AS(b = c, std::runtime_error);
    CHECK(b() == 1);
    CHECK(live == 2);
    fail = false;
    c = nullptr;
    CHECK(live == 1);
  }
  CHECK(live == 0);
}
TEST_CASE("fifo: the same sequence as std::deque through pushes, pops and compaction", "[host]") {
  gpucomm::detail::fifo<std::size_t> q;
  std::deque<std::size_t> reference;
  std::mt19937 rng(7);
  std::size_t next = 0;
  for (int step = 0; step < 20000; ++step) {
    // Phases of 1000 steps that grow the queue and phases that drain it, so that popped slots are
    // reclaimed (and the queue runs empty) many times.
    bool const draining = (step / 1000) % 2 == 1;
    switch (draining ? 3 + rng() % 2 : rng() % 5) {
      case 0:
      case 1:
        q.push_back(next);
        reference.push_back(next++);
        break;
      case 2: {
        std::vector<std::size_t> batch(rng() % 9);
        for (auto& x : batch) x = next++;
        q.append(batch.begin(), batch.end());
        reference.insert(reference.end(), batch.begin(), batch.end());
        break;
      }
      case 3:
        if (!reference.empty()) {
          REQUIRE(q.front() == reference.front());
          q.pop_front();
          reference.pop_front();
        }
        break;
      default:
        if (!reference.empty() && (draining || rng() % 4 == 0)) {
          REQUIRE(q.back() == reference.back());
          q.pop_back();
          reference.pop_back();
        }
    }
    REQUIRE(q.size() == reference.size());
    REQUIRE(q.empty() == reference.empty());
    if (step % 997 == 0) {
      REQUIRE(std::vector<std::size_t>(q.begin(), q.end()) ==
              std::vector<std::size_t>(reference.begin(), reference.end()));
      for (std::size_t i = 0; i < reference.size(); ++i) REQUIRE(q[i] == reference[i]);
    }
  }
  q.clear();
  CHECK(q.empty());
  CHECK(q.begin() == q.end());
}

TEST_CASE("os_thread: runs its callable once, joins, moves, and sleeps at least as long as asked", "[host]") {
  std::atomic<int> runs{0};
  {
    gpucomm::detail::os_thread t([&] { runs.fetch_add(1); });
    CHECK(t.joinable());
    gpucomm::detail::os_thread moved = std::move(t);
    CHECK_FALSE(t.joinable());
    CHECK(moved.joinable());
    moved.join();
    CHECK_FALSE(moved.joinable());
    CHECK(runs.load() == 1);
  }
  {
    gpucomm::detail::os_thread joined_by_destructor([&] { runs.fetch_add(1); });
  }
  CHECK(runs.load() == 2);
  std::vector<gpucomm::detail::os_thread> many;
  for (int i = 0; i < 8; ++i) many.emplace_back([&] { runs.fetch_add(1); });
  for (auto& t : many) t.join();
  CHECK(runs.load() == 10);

  gpucomm::detail::os_thread pinned([] {});
  CHECK(pinned.pin_to(1 << 20) != 0);  // no such CPU: the error comes back, nothing throws

  auto const start = std::chrono::steady_clock::now();
  gpucomm::detail::sleep_us(20000);
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::microseconds(20000));
  gpucomm::detail::sleep_us(0);
}
