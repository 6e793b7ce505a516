#pragma once
// What the software NIC model (gpucomm::nic_model, testing/) of a process did, as the NIC
// transports' host halves report it (model_stats()): a test and development tool. Plain values, no
// dependencies, so the transports' host halves can name it without the NIC set-up.

#include <cstdint>

namespace gpucomm {

/// What the NIC model of this process did so far (faults injected included). Zeros on hardware.
struct nic_model_stats {
  std::uint64_t doorbells = 0, doorbells_dropped = 0, doorbells_duplicated = 0;
  std::uint64_t wqes = 0, cqes = 0, error_cqes = 0, flushed = 0, bytes = 0;
  std::uint64_t atomics = 0;     ///< atomics executed on this NIC's memory (as responder)
  std::uint64_t remote_ops = 0;  ///< requests sent to other NICs (as requester)
  std::uint64_t served = 0;      ///< requests of other NICs answered (as responder)
  /// Faults injected besides drops and duplicates: doorbell handlings and CQEs delayed.
  std::uint64_t doorbells_delayed = 0, cqes_delayed = 0;
  /// CQEs written to a collapsed CQ without overrun-ignore while its last one was unconsumed.
  std::uint64_t cq_overruns = 0;
};

}  // namespace gpucomm
