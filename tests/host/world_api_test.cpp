// The world's host-side rules that need no GPU: when a pre-existing CUDA context's hardware
// queues are an error, a warning or fine (host/detail/hardware_queues.hpp); how
// CUDA_DEVICE_MAX_CONNECTIONS is read, and what the world asks for with and without MPS; which
// arguments world::prepare takes; that every transport's host half answers world::reaches; and the
// memory rules behind allocate and register_buffer (host/detail/world_memory.hpp).
#include <gpucomm/host/world.hpp>
#include <gpucomm/transport/nvlink_store/host.hpp>
#include <gpucomm/transport/proxy_queue/host.hpp>

#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "error_of.hpp"

namespace {

using gpucomm::detail::hardware_queue_verdict;
using gpucomm::detail::judge_hardware_queues;

using gpucomm::test::error_of;

void kernel_a(int*) {}
void kernel_b(float const*, int) {}

/// Whether w.prepare(args...) compiles.
template <class W, class... Args>
constexpr bool can_prepare = requires(W& w, Args&&... args) {
  w.prepare(static_cast<Args&&>(args)...);
};

/// Puts the named environment variables back as they were when it was made.
struct env_restorer {
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  env_restorer(std::initializer_list<char const*> names) {
    for (char const* n : names) {
      char const* v = std::getenv(n);
      saved.emplace_back(n, v ? std::optional<std::string>(v) : std::nullopt);
    }
  }
  ~env_restorer() {
    for (auto const& [n, v] : saved) v ? ::setenv(n.c_str(), v->c_str(), 1) : ::unsetenv(n.c_str());
  }
  env_restorer(env_restorer const&) = delete;
  env_restorer& operator=(env_restorer const&) = delete;
};

/// Host halves answer world::reaches with `bool reaches(int, int) const`.
template <class Host>
constexpr bool answers_reaches = requires(Host const& h) {
  { h.reaches(0, 1) } -> std::convertible_to<bool>;
};

}  // namespace

TEST_CASE("hardware queues: no pre-existing context is always fine", "[world][queues]") {
  for (bool matters : {false, true}) {
    CHECK(judge_hardware_queues(std::nullopt, false, matters) == hardware_queue_verdict::ok);
    CHECK(judge_hardware_queues(4, false, matters) == hardware_queue_verdict::ok);
    CHECK(judge_hardware_queues(32, false, matters) == hardware_queue_verdict::ok);
  }
}

TEST_CASE("hardware queues: a context made with 32 or more queues set before is fine", "[world][queues]") {
  for (bool matters : {false, true}) {
    CHECK(judge_hardware_queues(32, true, matters) == hardware_queue_verdict::ok);
    CHECK(judge_hardware_queues(64, true, matters) == hardware_queue_verdict::ok);
  }
}

TEST_CASE("hardware queues: a context made without them fails where it matters, warns elsewhere", "[world][queues]") {
  CHECK(judge_hardware_queues(std::nullopt, true, true) == hardware_queue_verdict::fail);
  CHECK(judge_hardware_queues(8, true, true) == hardware_queue_verdict::fail);
  CHECK(judge_hardware_queues(31, true, true) == hardware_queue_verdict::fail);
  CHECK(judge_hardware_queues(std::nullopt, true, false) == hardware_queue_verdict::warn);
  CHECK(judge_hardware_queues(1, true, false) == hardware_queue_verdict::warn);
  static_assert(judge_hardware_queues(std::nullopt, true, true) == hardware_queue_verdict::fail);
}

TEST_CASE("CUDA_DEVICE_MAX_CONNECTIONS is read as a positive decimal count", "[world][queues]") {
  using gpucomm::detail::hardware_queues_from;
  CHECK(hardware_queues_from(nullptr) == std::nullopt);
  CHECK(hardware_queues_from("") == std::nullopt);
  CHECK(hardware_queues_from("32") == 32);
  CHECK(hardware_queues_from("1") == 1);
  CHECK(hardware_queues_from("0") == std::nullopt);
  CHECK(hardware_queues_from("-4") == std::nullopt);
  CHECK(hardware_queues_from("32x") == std::nullopt);
  CHECK(hardware_queues_from("many") == std::nullopt);
}

TEST_CASE("hardware queues: CUDA's default for a process with one PE per GPU under MPS, else 32", "[world][queues]") {
  using gpucomm::detail::hardware_queues_to_ask;
  STATIC_REQUIRE(hardware_queues_to_ask(false, false) == 32);
  STATIC_REQUIRE(hardware_queues_to_ask(false, true) == 32);  // its own PEs may share a GPU
  STATIC_REQUIRE(hardware_queues_to_ask(true, false) == 32);
  STATIC_REQUIRE(hardware_queues_to_ask(true, true) == 8);
}

