#pragma once
// The NIC model behind the transports' hook (gpucomm/transport/nic/model_hook.hpp): one
// model_network (the process's data path) and one firmware_fabric (the modelled devices) per
// transport that chose nic_choice::model, and a nic_backend per local PE on them.
//
// Programs do not include this: linking the CMake target gpucomm::nic_model compiles
// testing/src/nic_model_registration.cpp into them, which calls install_nic_model() once during
// static initialisation. Tests that drive the model directly include nic_model.hpp and
// nic_backend.hpp instead.

#include <gpucomm/transport/nic/model_hook.hpp>
#include <memory>

#include "nic_backend.hpp"
#include "nic_model.hpp"

namespace gpucomm::verbs_gpu::model {

class hooked_model final : public gpucomm::detail::nic_model_instance {
 public:
  explicit hooked_model(gpucomm::detail::nic_model_config const& c) : network_(network_config(c)) {
    for (gpucomm::detail::nic_model_device const& d : c.devices) {
      firmware_config f;
      f.name = d.name;
      f.pci_bus_id = d.pci_bus_id;
      f.ports = {port_config::infiniband(d.lid, d.port_guid)};
      f.remote = d.remote;
      fabric_.add_device(std::move(f));
    }
    for (auto const& [name, address] : c.remotes) network_.add_remote(name, address);
    if (!c.listen.empty()) network_.data_path().listen(c.listen);
  }

  std::unique_ptr<host::control_memory> gpu_control_memory() override { return std::make_unique<model_gpu_memory>(); }
  std::unique_ptr<host::backend> backend(host::control_memory& memory, void const* range, std::size_t bytes,
                                         int device) override {
    auto be = std::make_unique<nic_backend>(fabric_, network_, memory);
    be->gpu_range(range, bytes, device);
    return be;
  }
  void start() override { network_.data_path().start(); }
  void stop() noexcept override { network_.data_path().stop(); }
  nic_model_stats stats() override { return network_.data_path().stats(); }

 private:
  static nic_config network_config(gpucomm::detail::nic_model_config const& c) {
    nic_config n;
    n.fault = faults_from(c.faults);
    return n;
  }

  model_network network_;
  firmware_fabric fabric_;
};

/// Makes the model the one the NIC transports of this program use (idempotent).
inline bool install_nic_model() noexcept {
  gpucomm::detail::linked_nic_model() =
      [](gpucomm::detail::nic_model_config const& c) -> std::unique_ptr<gpucomm::detail::nic_model_instance> {
    return std::make_unique<hooked_model>(c);
  };
  return true;
}

}  // namespace gpucomm::verbs_gpu::model
