#pragma once
// gpucomm::verbs_gpu: device-side mlx5 verbs (umbrella header).
//
//   prm.cuh               opcodes, WQE segments, CQE, segment builders, doorbell format
//   wqe.cuh               whole-WQE builders writing into a ring slot
//   send_queue.cuh        reserve / build / publish / ring; group-level posting; flush, quiet
//   completion_queue.cuh  collapsed and owner-bit CQ polling, error CQE decoding
//
// Host-only parts: host/ (rdma-core setup of GPU-resident QPs), model/ (the software NIC).

#include "completion_queue.cuh"
#include "prm.cuh"
#include "send_queue.cuh"
#include "wqe.cuh"
