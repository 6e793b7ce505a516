#pragma once
// ProxyQueue's settings: world::configure<ProxyQueue>(options) before its first use.

#include <chrono>

#include "../nic/choice.hpp"
#include "../nic/model_faults.hpp"

namespace gpucomm {

/// How many proxy threads serve a process's rings.
enum class proxy_threads {
  automatic,    ///< GPUCOMM_PROXY_THREADS (per_process or per_pe) if set, else per_pe
  per_process,  ///< one thread polls the rings of every local PE in turn
  per_pe,       ///< one thread per local PE, each polling its own ring
};

/// Which backend carries a PE's commands to each peer.
enum class proxy_backends {
  automatic,  ///< GPUCOMM_PROXY_BACKENDS (by_reach or nic) if set, else by_reach
  by_reach,   ///< the copy engines for peers reached through the mapped heap, the network for the others
  nic,        ///< the network backend for every peer, this PE included (tests that path on one host)
};

/// What carries commands to the peers the copy engines do not serve (the network backend).
enum class proxy_network {
  automatic,  ///< GPUCOMM_PROXY_NETWORK (nic or engine) if set, else nic
  nic,        ///< an RDMA NIC through rdma-core's ordinary verbs, or the NIC model (proxy_options::nic)
  engine,     ///< a network engine (UCX: the program links gpucomm::ucx; docs/guide/across_nodes.md)
};

/// How the engine backend moves the bytes of puts and gets (docs/guide/across_nodes.md, "GPU memory").
enum class proxy_engine_data {
  automatic,   ///< GPUCOMM_PROXY_ENGINE_DATA (registered or agents) if set, else registered where
               ///< the linked engine can register GPU memory, agents where it cannot
  registered,  ///< RMA between GPU memory the engine registered (a UCX built with CUDA support)
  agents,      ///< through host memory: the memory agents read and write GPU memory at both ends
};

/// The engine backend's settings (proxy_network::engine).
struct proxy_engine_options {
  proxy_engine_data data = proxy_engine_data::automatic;
  /// Longest wait for every peer's answer while the engines connect.
  std::chrono::milliseconds connect_timeout{10'000};
  /// Longest a command may stay incomplete before it fails (engine_timed_out) and its peer is
  /// taken as failed: the bound on how long a dead peer goes unreported. 1 ms to 10 minutes.
  std::chrono::milliseconds op_timeout{20'000};
};

/// Faults the software NIC model injects (gpucomm::nic_model): a test and development tool. The same
/// type as IBGDAPost's (ibgda_options::model_faults).
using proxy_model_faults = nic_model_faults;

/// The store path's default size limit (proxy_options::store_path_bytes). A copy engine's command
/// has a fixed cost of microseconds (the ring, the proxy's CUDA call, the engine's start), which
/// the group's stores of a few KiB undercut; bulk stays with the copy engines, which free the SMs.
/// Where the two paths cross on a machine: the benchmark's ProxyQueue put_latency rows with the
/// store path on and off (docs/guide/proxyqueue.md, "The store path").
inline constexpr long long default_store_path_bytes = 16384;

struct proxy_options {
  /// log2 of each ring's command count (64 bytes each, pinned host memory). 0: the environment
  /// variable GPUCOMM_PROXY_LOG_DEPTH if set, else 10 (1024 commands, 64 KiB per PE). 1 to 20.
  unsigned log_depth = 0;
  /// One thread for all local PEs, or one each. The default is one each: with two PEs on one H100
  /// it carried 1.5x the copies per second and 1.2x the commands (docs/guide/proxyqueue.md).
  proxy_threads threads = proxy_threads::automatic;
  /// The CPU to pin the proxy thread to (per_pe: the i-th local PE's thread to cpu + i). -1: the
  /// environment variable GPUCOMM_PROXY_CPU if set, else no pinning. Each thread busy-polls: it
  /// takes a whole core while the world lives.
  int cpu = -1;
  /// Which peers the network backend serves; the rest go to the copy engines.
  proxy_backends backends = proxy_backends::automatic;
  /// The network backend: the NIC (below) or a network engine (`engine`).
  proxy_network network = proxy_network::automatic;
  /// The engine backend's settings (network engine only).
  proxy_engine_options engine{};
  /// The NIC of the NIC backend; automatic: GPUCOMM_NIC decides (unset: hardware). Hardware: the
  /// mlx5 NIC closest to each GPU through rdma-core's ordinary verbs (no DEVX; needs the program
  /// linked with gpucomm::verbs); model: the software NIC model, a test and development tool
  /// (docs/guide/proxyqueue.md, "The NIC backend").
  nic_choice nic = nic_choice::automatic;
  /// Puts, gets and put_signals of at most this many bytes, and at most 1 KiB per thread of the
  /// calling group, to a peer the GPU can store to (one the copy engines serve) go through the
  /// group's own loads and stores, as NVLinkStore's do: a copy engine's command costs microseconds
  /// however small it is (docs/guide/proxyqueue.md, "The store path"). Larger ones, and every one
  /// to a NIC peer, go to the proxy. -1: GPUCOMM_PROXY_STORE_BYTES if set, else
  /// default_store_path_bytes; 0: every operation goes to the proxy. At most 1 GiB.
  long long store_path_bytes = -1;
  /// Faults the NIC model injects (nic_choice::model only).
  proxy_model_faults model_faults{};
  /// A test and development tool: the proxy waits this long (microseconds) before it issues each
  /// command, as a slow or busy proxy would. 0: no wait.
  unsigned issue_delay_us = 0;
};

}  // namespace gpucomm
