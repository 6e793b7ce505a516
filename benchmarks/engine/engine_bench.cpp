// Smoke benchmark of ProxyQueue's engine backend over the UCX engine: commands posted to a command
// ring in host memory, drained by a proxy thread, carried by UCX (tests/engine/engine_harness.hpp
// sets it up as the tests do). Run by benchmarks/engine/smoke.py under `mpirun -np 2`, next to
// ucx_perftest on the same path; rank 0 prints one JSON object per figure:
//   put_bw          rank 0 posts `count` puts of `size` bytes to rank 1 at once and waits for the
//                   last completion (remote: the data is at rank 1), sleeping as it waits (a GPU
//                   would take no core from the proxy threads); MB/s (10^6 bytes)
//   engine_put_bw   the same puts straight to the engine (no ring, no proxy thread)
//   put_signal_lat  ping-pong of 8-byte put_signals, each rank waiting for the other's signal
//                   before it answers; half the round trip, microseconds (median and average)
//   ring_rtt        a nop posted to the ring until its completion is seen; microseconds
// The heap is host memory, or with GPUCOMM_TEST_ENGINE_HEAP=cuda GPU 0's memory (a cuda_memory_agent
// writes what arrives; puts by RMA need a UCX built with CUDA): then only put_bw and engine_put_bw
// run, each rank checking the last put's bytes against the pattern it was sent.

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include <gpucomm/host/mpi_bootstrap.hpp>

#include "engine_harness.hpp"

using namespace gpucomm_test;
using clock_type = std::chrono::steady_clock;

