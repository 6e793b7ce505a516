#pragma once
// The bodies of completion_window.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::proxy_queue {

inline void completion_window::read(std::uint64_t ticket) {
  if (ticket != low_ + done_.size()) {
    throw std::logic_error("gpucomm: proxy completion window: ticket " + std::to_string(ticket) +
                           " read out of order (expected " + std::to_string(low_ + done_.size()) + ")");
  }
  done_.push_back(0);
}

inline std::uint64_t completion_window::complete(std::uint64_t ticket) {
  if (ticket < low_ || ticket >= low_ + done_.size() || done_[ticket - low_]) {
    throw std::logic_error("gpucomm: proxy completion window: ticket " + std::to_string(ticket) +
                           (ticket < low_ || (ticket < low_ + done_.size() && done_[ticket - low_])
                                ? " completed twice"
                                : " completed before it was read"));
  }
  done_[ticket - low_] = 1;
  while (!done_.empty() && done_.front()) {
    done_.pop_front();
    ++low_;
  }
  return low_;
}

inline std::vector<std::uint64_t> completion_window::unfinished() const {
  std::vector<std::uint64_t> out;
  for (std::size_t i = 0; i < done_.size(); ++i)
    if (!done_[i]) out.push_back(low_ + i);
  return out;
}

}  // namespace gpucomm::proxy_queue
