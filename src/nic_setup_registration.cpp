// Compiled into every program that links the CMake target gpucomm::nic (gpucomm::nic_model and
// gpucomm::verbs link it): installs the NIC set-up behind the NIC transports' hooks, IBGDAPost's
// (gpucomm/transport/ibgda_post/nic_link.hpp) and ProxyQueue's NIC backend's
// (gpucomm/transport/proxy_queue/detail/nic_link.hpp), so that a world's IBGDAPost and ProxyQueue
// find them (compiled here once, not in every file that includes the transports). Built with
// rdma-core where the program links gpucomm::verbs (GPUCOMM_HAVE_RDMA_CORE), else for the NIC model
// only. Code that runs during static initialisation, before this unit's initialiser, does not see
// them.
#include <gpucomm/transport/ibgda_post/host_state.hpp>
#include <gpucomm/transport/proxy_queue/detail/nic_setup.hpp>

#include <memory>
#include <utility>
#include <vector>

namespace {
std::unique_ptr<gpucomm::detail::ibgda_nic> make_ibgda_nic(gpucomm::world& w, gpucomm::ibgda_options const& o) {
  return std::make_unique<gpucomm::detail::ibgda_host>(w, o);
}

std::unique_ptr<gpucomm::detail::proxy_nic> make_proxy_nic(gpucomm::world& w, gpucomm::proxy_options const& o,
                                                           std::vector<gpucomm::detail::proxy_nic_pe> pes,
                                                           gpucomm::detail::proxy_failures& f) {
  return std::make_unique<gpucomm::detail::proxy_nic_setup>(w, o, std::move(pes), f);
}

[[maybe_unused]] bool const gpucomm_nic_setup_installed = [] {
  gpucomm::detail::linked_nic_setup<gpucomm::detail::ibgda_nic_factory>() = &make_ibgda_nic;
  gpucomm::detail::linked_nic_setup<gpucomm::detail::proxy_nic_factory>() = &make_proxy_nic;
  return true;
}();
}  // namespace
