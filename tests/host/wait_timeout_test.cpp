// The wait timeout rule (detail/bounded_wait.cuh): debug builds always bound a wait, release builds
// only when the program asked; deadlines follow the rule of the build they are compiled in.
#include <gpucomm/detail/bounded_wait.cuh>
#include <gpucomm/host/detail/world_env.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <cstdint>
#include <thread>

namespace d = gpucomm::detail;

TEST_CASE("wait timeout words: debug builds always bound, release builds only when asked") {
  std::uint64_t const ns = 5'000'000'000ull;
  std::uint64_t const asked = d::wait_timeout_word(ns, true);
  std::uint64_t const default_bound = d::wait_timeout_word(ns, false);
  CHECK(asked != default_bound);
  CHECK(d::wait_bound_ns(asked, true) == ns);
  CHECK(d::wait_bound_ns(asked, false) == ns);
  CHECK(d::wait_bound_ns(default_bound, true) == ns);
  CHECK(d::wait_bound_ns(default_bound, false) == 0);
  CHECK(d::wait_bound_ns(d::wait_timeout_word(0, false), true) == 0);
  CHECK(d::wait_bound_ns(d::wait_timeout_word(0, true), false) == 0);
  // A plain count of nanoseconds (the queues' default before a world sets one) is a debug-only bound.
  CHECK(d::wait_bound_ns(20'000'000'000ull, true) == 20'000'000'000ull);
  CHECK(d::wait_bound_ns(20'000'000'000ull, false) == 0);
}

TEST_CASE("a deadline expires after its bound in this build, and never without one") {
  d::deadline const none(d::wait_timeout_word(0, true));
  d::deadline const asked(d::wait_timeout_word(1'000'000, true));  // 1 ms, asked for: every build
  d::deadline const debug_only(d::wait_timeout_word(1'000'000, false));
  CHECK_FALSE(asked.expired());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK_FALSE(none.expired());
  CHECK(asked.expired());
  CHECK(debug_only.expired() == (GPUCOMM_DEBUG != 0));
}

TEST_CASE("the world encodes its wait timeout: asked for by the option or the variable, else a debug default") {
  ::unsetenv("GPUCOMM_WAIT_TIMEOUT_MS");
  gpucomm::world_options o;
  std::uint64_t const unset = d::wait_timeout_word_from(o);
  CHECK(d::wait_bound_ns(unset, true) == 20'000'000'000ull);
  CHECK(d::wait_bound_ns(unset, false) == 0);
  o.wait_timeout = std::chrono::milliseconds(250);
  std::uint64_t const option = d::wait_timeout_word_from(o);
  CHECK(d::wait_bound_ns(option, true) == 250'000'000ull);
  CHECK(d::wait_bound_ns(option, false) == 250'000'000ull);
  o.wait_timeout = std::chrono::milliseconds(0);
  ::setenv("GPUCOMM_WAIT_TIMEOUT_MS", "1500", 1);
  std::uint64_t const variable = d::wait_timeout_word_from(o);
  ::unsetenv("GPUCOMM_WAIT_TIMEOUT_MS");
  CHECK(d::wait_bound_ns(variable, false) == 1'500'000'000ull);
  o.wait_timeout = std::chrono::milliseconds(-1);
  CHECK_THROWS_AS(d::wait_timeout_word_from(o), gpucomm::error);
}
