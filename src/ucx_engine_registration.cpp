// Compiled into every program that links the CMake target gpucomm::ucx: installs the UCX network
// engine behind gpucomm/transport/engine/engine_hook.hpp, so that require_net_engine() finds it.
// Code that runs during static initialisation, before this unit's initialiser, does not see it.
#include <gpucomm/transport/engine/engine_hook.hpp>
#include <gpucomm/transport/engine/ucx_engine.hpp>

namespace {
[[maybe_unused]] bool const gpucomm_ucx_engine_installed = [] {
  gpucomm::engine::linked_net_engine() = &gpucomm::engine::make_ucx_engine;
  return true;
}();
}  // namespace
