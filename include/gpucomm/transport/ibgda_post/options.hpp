#pragma once
// IBGDAPost's options: which NIC (model or hardware, and which device), how many QPs per peer. Give them to the world
// before IBGDAPost's first use: `w.configure<gpucomm::IBGDAPost>({.nic = gpucomm::nic_choice::model})`.

#include <string>

#include "../nic/choice.hpp"
#include "../nic/model_faults.hpp"

namespace gpucomm {

struct ibgda_options {
  /// The NIC (see nic_choice); automatic: the environment variable GPUCOMM_NIC decides. Asking for
  /// hardware never falls back to the model.
  nic_choice nic = nic_choice::automatic;
  /// Hardware: the ibv device to use for every local PE ("mlx5_0"); empty: the mlx5 device closest
  /// to each PE's GPU in the PCI tree (verbs_gpu/host/setup.hpp, device_options::name).
  std::string nic_name{};
  /// RC QPs from each PE to each PE; a calling group always uses the same one per peer
  /// (ibgda_post/device.cuh says which). 0: GPUCOMM_QPS_PER_PEER if set, else 2.
  int qps_per_peer = 0;
  /// Faults the NIC model injects (nic_choice::model only): a test and development tool. Dropped
  /// doorbells are recovered: a wait that sees no completion for a while rings again
  /// (verbs_gpu/send_queue.cuh, "Lost doorbells").
  nic_model_faults model_faults{};
};

}  // namespace gpucomm
