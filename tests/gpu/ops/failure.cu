// The op suite (every transport under test): failures beyond the NIC (issue #19). A PE whose
// kernel exits early, a PE whose kernel traps, and (IBGDAPost) an error completion from a bad key.
// The other PEs must not hang: in debug builds (the test binaries are) a wait gives up after the
// world's wait timeout (1 s here), prints the PE, the operation and the address it waited on, and
// traps; world::synchronize() then throws on every process that saw a failure.
//
// A kernel's fault loses the CUDA context of its GPU for the rest of the process, and under MPS
// for every process sharing that GPU (the MPS server then takes no new client until they have all
// exited). So every case here is hidden ([.failure]) and runs alone in fresh processes:
// scripts/lib/one-per-process.sh, from scripts/gpu-round.sh, in every layout of the round: one
// process with one or more PEs per GPU, and one process per PE (sharing GPUs under MPS). The world
// of a case is never destroyed: nothing can be freed in a lost context, and the process ends right
// after.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <regex>
#include <string>
#include <vector>

#include "../ibgda/bad_key.cuh"
#include "common.cuh"

using namespace gpucomm::test::ops;

namespace {

enum class role : int { idle, waits_for_signal, waits_in_barrier, traps, puts_with_bad_key };

struct failure_args {
  comm_t c;
  role what;
  sym_ptr<signal_t> sig;  // one word per PE: the signal PE's waits_for_signal waits for
  sym_ptr<std::uint64_t> data;
  int target;  // puts_with_bad_key: the PE it writes to (and signals)
};

__global__ void failure_kernel(failure_args a) {
  auto const block = cg::this_thread_block();
  switch (a.what) {
    case role::idle:  // the PE that exits early: it never signals nor enters the barrier
      return;
    case role::waits_for_signal:
      if (threadIdx.x == 0) a.c.wait_until(a.sig, gpucomm::cmp::ge, 1);
      return;
    case role::waits_in_barrier:
      a.c.barrier(block);
      return;
    case role::traps:
      __trap();
    case role::puts_with_bad_key:
      if constexpr (gpucomm::test::has_key_table) {
        if (threadIdx.x == 0) {
          a.c.put_signal(gpucomm::this_thread(), a.data, a.data.get() + 1, 1, a.sig, 1, gpucomm::signal_op::set,
                         a.target);
          if (a.target == a.c.my_pe()) a.c.wait_until(a.sig, gpucomm::cmp::ge, 1);
        }
      }
      return;
  }
}

/// What one process saw.
struct outcome {
  std::string error;   ///< what synchronize() threw here, or "(no error)"
  std::string output;  ///< what the kernels printed (device printf reaches standard output when the host synchronises)
};

/// The case's world: the test world's set-up with a wait timeout of 1 s.
std::unique_ptr<gpucomm::world> case_world() {
  auto options = gpucomm::test::test_world_options();
  options.wait_timeout = std::chrono::milliseconds(1000);
  return gpucomm::test::make_world(std::move(options));
}

/// Launches failure_kernel on every local PE with role_of(pe), then synchronize() with standard
/// output going to a temporary file; the output is echoed to the log as well. `adjust(pe, state)`
/// may change a PE's device state first.
using state_t = transport_under_test::device_state;

outcome run_case(gpucomm::world& w, std::vector<role> const& role_of, gpucomm::sym_array<signal_t> const& sig,
                 gpucomm::sym_array<std::uint64_t> const& data, int target,
                 std::function<void(int, state_t&)> const& adjust = {}) {
  for_each_local_pe(w, [&](int pe) {
    auto state = w.comm<transport_under_test>(pe).state();
    if (adjust) adjust(pe, state);
    failure_args const a{comm_t(pe, w.npes(), w.team_states(pe), state), role_of[static_cast<std::size_t>(pe)],
                         // a PE's waits watch its own word; the bad-key put signals the target's
                         sig.ptr(pe) + (role_of[static_cast<std::size_t>(pe)] == role::puts_with_bad_key ? target : pe),
                         data.ptr(pe), target};
    failure_kernel<<<1, 64, 0, w.stream(pe)>>>(a);
    GPUCOMM_TEST_CUDA(cudaGetLastError());
  });
  outcome out;
  std::fflush(stdout);
  std::FILE* file = std::tmpfile();
  REQUIRE(file != nullptr);
  int const saved = dup(fileno(stdout));
  REQUIRE(saved >= 0);
  REQUIRE(dup2(fileno(file), fileno(stdout)) >= 0);
  out.error = gpucomm::test::error_of([&] { w.synchronize(); });
  for (int pe : w.local_pes()) {  // whatever failed, every device's printf buffer is written out
    cudaSetDevice(w.device(pe));
    cudaDeviceSynchronize();
  }
  std::fflush(stdout);
  dup2(saved, fileno(stdout));
  close(saved);
  std::rewind(file);
  for (int ch; (ch = std::fgetc(file)) != EOF;) out.output += static_cast<char>(ch);
  std::fclose(file);
  std::printf("%s", out.output.c_str());
  std::printf("synchronize: %s\n", out.error.c_str());
  return out;
}

/// A wait's report, parsed (gpucomm/detail/spin.cuh prints it).
struct report {
  int pe = -1;
  std::string op;
  unsigned long long waited_ms = 0, address = 0, value = 0, held = 0;
  int writer = -1;
};

std::vector<report> reports_in(std::string const& output) {
  static std::regex const line(
      R"(gpucomm: PE (\d+): ([a-z_]+): still waiting after (\d+) ms for the word at (0x[0-9a-fA-F]+)(, written by PE (\d+),)? to become >= (\d+) \(it holds (\d+)\))");
  std::vector<report> out;
  for (std::sregex_iterator m(output.begin(), output.end(), line), end; m != end; ++m) {
    report r;
    r.pe = std::stoi((*m)[1]);
    r.op = (*m)[2];
    r.waited_ms = std::stoull((*m)[3]);
    r.address = std::stoull((*m)[4], nullptr, 16);
    if ((*m)[6].matched) r.writer = std::stoi((*m)[6]);
    r.value = std::stoull((*m)[7]);
    r.held = std::stoull((*m)[8]);
    out.push_back(r);
  }
  return out;
}

auto address_of(void const* p) { return static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(p)); }

