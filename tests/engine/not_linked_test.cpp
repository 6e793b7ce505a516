// A program that asks for a network engine without linking gpucomm::ucx gets a gpucomm::error that
// names the missing target (engine_not_linked), not a crash or a null engine: from the hook
// itself, and from ProxyQueue's engine set-up (proxy_network::engine), which a world runs on every
// process before any exchange.
#include <cstdio>
#include <memory>

#include <gpucomm/transport/engine/engine_hook.hpp>
#include <gpucomm/transport/engine/memory_agent.hpp>
#include <gpucomm/transport/proxy_queue/detail/engine_link.hpp>

#include "../not_linked.hpp"

int main() {
  using gpucomm::test::throws_naming;
  bool ok = throws_naming("the hook", {"engine_not_linked", "gpucomm::ucx", "engine test"},
                          [] { gpucomm::engine::require_net_engine("engine test", 0); });
  auto const engine_setup = [] {
    static std::uint64_t slot[64];
    std::uint64_t results[4] = {};
    gpucomm::detail::engine_world w;
    w.npes = 1;
    w.slot_bytes = sizeof slot;
    w.allgather = [](void const*, void*, std::size_t) { std::printf("FAIL: an exchange before the check\n"); };
    w.make_agent = [](int) { return std::make_unique<gpucomm::engine::host_memory_agent>(); };
    w.locals.push_back({0, -1, reinterpret_cast<std::uint64_t>(slot), results, 4, {3}});
    gpucomm::detail::proxy_failures failures;
    auto const engines = gpucomm::detail::make_proxy_engines(w, {}, failures);
  };
  ok &= throws_naming("ProxyQueue's engine set-up",
                      {"engine_not_linked", "gpucomm::ucx", "world::comm<ProxyQueue> (proxy_network::engine)"},
                      engine_setup);
  return ok ? 0 : 1;
}
