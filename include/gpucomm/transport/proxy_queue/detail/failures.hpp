#pragma once
// Commands the proxy could not carry out, recorded by the proxy threads and reported by
// world::synchronize(). Host only.

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "../command.cuh"

namespace gpucomm::detail {

/// One failed command: who posted it, to whom, what it was, and why it failed.
struct proxy_failure {
  int pe = -1;    ///< the PE whose ring held the command
  int peer = -1;  ///< the command's target PE
  proxy_queue::command_op op = proxy_queue::command_op::nop;
  std::uint64_t ticket = 0;
  std::uint64_t bytes = 0;
  std::string what;  ///< the failing call and its error, or the check that refused the command
  /// The target is gone: its process died, its connection broke, or it stopped answering (the
  /// engine's peer_failed and timed_out, the NIC's transport retries exhausted).
  bool peer_lost = false;

  std::string op_name() const;
};

/// The failures of one world's proxies: the first is kept whole, the rest counted. Written by
/// proxy threads, taken by world::synchronize() on the caller's thread. The first lost peer is
/// kept apart and never cleared: the world's teardown asks for it after synchronize took the rest.
class proxy_failures {
 public:
  void record(proxy_failure f);

  /// The first peer a command found gone, with why, or nothing while every peer answers.
  std::optional<std::string> lost_peer() const;

  /// The first failure recorded since the last take, and how many there were; clears both.
  std::optional<proxy_failure> take(std::uint64_t& count);

 private:
  mutable std::mutex m_;
  std::optional<proxy_failure> first_;
  std::optional<std::string> lost_;
  std::uint64_t count_ = 0;
};

}  // namespace gpucomm::detail

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "failures.inl"
#endif
