#pragma once
// The faults the software NIC model (gpucomm::nic_model, testing/) injects, as the transports that drive it take
// them in their options (ibgda_options::model_faults, proxy_options::model_faults): a test and
// development tool. Plain values, no dependencies, so options headers can hold one.

#include <cstdint>

namespace gpucomm {

struct nic_model_faults {
  unsigned doorbell_delay_us = 0;             ///< before a doorbell is handled
  unsigned completion_delay_us = 0;           ///< before a completion is written
  double drop_doorbell = 0.0;                 ///< probability that a doorbell is ignored
  double duplicate_doorbell = 0.0;            ///< probability that a doorbell is handled twice
  double doorbell_delay_probability = 1.0;    ///< of each doorbell handling being delayed
  double completion_delay_probability = 1.0;  ///< of each completion being delayed
  std::uint64_t seed = 1;                     ///< of the model's fault draws
};

}  // namespace gpucomm
