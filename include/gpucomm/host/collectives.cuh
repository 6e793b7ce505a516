#pragma once
// Host launchers: the device collectives for programs that do not write their own kernels.
//
//   gpucomm::team_workspace ws(w, w.team_world());
//   gpucomm::allreduce(w, ws, pe, dst, src, n, gpucomm::reduction::sum{}, stream);  // one local PE
//   gpucomm::allreduce(w, ws, dst_array, src_array, n, gpucomm::reduction::sum{});  // every local PE
//
// Each call launches one kernel per local PE: one CTA of 1024 threads per workspace part (the
// multi-CTA form when the workspace has several parts), calling the device collective with the
// whole CTA as its group. The first form launches for PE `pe` on `stream` (a process-per-GPU
// program, as with NCCL: every member process calls it); the second on every local PE's world
// stream (w.stream(pe)) with symmetric arrays. Both may be captured in a CUDA graph: they only
// launch kernels. Every member of the workspace's team must make the same calls in the same order;
// PEs outside it are refused (gpucomm::error). The transport is the first template argument
// (NVLinkStore by default): gpucomm::allreduce<gpucomm::ProxyQueue>(...). Arguments, in-place
// rules and algorithms are those of the device collectives (docs/collectives.md).

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "../error.hpp"
#include "detail/device_guard.hpp"
#include "team_workspace.hpp"
#include "world.hpp"
#include "../transport/nvlink_store.cuh"
#include "../collectives/allgather.cuh"
#include "../collectives/allreduce.cuh"
#include "../collectives/alltoall.cuh"
#include "../collectives/broadcast.cuh"
#include "../collectives/reduce.cuh"
#include "../collectives/reduce_scatter.cuh"

