#pragma once
// Device collectives on teams (collectives/, one header each; docs/guide/collectives.md):
//   broadcast, allgather, alltoall, alltoallv, reduce, allreduce (with epilogues: epilogue.cuh;
//   row-wise: allreduce_rows.cuh), reduce_scatter, and MoE dispatch and combine (moe.cuh)
// over any transport with put_signal, signal and quiet, in a team's workspace
// (collectives/workspace.hpp; host/team_workspace.hpp makes one), with the reduction operations
// of collectives/reduction.cuh; and their host launchers (host/collectives.cuh).

#include "collectives/allgather.cuh"
#include "host/collectives.cuh"
#include "collectives/allreduce.cuh"
#include "collectives/allreduce_rows.cuh"
#include "collectives/alltoall.cuh"
#include "collectives/alltoallv.cuh"
#include "collectives/broadcast.cuh"
#include "collectives/epilogue.cuh"
#include "collectives/moe.cuh"
#include "collectives/reduce.cuh"
#include "collectives/reduce_scatter.cuh"
#include "collectives/reduction.cuh"
#include "collectives/workspace.hpp"
