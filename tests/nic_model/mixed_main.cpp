// The file of the mixed program that sees only production headers: it reaches the model through
// the hook that linking gpucomm::nic_model installed.
#include <gpucomm/transport/ibgda_post/nic_link.hpp>
#include <gpucomm/transport/nic/endpoints.hpp>
#include <gpucomm/transport/proxy_queue/detail/nic_link.hpp>

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
  // Linking gpucomm::nic_model links the set-up the model runs under (gpucomm::nic).
  namespace d = gpucomm::detail;
  bool const setup =
      d::linked_nic_setup<d::ibgda_nic_factory>() != nullptr && d::linked_nic_setup<d::proxy_nic_factory>() != nullptr;
  std::puts(setup ? "PASS: the NIC set-up is installed with the model" : "FAIL: the NIC set-up is not installed");
  return ok && setup ? 0 : 1;
}
