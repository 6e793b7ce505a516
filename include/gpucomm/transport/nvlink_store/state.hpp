#pragma once
// NVLinkStore's device state, apart from its device code so the host half builds it without any.

#include <cstddef>
#include <type_traits>

namespace gpucomm {
class world;
}

namespace gpucomm::detail {

/// What NVLinkStore's device code needs: how far apart the PEs' heap slots are (host/detail/heap.hpp
/// maps PE j's slot at base + j * stride in every address space that reaches it).
struct nvlink_store_state {
  std::size_t stride = 0;
};
static_assert(std::is_trivially_copyable_v<nvlink_store_state>);

/// The host half of NVLinkStore and P2PCopy (nvlink_store/host.hpp). A template on the world only so
/// that a kernel's translation unit may include the transport without the world's definition; it
/// is instantiated where world::comm is, with gpucomm::world.
template <class World>
class load_store_host;
using nvlink_store_host = load_store_host<world>;

}  // namespace gpucomm::detail
