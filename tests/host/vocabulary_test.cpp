// Host-testable vocabulary: comparisons, sym_ptr arithmetic, group traits, errors, agreement.
#include <gpucomm/error.hpp>
#include <gpucomm/host/bootstrap.hpp>
#include <gpucomm/ops.hpp>
#include <gpucomm/sym_ptr.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

using gpucomm::cmp;

TEST_CASE("compare implements all six comparisons", "[ops]") {
  std::uint64_t const values[] = {0, 1, 2, std::numeric_limits<std::uint64_t>::max()};
  for (auto a : values) {
    for (auto b : values) {
      CHECK(gpucomm::compare(cmp::eq, a, b) == (a == b));
      CHECK(gpucomm::compare(cmp::ne, a, b) == (a != b));
      CHECK(gpucomm::compare(cmp::lt, a, b) == (a < b));
      CHECK(gpucomm::compare(cmp::le, a, b) == (a <= b));
      CHECK(gpucomm::compare(cmp::gt, a, b) == (a > b));
      CHECK(gpucomm::compare(cmp::ge, a, b) == (a >= b));
    }
  }
}

TEST_CASE("sym_ptr behaves like a pointer", "[sym_ptr]") {
  int data[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  gpucomm::sym_ptr<int> p(data);
  CHECK(p.get() == data);
  CHECK(*(p + 3) == 3);
  CHECK((p + 5) - p == 5);
  CHECK(p[7] == 7);
  auto q = p;
  ++q;
  q += 2;
  CHECK(*q == 3);
  CHECK(q > p);
  CHECK(q != p);
  gpucomm::sym_ptr<int const> c = q;
  CHECK(c.get() == data + 3);
  CHECK(gpucomm::sym_ptr_cast<char>(p).get() == reinterpret_cast<char*>(data));
  CHECK(!gpucomm::sym_ptr<int>{});
  static_assert(std::is_trivially_copyable_v<gpucomm::sym_ptr<double>>);
}

TEST_CASE("gpucomm::error names the call, the PE and the remedy", "[error]") {
  gpucomm::error const e("world::alloc", 3, "heap exhausted", "free something");
  CHECK(std::string(e.what()) == "gpucomm: world::alloc on PE 3: heap exhausted. free something");
  CHECK(e.pe() == 3);
  CHECK(e.call() == "world::alloc");
  gpucomm::error const f("world", -1, "no GPU");
  CHECK(std::string(f.what()) == "gpucomm: world: no GPU");
}

namespace {
// A bootstrap over in-memory "ranks": each allgather returns the values every simulated rank
// registered, so agreement logic can be checked for any rank without processes.
struct table_bootstrap {
  int rank_;
  std::vector<std::vector<unsigned char>>* table;  // one entry per rank
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(table->size()); }
  void allgather(void const* send, void* recv, std::size_t bytes) {
    (*table)[static_cast<std::size_t>(rank_)].assign(static_cast<unsigned char const*>(send),
                                                     static_cast<unsigned char const*>(send) + bytes);
    for (std::size_t r = 0; r < table->size(); ++r) {
      auto const& src = (*table)[r].empty() ? (*table)[static_cast<std::size_t>(rank_)] : (*table)[r];
      std::memcpy(static_cast<unsigned char*>(recv) + r * bytes, src.data(), bytes);
    }
  }
  void barrier() {}
};
}  // namespace

TEST_CASE("agree throws on every rank when values differ, naming the first odd PE", "[bootstrap]") {
  std::vector<std::vector<unsigned char>> table(3);
  std::size_t const v0 = 4096, v2 = 8192;
  table[0].assign(reinterpret_cast<unsigned char const*>(&v0), reinterpret_cast<unsigned char const*>(&v0) + 8);
  table[2].assign(reinterpret_cast<unsigned char const*>(&v2), reinterpret_cast<unsigned char const*>(&v2) + 8);
  gpucomm::detail::any_bootstrap boot(table_bootstrap{1, &table});
  CHECK(boot.rank() == 1);
  CHECK(boot.size() == 3);
  try {
    gpucomm::detail::agree(boot, std::size_t{4096}, "world::allocate", "the requested size", "same sizes");
    FAIL("agree accepted differing values");
  } catch (gpucomm::error const& e) {
    CHECK(e.pe() == 2);
    CHECK_THAT(e.what(), Catch::Contains("PE 0 passed 4096, PE 2 passed 8192"));
  }
  std::size_t const v = 4096;
  table[2].assign(reinterpret_cast<unsigned char const*>(&v), reinterpret_cast<unsigned char const*>(&v) + 8);
  CHECK_NOTHROW(gpucomm::detail::agree(boot, std::size_t{4096}, "c", "w", "h"));
}

TEST_CASE("callback_bootstrap forwards to the user's collectives", "[bootstrap]") {
  int barriers = 0;
  gpucomm::callback_bootstrap cb{0, 1, [](void const* s, void* r, std::size_t n) { std::memcpy(r, s, n); },
                                 [&] { ++barriers; }};
  gpucomm::detail::any_bootstrap boot(cb);
  CHECK(boot.allgather_value(42)[0] == 42);
  boot.barrier();
  CHECK(barriers == 1);
  static_assert(gpucomm::bootstrap<gpucomm::callback_bootstrap>);
}

TEST_CASE("checked_on_every_rank throws on every rank when one rank's checks fail", "[bootstrap]") {
  // Rank 2 failed its checks (its verdict is in the table); rank 1's pass, and rank 1 throws too.
  std::vector<std::vector<unsigned char>> table(3);
  struct verdict {
    char ok;
    char text[255];
  } failed{};
  std::strncpy(failed.text, "GPUCOMM_HEAP_BYTES=-1 is not a decimal count", sizeof(failed.text) - 1);
  table[2].assign(reinterpret_cast<unsigned char const*>(&failed),
                  reinterpret_cast<unsigned char const*>(&failed) + sizeof(failed));
  gpucomm::detail::any_bootstrap boot(table_bootstrap{1, &table});
  bool ran = false;
  try {
    gpucomm::detail::checked_on_every_rank(boot, "world", [&] { ran = true; });
    FAIL("a rank's failure was not reported");
  } catch (gpucomm::error const& e) {
    CHECK(e.pe() == 2);
    CHECK(std::string(e.what()) == "gpucomm: world on PE 2: GPUCOMM_HEAP_BYTES=-1 is not a decimal count");
  }
  CHECK(ran);
  // This rank's own failure: its text travels without the "gpucomm: call on PE p: " prefix.
  std::vector<std::vector<unsigned char>> clean(2);
  gpucomm::detail::any_bootstrap two(table_bootstrap{0, &clean});
  try {
    gpucomm::detail::checked_on_every_rank(two, "world", [] { throw gpucomm::error("world", -1, "bad", "fix it"); });
    FAIL("the rank's own failure was swallowed");
  } catch (gpucomm::error const& e) {
    CHECK(std::string(e.what()) == "gpucomm: world on PE 0: bad. fix it");
  }
  // One rank alone: the error passes through as thrown.
  std::vector<std::vector<unsigned char>> alone(1);
  gpucomm::detail::any_bootstrap one(table_bootstrap{0, &alone});
  try {
    gpucomm::detail::checked_on_every_rank(one, "world", [] { throw gpucomm::error("inner", 3, "bad"); });
    FAIL("the error was swallowed");
  } catch (gpucomm::error const& e) {
    CHECK(std::string(e.what()) == "gpucomm: inner on PE 3: bad");
  }
}
