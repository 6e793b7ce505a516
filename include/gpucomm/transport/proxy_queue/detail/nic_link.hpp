#pragma once
// Where ProxyQueue's NIC backend plugs into its host half (proxy_network::nic). Host only.
//
// The NIC backend's set-up (nic_setup.hpp: the NICs opened, a host-posted QP to every PE made and
// connected, the heap and the result slots registered, nic_backend.hpp's backend per PE) is
// compiled into programs that link the CMake target gpucomm::nic, whose registration unit installs
// the factory below (transport/nic/setup_hook.hpp). ProxyQueue's host half names only this header
// and asks for the factory before any exchange, so a program without gpucomm::nic that needs the
// NIC backend gets nic_setup_not_linked on every process.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "../../../host/world_options.hpp"
#include "../../nic/model_stats.hpp"
#include "../../nic/setup_hook.hpp"
#include "../options.hpp"
#include "backend.hpp"
#include "failures.hpp"

namespace gpucomm::detail {

/// What the NIC backend of one local PE needs of its host half.
struct proxy_nic_pe {
  int pe = 0;
  int device = 0;  ///< its GPU
  /// [result_slots + 1] in GPU memory: the result slots, then the discarded values' word.
  std::uint64_t* results = nullptr;
  std::uint32_t result_slots = 0;
  std::vector<std::uint8_t> paths;  ///< [peer]: proxy_path bits
  /// staging_layout::bytes in GPU memory, where the device stages local buffers (detail/staging.hpp).
  unsigned char* staging = nullptr;
};

/// The NIC backends of a world's local PEs, set up and serving (their NICs, queues and
/// registrations). Stopped, then destroyed, after the proxy threads; the backends it handed out
/// are idle by then.
class proxy_nic {
 public:
  virtual ~proxy_nic() = default;
  /// PE pe's NIC backend, for its ring (once per PE).
  virtual std::unique_ptr<proxy_backend> backend_for(int pe) = 0;
  /// world::allocate: every local PE's NIC registers the new block and learns every PE's rkey of
  /// it; collective, undone everywhere when it fails anywhere.
  virtual void add_heap_block(std::size_t offset, std::size_t bytes) = 0;
  /// world::deallocate, the proxy drained: the block's regions go. Never throws.
  virtual void remove_heap_block(std::size_t offset, std::size_t bytes) noexcept = 0;
  /// world::register_buffer: PE b.pe's NIC registers the buffer, and its backend takes commands
  /// from and into it. Throws gpucomm::error.
  virtual void add_buffer(registered_buffer const& b) = 0;
  /// world::unregister_buffer, the proxy drained: the buffer's region goes. Never throws.
  virtual void remove_buffer(registered_buffer const& b) noexcept = 0;
  /// Throws the first error no completion carries (the NICs' asynchronous events).
  virtual void check_async_events() const = 0;
  /// The NIC model stops executing: nothing reads memory being released after this.
  virtual void stop() noexcept = 0;
  /// What this process's NIC model did so far; zeros on hardware.
  virtual nic_model_stats model_stats() const = 0;
};

/// What gpucomm::nic's registration unit installs (linked_nic_setup<proxy_nic_factory>()).
using proxy_nic_factory = std::unique_ptr<proxy_nic> (*)(world&, proxy_options const&, std::vector<proxy_nic_pe>,
                                                         proxy_failures&);

}  // namespace gpucomm::detail
