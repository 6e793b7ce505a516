// Compiled into every program that links the CMake target gpucomm::nic_model: installs the
// software NIC model behind the NIC transports' hook (gpucomm/transport/nic/model_hook.hpp), so
// nic_choice::model (or GPUCOMM_NIC=model) works in that program. A world built during static
// initialisation, before this unit's initialiser has run, does not see the model.
#include <gpucomm/testing/nic_model/instance.hpp>

namespace {
[[maybe_unused]] bool const gpucomm_nic_model_installed = gpucomm::verbs_gpu::model::install_nic_model();
}  // namespace
