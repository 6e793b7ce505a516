// Compiled into every program that links the CMake target gpucomm::nic (gpucomm::nic_model and
// gpucomm::verbs link it): installs the NIC set-up behind IBGDAPost's hook
// (gpucomm/transport/ibgda_post/nic_link.hpp), so that a world's IBGDAPost finds it (compiled here
// once, not in every file that includes the transport). Built with rdma-core where the program
// links gpucomm::verbs (GPUCOMM_HAVE_RDMA_CORE), else for the NIC model only. Code that runs during
// static initialisation, before this unit's initialiser, does not see it.
#include <gpucomm/transport/ibgda_post/host_state.hpp>

#include <memory>

namespace {
std::unique_ptr<gpucomm::detail::ibgda_nic> make_ibgda_nic(gpucomm::world& w, gpucomm::ibgda_options const& o) {
  return std::make_unique<gpucomm::detail::ibgda_host>(w, o);
}

[[maybe_unused]] bool const gpucomm_nic_setup_installed = [] {
  gpucomm::detail::linked_ibgda_nic() = &make_ibgda_nic;
  return true;
}();
}  // namespace
