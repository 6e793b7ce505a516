#pragma once
// ProxyQueue's settings: world::configure<ProxyQueue>(options) before its first use.

namespace gpucomm {

/// How many proxy threads serve a process's rings.
enum class proxy_threads {
  automatic,    ///< GPUCOMM_PROXY_THREADS (per_process or per_pe) if set, else per_pe
  per_process,  ///< one thread polls the rings of every local PE in turn
  per_pe,       ///< one thread per local PE, each polling its own ring
};

struct proxy_options {
  /// log2 of each ring's command count (64 bytes each, pinned host memory). 0: the environment
  /// variable GPUCOMM_PROXY_LOG_DEPTH if set, else 10 (1024 commands, 64 KiB per PE). 1 to 20.
  unsigned log_depth = 0;
  /// One thread for all local PEs, or one each. The default is one each: with two PEs on one H100
  /// it carried 1.5x the copies per second and 1.2x the commands (docs/proxyqueue.md).
  proxy_threads threads = proxy_threads::automatic;
  /// The CPU to pin the proxy thread to (per_pe: the i-th local PE's thread to cpu + i). -1: the
  /// environment variable GPUCOMM_PROXY_CPU if set, else no pinning. Each thread busy-polls: it
  /// takes a whole core while the world lives.
  int cpu = -1;
};

}  // namespace gpucomm
