// A program that asks for a network engine without linking gpucomm::ucx gets a gpucomm::error that
// names the missing target (engine_not_linked), not a crash or a null engine: from the hook
// itself, and from ProxyQueue's engine set-up (proxy_network::engine), which a world runs on every
// process before any exchange.
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include <gpucomm/transport/engine/engine_hook.hpp>
#include <gpucomm/transport/engine/memory_agent.hpp>
#include <gpucomm/transport/proxy_queue/detail/engine_link.hpp>

namespace {
/// Whether f throws a gpucomm::error naming engine_not_linked, gpucomm::ucx and `who`.
bool names_the_target(char const* case_name, std::string const& who, std::function<void()> const& f) {
  try {
    f();
  } catch (gpucomm::error const& e) {
    std::string const what = e.what();
    bool const ok = what.find("engine_not_linked") != std::string::npos &&
                    what.find("gpucomm::ucx") != std::string::npos && what.find(who) != std::string::npos;
    std::printf("%s: %s: %s\n", ok ? "PASS" : "FAIL", case_name, e.what());
    return ok;
  }
  std::printf("FAIL: %s: no error without gpucomm::ucx\n", case_name);
  return false;
}
}  // namespace

int main() {
  bool ok = names_the_target("the hook", "engine test", [] { gpucomm::engine::require_net_engine("engine test", 0); });
  ok &= names_the_target("ProxyQueue's engine set-up", "world::comm<ProxyQueue> (proxy_network::engine)", [] {
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
  });
  return ok ? 0 : 1;
}
