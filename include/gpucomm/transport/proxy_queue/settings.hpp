#pragma once
// ProxyQueue's settings that an option or an environment variable gives, read strictly
// (host/detail/env_count.hpp): an option that is set wins; a bad value of either throws a
// gpucomm::error naming it. Host only, apart from the host half so that host tests reach them.

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "../../error.hpp"
#include "../../host/detail/env_count.hpp"
#include "options.hpp"

namespace gpucomm::detail {

/// log2 of ProxyQueue's ring depth: proxy_options::log_depth when not 0, else
/// GPUCOMM_PROXY_LOG_DEPTH, else 10; 1 to 20 either way.
inline unsigned proxy_log_depth_from(unsigned option, int pe) {
  constexpr char const* hint = "give 1 to 20 (2 to 1,048,576 commands of 64 bytes), or leave it unset for 10";
  if (option > 20) {
    throw error("ProxyQueue", pe, "proxy_options::log_depth is " + std::to_string(option) + ", above 20",
                "give 1 to 20, or 0 for the environment variable or the default 10");
  }
  if (option != 0) return option;
  auto const env = env_count("GPUCOMM_PROXY_LOG_DEPTH", 1, 20, "ProxyQueue", hint, pe);
  return env ? static_cast<unsigned>(*env) : 10u;
}

/// The CPU ProxyQueue's threads are pinned to: proxy_options::cpu when >= 0, else
/// GPUCOMM_PROXY_CPU (a CPU number up to 65536, or -1 for none), else -1 (no pinning).
inline int proxy_cpu_from(int option, int pe) {
  if (option >= 0) return option;
  if (char const* text = std::getenv("GPUCOMM_PROXY_CPU"); text != nullptr && std::string_view(text) == "-1") return -1;
  auto const cpu = env_count("GPUCOMM_PROXY_CPU", 0, 1 << 16, "ProxyQueue",
                             "set it to the CPU the proxy threads should run on, or -1 for none", pe);
  return cpu ? static_cast<int>(*cpu) : -1;
}

/// ProxyQueue's backends: the option unless automatic, else GPUCOMM_PROXY_BACKENDS (by_reach or
/// nic), else by_reach.
inline proxy_backends proxy_backends_from(proxy_backends option, int pe) {
  if (option != proxy_backends::automatic) return option;
  auto const i = env_word("GPUCOMM_PROXY_BACKENDS", {"by_reach", "nic"}, "ProxyQueue", pe,
                          "set it to by_reach or nic, or leave it unset");
  return !i || *i == 0 ? proxy_backends::by_reach : proxy_backends::nic;
}

/// ProxyQueue's network backend: the option unless automatic, else GPUCOMM_PROXY_NETWORK (nic or
/// engine), else nic.
inline proxy_network proxy_network_from(proxy_network option, int pe) {
  if (option != proxy_network::automatic) return option;
  auto const i = env_word("GPUCOMM_PROXY_NETWORK", {"nic", "engine"}, "ProxyQueue", pe,
                          "set it to nic or engine, or leave it unset");
  return i && *i == 1 ? proxy_network::engine : proxy_network::nic;
}

/// How the engine backend moves puts' and gets' bytes: the option unless automatic, else
/// GPUCOMM_PROXY_ENGINE_DATA (registered or agents), else registered when the engine can register
/// GPU memory (`engine_registers_gpu`), agents when it cannot.
inline proxy_engine_data proxy_engine_data_from(proxy_engine_data option, bool engine_registers_gpu, int pe) {
  if (option == proxy_engine_data::automatic) {
    auto const i = env_word("GPUCOMM_PROXY_ENGINE_DATA", {"registered", "agents"}, "ProxyQueue", pe,
                            "set it to registered or agents, or leave it unset");
    if (i) option = *i == 0 ? proxy_engine_data::registered : proxy_engine_data::agents;
  }
  if (option == proxy_engine_data::automatic)
    return engine_registers_gpu ? proxy_engine_data::registered : proxy_engine_data::agents;
  if (option == proxy_engine_data::registered && !engine_registers_gpu) {
    throw error("ProxyQueue", pe,
                "registered GPU memory was asked for (proxy_engine_data::registered), but the linked network "
                "engine cannot register GPU memory (engine_refused)",
                "use a UCX built with CUDA support, or proxy_engine_data::agents (or automatic)");
  }
  return option;
}

/// The engine backend's operation timeout: 1 ms to 10 minutes.
inline std::chrono::milliseconds proxy_engine_timeout_from(std::chrono::milliseconds option, char const* name, int pe) {
  if (option.count() < 1 || option.count() > 600'000) {
    throw error("ProxyQueue", pe,
                std::string("proxy_engine_options::") + name + " is " + std::to_string(option.count()) + " ms",
                "give 1 to 600000 ms");
  }
  return option;
}

/// ProxyQueue's threads: the option unless automatic, else GPUCOMM_PROXY_THREADS (per_process or
/// per_pe), else per_pe.
inline proxy_threads proxy_threads_from(proxy_threads option, int pe) {
  if (option != proxy_threads::automatic) return option;
  auto const i = env_word("GPUCOMM_PROXY_THREADS", {"per_process", "per_pe"}, "ProxyQueue", pe,
                          "set it to per_process or per_pe, or leave it unset");
  return i && *i == 0 ? proxy_threads::per_process : proxy_threads::per_pe;
}

/// The store path's limit in bytes: proxy_options::store_path_bytes when >= 0, else
/// GPUCOMM_PROXY_STORE_BYTES, else default_store_path_bytes; at most 1 GiB either way.
inline std::uint32_t proxy_store_path_bytes_from(long long option, int pe) {
  constexpr long long most = 1ll << 30;
  if (option > most || option < -1) {
    throw error("ProxyQueue", pe, "proxy_options::store_path_bytes is " + std::to_string(option),
                "give 0 (off) to 1073741824 bytes, or -1 for the environment variable or the default");
  }
  if (option >= 0) return static_cast<std::uint32_t>(option);
  auto const env = env_count("GPUCOMM_PROXY_STORE_BYTES", 0, most, "ProxyQueue",
                             "give 0 (off) to 1073741824 bytes, or leave it unset", pe);
  return static_cast<std::uint32_t>(env ? *env : default_store_path_bytes);
}

/// GPUCOMM_PROXY_STREAMS: per_pe (false), per_peer (true), or unset (nothing: ProxyQueue decides).
inline std::optional<bool> proxy_stream_per_peer_forced(int pe) {
  auto const i = env_word("GPUCOMM_PROXY_STREAMS", {"per_pe", "per_peer"}, "ProxyQueue", pe,
                          "set it to per_pe or per_peer, or leave it unset");
  if (!i) return std::nullopt;
  return *i == 1;
}

}  // namespace gpucomm::detail