TEST_CASE("hardware queues: MPS is a control socket in the pipe directory; the environment's value stays",
          "[world][queues]") {
  using gpucomm::detail::mps_control_present;
  env_restorer const keep{"CUDA_MPS_PIPE_DIRECTORY", "CUDA_DEVICE_MAX_CONNECTIONS"};
  char dir[] = "/tmp/gpucomm-mps-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  std::string const control = std::string(dir) + "/control";
  ::setenv("CUDA_MPS_PIPE_DIRECTORY", dir, 1);
  CHECK_FALSE(mps_control_present());  // nothing there
  { std::ofstream{control} << "not a socket"; }
  CHECK_FALSE(mps_control_present());
  REQUIRE(::unlink(control.c_str()) == 0);
  int const fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", control.c_str());
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr const*>(&addr), sizeof(addr)) == 0);
  CHECK(mps_control_present());

  ::unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
  gpucomm::request_hardware_queues(/*one_pe_per_process=*/true);
  CHECK(std::string(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS")) == "8");
  ::unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
  gpucomm::request_hardware_queues();
  CHECK(std::string(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS")) == "32");
  ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "16", 1);
  gpucomm::request_hardware_queues(true);
  CHECK(std::string(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS")) == "16");  // the program's own

  ::close(fd);
  ::unlink(control.c_str());
  ::rmdir(dir);
  ::unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
  gpucomm::request_hardware_queues(true);  // no daemon: 32
  CHECK(std::string(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS")) == "32");
}

TEST_CASE("world::prepare takes kernels, optionally after a stack size, and nothing else", "[world][prepare]") {
  using gpucomm::world;
  using a = decltype(&kernel_a);
  using b = decltype(&kernel_b);
  STATIC_REQUIRE(can_prepare<world, a>);
  STATIC_REQUIRE(can_prepare<world, a, b>);
  STATIC_REQUIRE(can_prepare<world, decltype(kernel_a)&, decltype(kernel_b)&>);  // functions decay
  STATIC_REQUIRE(can_prepare<world, int, a, b>);
  STATIC_REQUIRE(can_prepare<world, std::size_t>);
  STATIC_REQUIRE_FALSE(can_prepare<world, int*>);
  STATIC_REQUIRE_FALSE(can_prepare<world, int, a, int*>);
  STATIC_REQUIRE_FALSE(can_prepare<world, a, int>);
}

// route's host half (route/host.hpp) needs its legs' device headers, and IBGDAPost's
// (ibgda_post/host.cuh) its quiet kernel, which this host-only file cannot include: their reaches
// are checked where the GPU tests build them (IBGDAPost's in gpu/ibgda/ibgda_test.cu).
TEST_CASE("every transport's host half answers world::reaches", "[world][reaches]") {
  namespace d = gpucomm::detail;
  STATIC_REQUIRE(answers_reaches<d::nvlink_store_host>);  // NVLinkStore and P2PCopy
  STATIC_REQUIRE(answers_reaches<d::proxy_queue_host>);
}

TEST_CASE("an allocation whose byte count overflows asks for everything and says why", "[world][memory]") {
  using gpucomm::detail::allocation_bytes_of;
  auto const fits = allocation_bytes_of(1000, 8);
  CHECK(fits.bytes == 8000);
  CHECK(fits.problem.empty());
  auto const wraps = allocation_bytes_of(std::numeric_limits<std::size_t>::max() / 4 + 1, 4);
  CHECK(wraps.bytes == std::numeric_limits<std::size_t>::max());
  CHECK(wraps.problem.find("more bytes than a size_t holds") != std::string::npos);
}

TEST_CASE("register_buffer's rules: not null, not the heap, no overlap, at most `most` per PE", "[world][memory]") {
  using gpucomm::detail::check_new_buffer;
  alignas(64) static char heap[4096];
  alignas(64) static char outside[4096];
  gpucomm::detail::heap_layout layout;
  layout.base = heap;
  layout.stride = 1024;  // 4 PEs: the whole array
  std::vector<gpucomm::registered_buffer> buffers{{1, outside, 256, -1}};
  auto const check = [&](int pe, void const* p, std::size_t bytes, int most = 64) {
    return error_of([&] { check_new_buffer("world::register_buffer", pe, p, bytes, layout, 4, buffers, most); });
  };
  CHECK(check(0, outside + 256, 256) == "(no error)");
  CHECK(check(0, outside, 256) == "(no error)");  // PE 1's buffer: another PE may register it too
  CHECK(check(0, nullptr, 16).find("the buffer is null") != std::string::npos);
  CHECK(check(0, outside, 0).find("the buffer has no bytes") != std::string::npos);
  CHECK(check(0, heap + 3000, 16).find("overlaps the symmetric heap") != std::string::npos);
  CHECK(check(1, outside + 128, 256).find("overlaps one registered before") != std::string::npos);
  CHECK(check(1, outside + 256, 256) == "(no error)");
  CHECK(check(1, outside + 512, 16, 1).find("has 1 registered buffers already") != std::string::npos);
  CHECK(check(0, reinterpret_cast<void const*>(std::numeric_limits<std::uintptr_t>::max() - 8), 16)
            .find("runs past the end of the address space") != std::string::npos);
}
