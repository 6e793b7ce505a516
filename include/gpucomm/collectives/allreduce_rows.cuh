#pragma once
// allreduce_rows: allreduce of a rows x cols matrix whose every row, once reduced, goes through a
// row function in the same kernel: allreduce + residual add + RMSNorm as one kernel, as
// tensor-parallel layers end.
//
//   struct add_rmsnorm {                       // examples/add_rmsnorm.cuh has it in full
//     __nv_bfloat16 const* residual; __nv_bfloat16* residual_out; __nv_bfloat16 const* weight;
//     std::size_t hidden; float eps;
//     template <class G>
//     __device__ void operator()(G const& g, std::size_t row, __nv_bfloat16* x) const;
//   };
//   gpucomm::allreduce_rows(c, block, ws.part(blockIdx.x), dst, src, rows, cols,
//                           gpucomm::reduction::sum{}, add_rmsnorm{...});
//
// The call is allreduce's (allreduce.cuh) on rows * cols elements, with these differences:
// - Each part's share is whole rows: part k reduces a run of consecutive rows into dst, and then
//   its group calls row_fn(g, row, dst + row * cols) for each of them in turn, every thread of g
//   taking part. row_fn may read and rewrite the row and write elsewhere; what it needs between
//   its own passes over a row (a sum over the row, shared scratch) it does itself, and the group
//   is synchronised after the last row. The row was just written by this group: row_fn reads it
//   back from the caches, with no second kernel and no wait on other members.
// - The algorithm is packets or one_shot (automatic picks packets where allreduce would); two_shot
//   is refused, since it splits the message by member, not by row.
// - cols * sizeof(T) is a positive multiple of 16 (so that rows of 16-byte aligned buffers start
//   16-byte aligned, and no packet line holds two rows); the kernel traps with a message otherwise,
//   in every build, and the host launcher refuses it before launching.
// - Every member computes every row: row_fn gives the same results at every member when it
//   depends only on the row and on data every member holds alike (a replicated residual, the
//   norm's weights).
// With more parts than rows, the parts past the last row only take part in the protocol.

#include <cstddef>

#include "allreduce.cuh"

namespace gpucomm {

#if defined(__CUDACC__)

namespace detail {

/// The algorithm allreduce_rows runs: allreduce's choice, with one_shot for two_shot.
template <class Tr, class T>
GPUCOMM_HD constexpr allreduce_algorithm chosen_allreduce_rows(allreduce_algorithm requested, std::size_t n,
                                                               int members) {
  allreduce_algorithm const a = chosen_allreduce<Tr, T>(requested, n, members);
  return a == allreduce_algorithm::packets ? a : allreduce_algorithm::one_shot;
}

/// Whether rows of `cols` elements of T suit allreduce_rows (header above).
template <class T>
GPUCOMM_HD constexpr bool rows_fit(std::size_t cols) {
  return cols > 0 && cols * sizeof(T) % 16 == 0;
}

/// allreduce_rows with the algorithm already chosen (packets or one_shot; Packets: whether this
/// instantiation holds the packet code).
template <bool Packets, class Op, class Tr, group G, class T, class RowFn>
__device__ void allreduce_rows_chosen(comm<Tr> const& c, G const& g, collective_workspace const& ws,
                                      allreduce_algorithm chosen, T* dst, T const* src, std::size_t rows,
                                      std::size_t cols, collective_entry entry, RowFn const& row_fn) {
  // In every build: rows split otherwise would be read while another part still folds them.
  if (!rows_fit<T>(cols))
    device_misuse("allreduce_rows",
                  "cols * sizeof(T) must be a positive multiple of 16 (collectives/allreduce_rows.cuh)");
  std::size_t const n = rows * cols;
  auto rows_pass = [&](round_context const& x) {
    element_range const share = x.share(n);
    for (std::size_t row = share.lo / cols; row < share.hi / cols; ++row) row_fn(g, row, dst + row * cols);
  };
  allreduce_chosen<Packets, true, Op>(c, g, ws, chosen, dst, src, n, entry,
                                      allreduce_extras<identity_epilogue, decltype(rows_pass)>{{}, cols, rows_pass});
}

}  // namespace detail

template <allreduce_algorithm Algorithm = allreduce_algorithm::automatic, class Tr, group G, class T, class Op,
          class RowFn>
__device__ void allreduce_rows(comm<Tr> const& c, G const& g, collective_workspace const& ws, T* dst, T const* src,
                               std::size_t rows, std::size_t cols, Op, RowFn const& row_fn) {
  require_reduction<Op, T>();
  static_assert(Algorithm != allreduce_algorithm::two_shot,
                "gpucomm: allreduce_rows runs packets or one_shot: two_shot splits the message by member, not by row");
  constexpr bool packets = detail::allreduce_holds_packets<Algorithm, Tr, T>();
  detail::allreduce_rows_chosen<packets, Op>(
      c, g, ws, detail::chosen_allreduce_rows<Tr, T>(Algorithm, rows * cols, ws.members.size), dst, src, rows, cols,
      detail::collective_entry::device_call, row_fn);
}

#endif  // __CUDACC__

}  // namespace gpucomm
