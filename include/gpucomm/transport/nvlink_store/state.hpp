#pragma once
// NVLinkStore's device state, apart from its device code so the host half builds it without any.

#include <cstddef>
#include <type_traits>

namespace gpucomm::detail {

/// What NVLinkStore's device code needs: how far apart the PEs' heap slots are (host/detail/heap.hpp
/// maps PE j's slot at base + j * stride in every address space that reaches it).
struct nvlink_store_state {
  std::size_t stride = 0;
};
static_assert(std::is_trivially_copyable_v<nvlink_store_state>);

}  // namespace gpucomm::detail
