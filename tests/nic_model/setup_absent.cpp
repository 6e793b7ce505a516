// A program built without gpucomm::nic: IBGDAPost's and ProxyQueue's NIC backend's requests for
// the NIC set-up fail with a gpucomm::error that names the missing target (nic_setup_not_linked),
// not a crash or a null set-up. Their host halves ask first, on every process, before any exchange.
#include <gpucomm/transport/ibgda_post/nic_link.hpp>
#include <gpucomm/transport/proxy_queue/detail/nic_link.hpp>

#include <cstdio>

#include "../not_linked.hpp"

int main() {
  namespace d = gpucomm::detail;
  if (d::linked_nic_setup<d::ibgda_nic_factory>() != nullptr ||
      d::linked_nic_setup<d::proxy_nic_factory>() != nullptr) {
    std::puts("FAIL: a NIC set-up is installed in a program that did not link gpucomm::nic");
    return 1;
  }
  bool ok = gpucomm::test::throws_naming("IBGDAPost", {"nic_setup_not_linked", "gpucomm::nic ", "IBGDAPost"}, [] {
    d::require_nic_setup<d::ibgda_nic_factory>("world::comm<IBGDAPost>", 3);
  });
  ok &= gpucomm::test::throws_naming(
      "ProxyQueue's NIC backend", {"nic_setup_not_linked", "gpucomm::nic ", "ProxyQueue"},
      [] { d::require_nic_setup<d::proxy_nic_factory>("world::comm<ProxyQueue> (proxy_network::nic)", 3); });
  return ok ? 0 : 1;
}
