#pragma once
// The bodies of engine_link.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::detail {

inline proxy_engines_factory& linked_proxy_engines() noexcept {
  static proxy_engines_factory factory = nullptr;
  return factory;
}

inline std::unique_ptr<proxy_engines_base> make_proxy_engines(engine_world const& w,
                                                              proxy_engine_options const& options,
                                                              proxy_failures& failures) {
  proxy_engines_factory const make = linked_proxy_engines();
  if (make == nullptr) {
    engine::require_net_engine("world::comm<ProxyQueue> (proxy_network::engine)", w.locals.front().pe);
    throw error("world::comm<ProxyQueue> (proxy_network::engine)", w.locals.front().pe,
                "the engine is linked but ProxyQueue's engine set-up is not (engine_not_linked)",
                "link the CMake target gpucomm::ucx, whose registration unit installs both");
  }
  return make(w, options, failures);
}

}  // namespace gpucomm::detail
