#pragma once
// Where a network engine's implementation plugs in. Host only.
//
// The UCX engine (engine/ucx_engine.hpp) needs UCX's headers and libraries, which gpucomm's core
// does not: no header of the core includes it. A program that links the CMake target gpucomm::ucx
// gets one extra translation unit, which installs the engine's factory here during static
// initialisation; code that wants an engine asks require_net_engine(), which throws a
// gpucomm::error naming the target when the program was not linked with it. Every translation
// unit sees the same headers whether or not the program links UCX, so there is no
// one-definition-rule hazard and no macro to agree on (the pattern of transport/nic/model_hook.hpp).
//
//   gpucomm::engine::host_memory_agent agent;
//   gpucomm::engine::net_engine_config config{.rank = rank, .size = size, .agent = &agent};
//   auto engine = gpucomm::engine::require_net_engine("my program", rank)(config);

#include <memory>
#include <string>

#include "../../error.hpp"
#include "net_engine.hpp"

namespace gpucomm::engine {

using net_engine_factory = std::unique_ptr<net_engine> (*)(net_engine_config const&);

/// The engine linked into this program (gpucomm::ucx's registration unit sets it), or null.
inline net_engine_factory& linked_net_engine() noexcept {
  static net_engine_factory factory = nullptr;
  return factory;
}

/// Whether the linked engine can register GPU memory for RMA (gpucomm::ucx's registration unit
/// sets it; null: no engine, or one that cannot).
using net_engine_gpu_probe = bool (*)() noexcept;
inline net_engine_gpu_probe& linked_net_engine_gpu_probe() noexcept {
  static net_engine_gpu_probe probe = nullptr;
  return probe;
}

/// The linked engine's factory; a gpucomm::error naming the CMake target to link when there is
/// none. `who` is the caller for the message, `pe` its PE (or -1).
inline net_engine_factory require_net_engine(std::string const& who, int pe) {
  if (net_engine_factory const f = linked_net_engine()) return f;
  throw error(who, pe,
              "a network engine was asked for, but this program was not linked with one "
              "(engine_not_linked)",
              "link the CMake target gpucomm::ucx (needs UCX: Debian's libucx-dev), see docs/guide/across_nodes.md");
}

}  // namespace gpucomm::engine
