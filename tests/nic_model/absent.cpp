// A program built without gpucomm::nic_model: the NIC transports' request for the model fails with
// the named error, and nothing else about the production headers changes.
#include <gpucomm/transport/nic/endpoints.hpp>

#include <cstdio>
#include <string>

int main() {
  if (gpucomm::detail::linked_nic_model() != nullptr) {
    std::puts("FAIL: a model is installed in a program that did not link gpucomm::nic_model");
    return 1;
  }
  try {
    gpucomm::detail::require_nic_model("IBGDAPost", "ibgda_options::nic", 3);
  } catch (gpucomm::error const& e) {
    std::string const what = e.what();
    bool const named = what.find("gpucomm::nic_model") != std::string::npos &&
                       what.find("IBGDAPost") != std::string::npos &&
                       what.find("ibgda_options::nic") != std::string::npos;
    std::printf("%s: %s\n", named ? "PASS" : "FAIL", e.what());
    return named ? 0 : 1;
  }
  std::puts("FAIL: asking for the NIC model without it did not throw");
  return 1;
}
