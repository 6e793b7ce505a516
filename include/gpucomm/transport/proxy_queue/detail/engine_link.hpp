#pragma once
// Where ProxyQueue's engine backends plug into its host half (proxy_network::engine). Host only.
//
// The engines' set-up (engine_setup.hpp: the engines, their memory agents and backends) is
// compiled only into programs that link the CMake target gpucomm::ucx: its registration unit
// (src/ucx_engine_registration.cpp) installs the factory below during static initialisation, as
// it installs the engine itself (engine/engine_hook.hpp). ProxyQueue's host half names only this
// header, so a program that never asks for the engine does not compile its set-up, and one that
// asks without linking gpucomm::ucx gets engine_not_linked on every process, before any exchange.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../../../callback.hpp"
#include "../../engine/engine_hook.hpp"
#include "../../engine/memory_agent.hpp"
#include "../options.hpp"
#include "backend.hpp"
#include "failures.hpp"

namespace gpucomm::detail {

/// What the engines' set-up needs of the world.
struct engine_world {
  int npes = 0;
  std::uint64_t slot_bytes = 0;  ///< every PE's heap slot size (the heap's stride)
  struct local_pe {
    int pe = 0;
    int device = 0;
    std::uint64_t slot = 0;            ///< its heap slot, as its commands name it
    std::uint64_t* results = nullptr;  ///< its result slots (GPU memory), written by its agent
    std::uint32_t result_slots = 0;
    std::vector<std::uint8_t> paths;  ///< [peer]: proxy_path bits
  };
  std::vector<local_pe> locals;
  /// The world's bootstrap: `bytes` from every process into `recv`, in process order.
  callback<void(void const* send, void* recv, std::size_t bytes)> allgather;
  int processes = 1;
  /// The memory agent of a local PE's GPU; unset: a cuda_memory_agent on `device`. (Tests without
  /// a GPU give host_memory_agents over host-memory heaps.)
  callback<std::unique_ptr<engine::memory_agent>(int device)> make_agent;
};

/// The engines of a world's local PEs, set up (engine_setup.hpp's proxy_engines).
class proxy_engines_base {
 public:
  virtual ~proxy_engines_base() = default;
  /// PE pe's engine backend, for its ring (once per PE).
  virtual std::unique_ptr<proxy_backend> backend_for(int pe) = 0;
  /// How the engines move puts' and gets' bytes.
  virtual proxy_engine_data data() const noexcept = 0;
  /// The engine's name (library and version), for messages.
  virtual std::string name() const = 0;
};

using proxy_engines_factory = std::unique_ptr<proxy_engines_base> (*)(engine_world const&, proxy_engine_options const&,
                                                                      proxy_failures&);

/// The set-up linked into this program (gpucomm::ucx's registration unit sets it), or null.
proxy_engines_factory& linked_proxy_engines() noexcept;

/// Sets up the engines of `w`'s local PEs through the linked set-up; engine_not_linked (a
/// gpucomm::error naming gpucomm::ucx) when the program was not linked with it.
std::unique_ptr<proxy_engines_base> make_proxy_engines(engine_world const& w, proxy_engine_options const& options,
                                                       proxy_failures& failures);

}  // namespace gpucomm::detail

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "engine_link.inl"
#endif
