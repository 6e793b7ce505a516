#pragma once
// The bodies of world_env.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::detail {

inline void check_pe_count(world_options const& options, int actual, char const* source) {
  if (options.expected_pes != 0 && options.expected_pes != actual) {
    throw error("world", -1,
                "the program expects " + std::to_string(options.expected_pes) + " PEs but " + source + " gives " +
                    std::to_string(actual),
                "launch as many processes (or list as many GPUs) as world_options::expected_pes says");
  }
}

inline std::size_t heap_bytes_from(world_options const& options) {
  std::size_t const bytes =
      options.heap_bytes ? options.heap_bytes
                         : env_count("GPUCOMM_HEAP_BYTES", 1, max_heap_bytes, "world",
                                     "set it to a number of bytes in decimal digits, e.g. 4294967296, or unset it")
                               .value_or(std::size_t{1} << 30);
  if (bytes > max_heap_bytes) {
    throw error("world", -1,
                "world_options::heap_bytes is " + std::to_string(bytes) +
                    ", more than the 2^47 bytes of address space a PE's slot may take",
                "give a heap size below the GPU's memory");
  }
  return bytes;
}

inline int max_teams_from(world_options const& options) {
  constexpr int most = 1 << 20;
  int const n =
      options.max_teams
          ? options.max_teams
          : static_cast<int>(env_count("GPUCOMM_MAX_TEAMS", control_block_layout::predefined_slots, most, "world",
                                       "set it to a count of at least 3 (the predefined teams), "
                                       "e.g. 64, or unset it")
                                 .value_or(32));
  if (n < control_block_layout::predefined_slots) {
    throw error("world", -1, "world_options::max_teams is " + std::to_string(n) + ", below the 3 predefined teams",
                "give 0 (default: 32) or a count of at least 3");
  }
  if (n > most) {
    throw error("world", -1,
                "world_options::max_teams is " + std::to_string(n) + ", above the most, " + std::to_string(most),
                "give a count the control block can hold, e.g. 64");
  }
  return n;
}

inline std::uint64_t wait_timeout_word_from(world_options const& options) {
  if (options.wait_timeout.count() < 0 ||
      static_cast<std::uint64_t>(options.wait_timeout.count()) > max_wait_timeout_ms) {
    throw error("world", -1,
                "world_options::wait_timeout is " + std::to_string(options.wait_timeout.count()) +
                    " ms, outside 0 to a day (86400000 ms)",
                "give 0 (default: 20 s) or a positive number of milliseconds up to a day");
  }
  std::optional<unsigned long long> ms;
  if (options.wait_timeout.count() != 0)
    ms = static_cast<unsigned long long>(options.wait_timeout.count());
  else
    ms = env_count("GPUCOMM_WAIT_TIMEOUT_MS", 1, max_wait_timeout_ms, "world",
                   "set it to a number of milliseconds in decimal digits, e.g. 5000, or unset it");
  return wait_timeout_word(ms.value_or(20'000) * 1'000'000, ms.has_value());
}

}  // namespace gpucomm::detail
