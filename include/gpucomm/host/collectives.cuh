#pragma once
// Host launchers: the device collectives for programs that do not write their own kernels.
//
//   gpucomm::team_workspace ws(w, w.team_world());
//   gpucomm::allreduce(w, ws, pe, dst, src, n, gpucomm::reduction::sum{}, stream);  // one local PE
//   gpucomm::allreduce(w, ws, dst_array, src_array, n, gpucomm::reduction::sum{});  // every local PE
//
// Each call launches one kernel per local PE, of launch_shape CTAs (collectives/launch_shape.hpp),
// CTA k running part k of the workspace with the whole CTA as its group. The shape is chosen per
// call from the algorithm or protocol (allreduce's, allgather's, alltoall's and reduce_scatter's
// automatic choices made here, as the device makes them), the message's bytes, the workspace's
// parts and its cta_limit(): the packet protocol takes CTAs of 256 threads by size (1 at 1 KiB to 64
// at 256 KiB), the round protocols every part (up to the limit) in CTAs of 1024.
// allreduce_launch_shape, data_launch_shape and rounds_launch_shape say what a call takes;
// alltoallv_launch_shape what alltoallv takes for a bound on its pairs, and advises device callers.
//
// The first form launches for PE `pe` on `stream` (a process-per-GPU program, as with NCCL: every
// member process calls it); the second on every local PE's world stream (w.stream(pe)) with
// symmetric arrays. Kernels are launched with programmatic dependent launch (PDL) where the
// workspace allows it (team_workspace::programmatic_launch; off with set_programmatic_launch(false)
// or workspace_options::programmatic_launch = false): a kernel may then start while the stream's
// previous kernel finishes, and waits for it (griddepcontrol.wait) before touching any memory; it
// lets the stream's next PDL kernel start early in turn. Both forms may be captured in a CUDA
// graph (PDL launches become programmatic edges). Every member of the workspace's team must make
// the same calls in the same order; PEs outside it are refused (gpucomm::error). The transport is
// the first template argument (NVLinkStore by default): gpucomm::allreduce<gpucomm::ProxyQueue>(...).
// Arguments, in-place rules and algorithms are those of the device collectives (docs/guide/collectives.md).

#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <nv/target>

#include <cstddef>
#include <string>
#include <type_traits>

#include "../error.hpp"
#include "detail/device_guard.hpp"
#include "team_workspace.hpp"
#include "world.hpp"
#include "../transport/nvlink_store.cuh"
#include "../collectives/allgather.cuh"
#include "../collectives/allreduce.cuh"
#include "../collectives/allreduce_rows.cuh"
#include "../collectives/alltoall.cuh"
#include "../collectives/alltoallv.cuh"
#include "../collectives/broadcast.cuh"
#include "../collectives/detail/buffer_rules.hpp"
#include "../collectives/launch_shape.hpp"
#include "../collectives/reduce.cuh"
#include "../collectives/reduce_scatter.cuh"
#include "moe.cuh"  // the MoE plan and its launchers

