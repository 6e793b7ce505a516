#pragma once
// ProxyQueue's device state, apart from its device code so the host half builds it without any.

#include <cstddef>
#include <type_traits>

#include "command_ring.cuh"

namespace gpucomm::detail {

/// What ProxyQueue's device code needs: this PE's command ring, and how far apart the PEs' heap
/// slots are (the operations the GPU carries out itself reach peers through the mapped heap,
/// host/detail/heap.hpp).
struct proxy_queue_state {
  proxy_queue::command_ring ring{};
  std::size_t stride = 0;
};
static_assert(std::is_trivially_copyable_v<proxy_queue_state>);

}  // namespace gpucomm::detail
