#pragma once
// The bodies of memory_agent.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::engine {

inline std::string host_memory_agent::write(void* dst, void const* src, std::size_t bytes) {
  if (delay_.count() > 0) gpucomm::detail::sleep_us(delay_.count());
  if (bytes != 0) std::memcpy(dst, src, bytes);
  return {};
}

inline std::string host_memory_agent::read(void* dst, void const* src, std::size_t bytes) {
  if (bytes != 0) std::memcpy(dst, src, bytes);
  return {};
}

inline std::string host_memory_agent::signal(std::uint64_t* word, signal_op op, std::uint64_t value) {
  std::atomic_ref<std::uint64_t> w(*word);
  // Release: the data of earlier write()s (plain stores) happen before a reader's acquire of
  // the new value.
  if (op == signal_op::add) {
    w.fetch_add(value, std::memory_order_release);
  } else {
    w.store(value, std::memory_order_release);
  }
  return {};
}

inline std::string host_memory_agent::atomic(void* word, unsigned width, atomic_op op, std::uint64_t operand,
                                             std::uint64_t compare, std::uint64_t& old) {
  if (width == 8) {
    old = detail::apply_atomic(*static_cast<std::uint64_t*>(word), op, operand, compare);
  } else if (width == 4) {
    old = detail::apply_atomic(*static_cast<std::uint32_t*>(word), op, static_cast<std::uint32_t>(operand),
                               static_cast<std::uint32_t>(compare));
  } else {
    return "an atomic of " + std::to_string(width) + " bytes (4 or 8 only)";
  }
  return {};
}

}  // namespace gpucomm::engine
