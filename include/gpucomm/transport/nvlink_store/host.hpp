#pragma once
// NVLinkStore, host half: hands out device states, refusing a PE that cannot load and store some
// other PE's heap. The device side is nvlink_store/device.cuh. It needs the world's definition only
// where world::comm instantiates it, so this header does not include host/world.hpp.

#include <string>

#include "../../error.hpp"
#include "state.hpp"

namespace gpucomm::detail {

template <class World>
class load_store_host {
 public:
  explicit load_store_host(World& w) : world_(&w) {}
  /// Whether PE `from` reaches PE `to` through this transport (world::reaches, composite transports).
  bool reaches(int from, int to) const { return world_->can_load_store(from, to); }
  /// PE `pe`'s device state for a composite transport that sends it only to the peers it reaches
  /// (no check that every peer is reachable).
  nvlink_store_state routed_state_for(int) const { return {world_->heap_layout().stride}; }
  nvlink_store_state device_state_for(int pe) const {
    for (int to = 0; to < world_->npes(); ++to) {
      if (!world_->can_load_store(pe, to)) {
        throw error("world::comm<NVLinkStore>", pe,
                    "PE " + std::to_string(to) + " cannot be reached by load/store from PE " + std::to_string(pe) +
                        " (no NVLink or PCIe peer access between their GPUs, another host, or excluded by "
                        "world_options::load_store_filter)",
                    "run every PE on GPUs of one host with peer access (NVLink or PCIe P2P), or give the "
                    "unreachable peers a transport that goes through the network");
      }
    }
    return routed_state_for(pe);
  }

 private:
  World* world_;
};

}  // namespace gpucomm::detail
