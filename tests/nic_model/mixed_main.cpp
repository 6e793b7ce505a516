// The file of the mixed program that sees only production headers: it reaches the model through
// the hook that linking gpucomm::nic_model installed.
#include <gpucomm/transport/nic/endpoints.hpp>

#include <cstdio>

bool model_counts_nothing_yet();

int main() {
  gpucomm::detail::nic_model_factory const make = gpucomm::detail::require_nic_model("IBGDAPost", "test", 0);
  gpucomm::detail::nic_model_config config;
  config.devices.push_back({"gpucomm_model_0", "", 1, 0x0002c90300000000ull, false});
  auto model = make(config);
  gpucomm::nic_model_stats const s = model->stats();
  bool const ok = model != nullptr && s.wqes == 0 && model_counts_nothing_yet();
  std::puts(ok ? "PASS: the model is reachable through the hook, beside a file using its headers" : "FAIL");
  return ok ? 0 : 1;
}
