#pragma once
// The world's settings from world_options and the environment: the heap size
// (GPUCOMM_HEAP_BYTES), the team limit (GPUCOMM_MAX_TEAMS), the debug-build wait timeout
// (GPUCOMM_WAIT_TIMEOUT_MS) and the expected PE count. Each throws gpucomm::error naming the option
// or variable, its value and what to give instead. (CUDA_DEVICE_MAX_CONNECTIONS:
// hardware_queues.hpp.)

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "../../detail/bounded_wait.cuh"
#include "../../detail/control_block.hpp"
#include "../../error.hpp"
#include "../world_options.hpp"
#include "env_count.hpp"

namespace gpucomm::detail {

/// Throws when the program expects another number of PEs than `source` (the device list, the
/// launcher) gives.
void check_pe_count(world_options const& options, int actual, char const* source);

/// The largest heap per PE: every PE's slot must fit one reservation of the address space
/// (2^47 bytes of virtual addresses on current GPUs, far above any GPU's memory).
inline constexpr std::size_t max_heap_bytes = std::size_t{1} << 47;

/// Bytes of symmetric heap per PE: world_options::heap_bytes, else GPUCOMM_HEAP_BYTES, else 1 GiB.
std::size_t heap_bytes_from(world_options const& options);

/// How many teams may exist at once: world_options::max_teams, else GPUCOMM_MAX_TEAMS, else 32.
int max_teams_from(world_options const& options);

/// The longest wait timeout: a day.
inline constexpr std::uint64_t max_wait_timeout_ms = 86'400'000;

/// The wait timeout as device code takes it (detail/bounded_wait.cuh, the timeout rule):
/// world_options::wait_timeout, else GPUCOMM_WAIT_TIMEOUT_MS, both marked as asked for (release
/// builds honour them too), else 20 s for debug builds only.
std::uint64_t wait_timeout_word_from(world_options const& options);

}  // namespace gpucomm::detail

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "world_env.inl"
#endif
