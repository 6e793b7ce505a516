// A program that asks for a network engine without linking gpucomm::ucx gets a gpucomm::error that
// names the missing target (engine_not_linked), not a crash or a null engine.
#include <cstdio>
#include <string>

#include <gpucomm/transport/engine/engine_hook.hpp>

int main() {
  try {
    gpucomm::engine::require_net_engine("engine test", 0);
  } catch (gpucomm::error const& e) {
    std::string const what = e.what();
    bool const ok =
        what.find("engine_not_linked") != std::string::npos && what.find("gpucomm::ucx") != std::string::npos;
    std::printf("%s: %s\n", ok ? "PASS" : "FAIL", e.what());
    return ok ? 0 : 1;
  }
  std::printf("FAIL: no error without gpucomm::ucx\n");
  return 1;
}
