// The file of the mixed program that uses the model's own headers (as the NIC model's unit tests
// do) beside the production ones.
#include <gpucomm/testing/nic_model/nic_backend.hpp>
#include <gpucomm/testing/nic_model/nic_model.hpp>
#include <gpucomm/transport/nic/endpoints.hpp>

/// Drives a model network directly: nothing has run, so it counts nothing.
bool model_counts_nothing_yet() {
  gpucomm::verbs_gpu::model::model_network network;
  gpucomm::nic_model_stats const s = network.data_path().stats();
  return s.doorbells == 0 && s.wqes == 0 && s.cqes == 0;
}