/// Checks every report against what its PE waited for: a waits_for_signal PE on its signal word
/// (>= 1, holding 0), a waits_in_barrier PE on the world's arrival flag of a PE in `absent`
/// (epoch 1 of a new world, holding 0); after at least the timeout. Returns how many there were.
std::size_t check_reports(gpucomm::world& w, outcome const& o, std::vector<role> const& role_of,
                          gpucomm::sym_array<signal_t> const& sig, std::vector<int> const& absent) {
  auto const reports = reports_in(o.output);
  for (auto const& r : reports) {
    INFO("report of PE " << r.pe << ": " << r.op);
    REQUIRE(w.is_local(r.pe));
    CHECK(r.waited_ms >= 1000);
    CHECK(r.waited_ms < 60000);
    role const what = role_of[static_cast<std::size_t>(r.pe)];
    if (r.op == "wait_until") {
      CHECK((what == role::waits_for_signal || what == role::puts_with_bad_key));
      CHECK(r.address == address_of(sig.ptr(r.pe).get() + r.pe));
      CHECK(r.writer == -1);
      CHECK(r.value == 1);
      CHECK(r.held == 0);
    } else {
      CHECK(r.op == "barrier");
      CHECK(what == role::waits_in_barrier);
      CHECK(std::find(absent.begin(), absent.end(), r.writer) != absent.end());
      // The world team's arrival flags at this PE: flag r is written by PE r (control_block.hpp).
      std::uint64_t const* flags = w.team_states(r.pe) + gpucomm::detail::control_block_layout::flags_word;
      CHECK(r.address == address_of(flags + r.writer));
      CHECK(r.value == 1);
      CHECK(r.held == 0);
    }
  }
  return reports.size();
}

bool is_kernel_failure(std::string const& e) {
  return e.find("world::synchronize") != std::string::npos &&
         e.find("a kernel on the world's streams failed") != std::string::npos;
}

/// Whether a PE of another process shares a GPU with a PE of this one: under MPS, a trap of that PE
/// ends this process's kernels on the GPU too, perhaps before their own waits give up and report.
bool gpu_shared_with_another_process(gpucomm::world& w) {
  for (int pe : w.local_pes())
    for (int q = 0; q < w.npes(); ++q)
      if (!w.is_local(q) && w.same_gpu(pe, q)) return true;
  return false;
}

/// Whether this process owns a PE whose role is one of `roles`.
bool owns(gpucomm::world& w, std::vector<role> const& role_of, std::initializer_list<role> roles) {
  for (int pe : w.local_pes())
    for (role r : roles)
      if (role_of[static_cast<std::size_t>(pe)] == r) return true;
  return false;
}

}  // namespace