namespace gpucomm {

namespace detail {

/// Threads per CTA of the launchers' kernels.
inline constexpr unsigned launcher_threads = 1024;

// One call of a device collective, as a trivially copyable value the kernel takes.
template <class T>
struct broadcast_call {
  static constexpr bool src_at_root_only = true;
  T* dst;
  T const* src;
  std::size_t n;
  int root;
  template <class C, class G>
  __device__ void operator()(C const& c, G const& g, collective_workspace const& ws) const {
    broadcast(c, g, ws, dst, src, n, root);
  }
};
template <class T>
struct allgather_call {
  T* dst;
  T const* src;
  std::size_t n;
  template <class C, class G>
  __device__ void operator()(C const& c, G const& g, collective_workspace const& ws) const {
    allgather(c, g, ws, dst, src, n);
  }
};
template <class T>
struct alltoall_call {
  T* dst;
  T const* src;
  std::size_t n;
  template <class C, class G>
  __device__ void operator()(C const& c, G const& g, collective_workspace const& ws) const {
    alltoall(c, g, ws, dst, src, n);
  }
};
template <class T, class Op>
struct reduce_call {
  static constexpr bool dst_at_root_only = true;
  T* dst;
  T const* src;
  std::size_t n;
  int root;
  template <class C, class G>
  __device__ void operator()(C const& c, G const& g, collective_workspace const& ws) const {
    reduce(c, g, ws, dst, src, n, Op{}, root);
  }
};
template <allreduce_algorithm Algorithm, class T, class Op>
struct allreduce_call {
  T* dst;
  T const* src;
  std::size_t n;
  template <class C, class G>
  __device__ void operator()(C const& c, G const& g, collective_workspace const& ws) const {
    allreduce<Algorithm>(c, g, ws, dst, src, n, Op{});
  }
};
template <class T, class Op>
struct reduce_scatter_call {
  T* dst;
  T const* src;
  std::size_t n;
  template <class C, class G>
  __device__ void operator()(C const& c, G const& g, collective_workspace const& ws) const {
    reduce_scatter(c, g, ws, dst, src, n, Op{});
  }
};

template <class Tr, class Call>
__global__ void __launch_bounds__(launcher_threads) collective_kernel(comm<Tr> c, collective_workspace ws, Call call) {
  auto const block = cooperative_groups::this_thread_block();
  call(c, block, ws.parts > 1 ? ws.part(static_cast<int>(blockIdx.x)) : ws);
}

/// What is wrong with `call` at team rank `rank` of `members`, or an empty string. The device
/// collectives check the root too, but only in debug builds, and a null pointer faults the kernel
/// and with it the CUDA context: both are refused here, before anything is launched.
template <class Call>
std::string launch_problem(Call const& call, team const& members, int rank) {
  bool is_root = true;
  if constexpr (requires { call.root; }) {
    if (call.root < 0 || call.root >= members.size) {
      return "root " + std::to_string(call.root) + " is not a rank of the team (0 to " +
             std::to_string(members.size - 1) + ")";
    }
    is_root = rank == call.root;
  }
  bool need_src = call.n > 0, need_dst = call.n > 0;
  if constexpr (requires { Call::src_at_root_only; }) need_src = need_src && is_root;
  if constexpr (requires { Call::dst_at_root_only; }) need_dst = need_dst && is_root;
  if (need_src && call.src == nullptr) return "src is null, for " + std::to_string(call.n) + " elements";
  if (need_dst && call.dst == nullptr) return "dst is null, for " + std::to_string(call.n) + " elements";
  return {};
}

/// Launches `call` for local PE `pe` on `stream`.
template <class Tr, class Call>
void launch_collective(world& w, team_workspace const& ws, int pe, Call const& call, cudaStream_t stream,
                       char const* name) {
  if (!ws.members().contains(pe)) {
    throw error(name, pe, "this PE is not a member of the workspace's team",
                "call collectives only on the team's members");
  }
  if (std::string const problem = launch_problem(call, ws.members(), ws.members().rank_of(pe)); !problem.empty())
    throw error(name, pe, problem, "pass a root inside the team and device memory for the buffers this PE uses");
  comm<Tr> const c = w.comm<Tr>(pe);
  current_device_guard const keep;
  GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
  collective_kernel<Tr, Call><<<static_cast<unsigned>(ws.parts()), launcher_threads, 0, stream>>>(c, ws.view(pe), call);
  GPUCOMM_CUDA_CHECK(cudaGetLastError(), pe);
}

/// f(pe) for every local PE that is a member of the workspace's team.
template <class F>
void for_each_local_member(world& w, team_workspace const& ws, F&& f) {
  for (int pe : w.local_pes())
    if (ws.members().contains(pe)) f(pe);
}

}  // namespace detail

// ---- one local PE, on a stream of the caller's -------------------------------------------------

template <class Tr = NVLinkStore, class T>
void broadcast(world& w, team_workspace const& ws, int pe, T* dst, T const* src, std::size_t n, int root,
               cudaStream_t stream) {
  detail::launch_collective<Tr>(w, ws, pe, detail::broadcast_call<T>{dst, src, n, root}, stream, "gpucomm::broadcast");
}
template <class Tr = NVLinkStore, class T>
void allgather(world& w, team_workspace const& ws, int pe, T* dst, T const* src, std::size_t n, cudaStream_t stream) {
  detail::launch_collective<Tr>(w, ws, pe, detail::allgather_call<T>{dst, src, n}, stream, "gpucomm::allgather");
}
template <class Tr = NVLinkStore, class T>
void alltoall(world& w, team_workspace const& ws, int pe, T* dst, T const* src, std::size_t n, cudaStream_t stream) {
  detail::launch_collective<Tr>(w, ws, pe, detail::alltoall_call<T>{dst, src, n}, stream, "gpucomm::alltoall");
}
template <class Tr = NVLinkStore, class T, class Op>
void reduce(world& w, team_workspace const& ws, int pe, T* dst, T const* src, std::size_t n, Op, int root,
            cudaStream_t stream) {
  detail::launch_collective<Tr>(w, ws, pe, detail::reduce_call<T, Op>{dst, src, n, root}, stream, "gpucomm::reduce");
}
template <class Tr = NVLinkStore, allreduce_algorithm Algorithm = allreduce_algorithm::automatic, class T, class Op>
void allreduce(world& w, team_workspace const& ws, int pe, T* dst, T const* src, std::size_t n, Op,
               cudaStream_t stream) {
  detail::launch_collective<Tr>(w, ws, pe, detail::allreduce_call<Algorithm, T, Op>{dst, src, n}, stream,
                                "gpucomm::allreduce");
}
template <class Tr = NVLinkStore, class T, class Op>
void reduce_scatter(world& w, team_workspace const& ws, int pe, T* dst, T const* src, std::size_t n, Op,
                    cudaStream_t stream) {
  detail::launch_collective<Tr>(w, ws, pe, detail::reduce_scatter_call<T, Op>{dst, src, n}, stream,
                                "gpucomm::reduce_scatter");
}

// ---- every local member PE, on its world stream, with symmetric arrays: the forms above ------

template <class Tr = NVLinkStore, class T>
void broadcast(world& w, team_workspace const& ws, sym_array<T> const& dst, sym_array<T> const& src, std::size_t n,
               int root) {
  detail::for_each_local_member(
      w, ws, [&](int pe) { broadcast<Tr>(w, ws, pe, dst.ptr(pe).get(), src.ptr(pe).get(), n, root, w.stream(pe)); });
}
template <class Tr = NVLinkStore, class T>
void allgather(world& w, team_workspace const& ws, sym_array<T> const& dst, sym_array<T> const& src, std::size_t n) {
  detail::for_each_local_member(
      w, ws, [&](int pe) { allgather<Tr>(w, ws, pe, dst.ptr(pe).get(), src.ptr(pe).get(), n, w.stream(pe)); });
}
template <class Tr = NVLinkStore, class T>
void alltoall(world& w, team_workspace const& ws, sym_array<T> const& dst, sym_array<T> const& src, std::size_t n) {
  detail::for_each_local_member(
      w, ws, [&](int pe) { alltoall<Tr>(w, ws, pe, dst.ptr(pe).get(), src.ptr(pe).get(), n, w.stream(pe)); });
}
template <class Tr = NVLinkStore, class T, class Op>
void reduce(world& w, team_workspace const& ws, sym_array<T> const& dst, sym_array<T> const& src, std::size_t n, Op op,
            int root) {
  detail::for_each_local_member(
      w, ws, [&](int pe) { reduce<Tr>(w, ws, pe, dst.ptr(pe).get(), src.ptr(pe).get(), n, op, root, w.stream(pe)); });
}
template <class Tr = NVLinkStore, allreduce_algorithm Algorithm = allreduce_algorithm::automatic, class T, class Op>
void allreduce(world& w, team_workspace const& ws, sym_array<T> const& dst, sym_array<T> const& src, std::size_t n,
               Op op) {
  detail::for_each_local_member(w, ws, [&](int pe) {
    allreduce<Tr, Algorithm>(w, ws, pe, dst.ptr(pe).get(), src.ptr(pe).get(), n, op, w.stream(pe));
  });
}
template <class Tr = NVLinkStore, class T, class Op>
void reduce_scatter(world& w, team_workspace const& ws, sym_array<T> const& dst, sym_array<T> const& src, std::size_t n,
                    Op op) {
  detail::for_each_local_member(
      w, ws, [&](int pe) { reduce_scatter<Tr>(w, ws, pe, dst.ptr(pe).get(), src.ptr(pe).get(), n, op, w.stream(pe)); });
}

}  // namespace gpucomm