namespace gpucomm {

namespace detail {

// One call of a device collective, as a trivially copyable value the kernel takes.
template <class T>
struct broadcast_call {
  static constexpr bool src_at_root_only = true;
  T* dst;
  T const* src;
  std::size_t n;
  int root;
  call_buffers buffers(int, int) const { return buffers_of(src, n, dst, n, in_place_at(0)); }
  template <class C, class G>
  __device__ void operator()(C const& c, G const& g, collective_workspace const& ws) const {
    broadcast(c, g, ws, dst, src, n, root);
  }
};
/// allgather, alltoall, reduce_scatter in protocol P, chosen on the host by data_protocol: a
/// kernel per protocol, each with only its own code.
template <class T, collective_protocol P = collective_protocol::rounds>
struct allgather_call {
  T* dst;
  T const* src;
  std::size_t n;
  call_buffers buffers(int size, int rank) const {
    return buffers_of(src, n, dst, static_cast<std::size_t>(size) * n,
                      in_place_at(static_cast<std::ptrdiff_t>(rank) * static_cast<std::ptrdiff_t>(n)));
  }
  template <class C, class G>
  __device__ void operator()(C const& c, G const& g, collective_workspace const& ws) const {
    allgather_as<P>(c, g, ws, dst, src, n, collective_entry::kernel_start);
  }
};
template <class T, collective_protocol P = collective_protocol::rounds>
struct alltoall_call {
  T* dst;
  T const* src;
  std::size_t n;
  call_buffers buffers(int size, int) const {
    return buffers_of(src, static_cast<std::size_t>(size) * n, dst, static_cast<std::size_t>(size) * n);
  }
  template <class C, class G>
  __device__ void operator()(C const& c, G const& g, collective_workspace const& ws) const {
    alltoall_as<P>(c, g, ws, dst, src, n, collective_entry::kernel_start);
  }
};
/// alltoallv with its counts and offsets in device memory, written by earlier work on the stream.
/// The sizes are the device's, so the host checks only the pointers.
template <class T>
struct alltoallv_call {
  T* dst;
  std::size_t* recv_counts;
  std::size_t dst_capacity;
  T const* src;
  std::size_t const* send_counts;
  std::size_t const* send_offsets;
  std::string problem() const {
    if (send_counts == nullptr || send_offsets == nullptr || recv_counts == nullptr)
      return "send_counts, send_offsets or recv_counts is null (team size entries each, in device memory)";
    if (src == nullptr)
      return "src is null (the counts are read on the device: pass the send buffer even when they are 0)";
    if (dst == nullptr && dst_capacity > 0)
      return "dst is null, for dst_capacity " + std::to_string(dst_capacity) + " elements";
    if (static_cast<void const*>(src) == static_cast<void const*>(dst))
      return "src and dst are the same buffer (alltoallv's must not overlap)";
    return {};
  }
  template <class C, class G>
  __device__ void operator()(C const& c, G const& g, collective_workspace const& ws) const {
    alltoallv_as(c, g, ws, dst, recv_counts, dst_capacity, src, send_counts, send_offsets,
                 collective_entry::kernel_start);
  }
};
template <class T, class Op>
struct reduce_call {
  static constexpr bool dst_at_root_only = true;
  T* dst;
  T const* src;
  std::size_t n;
  int root;
  call_buffers buffers(int, int) const { return buffers_of(src, n, dst, n, in_place_at(0)); }
  template <class C, class G>
  __device__ void operator()(C const& c, G const& g, collective_workspace const& ws) const {
    reduce(c, g, ws, dst, src, n, Op{}, root);
  }
};
/// allreduce with algorithm Chosen (packets, one_shot or two_shot), chosen on the host by
/// chosen_allreduce: a kernel per algorithm, each with only its own code (and registers).
template <allreduce_algorithm Chosen, class T, class Op, class Epilogue = identity_epilogue>
struct allreduce_call {
  T* dst;
  T const* src;
  std::size_t n;
  Epilogue epilogue;
  call_buffers buffers(int, int) const { return buffers_of(src, n, dst, n, in_place_at(0)); }
  template <class C, class G>
  __device__ void operator()(C const& c, G const& g, collective_workspace const& ws) const {
    constexpr bool packets = Chosen == allreduce_algorithm::packets;
    allreduce_chosen<packets, !packets, Op>(c, g, ws, Chosen, dst, src, n, collective_entry::kernel_start,
                                            allreduce_extras<Epilogue>{epilogue});
  }
};
/// allreduce_rows with algorithm Chosen (packets or one_shot).
template <allreduce_algorithm Chosen, class T, class Op, class RowFn>
struct allreduce_rows_call {
  T* dst;
  T const* src;
  std::size_t n;  ///< rows * cols
  std::size_t rows;
  std::size_t cols;
  RowFn row_fn;
  call_buffers buffers(int, int) const { return buffers_of(src, n, dst, n, in_place_at(0)); }
  template <class C, class G>
  __device__ void operator()(C const& c, G const& g, collective_workspace const& ws) const {
    allreduce_rows_chosen<Chosen == allreduce_algorithm::packets, Op>(c, g, ws, Chosen, dst, src, rows, cols,
                                                                      collective_entry::kernel_start, row_fn);
  }
};
template <class T, class Op, collective_protocol P = collective_protocol::rounds>
struct reduce_scatter_call {
  T* dst;
  T const* src;
  std::size_t n;
  call_buffers buffers(int size, int rank) const {
    return buffers_of(src, static_cast<std::size_t>(size) * n, dst, n,
                      in_place_at(-static_cast<std::ptrdiff_t>(rank) * static_cast<std::ptrdiff_t>(n)));
  }
  template <class C, class G>
  __device__ void operator()(C const& c, G const& g, collective_workspace const& ws) const {
    reduce_scatter_as<P, Op>(c, g, ws, dst, src, n, collective_entry::kernel_start);
  }
};

/// The launchers' kernel: CTA k runs `call` on part k of ws (ws.parts == gridDim.x).
template <class Tr, class Call, int Threads>
__global__ void __launch_bounds__(Threads) collective_kernel(comm<Tr> c, collective_workspace ws, Call call) {
  // Programmatic dependent launch: this kernel may have started before the stream's previous kernel
  // finished. griddepcontrol.wait returns once that kernel has completed and its memory operations
  // are visible (at once when launched without PDL); nothing here touches memory before it. Then
  // the stream's next kernel, if launched with PDL, may start: it waits in turn before touching
  // memory, so this kernel's results are complete for it whatever the trigger's place.
  NV_IF_TARGET(NV_PROVIDES_SM_90, (cudaGridDependencySynchronize(); cudaTriggerProgrammaticLaunchCompletion();));
  auto const block = cooperative_groups::this_thread_block();
  call(c, block, ws.part(static_cast<int>(blockIdx.x)));
}

/// The co-residency cap and parts of ws, as collective_launch_shape takes them.
inline launch_shape shape_on(team_workspace const& ws, collective_protocol protocol, std::size_t bytes) {
  return collective_launch_shape(protocol, bytes, ws.parts(), ws.cta_limit());
}

/// What is wrong with `call` at team rank `rank` of `members`, or an empty string: a root outside
/// the team, a null buffer this member uses, or src and dst overlapping other than in the
/// collective's in-place form (detail/buffer_rules.hpp); a call whose sizes only the device knows
/// says itself (its problem()). The device collectives check the root too, but only in debug
/// builds, a null pointer faults the kernel and with it the CUDA context, and an overlap gives
/// wrong results silently: all are refused here, before anything is launched.
template <class Call>
std::string launch_problem(Call const& call, team const& members, int rank) {
  if constexpr (requires { call.problem(); }) {
    (void)members, (void)rank;
    return call.problem();
  } else {
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
    if (need_src && need_dst) {
      call_buffers const b = call.buffers(members.size, rank);
      if (overlap_refused(b)) {
        return "src (" + std::to_string(b.src_bytes) + " bytes) and dst (" + std::to_string(b.dst_bytes) +
               " bytes) overlap other than as the collective's in-place form";
      }
    }
    return {};
  }
}

/// Launches `call` for local PE `pe` on `stream`, in `ctas` CTAs of Threads threads.
template <class Tr, int Threads, class Call>
void launch_collective(world& w, team_workspace const& ws, int pe, Call const& call, int ctas, cudaStream_t stream,
                       char const* name) {
  if (!ws.members().contains(pe)) {
    throw error(name, pe, "this PE is not a member of the workspace's team",
                "call collectives only on the team's members");
  }
  if (std::string const problem = launch_problem(call, ws.members(), ws.members().rank_of(pe)); !problem.empty())
    throw error(name, pe, problem,
                "pass a root inside the team, device memory for the buffers this PE uses, and buffers that "
                "overlap only in the in-place form (docs/guide/collectives.md)");
  comm<Tr> const c = w.comm<Tr>(pe);
  current_device_guard const keep;
  GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
  cudaLaunchAttribute programmatic{};
  programmatic.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  programmatic.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(ctas));
  config.blockDim = dim3(static_cast<unsigned>(Threads));
  config.stream = stream;
  config.attrs = &programmatic;
  config.numAttrs = ws.programmatic_launch() ? 1 : 0;
  GPUCOMM_CUDA_CHECK(
      cudaLaunchKernelEx(&config, collective_kernel<Tr, Call, Threads>, c, ws.view(pe).first_parts(ctas), call), pe);
}

/// Launches a round-protocol collective: every part (up to the cap), round_threads threads each.
template <class Tr, class Call>
void launch_rounds(world& w, team_workspace const& ws, int pe, Call const& call, cudaStream_t stream,
                   char const* name) {
  launch_shape const shape = shape_on(ws, collective_protocol::rounds, 0);
  launch_collective<Tr, round_threads>(w, ws, pe, call, shape.ctas, stream, name);
}

/// Launches allgather, alltoall or reduce_scatter (make.template operator()<P>() makes its call in
/// protocol P) in the protocol data_protocol chooses for n elements of T per member pair.
template <class Tr, class T, class Make>
void launch_data(world& w, team_workspace const& ws, int pe, std::size_t n, Make&& make, cudaStream_t stream,
                 char const* name) {
  if constexpr (packets_automatic<Tr, T>) {
    if (data_protocol<Tr, T>(n, ws.members().size) == collective_protocol::packets) {
      launch_shape const shape = shape_on(ws, collective_protocol::packets, n * sizeof(T));
      launch_collective<Tr, packet_threads>(w, ws, pe, make.template operator()<collective_protocol::packets>(),
                                            shape.ctas, stream, name);
      return;
    }
  }
  launch_rounds<Tr>(w, ws, pe, make.template operator()<collective_protocol::rounds>(), stream, name);
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
  detail::launch_rounds<Tr>(w, ws, pe, detail::broadcast_call<T>{dst, src, n, root}, stream, "gpucomm::broadcast");
}
template <class Tr = NVLinkStore, class T>
void allgather(world& w, team_workspace const& ws, int pe, T* dst, T const* src, std::size_t n, cudaStream_t stream) {
  detail::launch_data<Tr, T>(
      w, ws, pe, n,
      [&]<detail::collective_protocol P>() {
        return detail::allgather_call<T, P>{dst, src, n};
      },
      stream, "gpucomm::allgather");
}
template <class Tr = NVLinkStore, class T>
void alltoall(world& w, team_workspace const& ws, int pe, T* dst, T const* src, std::size_t n, cudaStream_t stream) {
  detail::launch_data<Tr, T>(
      w, ws, pe, n,
      [&]<detail::collective_protocol P>() {
        return detail::alltoall_call<T, P>{dst, src, n};
      },
      stream, "gpucomm::alltoall");
}
template <class Tr = NVLinkStore, class T, class Op>
void reduce(world& w, team_workspace const& ws, int pe, T* dst, T const* src, std::size_t n, Op, int root,
            cudaStream_t stream) {
  detail::launch_rounds<Tr>(w, ws, pe, detail::reduce_call<T, Op>{dst, src, n, root}, stream, "gpucomm::reduce");
}
/// allreduce, each reduced element stored through `epilogue` (collectives/epilogue.cuh; the functor
/// travels to the kernel by value).
template <class Tr = NVLinkStore, allreduce_algorithm Algorithm = allreduce_algorithm::automatic, class T, class Op,
          class Epilogue>
void allreduce(world& w, team_workspace const& ws, int pe, T* dst, T const* src, std::size_t n, Op, Epilogue epilogue,
               cudaStream_t stream) {
  require_reduction<Op, T>();
  detail::require_epilogue<Epilogue, T>();
  constexpr bool holds_packets = detail::allreduce_holds_packets<Algorithm, Tr, T>();
  constexpr char const* name = "gpucomm::allreduce";
  using enum allreduce_algorithm;
  allreduce_algorithm const chosen = detail::chosen_allreduce<Tr, T>(Algorithm, n, ws.members().size);
  if constexpr (holds_packets) {
    if (chosen == packets) {
      launch_shape const shape = detail::shape_on(ws, detail::collective_protocol::packets, n * sizeof(T));
      detail::launch_collective<Tr, detail::packet_threads>(
          w, ws, pe, detail::allreduce_call<packets, T, Op, Epilogue>{dst, src, n, epilogue}, shape.ctas, stream, name);
    }
  }
  if constexpr (Algorithm == one_shot || Algorithm == automatic) {
    if (chosen == one_shot)
      detail::launch_rounds<Tr>(w, ws, pe, detail::allreduce_call<one_shot, T, Op, Epilogue>{dst, src, n, epilogue},
                                stream, name);
  }
  if constexpr (Algorithm == two_shot || Algorithm == automatic) {
    if (chosen == two_shot)
      detail::launch_rounds<Tr>(w, ws, pe, detail::allreduce_call<two_shot, T, Op, Epilogue>{dst, src, n, epilogue},
                                stream, name);
  }
}
template <class Tr = NVLinkStore, allreduce_algorithm Algorithm = allreduce_algorithm::automatic, class T, class Op>
void allreduce(world& w, team_workspace const& ws, int pe, T* dst, T const* src, std::size_t n, Op op,
               cudaStream_t stream) {
  allreduce<Tr, Algorithm>(w, ws, pe, dst, src, n, op, identity_epilogue{}, stream);
}

/// The launch gpucomm::allreduce_rows<Tr, Algorithm> makes for rows x cols elements of T on ws, at
/// every member: allreduce_launch_shape's for its algorithm, at most one CTA per row.
template <class T, class Tr = NVLinkStore, allreduce_algorithm Algorithm = allreduce_algorithm::automatic>
launch_shape allreduce_rows_launch_shape(team_workspace const& ws, std::size_t rows, std::size_t cols) {
  std::size_t const n = rows * cols;
  bool const packets =
      detail::chosen_allreduce_rows<Tr, T>(Algorithm, n, ws.members().size) == allreduce_algorithm::packets;
  launch_shape shape = detail::shape_on(
      ws, packets ? detail::collective_protocol::packets : detail::collective_protocol::rounds, n * sizeof(T));
  if (static_cast<std::size_t>(shape.ctas) > rows) shape.ctas = rows > 0 ? static_cast<int>(rows) : 1;
  return shape;
}

/// allreduce_rows (collectives/allreduce_rows.cuh) of rows x cols elements: refuses cols whose
/// rows are not a multiple of 16 bytes (gpucomm::error); runs at most one CTA per row.
template <class Tr = NVLinkStore, allreduce_algorithm Algorithm = allreduce_algorithm::automatic, class T, class Op,
          class RowFn>
void allreduce_rows(world& w, team_workspace const& ws, int pe, T* dst, T const* src, std::size_t rows,
                    std::size_t cols, Op, RowFn row_fn, cudaStream_t stream) {
  require_reduction<Op, T>();
  static_assert(Algorithm != allreduce_algorithm::two_shot, "gpucomm: allreduce_rows runs packets or one_shot");
  static_assert(std::is_trivially_copyable_v<RowFn>,
                "gpucomm: allreduce_rows' row function travels to the kernel by "
                "value: it must be trivially copyable");
  constexpr bool holds_packets = detail::allreduce_holds_packets<Algorithm, Tr, T>();
  constexpr char const* name = "gpucomm::allreduce_rows";
  if (!detail::rows_fit<T>(cols)) {
    throw error(name, pe,
                "rows of " + std::to_string(cols) + " elements of " + std::to_string(sizeof(T)) +
                    " bytes are not a positive multiple of 16 bytes",
                "pad the rows to a multiple of 16 bytes, or use allreduce and a kernel of your own");
  }
  using enum allreduce_algorithm;
  std::size_t const n = rows * cols;
  allreduce_algorithm const chosen = detail::chosen_allreduce_rows<Tr, T>(Algorithm, n, ws.members().size);
  launch_shape const shape = allreduce_rows_launch_shape<T, Tr, Algorithm>(ws, rows, cols);
  if constexpr (holds_packets) {
    if (chosen == packets) {
      detail::launch_collective<Tr, detail::packet_threads>(
          w, ws, pe, detail::allreduce_rows_call<packets, T, Op, RowFn>{dst, src, n, rows, cols, row_fn}, shape.ctas,
          stream, name);
    }
  }
  if constexpr (Algorithm != packets) {
    if (chosen == one_shot) {
      detail::launch_collective<Tr, detail::round_threads>(
          w, ws, pe, detail::allreduce_rows_call<one_shot, T, Op, RowFn>{dst, src, n, rows, cols, row_fn}, shape.ctas,
          stream, name);
    }
  }
}

/// The launch gpucomm::allreduce<Tr, Algorithm> makes for n elements of T on ws, at every member.
template <class T, class Tr = NVLinkStore, allreduce_algorithm Algorithm = allreduce_algorithm::automatic>
launch_shape allreduce_launch_shape(team_workspace const& ws, std::size_t n) {
  bool const packets = detail::chosen_allreduce<Tr, T>(Algorithm, n, ws.members().size) == allreduce_algorithm::packets;
  return detail::shape_on(ws, packets ? detail::collective_protocol::packets : detail::collective_protocol::rounds,
                          n * sizeof(T));
}

/// The launch gpucomm::allgather, alltoall or reduce_scatter makes for n elements of T per member
/// pair on ws, at every member.
template <class T, class Tr = NVLinkStore>
launch_shape data_launch_shape(team_workspace const& ws, std::size_t n) {
  detail::collective_protocol const p = detail::data_protocol<Tr, T>(n, ws.members().size);
  return detail::shape_on(ws, p, p == detail::collective_protocol::packets ? n * sizeof(T) : 0);
}

/// The launch advised for a device gpucomm::alltoallv of T on ws whose pairs carry at most `most`
/// elements (a bound the caller knows: MoE's tokens per rank, say): allgather's for that count,
/// so a call whose pairs all fit its packet epoch runs as few CTAs of packet_threads as
/// allgather would, each passing ws.view(pe).first_parts(ctas).part(blockIdx.x). Pairs above
/// the bound still arrive (in channel steps), at the speed of a shape chosen for fewer elements.
/// Every member must use the same shape.
template <class T, class Tr = NVLinkStore>
launch_shape alltoallv_launch_shape(team_workspace const& ws, std::size_t most) {
  return data_launch_shape<T, Tr>(ws, most);
}

/// alltoallv (collectives/alltoallv.cuh) for PE `pe` on `stream`, with counts computed on the
/// device: send_counts and send_offsets (team size entries each, elements) are device memory the
/// stream's earlier work wrote (a router kernel, say), recv_counts (team size entries) is written,
/// and the received elements land packed in rank order in dst, at most dst_capacity of them (more:
/// the kernel traps, nothing written past it). `most` bounds the elements of any one pair, as the
/// caller knows it (MoE: tokens per rank x hidden); it picks the launch, alltoallv_launch_shape's,
/// and nothing else: a pair above it still arrives, at the speed of a shape chosen for fewer
/// elements. Every member passes the same `most`. src and dst must not overlap; null counts,
/// offsets or src, and a null dst with a capacity, are refused (gpucomm::error) before anything is
/// launched. For several local PEs, call it once per PE (on w.stream(pe), say).
template <class Tr = NVLinkStore, class T>
void alltoallv(world& w, team_workspace const& ws, int pe, T* dst, std::size_t* recv_counts, std::size_t dst_capacity,
               T const* src, std::size_t const* send_counts, std::size_t const* send_offsets, std::size_t most,
               cudaStream_t stream) {
  detail::alltoallv_call<T> const call{dst, recv_counts, dst_capacity, src, send_counts, send_offsets};
  // One call for either protocol: the device chooses each pair's way from its count.
  detail::launch_data<Tr, T>(
      w, ws, pe, most, [&]<detail::collective_protocol>() { return call; }, stream, "gpucomm::alltoallv");
}

/// The launch broadcast and reduce make on ws, at every member, whatever the count (the round
/// protocols: every part up to the cap, in CTAs of 1024 threads).
inline launch_shape rounds_launch_shape(team_workspace const& ws) {
  return detail::shape_on(ws, detail::collective_protocol::rounds, 0);
}
template <class Tr = NVLinkStore, class T, class Op>
void reduce_scatter(world& w, team_workspace const& ws, int pe, T* dst, T const* src, std::size_t n, Op,
                    cudaStream_t stream) {
  require_reduction<Op, T>();
  detail::launch_data<Tr, T>(
      w, ws, pe, n,
      [&]<detail::collective_protocol P>() {
        return detail::reduce_scatter_call<T, Op, P>{dst, src, n};
      },
      stream, "gpucomm::reduce_scatter");
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
template <class Tr = NVLinkStore, allreduce_algorithm Algorithm = allreduce_algorithm::automatic, class T, class Op,
          class Epilogue>
void allreduce(world& w, team_workspace const& ws, sym_array<T> const& dst, sym_array<T> const& src, std::size_t n,
               Op op, Epilogue epilogue) {
  detail::for_each_local_member(w, ws, [&](int pe) {
    allreduce<Tr, Algorithm>(w, ws, pe, dst.ptr(pe).get(), src.ptr(pe).get(), n, op, epilogue, w.stream(pe));
  });
}
template <class Tr = NVLinkStore, allreduce_algorithm Algorithm = allreduce_algorithm::automatic, class T, class Op,
          class RowFn>
void allreduce_rows(world& w, team_workspace const& ws, sym_array<T> const& dst, sym_array<T> const& src,
                    std::size_t rows, std::size_t cols, Op op, RowFn row_fn) {
  detail::for_each_local_member(w, ws, [&](int pe) {
    allreduce_rows<Tr, Algorithm>(w, ws, pe, dst.ptr(pe).get(), src.ptr(pe).get(), rows, cols, op, row_fn,
                                  w.stream(pe));
  });
}
template <class Tr = NVLinkStore, class T, class Op>
void reduce_scatter(world& w, team_workspace const& ws, sym_array<T> const& dst, sym_array<T> const& src, std::size_t n,
                    Op op) {
  detail::for_each_local_member(
      w, ws, [&](int pe) { reduce_scatter<Tr>(w, ws, pe, dst.ptr(pe).get(), src.ptr(pe).get(), n, op, w.stream(pe)); });
}

}  // namespace gpucomm
