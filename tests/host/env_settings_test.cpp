// The transports' settings from options and environment variables (transport/ibgda_post/settings.hpp,
// transport/proxy_queue/settings.hpp): an option that is set wins, the variable is read strictly, a bad value of either
// throws naming it.
#include <gpucomm/transport/ibgda_post/settings.hpp>
#include <gpucomm/transport/proxy_queue/settings.hpp>
#include <gpucomm/transport/proxy_queue/state.hpp>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "error_of.hpp"

namespace {
/// Sets `name` to `value` for one scope (unset when value is null), and unsets it afterwards.
struct scoped_env {
  char const* name;
  scoped_env(char const* n, char const* value) : name(n) {
    if (value != nullptr)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~scoped_env() { ::unsetenv(name); }
};

using gpucomm::test::error_of;
}  // namespace

using namespace gpucomm::detail;
using gpucomm::proxy_backends;
using gpucomm::proxy_engine_data;
using gpucomm::proxy_network;
using gpucomm::proxy_threads;

TEST_CASE("IBGDAPost's QPs per peer: option, then GPUCOMM_QPS_PER_PEER (1 to 64), then 2", "[env]") {
  {
    scoped_env const unset("GPUCOMM_QPS_PER_PEER", nullptr);
    CHECK(qps_per_peer_from(0, 3) == 2);
    CHECK(qps_per_peer_from(5, 3) == 5);
    CHECK_THAT(error_of([] { qps_per_peer_from(-1, 3); }), Catch::Contains("qps_per_peer is negative"));
  }
  {
    scoped_env const set("GPUCOMM_QPS_PER_PEER", "64");
    CHECK(qps_per_peer_from(0, 0) == 64);
    CHECK(qps_per_peer_from(3, 0) == 3);  // the option wins
  }
  for (char const* bad : {"0", "65", "-1", "+2", " 2", "2x", "0x2", "two"}) {
    INFO(bad);
    scoped_env const set("GPUCOMM_QPS_PER_PEER", bad);
    CHECK(error_of([] { qps_per_peer_from(0, 3); }) ==
          std::string("gpucomm: IBGDAPost on PE 3: GPUCOMM_QPS_PER_PEER=") + bad +
              " is not a decimal count from 1 to 64. set it to the number of RC QPs per peer, e.g. 2");
  }
}

TEST_CASE("ProxyQueue's ring depth: option, then GPUCOMM_PROXY_LOG_DEPTH, then 10; 1 to 20", "[env]") {
  {
    scoped_env const unset("GPUCOMM_PROXY_LOG_DEPTH", nullptr);
    CHECK(proxy_log_depth_from(0, 0) == 10u);
    CHECK(proxy_log_depth_from(1, 0) == 1u);
    CHECK(proxy_log_depth_from(20, 0) == 20u);
    CHECK_THAT(error_of([] { proxy_log_depth_from(21, 0); }), Catch::Contains("log_depth is 21, above 20"));
  }
  {
    scoped_env const set("GPUCOMM_PROXY_LOG_DEPTH", "6");
    CHECK(proxy_log_depth_from(0, 0) == 6u);
    CHECK(proxy_log_depth_from(12, 0) == 12u);
  }
  for (char const* bad : {"0", "21", "-1", " 6", "6 ", "1e1", "abc"}) {
    INFO(bad);
    scoped_env const set("GPUCOMM_PROXY_LOG_DEPTH", bad);
    CHECK_THAT(error_of([] { proxy_log_depth_from(0, 1); }),
               Catch::Contains(std::string("GPUCOMM_PROXY_LOG_DEPTH=") + bad + " is not a decimal count from 1 to 20"));
  }
}

TEST_CASE("ProxyQueue's store path: option, then GPUCOMM_PROXY_STORE_BYTES, then the default", "[env]") {
  {
    scoped_env const unset("GPUCOMM_PROXY_STORE_BYTES", nullptr);
    CHECK(proxy_store_path_bytes_from(-1, 0) == static_cast<std::uint32_t>(gpucomm::default_store_path_bytes));
    CHECK(proxy_store_path_bytes_from(0, 0) == 0u);
    // A group carries at most 1 KiB per thread by stores, within the option's limit.
    using gpucomm::detail::store_path_limit;
    STATIC_REQUIRE(store_path_limit(16384, 1) == 1024);
    STATIC_REQUIRE(store_path_limit(16384, 8) == 8192);
    STATIC_REQUIRE(store_path_limit(16384, 1024) == 16384);
    STATIC_REQUIRE(store_path_limit(0, 1024) == 0);
    STATIC_REQUIRE(store_path_limit(1u << 30, 1u << 22) == (1u << 30));  // no overflow
    CHECK(proxy_store_path_bytes_from(1ll << 30, 0) == (1u << 30));
    CHECK_THAT(error_of([] { proxy_store_path_bytes_from((1ll << 30) + 1, 0); }),
               Catch::Contains("store_path_bytes is 1073741825"));
    CHECK_THAT(error_of([] { proxy_store_path_bytes_from(-2, 0); }), Catch::Contains("store_path_bytes is -2"));
  }
  {
    scoped_env const set("GPUCOMM_PROXY_STORE_BYTES", "0");
    CHECK(proxy_store_path_bytes_from(-1, 0) == 0u);
    CHECK(proxy_store_path_bytes_from(512, 0) == 512u);  // the option wins
  }
  for (char const* bad : {"-1", "1073741825", "4k", " 8", "abc"}) {
    INFO(bad);
    scoped_env const set("GPUCOMM_PROXY_STORE_BYTES", bad);
    CHECK_THAT(error_of([] { proxy_store_path_bytes_from(-1, 1); }),
               Catch::Contains(std::string("GPUCOMM_PROXY_STORE_BYTES=") + bad));
  }
}

TEST_CASE("ProxyQueue's CPU: option, then GPUCOMM_PROXY_CPU (a CPU or -1), then none", "[env]") {
  {
    scoped_env const unset("GPUCOMM_PROXY_CPU", nullptr);
    CHECK(proxy_cpu_from(-1, 0) == -1);
    CHECK(proxy_cpu_from(7, 0) == 7);
  }
  {
    scoped_env const set("GPUCOMM_PROXY_CPU", "-1");
    CHECK(proxy_cpu_from(-1, 0) == -1);
  }
  {
    scoped_env const set("GPUCOMM_PROXY_CPU", "12");
    CHECK(proxy_cpu_from(-1, 0) == 12);
    CHECK(proxy_cpu_from(3, 0) == 3);
  }
  for (char const* bad : {"-2", "65537", "+1", " 1", "cpu0", "1,2"}) {
    INFO(bad);
    scoped_env const set("GPUCOMM_PROXY_CPU", bad);
    CHECK_THAT(error_of([] { proxy_cpu_from(-1, 0); }),
               Catch::Contains(std::string("GPUCOMM_PROXY_CPU=") + bad + " is not a decimal count from 0 to 65536"));
  }
}

TEST_CASE("ProxyQueue's modes: GPUCOMM_PROXY_BACKENDS, _THREADS, _STREAMS take their words only", "[env]") {
  {
    scoped_env const b("GPUCOMM_PROXY_BACKENDS", nullptr), t("GPUCOMM_PROXY_THREADS", nullptr),
        s("GPUCOMM_PROXY_STREAMS", nullptr);
    CHECK(proxy_backends_from(proxy_backends::automatic, 0) == proxy_backends::by_reach);
    CHECK(proxy_threads_from(proxy_threads::automatic, 0) == proxy_threads::per_pe);
    CHECK_FALSE(proxy_stream_per_peer_forced(0).has_value());
  }
  {
    scoped_env const b("GPUCOMM_PROXY_BACKENDS", "nic"), t("GPUCOMM_PROXY_THREADS", "per_process"),
        s("GPUCOMM_PROXY_STREAMS", "per_peer");
    CHECK(proxy_backends_from(proxy_backends::automatic, 0) == proxy_backends::nic);
    CHECK(proxy_backends_from(proxy_backends::by_reach, 0) == proxy_backends::by_reach);  // the option wins
    CHECK(proxy_threads_from(proxy_threads::automatic, 0) == proxy_threads::per_process);
    CHECK(proxy_threads_from(proxy_threads::per_pe, 0) == proxy_threads::per_pe);
    CHECK(proxy_stream_per_peer_forced(0) == true);
  }
  {
    scoped_env const b("GPUCOMM_PROXY_BACKENDS", "by_reach"), t("GPUCOMM_PROXY_THREADS", "per_pe"),
        s("GPUCOMM_PROXY_STREAMS", "per_pe");
    CHECK(proxy_backends_from(proxy_backends::automatic, 0) == proxy_backends::by_reach);
    CHECK(proxy_threads_from(proxy_threads::automatic, 0) == proxy_threads::per_pe);
    CHECK(proxy_stream_per_peer_forced(0) == false);
  }
  for (char const* bad : {"", "NIC", "nic ", "per-pe", "auto"}) {
    INFO('"' << bad << '"');
    scoped_env const b("GPUCOMM_PROXY_BACKENDS", bad), t("GPUCOMM_PROXY_THREADS", bad), s("GPUCOMM_PROXY_STREAMS", bad);
    CHECK(error_of([] { proxy_backends_from(proxy_backends::automatic, 2); }) ==
          std::string("gpucomm: ProxyQueue on PE 2: GPUCOMM_PROXY_BACKENDS=") + bad +
              " is not one of by_reach or nic. set it to by_reach or nic, or leave it unset");
    CHECK_THAT(error_of([] { proxy_threads_from(proxy_threads::automatic, 2); }),
               Catch::Contains(std::string("GPUCOMM_PROXY_THREADS=") + bad + " is not one of per_process or per_pe"));
    CHECK_THAT(error_of([] { proxy_stream_per_peer_forced(2); }),
               Catch::Contains(std::string("GPUCOMM_PROXY_STREAMS=") + bad + " is not one of per_pe or per_peer"));
  }
}

TEST_CASE("ProxyQueue's network backend: GPUCOMM_PROXY_NETWORK and GPUCOMM_PROXY_ENGINE_DATA", "[env]") {
  {
    scoped_env const n("GPUCOMM_PROXY_NETWORK", nullptr), d("GPUCOMM_PROXY_ENGINE_DATA", nullptr);
    CHECK(proxy_network_from(proxy_network::automatic, 0) == proxy_network::nic);
    CHECK(proxy_network_from(proxy_network::engine, 0) == proxy_network::engine);
    // automatic: registered GPU memory where the engine can register it, the agents where not
    CHECK(proxy_engine_data_from(proxy_engine_data::automatic, true, 0) == proxy_engine_data::registered);
    CHECK(proxy_engine_data_from(proxy_engine_data::automatic, false, 0) == proxy_engine_data::agents);
    CHECK(proxy_engine_data_from(proxy_engine_data::agents, true, 0) == proxy_engine_data::agents);
    CHECK_THAT(error_of([] { proxy_engine_data_from(proxy_engine_data::registered, false, 3); }),
               Catch::Contains("ProxyQueue on PE 3") && Catch::Contains("cannot register GPU memory (engine_refused)"));
  }
  {
    scoped_env const n("GPUCOMM_PROXY_NETWORK", "engine"), d("GPUCOMM_PROXY_ENGINE_DATA", "agents");
    CHECK(proxy_network_from(proxy_network::automatic, 0) == proxy_network::engine);
    CHECK(proxy_network_from(proxy_network::nic, 0) == proxy_network::nic);  // the option wins
    CHECK(proxy_engine_data_from(proxy_engine_data::automatic, true, 0) == proxy_engine_data::agents);
  }
  {
    scoped_env const d("GPUCOMM_PROXY_ENGINE_DATA", "registered");
    CHECK(proxy_engine_data_from(proxy_engine_data::automatic, true, 0) == proxy_engine_data::registered);
    CHECK_THAT(error_of([] { proxy_engine_data_from(proxy_engine_data::automatic, false, 0); }),
               Catch::Contains("engine_refused"));
  }
  for (char const* bad : {"", "ucx", "Engine", "bounce"}) {
    INFO('"' << bad << '"');
    scoped_env const n("GPUCOMM_PROXY_NETWORK", bad), d("GPUCOMM_PROXY_ENGINE_DATA", bad);
    CHECK_THAT(error_of([] { proxy_network_from(proxy_network::automatic, 1); }),
               Catch::Contains(std::string("GPUCOMM_PROXY_NETWORK=") + bad + " is not one of nic or engine"));
    CHECK_THAT(
        error_of([] { proxy_engine_data_from(proxy_engine_data::automatic, false, 1); }),
        Catch::Contains(std::string("GPUCOMM_PROXY_ENGINE_DATA=") + bad + " is not one of registered or agents"));
  }
  for (long ms : {0L, -5L, 600'001L}) {
    CHECK_THAT(error_of([ms] { proxy_engine_timeout_from(std::chrono::milliseconds(ms), "op_timeout", 0); }),
               Catch::Contains("proxy_engine_options::op_timeout is " + std::to_string(ms) + " ms"));
  }
  CHECK(proxy_engine_timeout_from(std::chrono::milliseconds(1), "op_timeout", 0).count() == 1);
}
