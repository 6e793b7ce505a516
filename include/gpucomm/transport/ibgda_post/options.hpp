#pragma once
// IBGDAPost's options: which NIC, how many QPs per peer. Give them to the world before IBGDAPost's
// first use: `w.configure<gpucomm::IBGDAPost>({.nic = gpucomm::nic_choice::model})`.

#include "../../host/nic_choice.hpp"
#include "../../verbs_gpu/model/fault_options.hpp"

namespace gpucomm {

struct ibgda_options {
  /// The NIC (see nic_choice); automatic: the environment variable GPUCOMM_NIC decides. Asking for
  /// hardware never falls back to the model.
  nic_choice nic = nic_choice::automatic;
  /// RC QPs from each PE to each PE; a calling group always uses the same one per peer
  /// (ibgda_post/device.cuh says which). 0: GPUCOMM_QPS_PER_PEER if set, else 2.
  int qps_per_peer = 0;
  /// Faults the NIC model injects (nic_choice::model only): a test and development tool. IBGDAPost
  /// does not ring a doorbell again while it waits, so a dropped doorbell that no later post on
  /// the same QP covers leaves its operations unexecuted: a wait on them times out (debug builds)
  /// or hangs. Keep drop_doorbell at 0 unless every wait is followed by more posts.
  nic_model_faults model_faults{};
};

}  // namespace gpucomm
