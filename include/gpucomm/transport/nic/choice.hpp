#pragma once
// Which NIC IBGDAPost drives: ibgda_options::nic, or the environment variable GPUCOMM_NIC.

namespace gpucomm {

enum class nic_choice {
  automatic,  ///< GPUCOMM_NIC decides ("model" or "hardware"); unset: hardware
  hardware,   ///< the mlx5 NIC closest to each PE's GPU; an error if there is none
  model,      ///< the software NIC model (test support: link gpucomm::nic_model): a test and development tool
};

}  // namespace gpucomm
