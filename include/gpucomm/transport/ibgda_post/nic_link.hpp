#pragma once
// IBGDAPost's NIC set-up behind a link-time hook (transport/nic/setup_hook.hpp). Host only.
//
// The set-up (host_state.hpp: the NICs opened, the QPs made and connected, the heap and buffers
// registered, the device tables the kernels read) is compiled into programs that link the CMake
// target gpucomm::nic, whose registration unit installs the factory below. IBGDAPost's host half
// (host.cuh) names only this header and asks the factory first, on every process, so a program
// without gpucomm::nic gets nic_setup_not_linked before any exchange.

#include <cstddef>
#include <memory>

#include "../../host/world_options.hpp"
#include "../nic/model_stats.hpp"
#include "../nic/setup_hook.hpp"
#include "options.hpp"
#include "state.hpp"

namespace gpucomm::detail {

/// IBGDAPost's NICs, set up for a world's local PEs: what its host half forwards the world's
/// calls to. Made by the linked factory; destroyed before the world's heap goes.
class ibgda_nic {
 public:
  virtual ~ibgda_nic() = default;
  /// Local PE pe's device state: its queues, key table, result and staging slots.
  virtual ibgda_state device_state_for(int pe) const = 0;
  /// world::register_buffer / unregister_buffer: the NIC learns (forgets) a local buffer.
  virtual void on_register_buffer(registered_buffer const& b) = 0;
  virtual void on_unregister_buffer(registered_buffer const& b) = 0;
  /// world::allocate: the new heap block registered everywhere (collective).
  virtual void on_heap_block(std::size_t offset, std::size_t bytes) = 0;
  /// world::deallocate, the kernels done: the block's registrations go. Never throws.
  virtual void on_heap_block_freed(std::size_t offset, std::size_t bytes) noexcept = 0;
  /// What this process's NIC model did so far; zeros on hardware.
  virtual nic_model_stats model_stats() const = 0;
  /// Throws the first failure the local QPs or the NIC recorded, as a gpucomm::error.
  virtual void check_errors() const = 0;
};

/// What gpucomm::nic's registration unit installs (linked_nic_setup<ibgda_nic_factory>()).
using ibgda_nic_factory = std::unique_ptr<ibgda_nic> (*)(world&, ibgda_options const&);

}  // namespace gpucomm::detail