TEST_CASE("failure: a PE that exits early: the PEs waiting for it report PE and operation and address then trap",
          "[.failure][gpu]") {
  auto w = case_world().release();  // never destroyed (see the top of the file)
  int const npes = w->npes();
  // The last PE exits early. PE 0 waits for its signal; the others wait for it in a barrier. With
  // one PE, PE 0 waits for a signal nobody sends.
  int const quitter = npes - 1;
  std::vector<role> roles(static_cast<std::size_t>(npes), role::waits_in_barrier);
  roles[0] = role::waits_for_signal;
  if (npes > 1) roles[static_cast<std::size_t>(quitter)] = role::idle;
  auto sig = w->alloc<signal_t>(static_cast<std::size_t>(npes));
  auto data = w->alloc<std::uint64_t>(2);
  w->barrier();
  outcome const o = run_case(*w, roles, sig, data, 0);
  // Every PE of the barrier misses the quitter's arrival and PE 0's (which waits elsewhere).
  std::size_t const seen = check_reports(*w, o, roles, sig, {0, quitter});
  // Some PE of the world reports, whichever process it is in.
  auto const seen_by = w->bootstrap().allgather_value(static_cast<std::uint64_t>(seen));
  CHECK(std::accumulate(seen_by.begin(), seen_by.end(), std::uint64_t{0}) >= 1);
  if (owns(*w, roles, {role::waits_for_signal, role::waits_in_barrier})) {
    // The first trap ends every kernel of its GPU (in one process, and under MPS): one report at
    // least here, unless that trap may have been another process's PE on our GPU.
    if (!gpu_shared_with_another_process(*w)) CHECK(seen >= 1);
    CHECK(is_kernel_failure(o.error));
  } else {
    // The quitter's own process: its kernel ended well; a fault of a PE sharing its GPU under MPS
    // may reach it.
    CHECK(seen == 0);
    CHECK((o.error == "(no error)" || is_kernel_failure(o.error)));
  }
  w->bootstrap().barrier();
}

TEST_CASE("failure: a PE whose kernel traps: synchronize reports it and the PEs waiting for it do not hang",
          "[.failure][gpu]") {
  auto w = case_world().release();  // never destroyed (see the top of the file)
  int const npes = w->npes();
  // PE 0 traps (a user's kernel that faults or asserts); the others wait for its signal.
  std::vector<role> roles(static_cast<std::size_t>(npes), role::waits_for_signal);
  roles[0] = role::traps;
  auto sig = w->alloc<signal_t>(static_cast<std::size_t>(npes));
  auto data = w->alloc<std::uint64_t>(2);
  w->barrier();
  outcome const o = run_case(*w, roles, sig, data, 0);
  check_reports(*w, o, roles, sig, {0});
  if (w->is_local(0)) {
    CHECK(is_kernel_failure(o.error));
    CHECK(o.error.find("on PE ") != std::string::npos);
  } else {
    // Another process: its PEs' waits give up and trap, or the trap of PE 0 reaches them through
    // MPS first. Either way synchronize reports a failed kernel; nothing hangs.
    CHECK(is_kernel_failure(o.error));
  }
  w->bootstrap().barrier();
}

GPUCOMM_TEST_CASE_IF(gpucomm::test::has_key_table,
                     "failure: an error completion from a bad key: the sender's synchronize names it and the PE "
                     "waiting for its signal reports then traps",
                     "[.failure][gpu]") {
  auto w = case_world().release();  // never destroyed (see the top of the file)
  int const npes = w->npes();
  // PE 0's put_signal to the last PE goes out with a bad rkey: the NIC answers with a remote access
  // error, the data and the signal never land, and the last PE waits for the signal. With one PE,
  // PE 0 writes to itself and waits.
  int const target = npes - 1;
  std::vector<role> roles(static_cast<std::size_t>(npes), role::idle);
  roles[static_cast<std::size_t>(target)] = role::waits_for_signal;
  roles[0] = role::puts_with_bad_key;
  auto sig = w->alloc<signal_t>(static_cast<std::size_t>(npes));
  auto data = w->alloc<std::uint64_t>(2);
  w->barrier();
  std::vector<void*> tables;
  // The signal word the target waits on is its own sig[target]; PE 0 signals that word.
  outcome const o = run_case(*w, roles, sig, data, target, [&](int pe, typename Tr::device_state& state) {
    if (pe == 0) tables.push_back(gpucomm::test::corrupt_rkey(*w, pe, target, state));
  });
  std::size_t const seen = check_reports(*w, o, roles, sig, {});
  if (w->is_local(target)) {
    CHECK(seen >= 1);
    CHECK(is_kernel_failure(o.error));
  } else if (w->is_local(0)) {
    // PE 0's own process: its kernel ended; the failed queue is reported, naming PE 0 and the
    // target. The put's REMOTE_ACCESS_ERR, or the flush error of the signal behind it, which the
    // NIC completes right after and which overwrites the CQ's one entry (docs/guide/reliability.md).
    CHECK(seen == 0);
    CHECK_THAT(o.error, Catch::Contains("IBGDAPost on PE 0") && Catch::Contains("to PE " + std::to_string(target)) &&
                            (Catch::Contains("REMOTE_ACCESS_ERR") || Catch::Contains("WR_FLUSH_ERR")));
  } else {
    // A process of idle PEs only (three processes or more): nothing of it waited, so nothing is
    // reported and its synchronize finds no error, unless the target's trap reached its kernels
    // through MPS on a GPU they share (its kernels had ended by then, but MPS may still report it).
    CHECK(seen == 0);
    CHECK((o.error == "(no error)" || (gpu_shared_with_another_process(*w) && is_kernel_failure(o.error))));
  }
  w->bootstrap().barrier();
}
