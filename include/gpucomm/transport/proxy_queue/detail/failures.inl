#pragma once
// The bodies of failures.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::detail {

inline std::string proxy_failure::op_name() const {
  switch (op) {
    case proxy_queue::command_op::nop:
      return "nop";
    case proxy_queue::command_op::put:
      return "put";
    case proxy_queue::command_op::get:
      return "get";
    case proxy_queue::command_op::signal:
      return "signal";
    case proxy_queue::command_op::put_signal:
      return "put_signal";
    case proxy_queue::command_op::atomic:
      return "atomic";
    case proxy_queue::command_op::fence:
      return "fence";
  }
  return "command " + std::to_string(static_cast<int>(op));
}

inline void proxy_failures::record(proxy_failure f) {
  std::lock_guard<std::mutex> const lock(m_);
  if (f.peer_lost && !lost_) lost_ = "PE " + std::to_string(f.peer) + " (" + f.what + ")";
  if (!first_) first_ = std::move(f);
  ++count_;
}

inline std::optional<std::string> proxy_failures::lost_peer() const {
  std::lock_guard<std::mutex> const lock(m_);
  return lost_;
}

inline std::optional<proxy_failure> proxy_failures::take(std::uint64_t& count) {
  std::lock_guard<std::mutex> const lock(m_);
  count = count_;
  count_ = 0;
  return std::exchange(first_, std::nullopt);
}

}  // namespace gpucomm::detail
