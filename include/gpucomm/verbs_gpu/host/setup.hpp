#pragma once
// Host set-up of GPU-posted mlx5 RC QPs: the objects whose device views (send_queue,
// completion_queue) kernels use. Include this header for all of it; each part has its own:
//
//   device.hpp               host::device, steps 1-4: choose the NIC (by name, else the mlx5 device
//                            closest to the GPU in the PCI tree), open it with DEVX, QUERY_HCA_CAP and
//                            check what verbs_gpu needs, pick the RoCE GID, decide dma-buf or peer
//                            memory, allocate the PD; the per-page count of mapped doorbells
//   memory_registration.hpp  host::memory_region, step 13: an MR, dma-buf first;
//                            host::region_registry, step 13: an MR per heap allocation and the
//                            (base, length, rkey) table peers exchange; step 6: the UMEM of each of a
//                            qp's queue objects
//   queues.hpp               host::qp, steps 5-10 and 14: the SQ ring, CQ and both doorbell records in
//                            control memory, one UMEM each; the CQ and RC QP through DEVX, the UAR
//                            mapped into the GPU, the device view; host::host_qp, an RC QP a host
//                            thread posts to (ProxyQueue's NIC backend): made with ordinary verbs
//                            (ibv_create_qp, no DEVX) where the backend has them, its rings taken from
//                            mlx5dv_init_obj; on the firmware model, a qp with its queues in host
//                            memory and the host ringing the UAR itself
//   connection.hpp           host::exchange, step 11: connection data through any allgather; step 12:
//                            RESET -> INIT -> RTR -> RTS for IB and RoCE, for both kinds of QP
//   detail/setup_common.hpp  host::setup_error and the helpers that word its messages
//
// The steps, in order: 1 choose and open the NIC, 2 query the port and capabilities, 3 decide how the
// NIC reaches GPU memory, 4 the PD, 5 control memory for the queues, 6 their UMEMs, 7 the CQ, 8 the
// doorbell UAR, 9-10 the QP, 11 exchange connection data, 12 RESET -> INIT -> RTR -> RTS, 13 MRs of
// the data buffers, 14 the device view. docs/guide/mlx5-setup-references.md ("refs" in the comments, with
// its section) collects what the references do at each.
//
// Everything goes through host::backend (backend.hpp): rdma_core_backend.hpp on a real NIC, the
// firmware model (test support, gpucomm::nic_model) in tests; the control memory through
// host::control_memory (GPU memory on hardware, host memory in tests). These headers need neither
// rdma-core nor the CUDA runtime, so the host tests run all of it against the model.
//
// Every failure throws verbs_gpu::host::setup_error naming the call, its error and what to do. This
// code (host_qp's ordinary-verbs path included) has run against the firmware model only, never on a
// NIC; see docs/guide/verbs_gpu.md, "Running on a real mlx5 NIC".

#include "connection.hpp"
#include "detail/setup_common.hpp"
#include "device.hpp"
#include "memory_registration.hpp"
#include "queues.hpp"
