#pragma once
// Where the software NIC model plugs into the NIC transports. Host only.
//
// The model (testing/, CMake target gpucomm::nic_model) is test support, not the product: no
// production header includes it. A program that links gpucomm::nic_model gets one extra
// translation unit, which installs the model's factory here during static initialisation; the
// NIC transports (IBGDAPost, ProxyQueue's NIC backend) ask for it when nic_choice::model is chosen
// and throw a gpucomm::error naming the target when it is missing.
//
// Why a run-time hook and not a macro: every translation unit of a program sees the same
// production headers whether or not the program uses the model, so files built with and without
// it link together without breaking the one-definition rule, and a program that uses only
// NVLinkStore, P2PCopy or the copy-engine ProxyQueue never compiles the model.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../../error.hpp"
#include "../../verbs_gpu/host/backend.hpp"
#include "model_faults.hpp"
#include "model_stats.hpp"

namespace gpucomm::detail {

/// One modelled device (an mlx5 NIC with one InfiniBand port).
struct nic_model_device {
  std::string name;
  std::string pci_bus_id;  ///< the GPU it sits beside; empty for a remote device
  std::uint16_t lid = 0;
  std::uint64_t port_guid = 0;
  bool remote = false;  ///< modelled by another process, served to this one over its fabric address
};

/// The model a transport asks for: its devices, and where the remote ones are served.
struct nic_model_config {
  nic_model_faults faults{};
  std::vector<nic_model_device> devices;
  std::vector<std::pair<std::string, std::string>> remotes;  ///< (device name, fabric address)
  std::string listen;  ///< this process's fabric address; empty: a single-process world
};

/// A running model: one data path for the process, and the device contexts set-up opens on it.
class nic_model_instance {
 public:
  virtual ~nic_model_instance() = default;
  /// Control memory for GPU-posted queues, in GPU memory as on hardware.
  virtual std::unique_ptr<verbs_gpu::host::control_memory> gpu_control_memory() = 0;
  /// A device context whose default memory is `memory`; [range, range + bytes) on CUDA device
  /// `device` is GPU memory the runtime cannot describe in one piece (the symmetric heap slot).
  virtual std::unique_ptr<verbs_gpu::host::backend> backend(verbs_gpu::host::control_memory& memory, void const* range,
                                                            std::size_t bytes, int device) = 0;
  /// The data path starts executing the QPs set-up made / stops (nothing is read after stop()).
  virtual void start() = 0;
  virtual void stop() noexcept = 0;
  virtual nic_model_stats stats() = 0;
};

using nic_model_factory = std::unique_ptr<nic_model_instance> (*)(nic_model_config const&);

/// The model linked into this program (gpucomm::nic_model's registration unit sets it), or null.
inline nic_model_factory& linked_nic_model() noexcept {
  static nic_model_factory factory = nullptr;
  return factory;
}

/// The linked model's factory; a gpucomm::error naming the missing CMake target when there is none.
/// `who` is the transport ("IBGDAPost"), `option` the option that chose the model.
inline nic_model_factory require_nic_model(char const* who, char const* option, int pe) {
  if (nic_model_factory const f = linked_nic_model()) return f;
  throw error(std::string("world::comm<") + who + ">", pe,
              std::string("the software NIC model was asked for (") + option +
                  " or GPUCOMM_NIC=model), but this program was not linked with it",
              "link the CMake target gpucomm::nic_model (test support: testing/), or choose "
              "nic_choice::hardware on a machine with an mlx5 NIC");
}

}  // namespace gpucomm::detail
