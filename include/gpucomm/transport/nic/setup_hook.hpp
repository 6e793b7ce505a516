#pragma once
// Where the NIC set-up plugs into the NIC transports. Host only.
//
// The set-up (endpoints.hpp over verbs_gpu/host/: opening NICs, registering memory, making and
// connecting queues; rdma-core's verbs where the program is built with them) is compiled only into
// programs that link the CMake target gpucomm::nic, which gpucomm::nic_model (the software NIC, for
// tests) and gpucomm::verbs (rdma-core, for hardware) link too. Its registration unit
// (src/nic_setup_registration.cpp) installs each NIC transport's set-up during static
// initialisation: IBGDAPost's behind ibgda_post/nic_link.hpp, ProxyQueue's NIC backend behind
// proxy_queue/detail/nic_link.hpp. The transports include only those link headers, so a program
// that uses neither compiles none of the set-up, and one that asks for either without linking
// gpucomm::nic gets nic_setup_not_linked on every process, before any exchange.

#include <string>

#include "../../error.hpp"

namespace gpucomm::detail {

/// The set-up of type `Factory` (a transport's factory function pointer: ibgda_nic_factory,
/// proxy_nic_factory) linked into this program, or null; gpucomm::nic's registration unit sets it.
template <class Factory>
Factory& linked_nic_setup() noexcept {
  static Factory factory = nullptr;
  return factory;
}

/// The linked set-up of type `Factory`; nic_setup_not_linked (a gpucomm::error naming gpucomm::nic)
/// when the program was not linked with it. `who` is the call that needs it, `pe` the PE asking.
template <class Factory>
Factory require_nic_setup(char const* who, int pe) {
  if (Factory const linked = linked_nic_setup<Factory>()) return linked;
  throw error(who, pe, "the NIC set-up was asked for, but this program was not linked with it (nic_setup_not_linked)",
              "link the CMake target gpucomm::nic (gpucomm::nic_model, the software NIC for tests, and "
              "gpucomm::verbs, rdma-core for a real NIC, link it too)");
}

}  // namespace gpucomm::detail
