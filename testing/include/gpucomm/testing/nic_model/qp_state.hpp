#pragma once
// A QP's state, as the firmware model tracks it and the NIC model executes by: the kernel's
// MLX5_QPC_STATE_* values. The NIC model's QPs are only ever in rts or error.

#include <cstdint>

namespace gpucomm::verbs_gpu::model {

enum class qp_state : std::uint8_t { reset = 0, init = 1, rtr = 2, rts = 3, error = 6 };

}  // namespace gpucomm::verbs_gpu::model
