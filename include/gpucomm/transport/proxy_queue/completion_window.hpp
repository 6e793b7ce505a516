#pragma once
// The proxy's side of the ring's `completed` counter (command_ring.cuh, reader step 4). The proxy
// reads commands in ticket order but their effects may finish out of order (a copy on one peer's
// stream finishes before an earlier one on another's). The counter it publishes must still mean
// "every ticket below it has taken effect": this window turns completions in any order into that
// low-water mark. Host only.

#include <cstdint>
#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpucomm::proxy_queue {

class completion_window {
 public:
  /// The reader has taken `ticket` out of the ring; tickets come in order, one at a time.
  void read(std::uint64_t ticket) {
    if (ticket != low_ + done_.size()) {
      throw std::logic_error("gpucomm: proxy completion window: ticket " + std::to_string(ticket) +
                             " read out of order (expected " + std::to_string(low_ + done_.size()) + ")");
    }
    done_.push_back(false);
  }

  /// `ticket`'s command has taken effect. Returns the low-water mark: every ticket below it has.
  std::uint64_t complete(std::uint64_t ticket) {
    if (ticket < low_ || ticket >= low_ + done_.size() || done_[ticket - low_]) {
      throw std::logic_error("gpucomm: proxy completion window: ticket " + std::to_string(ticket) +
                             (ticket < low_ || (ticket < low_ + done_.size() && done_[ticket - low_])
                                  ? " completed twice"
                                  : " completed before it was read"));
    }
    done_[ticket - low_] = true;
    while (!done_.empty() && done_.front()) {
      done_.pop_front();
      ++low_;
    }
    return low_;
  }

  /// The tickets read and not yet completed, in order.
  std::vector<std::uint64_t> unfinished() const {
    std::vector<std::uint64_t> out;
    for (std::size_t i = 0; i < done_.size(); ++i)
      if (!done_[i]) out.push_back(low_ + i);
    return out;
  }

  /// Every ticket below this has taken effect (what the proxy publishes as `completed`).
  std::uint64_t low_water() const noexcept { return low_; }
  /// Tickets read and not yet completed, or completed behind one that is not.
  std::uint64_t in_flight() const noexcept { return done_.size(); }

 private:
  std::uint64_t low_ = 0;
  std::deque<bool> done_;  // done_[i]: ticket low_ + i has taken effect
};

}  // namespace gpucomm::proxy_queue
