// ProxyQueue's teardown barrier (transport/proxy_queue/detail/teardown.hpp) and the lost peer that
// proxy_failures keeps for it: the barrier is held while every peer answers, skipped once a
// command found a peer gone (even after synchronize took the failures), and a barrier that throws
// never leaves the call.
#include <gpucomm/transport/proxy_queue/detail/teardown.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>

using gpucomm::detail::proxy_failure;
using gpucomm::detail::proxy_failures;
using gpucomm::detail::teardown_barrier;
using gpucomm::proxy_queue::command_op;

namespace {

proxy_failure failure_to(int peer, std::string what, bool lost) {
  proxy_failure f;
  f.pe = 0;
  f.peer = peer;
  f.op = command_op::put;
  f.ticket = 7;
  f.bytes = 64;
  f.what = std::move(what);
  f.peer_lost = lost;
  return f;
}

}  // namespace

TEST_CASE("proxy teardown: the barrier is held while no peer was lost", "[proxy][teardown]") {
  proxy_failures failures;
  int calls = 0;
  CHECK(teardown_barrier([&] { ++calls; }, failures, 0));
  CHECK(calls == 1);
  // A command refused for bad input says nothing about the peer: the barrier is still held.
  failures.record(failure_to(1, "engine_refused: its source is not in this PE's symmetric heap", false));
  CHECK_FALSE(failures.lost_peer().has_value());
  CHECK(teardown_barrier([&] { ++calls; }, failures, 0));
  CHECK(calls == 2);
}

TEST_CASE("proxy teardown: no barrier once a command found a peer gone", "[proxy][teardown]") {
  proxy_failures failures;
  failures.record(failure_to(1, "engine_refused: bad address", false));
  failures.record(failure_to(3, "engine_peer_failed: rank 3: Connection reset by remote peer", true));
  failures.record(failure_to(2, "engine_timed_out: no completion within 20000 ms", true));
  // The first lost peer, named with why; kept after synchronize took the failures.
  std::uint64_t count = 0;
  auto const first = failures.take(count);
  REQUIRE(first.has_value());
  CHECK(first->peer == 1);
  CHECK(count == 3);
  REQUIRE(failures.lost_peer().has_value());
  CHECK(*failures.lost_peer() == "PE 3 (engine_peer_failed: rank 3: Connection reset by remote peer)");
  int calls = 0;
  CHECK_FALSE(teardown_barrier([&] { ++calls; }, failures, 0));
  CHECK(calls == 0);
}

TEST_CASE("proxy teardown: a barrier that throws stays inside", "[proxy][teardown]") {
  proxy_failures failures;
  CHECK_FALSE(
      teardown_barrier([] { throw std::runtime_error("MPI_Barrier failed: MPI_ERR_PROC_FAILED"); }, failures, 2));
  CHECK_FALSE(teardown_barrier([] { throw 42; }, failures, 2));
  static_assert(noexcept(teardown_barrier([] {}, failures, 0)));
}
