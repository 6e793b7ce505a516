#pragma once
// Shared pieces of the collectives suite (tests/gpu/collectives/*.cu), built once per transport
// under test (harness.cuh: transport_under_test):
//   - one kernel for the data collectives (broadcast, allgather, alltoall) and one for the
//     reductions (reduce, reduce_scatter, allreduce with each algorithm), per group kind and
//     element type, the collective chosen at run time; the group of index 0 of each block calls
//     it, the block index choosing the workspace part in the multi-CTA form;
//   - deterministic inputs every process can recompute for any PE, and a host reference written
//     independently of the library's reduction code (64-bit integer arithmetic, double for
//     floating types, with a tolerance that grows with the number of inputs folded);
//   - check_collective: poisons every destination and a guard behind it, runs the collective on
//     every member, and checks every element of every member's destination, that the guard and
//     non-members are untouched, and, for reduce, that no non-root destination was written.
//
// Process modes: every helper that allocates or synchronises is collective and is called in the
// same order by every process; data checks count mismatches and CHECK the count.
#include <cuda/ptx>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <gpucomm/aggregate.cuh>

#include "../ops/common.cuh"

namespace gpucomm::test::coll {

using namespace gpucomm::test::ops;
using gpucomm::collective_workspace;
using gpucomm::reduction_takes;
using gpucomm::sym_array;
using gpucomm::team;
using gpucomm::team_workspace;
using gpucomm::workspace_options;
using gpucomm::test::full_sample;
namespace reduction = gpucomm::reduction;

/// A user group, the whole block, whose leader leaves about half of its syncs 20 us after the
/// other threads, chosen by the clock and the SM, so that at times one member's leader is late and
/// another's is not: a collective whose threads act on a word their leader writes after a sync,
/// without a sync in between, goes wrong with it (packet rounds once read their round number so,
/// and with every leader late alike the members' stale rounds matched and hid it).
struct late_leader_block {
  __device__ unsigned long long num_threads() const { return blockDim.x; }
  __device__ unsigned long long thread_rank() const { return threadIdx.x; }
  __device__ void sync() const {
    __syncthreads();
    std::uint64_t const start = gpucomm::detail::now_ns();
    if (threadIdx.x == 0 && (((start >> 10) + cuda::ptx::get_sreg_smid()) & 1u) != 0) {
      while (gpucomm::detail::now_ns() - start < 20000) {
      }
    }
  }
};
static_assert(gpucomm::group<late_leader_block>);

struct mk_late_leader {
  static constexpr char const* name = "late_leader_block(user)";
  __device__ static auto make() { return late_leader_block{}; }
  __device__ static bool active() { return true; }
  __device__ static unsigned per_block() { return 1; }
  static unsigned per_block(unsigned) { return 1; }
  __device__ static unsigned index() { return 0; }
};

/// A 12-byte aggregate moved by the data collectives (no reduction).
struct triple {
  int a, b, c;
  friend bool operator==(triple const&, triple const&) = default;
};

/// Aggregates the reductions take field by field (aggregate.cuh): a flat one, and a nested one with
/// 16-bit floats. Neither has padding, so whole-element byte checks stay meaningful.
struct stats {
  float sum;
  int count;
  double sq;
};
struct halves {
  __half h;
  __nv_bfloat16 b;
};
struct nested {
  halves hb;
  std::uint32_t u;
};
static_assert(sizeof(stats) == 16 && sizeof(nested) == 8);
template <class T>
inline constexpr bool test_aggregate =
    std::is_same_v<T, stats> || std::is_same_v<T, halves> || std::is_same_v<T, nested>;

/// The operation field I gets from Op (the test's own reading of reduction::per_field).
template <class Op, std::size_t I>
struct op_of_field {
  using type = Op;
};
template <class... Ops, std::size_t I>
struct op_of_field<reduction::per_field<Ops...>, I> {
  using type = std::tuple_element_t<I, std::tuple<Ops...>>;
};

enum class kind : int {
  broadcast,
  allgather,
  alltoall,
  allgather_in_place,
  reduce,
  reduce_scatter,
  allreduce_one_shot,
  allreduce_two_shot,
  allreduce_automatic,
  allreduce_in_place,
  reduce_scatter_in_place,
  allreduce_packets,
  allreduce_packets_in_place,
};
inline char const* kind_name(kind k) {
  constexpr char const* names[] = {"broadcast",
                                   "allgather",
                                   "alltoall",
                                   "allgather in place",
                                   "reduce",
                                   "reduce_scatter",
                                   "allreduce one_shot",
                                   "allreduce two_shot",
                                   "allreduce automatic",
                                   "allreduce in place",
                                   "reduce_scatter in place",
                                   "allreduce packets",
                                   "allreduce packets in place"};
  return names[static_cast<int>(k)];
}
inline bool is_reduction(kind k) { return static_cast<int>(k) >= static_cast<int>(kind::reduce); }

/// Elements of src and dst at each member, for team size s and count n.
inline std::size_t src_count(kind k, int s, std::size_t n) {
  switch (k) {
    case kind::alltoall:
    case kind::reduce_scatter:
    case kind::reduce_scatter_in_place:
      return static_cast<std::size_t>(s) * n;
    default:
      return n;
  }
}
inline std::size_t dst_count(kind k, int s, std::size_t n) {
  switch (k) {
    case kind::allgather:
    case kind::alltoall:
    case kind::allgather_in_place:
    case kind::reduce_scatter_in_place:
      return static_cast<std::size_t>(s) * n;
    default:
      return n;
  }
}

struct coll_args {
  comm_t c;
  collective_workspace ws;
  void* dst;
  void const* src;
  std::size_t n;
  int root;
  kind k;
};

/// The workspace view of this block: its part in the multi-CTA form.
__device__ inline collective_workspace block_workspace(collective_workspace const& ws) {
  return ws.parts > 1 ? ws.part(static_cast<int>(blockIdx.x)) : ws;
}

template <class M, class T>
__global__ void __launch_bounds__(1024) data_kernel(coll_args a) {
  auto const g0 = M::make();
  if (!M::active() || M::index() != 0) return;
  auto const g = with_test_staging<M>(g0);
  collective_workspace const ws = block_workspace(a.ws);
  T* const dst = static_cast<T*>(a.dst);
  T const* const src = static_cast<T const*>(a.src);
  int const rank = ws.members.rank_of(a.c.my_pe());
  switch (a.k) {
    case kind::broadcast:
      gpucomm::broadcast(a.c, g, ws, dst, src, a.n, a.root);
      break;
    case kind::allgather:
      gpucomm::allgather(a.c, g, ws, dst, src, a.n);
      break;
    case kind::allgather_in_place:
      gpucomm::allgather(a.c, g, ws, dst, dst + static_cast<std::size_t>(rank) * a.n, a.n);
      break;
    case kind::alltoall:
      gpucomm::alltoall(a.c, g, ws, dst, src, a.n);
      break;
    default:
      break;
  }
}

template <class M, class T, class Op>
__global__ void __launch_bounds__(1024) reduce_kernel(coll_args a) {
  using gpucomm::allreduce_algorithm;
  auto const g0 = M::make();
  if (!M::active() || M::index() != 0) return;
  auto const g = with_test_staging<M>(g0);
  collective_workspace const ws = block_workspace(a.ws);
  T* const dst = static_cast<T*>(a.dst);
  T const* const src = static_cast<T const*>(a.src);
  int const rank = ws.members.rank_of(a.c.my_pe());
  switch (a.k) {
    case kind::reduce:
      gpucomm::reduce(a.c, g, ws, dst, src, a.n, Op{}, a.root);
      break;
    case kind::reduce_scatter:
      gpucomm::reduce_scatter(a.c, g, ws, dst, src, a.n, Op{});
      break;
    case kind::reduce_scatter_in_place:
      gpucomm::reduce_scatter(a.c, g, ws, dst + static_cast<std::size_t>(rank) * a.n, dst, a.n, Op{});
      break;
    case kind::allreduce_one_shot:
      gpucomm::allreduce<allreduce_algorithm::one_shot>(a.c, g, ws, dst, src, a.n, Op{});
      break;
    case kind::allreduce_two_shot:
      gpucomm::allreduce<allreduce_algorithm::two_shot>(a.c, g, ws, dst, src, a.n, Op{});
      break;
    case kind::allreduce_automatic:
      gpucomm::allreduce(a.c, g, ws, dst, src, a.n, Op{});
      break;
    case kind::allreduce_in_place:
      gpucomm::allreduce<allreduce_algorithm::two_shot>(a.c, g, ws, dst, dst, a.n, Op{});
      break;
    case kind::allreduce_packets:
    case kind::allreduce_packets_in_place:
      if constexpr (load_store_everywhere && gpucomm::detail::packet_element<T>)
        gpucomm::allreduce<allreduce_algorithm::packets>(a.c, g, ws, dst, a.k == kind::allreduce_packets ? src : dst,
                                                         a.n, Op{});
      break;
    default:
      break;
  }
}

// ---- inputs and the host reference ------------------------------------------------------------

/// What PE `pe` holds at src[i] in test `salt`. Floating values are multiples of 1/16 (1/8 for
/// bf16) small enough that sums of a few are exact in float.
template <class T>
T value_of(std::uint64_t salt, int pe, std::size_t i) {
  std::uint64_t const m = mix(salt, static_cast<std::uint64_t>(pe), i);
  if constexpr (std::is_same_v<T, bool>) {
    return (m & 3) != 0;  // mostly true, so and/min see both values
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(m);
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(static_cast<int>(m % 2001) - 1000) / T(16);
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half(static_cast<float>(static_cast<int>(m % 2001) - 1000) / 16.f);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16(static_cast<float>(static_cast<int>(m % 255) - 127) / 8.f);
  } else if constexpr (std::is_same_v<T, stats>) {
    return {value_of<float>(salt, pe, i), value_of<int>(salt + 1, pe, i), value_of<double>(salt + 2, pe, i)};
  } else if constexpr (std::is_same_v<T, halves>) {
    return {value_of<__half>(salt, pe, i), value_of<__nv_bfloat16>(salt + 1, pe, i)};
  } else if constexpr (std::is_same_v<T, nested>) {
    return {value_of<halves>(salt, pe, i), value_of<std::uint32_t>(salt + 3, pe, i)};
  } else {
    return T{static_cast<int>(m), static_cast<int>(m >> 21), static_cast<int>(m >> 42)};
  }
}

template <class T>
double as_double(T v) {
  if constexpr (std::is_same_v<T, __half>)
    return __half2float(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(v);
  else
    return static_cast<double>(v);
}

template <class T>
inline constexpr bool floating =
    std::is_floating_point_v<T> || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

/// Relative precision of T's results: one rounding to T (16-bit types are accumulated in float,
/// whose error the tolerance below adds per input).
template <class T>
double epsilon_of() {
  if constexpr (std::is_same_v<T, __half>)
    return 0x1p-10;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return 0x1p-7;
  else if constexpr (std::is_same_v<T, float>)
    return 0x1p-23;
  else
    return 0x1p-52;
}

/// The reference fold of `inputs` (in any order: the tolerance covers reordering) and whether
/// `got` matches it.
template <class Op, class T>
bool matches_fold(std::vector<T> const& inputs, T got);

/// Field `field` of the aggregates, folded with field operation Op, matches got's.
template <class Op, class T, class F>
bool field_matches(std::vector<T> const& inputs, F T::*field, T const& got) {
  std::vector<F> values;
  for (T const& in : inputs) values.push_back(in.*field);
  return matches_fold<Op>(values, got.*field);
}

template <class Op, class T>
bool matches_fold(std::vector<T> const& inputs, T got) {
  if constexpr (std::is_same_v<T, stats>) {
    return field_matches<typename op_of_field<Op, 0>::type>(inputs, &stats::sum, got) &&
           field_matches<typename op_of_field<Op, 1>::type>(inputs, &stats::count, got) &&
           field_matches<typename op_of_field<Op, 2>::type>(inputs, &stats::sq, got);
  } else if constexpr (std::is_same_v<T, halves>) {
    return field_matches<typename op_of_field<Op, 0>::type>(inputs, &halves::h, got) &&
           field_matches<typename op_of_field<Op, 1>::type>(inputs, &halves::b, got);
  } else if constexpr (std::is_same_v<T, nested>) {
    return field_matches<typename op_of_field<Op, 0>::type>(inputs, &nested::hb, got) &&
           field_matches<typename op_of_field<Op, 1>::type>(inputs, &nested::u, got);
  } else if constexpr (floating<T>) {
    double acc = as_double(inputs[0]), scale = std::fabs(acc);
    for (std::size_t r = 1; r < inputs.size(); ++r) {
      double const v = as_double(inputs[r]);
      if constexpr (std::is_same_v<Op, reduction::sum>) acc += v, scale += std::fabs(v);
      if constexpr (std::is_same_v<Op, reduction::prod>) acc *= v, scale = std::fabs(acc);
      if constexpr (std::is_same_v<Op, reduction::min>) acc = std::fmin(acc, v);
      if constexpr (std::is_same_v<Op, reduction::max>) acc = std::fmax(acc, v);
    }
    double const accumulate_eps = std::is_same_v<T, double> ? 0x1p-52 : 0x1p-23;
    double const tol = epsilon_of<T>() * std::fabs(acc) +
                       static_cast<double>(inputs.size()) * accumulate_eps * (scale + std::fabs(acc));
    return std::fabs(as_double(got) - acc) <= tol;
  } else {
    // Integers: 64-bit unsigned arithmetic, wrapping, then the low bits; min and max compare as T.
    std::uint64_t acc = static_cast<std::uint64_t>(inputs[0]);
    T best = inputs[0];
    for (std::size_t r = 1; r < inputs.size(); ++r) {
      auto const v = static_cast<std::uint64_t>(inputs[r]);
      if constexpr (std::is_same_v<Op, reduction::sum>) acc += v;
      if constexpr (std::is_same_v<Op, reduction::prod>) acc *= v;
      if constexpr (std::is_same_v<Op, reduction::bit_and>) acc &= v;
      if constexpr (std::is_same_v<Op, reduction::bit_or>) acc |= v;
      if constexpr (std::is_same_v<Op, reduction::bit_xor>) acc ^= v;
      if constexpr (std::is_same_v<Op, reduction::min>) best = inputs[r] < best ? inputs[r] : best;
      if constexpr (std::is_same_v<Op, reduction::max>) best = best < inputs[r] ? inputs[r] : best;
    }
    if constexpr (std::is_same_v<Op, reduction::min> || std::is_same_v<Op, reduction::max>) return got == best;
    if constexpr (std::is_same_v<T, bool>) return got == ((acc & 1) != 0);
    return got == static_cast<T>(acc);
  }
}

template <class T>
bool same_bits(T const& a, T const& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

/// How one collective is run: team, collective, count, root, workspace shape, group kind.
struct coll_case {
  team t;
  kind k;
  std::size_t n;
  int root = 0;
  workspace_options ws{.block_bytes = 256, .parts = 1};
  std::uint64_t salt = 1;
};

inline std::string describe(coll_case const& c, char const* group) {
  return std::string(kind_name(c.k)) + " n=" + std::to_string(c.n) + " root=" + std::to_string(c.root) + " team(" +
         std::to_string(c.t.start) + "," + std::to_string(c.t.stride) + "," + std::to_string(c.t.size) +
         ") block_bytes=" + std::to_string(c.ws.block_bytes) + " parts=" + std::to_string(c.ws.parts) + " group " +
         group;
}

/// The cases' workspaces take channel blocks of their block_bytes unless they ask otherwise, so
/// that small blocks make many channel steps as they make many rounds (the automatic channel block
/// of team_workspace, which the tests of the default workspace cover, would make one step of most).
inline workspace_options small_steps(workspace_options o) {
  if (o.channel_block_bytes == 0) o.channel_block_bytes = o.block_bytes;
  return o;
}

constexpr unsigned test_block = 256;  // threads per block; groups of every maker fit (bar64: 4 of them)
constexpr std::size_t guard_elements = 8;

/// Runs case `cc` with element type T (and reduction Op for reductions) by group kind M, and checks
/// every member's destination. Collective over the world.
template <class M, class T, class Op = reduction::sum>
void check_collective(coll_case const& cc) {
  auto& w = gpucomm::test::the_world();
  team const& t = cc.t;
  int const s = t.size;
  std::size_t const n_src = src_count(cc.k, s, cc.n), n_dst = dst_count(cc.k, s, cc.n);
  team_workspace ws(w, t, small_steps(cc.ws));
  auto src = w.alloc<T>(n_src + 1);
  auto dst = w.alloc<T>(n_dst + guard_elements);
  for (int pe : w.local_pes()) {
    auto const in = std::make_unique<T[]>(n_src + 1);  // not std::vector: bool is an element type
    for (std::size_t i = 0; i < n_src + 1; ++i) in[i] = value_of<T>(cc.salt, pe, i);
    upload(w, pe, src.ptr(pe).get(), in.get(), n_src + 1);
    fill_bytes(w, pe, dst.ptr(pe).get(), poison_byte, dst.size_bytes());
    bool const in_place = cc.k == kind::allgather_in_place || cc.k == kind::allreduce_in_place ||
                          cc.k == kind::allreduce_packets_in_place || cc.k == kind::reduce_scatter_in_place;
    if (in_place && t.contains(pe)) {
      // The input goes where the collective takes it from: the member's own block, or all of dst.
      std::size_t const at =
          cc.k == kind::allgather_in_place ? static_cast<std::size_t>(t.rank_of(pe)) * cc.n : std::size_t{0};
      std::size_t const count = cc.k == kind::reduce_scatter_in_place ? n_dst : cc.n;
      auto const mine = std::make_unique<T[]>(count);
      for (std::size_t i = 0; i < count; ++i) mine[i] = value_of<T>(cc.salt, pe, i);
      upload(w, pe, dst.ptr(pe).get() + at, mine.get(), count);
    }
  }
  w.barrier();
  unsigned const block = test_block;
  for_each_local_pe(w, [&](int pe) {
    if (!t.contains(pe)) return;
    coll_args a{
        w.comm<transport_under_test>(pe), ws.view(pe), dst.ptr(pe).get(), src.ptr(pe).get(), cc.n, cc.root, cc.k};
    auto const grid = static_cast<unsigned>(cc.ws.parts);
    if (is_reduction(cc.k)) {
      if constexpr (reduction_takes<Op, T>) {
        auto kernel = reduce_kernel<M, T, Op>;
        std::size_t const smem = prepare_staging<M>(w, kernel, block);
        kernel<<<grid, block, smem, w.stream(pe)>>>(a);
      } else {
        FAIL("no reduction of this element type");
      }
    } else {
      auto kernel = data_kernel<M, T>;
      std::size_t const smem = prepare_staging<M>(w, kernel, block);
      kernel<<<grid, block, smem, w.stream(pe)>>>(a);
    }
  });
  finish(w);
  w.barrier();
  unsigned char poison_bytes[sizeof(T)];
  std::memset(poison_bytes, poison_byte, sizeof(T));
  T poison;
  std::memcpy(static_cast<void*>(&poison), poison_bytes, sizeof(T));
  for (int pe : w.local_pes()) {
    auto const got = std::make_unique<T[]>(n_dst + guard_elements);
    GPUCOMM_TEST_CUDA(cudaSetDevice(w.device(pe)));
    GPUCOMM_TEST_CUDA(cudaMemcpy(got.get(), dst.ptr(pe).get(), dst.size_bytes(), cudaMemcpyDeviceToHost));
    int const q = t.rank_of(pe);
    std::size_t bad = 0, first = n_dst + guard_elements;
    auto miss = [&](std::size_t i) {
      if (bad++ == 0) first = i;
    };
    bool const writes_dst = q >= 0 && !(cc.k == kind::reduce && q != cc.root);
    for (std::size_t i = 0; i < n_dst; ++i) {
      if (!writes_dst) {
        if (!same_bits(got[i], poison)) miss(i);
        continue;
      }
      std::size_t const r = cc.n ? i / cc.n : 0, j = cc.n ? i % cc.n : 0;
      std::vector<T> inputs;
      switch (cc.k) {
        case kind::broadcast:
          if (!same_bits(got[i], value_of<T>(cc.salt, t.pe_of(cc.root), i))) miss(i);
          break;
        case kind::allgather:
        case kind::allgather_in_place:
          if (!same_bits(got[i], value_of<T>(cc.salt, t.pe_of(static_cast<int>(r)), j))) miss(i);
          break;
        case kind::alltoall:
          if (!same_bits(got[i],
                         value_of<T>(cc.salt, t.pe_of(static_cast<int>(r)), static_cast<std::size_t>(q) * cc.n + j)))
            miss(i);
          break;
        default:
          if constexpr (!std::is_same_v<T, triple>) {
            if (cc.k == kind::reduce_scatter_in_place && static_cast<int>(r) != q) {
              // The other members' blocks of an in-place reduce_scatter stay as they were: its input.
              if (!same_bits(got[i], value_of<T>(cc.salt, pe, i))) miss(i);
              break;
            }
            std::size_t const at = cc.k == kind::reduce_scatter ? static_cast<std::size_t>(q) * cc.n + i : i;
            for (int m = 0; m < s; ++m) inputs.push_back(value_of<T>(cc.salt, t.pe_of(m), at));
            if (!matches_fold<Op>(inputs, got[i])) miss(i);
          }
          break;
      }
    }
    for (std::size_t i = n_dst; i < n_dst + guard_elements; ++i)
      if (!same_bits(got[i], poison)) miss(i);
    INFO(describe(cc, M::name) << ": PE " << pe << " (rank " << q << "), " << bad << " of " << n_dst + guard_elements
                               << " elements wrong, first at " << first);
    CHECK(bad == 0);
  }
  w.barrier();
}

}  // namespace gpucomm::test::coll
