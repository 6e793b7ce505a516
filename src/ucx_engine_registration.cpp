// Compiled into every program that links the CMake target gpucomm::ucx: installs the UCX network
// engine behind gpucomm/transport/engine/engine_hook.hpp, so that require_net_engine() finds it,
// the probe that tells whether this UCX registers GPU memory, and ProxyQueue's engine set-up
// behind gpucomm/transport/proxy_queue/detail/engine_link.hpp, so that a world's ProxyQueue finds
// it (compiled here once, not in every file that includes ProxyQueue). Code that runs during
// static initialisation, before this unit's initialiser, does not see them.
#include <gpucomm/transport/engine/engine_hook.hpp>
#include <gpucomm/transport/engine/ucx_engine.hpp>
#include <gpucomm/transport/proxy_queue/detail/engine_setup.hpp>

namespace {
/// Whether this UCX registers CUDA device memory (built with CUDA support: its context lists the
/// CUDA memory type); false when it cannot, or when UCX cannot start at all.
bool ucx_registers_gpu_memory() noexcept {
  ucp_config_t* cfg = nullptr;
  if (ucp_config_read(nullptr, nullptr, &cfg) != UCS_OK) return false;
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA;
  ucp_context_h context = nullptr;
  ucs_status_t const st = ucp_init(&params, cfg, &context);
  ucp_config_release(cfg);
  if (st != UCS_OK) return false;
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  bool const cuda =
      ucp_context_query(context, &attr) == UCS_OK && (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
  ucp_cleanup(context);
  return cuda;
}

/// ProxyQueue's engine set-up, for proxy_queue/detail/engine_link.hpp.
std::unique_ptr<gpucomm::detail::proxy_engines_base> make_proxy_engines(gpucomm::detail::engine_world const& w,
                                                                        gpucomm::proxy_engine_options const& o,
                                                                        gpucomm::detail::proxy_failures& f) {
  return std::make_unique<gpucomm::detail::proxy_engines>(w, o, f);
}

[[maybe_unused]] bool const gpucomm_ucx_engine_installed = [] {
  gpucomm::engine::linked_net_engine() = &gpucomm::engine::make_ucx_engine;
  gpucomm::engine::linked_net_engine_gpu_probe() = &ucx_registers_gpu_memory;
  gpucomm::detail::linked_proxy_engines() = &make_proxy_engines;
  return true;
}();
}  // namespace
