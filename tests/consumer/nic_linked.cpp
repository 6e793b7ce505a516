// Built by the consumer project against gpucomm::nic: the registration unit the package ships
// compiles into the program and installs IBGDAPost's and ProxyQueue's NIC set-up.
#include <gpucomm/transport/ibgda_post/nic_link.hpp>
#include <gpucomm/transport/proxy_queue/detail/nic_link.hpp>

int main() {
  namespace d = gpucomm::detail;
  bool const linked =
      d::linked_nic_setup<d::ibgda_nic_factory>() != nullptr && d::linked_nic_setup<d::proxy_nic_factory>() != nullptr;
  return linked ? 0 : 1;
}
