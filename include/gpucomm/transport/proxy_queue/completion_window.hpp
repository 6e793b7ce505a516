#pragma once
// The proxy's side of the ring's `completed` counter (command_ring.cuh, reader step 4). The proxy
// reads commands in ticket order but their effects may finish out of order (a copy on one peer's
// stream finishes before an earlier one on another's). The counter it publishes must still mean
// "every ticket below it has taken effect": this window turns completions in any order into that
// low-water mark. Host only.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "../../detail/fifo.hpp"

namespace gpucomm::proxy_queue {

class completion_window {
 public:
  /// The reader has taken `ticket` out of the ring; tickets come in order, one at a time.
  void read(std::uint64_t ticket);

  /// `ticket`'s command has taken effect. Returns the low-water mark: every ticket below it has.
  std::uint64_t complete(std::uint64_t ticket);

  /// The tickets read and not yet completed, in order.
  std::vector<std::uint64_t> unfinished() const;

  /// Every ticket below this has taken effect (what the proxy publishes as `completed`).
  std::uint64_t low_water() const noexcept { return low_; }
  /// Tickets read and not yet completed, or completed behind one that is not.
  std::uint64_t in_flight() const noexcept { return done_.size(); }

 private:
  std::uint64_t low_ = 0;
  gpucomm::detail::fifo<std::uint8_t> done_;  // done_[i] != 0: ticket low_ + i has taken effect
};

}  // namespace gpucomm::proxy_queue

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "detail/completion_window.inl"
#endif