namespace {

double us(clock_type::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

/// Waits for every command posted so far sleeping, as a GPU waits without taking a CPU core from
/// the proxy threads (this machine has fewer cores than the ranks have threads).
bool quiet_sleeping(rank_env& env, std::uint64_t last) {
  auto const until = clock_type::now() + std::chrono::seconds(60);
  while (!env.is_complete(last)) {
    if (clock_type::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  return true;
}

/// A barrier that sleeps while it waits (rank 1 idles while rank 0 measures).
void barrier_sleeping() {
  MPI_Request r;
  MPI_Ibarrier(MPI_COMM_WORLD, &r);
  for (int done = 0; !done; std::this_thread::sleep_for(std::chrono::milliseconds(1)))
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
}

void emit(char const* metric, std::size_t size, long count, double value, char const* unit, double median = -1) {
  std::printf("{\"metric\": \"%s\", \"size\": %zu, \"iterations\": %ld, \"value\": %.3f, \"unit\": \"%s\"", metric,
              size, count, value, unit);
  if (median >= 0) std::printf(", \"median\": %.3f", median);
  std::printf("}\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  std::optional<gpucomm::mpi_bootstrap> mpi(std::in_place, MPI_COMM_WORLD);
  gpucomm::callback_bootstrap boot{mpi->rank(), mpi->size(),
                                   [&](void const* s, void* r, std::size_t n) { mpi->allgather(s, r, n); },
                                   [&] { mpi->barrier(); }};
  char const* heap_kind = std::getenv("GPUCOMM_TEST_ENGINE_HEAP");
  bool const gpu_heap = heap_kind != nullptr && std::string_view(heap_kind) == "cuda";
  {
    rank_env::options o;
    o.heap_bytes = 80u << 20;
    if (gpu_heap) o.gpu = 0;
    rank_env env(boot, o);
    int const me = env.rank();
    std::size_t const data_at = 1u << 20, src_at = 40u << 20;
    env.fill_heap(src_at, 42, 32u << 20);
    boot.barrier();
    // Rank 1 poisons the puts' destinations before a case (a pattern not the source's; both ranks
    // then meet, so no put lands before it) and checks the bytes of its last put after it.
    auto const poison = [&](std::size_t size) {
      if (me == 1) env.fill_heap(data_at, 7, 8 * size);
      boot.barrier();
    };
    auto const check_last = [&](std::size_t size, long count) {
      if (me != 1) return;
      auto const got = env.read_heap(data_at + static_cast<std::size_t>((count - 1) % 8) * size, size);
      if (std::size_t const bad = first_mismatch(got.data(), 42, size); bad != size) {
        std::fprintf(stderr, "rank 1: %zu-byte puts: byte %zu differs from the source\n", size, bad);
        rc = 1;
      }
    };

    struct bw_case {
      std::size_t size;
      long count;
    };
    for (bw_case const c : {bw_case{65536, 2000}, bw_case{1u << 20, 200}, bw_case{4u << 20, 50}}) {
      poison(c.size);
      auto const put = [&](long i) {
        return rank_env::make(command_op::put, 1, env.at(data_at + (i % 8) * c.size), env.at(src_at), c.size);
      };
      if (me == 0) {
        std::uint64_t last = 0;
        for (long i = 0; i < 10; ++i) last = env.post(put(i));
        if (!quiet_sleeping(env, last)) rc = 1;
        auto const t0 = clock_type::now();
        for (long i = 0; i < c.count; ++i) last = env.post(put(i));
        if (!quiet_sleeping(env, last)) rc = 1;
        double const s = std::chrono::duration<double>(clock_type::now() - t0).count();
        emit("put_bw", c.size, c.count, static_cast<double>(c.size) * c.count / s / 1e6, "MB/s");
      }
      barrier_sleeping();
      check_last(c.size, c.count);
    }
    // Straight to the engine: stop the proxy thread, drive the engine from this thread.
    std::vector<std::uint64_t> peer_base(2);
    std::uint64_t const mine = env.base();
    boot.allgather(&mine, peer_base.data(), sizeof mine);
    env.stop();
    for (bw_case const c : {bw_case{65536, 2000}, bw_case{1u << 20, 200}, bw_case{4u << 20, 50}}) {
      poison(c.size);
      if (me == 0) {
        std::vector<gpucomm::engine::completion> done;
        auto const run = [&](long n) {
          for (long i = 0; i < n; ++i) {
            if (!env.engine().put(1, env.heap() + src_at, peer_base[1] + data_at + (i % 8) * c.size, c.size, i).ok())
              rc = 1;
          }
          long got = 0;
          while (got < n) {
            done.clear();
            env.engine().progress(done);
            got += static_cast<long>(done.size());
          }
        };
        run(10);
        auto const t0 = clock_type::now();
        run(c.count);
        double const s = std::chrono::duration<double>(clock_type::now() - t0).count();
        emit("engine_put_bw", c.size, c.count, static_cast<double>(c.size) * c.count / s / 1e6, "MB/s");
        barrier_sleeping();
        boot.barrier();
      } else {
        // Rank 1 serves (over TCP, puts land inside its progress) until rank 0 is done.
        std::vector<gpucomm::engine::completion> done;
        MPI_Request r;
        MPI_Ibarrier(MPI_COMM_WORLD, &r);
        int finished = 0;
        while (!finished) {
          env.engine().progress(done);
          MPI_Test(&r, &finished, MPI_STATUS_IGNORE);
        }
        boot.barrier();
        check_last(c.size, c.count);
      }
    }
  }
  if (gpu_heap) {  // the ping-pong waits on heap words from the host: host memory only
    mpi.reset();
    MPI_Finalize();
    return rc;
  }
  // The ping-pong and the ring round trip with a fresh proxy thread.
  {
    rank_env::options o;
    o.heap_bytes = 1u << 20;
    rank_env env(boot, o);
    int const me = env.rank(), other = 1 - me;
    auto* const word = reinterpret_cast<std::uint64_t*>(env.heap());
    std::atomic_ref<std::uint64_t>(*word).store(0);
    boot.barrier();
    long const iters = 2000, warm = 100;
    std::vector<double> half_rtt;
    auto const send = [&](std::uint64_t i) {
      command c = rank_env::make(command_op::put_signal, other, env.at(64), env.at(128), 8);
      c.signal = env.at(0);
      c.signal_op = static_cast<std::uint8_t>(gpucomm::signal_op::set);
      c.value = i;
      env.post(c);
    };
    for (long i = 1; i <= iters + warm; ++i) {
      auto const t0 = clock_type::now();
      auto const got = [i](std::uint64_t v) { return v == static_cast<std::uint64_t>(i); };
      if (me == 0) {
        send(static_cast<std::uint64_t>(i));
        if (!wait_word(word, got)) rc = 1;
      } else {
        if (!wait_word(word, got)) rc = 1;
        send(static_cast<std::uint64_t>(i));
      }
      if (i > warm) half_rtt.push_back(us(clock_type::now() - t0) / 2);
    }
    if (me == 0) {
      std::vector<double> s = half_rtt;
      std::sort(s.begin(), s.end());
      double sum = 0;
      for (double v : s) sum += v;
      emit("put_signal_lat", 8, iters, sum / static_cast<double>(s.size()), "us", s[s.size() / 2]);
      std::vector<double> ring;
      for (long i = 0; i < 10000; ++i) {
        auto const t0 = clock_type::now();
        if (!env.wait(env.post(rank_env::make(command_op::nop, 0, 0, 0, 0)))) rc = 1;
        ring.push_back(us(clock_type::now() - t0));
      }
      std::sort(ring.begin(), ring.end());
      sum = 0;
      for (double v : ring) sum += v;
      emit("ring_rtt", 0, 10000, sum / static_cast<double>(ring.size()), "us", ring[ring.size() / 2]);
    }
    if (!env.quiet()) rc = 1;
    boot.barrier();
  }
  mpi.reset();
  MPI_Finalize();
  return rc;
}
