#pragma once
// Shared pieces of the op suite (tests/gpu/ops/*.cu), built once per transport under test
// (harness.cuh: transport_under_test):
//   - group "makers": one per calling-group kind (thread_block, thread_block_tile<N>,
//     coalesced_group full / partial / odd-sized, gpucomm::this_thread(), and two user-defined
//     groups: a lane pair with shfl and a 64-thread named-barrier group without shfl), each
//     saying how many groups a block holds and which one the calling thread is in;
//   - host helpers: stream-ordered upload / download / memset on a local PE, a gather of
//     per-PE host vectors over all processes;
//   - the put/get matrix: a deterministic list of copy jobs (op, element type, size, src and dst
//     misalignment, target PE) for every PE, one kernel template per group kind with the op
//     selected at run time, and a host reference for every byte of every PE's arenas (guards,
//     untouched bytes and signal words included).
//
// Process modes: every helper that allocates or synchronises is collective and is called in the
// same order by every process; data checks count mismatches and CHECK the count (no REQUIRE on
// data), so one rank's failure never desynchronises the others.
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../harness.cuh"

namespace gpucomm::test::ops {

namespace cg = cooperative_groups;
using gpucomm::test::model_slowdown;
using gpucomm::test::transport_under_test;
using comm_t = gpucomm::comm<transport_under_test>;
using gpucomm::signal_t;
using gpucomm::sym_ptr;
using gpucomm::test::finish;
using gpucomm::test::for_each_local_pe;
using gpucomm::test::mix;

// ---- user-defined groups ----------------------------------------------------------------------

/// Two adjacent lanes of a warp (lanes 2k, 2k+1). Static size, with shfl: meets
/// gpucomm::broadcasting_group, so fetching operations work.
struct lane_pair {
  static constexpr unsigned static_size = 2;
  unsigned lane;
  __device__ unsigned num_threads() const { return 2; }
  __device__ unsigned thread_rank() const { return lane & 1u; }
  __device__ unsigned mask() const { return 3u << (lane & ~1u); }
  __device__ void sync() const { __syncwarp(mask()); }
  template <class T>
  __device__ T shfl(T value, unsigned src) const {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8);
    unsigned long long bits = 0;
    memcpy(&bits, &value, sizeof(T));
    bits = __shfl_sync(mask(), bits, static_cast<int>((lane & ~1u) + src));
    T out;
    memcpy(&out, &bits, sizeof(T));
    return out;
  }
};

/// 64 threads (two warps) synchronised by named barrier `id`; size known only at run time and no
/// shfl, so only non-fetching operations and the reloading form of group wait_until apply.
struct bar64_group {
  unsigned id;
  unsigned rank;
  __device__ unsigned long long num_threads() const { return 64; }
  __device__ unsigned long long thread_rank() const { return rank; }
  __device__ void sync() const { asm volatile("bar.sync %0, 64;" ::"r"(id) : "memory"); }
};

static_assert(gpucomm::group<lane_pair> && gpucomm::broadcasting_group<lane_pair>);
static_assert(gpucomm::group<bar64_group> && !gpucomm::broadcasting_group<bar64_group>);

// ---- makers: how a kernel builds its group ----------------------------------------------------
// make() is called by every thread of the block; threads for which active() is false leave at
// once (kernels that use these makers never synchronise the whole block afterwards).

__device__ inline unsigned lane_id() { return threadIdx.x & 31u; }

struct mk_block {
  static constexpr char const* name = "thread_block";
  __device__ static auto make() { return cg::this_thread_block(); }
  __device__ static bool active() { return true; }
  __device__ static unsigned per_block() { return 1; }
  static unsigned per_block(unsigned) { return 1; }
  __device__ static unsigned index() { return 0; }
};

template <unsigned N>
struct mk_tile {
  static constexpr char const* names[] = {"", "tile<1>", "tile<2>", "", "tile<4>",  "", "", "", "tile<8>", "", "", "",
                                          "", "",        "",        "", "tile<16>", "", "", "", "",        "", "", "",
                                          "", "",        "",        "", "",         "", "", "", "tile<32>"};
  static constexpr char const* name = names[N];
  __device__ static auto make() { return cg::tiled_partition<N>(cg::this_thread_block()); }
  __device__ static bool active() { return true; }
  __device__ static unsigned per_block() { return blockDim.x / N; }
  static unsigned per_block(unsigned block) { return block / N; }
  __device__ static unsigned index() { return threadIdx.x / N; }
};

/// coalesced_group of the even lanes of each warp; the odd lanes take no part.
struct mk_coalesced_even {
  static constexpr char const* name = "coalesced_group(even lanes)";
  __device__ static auto make() {
    return cg::binary_partition(cg::tiled_partition<32>(cg::this_thread_block()), (threadIdx.x & 1u) == 0);
  }
  __device__ static bool active() { return (threadIdx.x & 1u) == 0; }
  __device__ static unsigned per_block() { return blockDim.x / 32; }
  static unsigned per_block(unsigned block) { return block / 32; }
  __device__ static unsigned index() { return threadIdx.x / 32; }
};

/// coalesced_group of all 32 lanes.
struct mk_coalesced_full {
  static constexpr char const* name = "coalesced_group(full warp)";
  __device__ static auto make() { return cg::binary_partition(cg::tiled_partition<32>(cg::this_thread_block()), true); }
  __device__ static bool active() { return true; }
  __device__ static unsigned per_block() { return blockDim.x / 32; }
  static unsigned per_block(unsigned block) { return block / 32; }
  __device__ static unsigned index() { return threadIdx.x / 32; }
};

/// Three coalesced_groups per warp, lanes with equal lane % 3 (sizes 11, 11, 10, not contiguous).
struct mk_coalesced_mod3 {
  static constexpr char const* name = "coalesced_group(lane%3)";
  __device__ static auto make() {
    return cg::labeled_partition(cg::tiled_partition<32>(cg::this_thread_block()), static_cast<int>(lane_id() % 3));
  }
  __device__ static bool active() { return true; }
  __device__ static unsigned per_block() { return blockDim.x / 32 * 3; }
  static unsigned per_block(unsigned block) { return block / 32 * 3; }
  __device__ static unsigned index() { return threadIdx.x / 32 * 3 + lane_id() % 3; }
};

struct mk_single {
  static constexpr char const* name = "this_thread()";
  __device__ static auto make() { return gpucomm::this_thread(); }
  __device__ static bool active() { return true; }
  __device__ static unsigned per_block() { return blockDim.x; }
  static unsigned per_block(unsigned block) { return block; }
  __device__ static unsigned index() { return threadIdx.x; }
};

struct mk_pair {
  static constexpr char const* name = "lane_pair(user)";
  __device__ static auto make() { return lane_pair{lane_id()}; }
  __device__ static bool active() { return true; }
  __device__ static unsigned per_block() { return blockDim.x / 2; }
  static unsigned per_block(unsigned block) { return block / 2; }
  __device__ static unsigned index() { return threadIdx.x / 2; }
};

/// Needs blockDim.x a multiple of 64 and at most 960 (barrier ids 1..15).
struct mk_bar64 {
  static constexpr char const* name = "bar64_group(user, no shfl)";
  __device__ static auto make() { return bar64_group{1 + threadIdx.x / 64, threadIdx.x % 64}; }
  __device__ static bool active() { return true; }
  __device__ static unsigned per_block() { return blockDim.x / 64; }
  static unsigned per_block(unsigned block) { return block / 64; }
  __device__ static unsigned index() { return threadIdx.x / 64; }
};

template <class M>
__device__ inline unsigned global_group() {
  return blockIdx.x * M::per_block() + M::index();
}
template <class M>
__device__ inline unsigned groups_in_grid() {
  return gridDim.x * M::per_block();
}

// ---- per-group staging (P2PCopy) -----------------------------------------------------------------
// Where the transport under test takes per-group staging (P2PCopy's with_staging), the copy matrix
// gives every group its own, in dynamic shared memory, so its bulk-copy paths run. The suite's
// other kernels call with plain groups, which take P2PCopy's fallback (the group's own stores).

template <class T>
concept takes_staging = requires {
  typename T::staging;
};

/// g, with its own staging where the transport under test takes one (M::index() picks the slot).
/// (T is a parameter only so that the discarded branch is not checked for transports without
/// staging.)
template <class M, class G, class T = transport_under_test>
__device__ auto with_test_staging(G const& g) {
  if constexpr (takes_staging<T>) {
    using staging = typename T::staging;
    extern __shared__ __align__(128) unsigned char dynamic_smem[];
    return gpucomm::with_staging(g, reinterpret_cast<staging*>(dynamic_smem)[M::index()]);
  } else {
    return g;
  }
}

/// The dynamic shared memory a kernel using with_test_staging<M> needs per block of `block` threads.
template <class M, class T = transport_under_test>
std::size_t test_staging_bytes(unsigned block) {
  if constexpr (takes_staging<T>)
    return M::per_block(block) * sizeof(typename T::staging);
  else
    return 0;
}

/// Lets `kernel` take `bytes` of dynamic shared memory, above the default 48 KiB where needed, on
/// every local PE's GPU: the attribute belongs to the kernel on the current device only, so a
/// launch on another GPU of the process would otherwise fail (and the PEs waiting for it hang).
/// The current device stays as it was (callers run it inside for_each_local_pe too).
template <class Kernel>
void allow_dynamic_smem(gpucomm::world& w, Kernel kernel, std::size_t bytes) {
  if (bytes <= 48 * 1024) return;
  int caller_device = 0;
  GPUCOMM_TEST_CUDA(cudaGetDevice(&caller_device));
  for_each_local_pe(w, [&](int) {
    GPUCOMM_TEST_CUDA(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  });
  GPUCOMM_TEST_CUDA(cudaSetDevice(caller_device));
}

/// Launch configuration for a kernel that uses with_test_staging<M>: the dynamic shared memory,
/// with the kernel allowed to take more than the default 48 KiB.
template <class M, class Kernel>
std::size_t prepare_staging(gpucomm::world& w, Kernel kernel, unsigned block) {
  std::size_t const bytes = test_staging_bytes<M>(block);
  REQUIRE(bytes <= 200 * 1024);  // a test's group count too large for staging in one CTA
  allow_dynamic_smem(w, kernel, bytes);
  return bytes;
}

/// Adds `count` to `*errors` when nonzero (one atomic per thread at most).
__device__ inline void report(unsigned long long* errors, unsigned long long count) {
  if (count) atomicAdd(errors, count);
}

/// True when every thread of g passed the same `v` (bitwise): the leader publishes its value in
/// `slot` (per-group scratch), every thread compares.
template <class G, class T>
__device__ bool same_in_group(G const& g, T v, T* slot) {
  if (gpucomm::is_leader(g)) *slot = v;
  gpucomm::group_sync(g);
  T const leader = *slot;
  gpucomm::group_sync(g);
  static_assert(sizeof(T) <= 8);
  unsigned long long x = 0, y = 0;
  memcpy(&x, &leader, sizeof(T));
  memcpy(&y, &v, sizeof(T));
  return x == y;
}

// ---- host helpers -----------------------------------------------------------------------------

template <class T>
void upload(gpucomm::world& w, int pe, T* dst, T const* src, std::size_t n) {
  GPUCOMM_TEST_CUDA(cudaSetDevice(w.device(pe)));
  GPUCOMM_TEST_CUDA(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyHostToDevice, w.stream(pe)));
  GPUCOMM_TEST_CUDA(cudaStreamSynchronize(w.stream(pe)));
}
template <class T>
void upload(gpucomm::world& w, int pe, sym_ptr<T> dst, std::vector<T> const& src) {
  upload(w, pe, dst.get(), src.data(), src.size());
}
template <class T>
std::vector<T> download(gpucomm::world& w, int pe, T const* src, std::size_t n) {
  std::vector<T> out(n);
  GPUCOMM_TEST_CUDA(cudaSetDevice(w.device(pe)));
  GPUCOMM_TEST_CUDA(cudaMemcpyAsync(out.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost, w.stream(pe)));
  GPUCOMM_TEST_CUDA(cudaStreamSynchronize(w.stream(pe)));
  return out;
}
template <class T>
std::vector<T> download(gpucomm::world& w, int pe, sym_ptr<T> src, std::size_t n) {
  return download<T>(w, pe, src.get(), n);
}
inline void fill_bytes(gpucomm::world& w, int pe, void* p, int byte, std::size_t n) {
  GPUCOMM_TEST_CUDA(cudaSetDevice(w.device(pe)));
  GPUCOMM_TEST_CUDA(cudaMemsetAsync(p, byte, n, w.stream(pe)));
  GPUCOMM_TEST_CUDA(cudaStreamSynchronize(w.stream(pe)));
}
/// Every local PE's copy of a symmetric array set to `value`. Callers still need w.barrier()
/// before launching kernels that write into peers.
template <class T>
void fill_all(gpucomm::world& w, sym_array<T> const& a, T value) {
  std::vector<T> const v(a.size(), value);
  for (int pe : w.local_pes()) upload(w, pe, a.ptr(pe), v);
}

/// The concatenation over all PEs (in PE order) of `count` values each local PE contributes.
/// Collective. In one-process-per-GPU mode each process owns PE == rank.
template <class T>
std::vector<T> gather_pes(gpucomm::world& w, std::map<int, std::vector<T>> const& mine, std::size_t count) {
  std::vector<T> send;
  for (int pe : w.local_pes()) {
    auto const it = mine.find(pe);
    std::vector<T> part = it == mine.end() ? std::vector<T>(count) : it->second;
    part.resize(count);
    send.insert(send.end(), part.begin(), part.end());
  }
  auto& boot = w.bootstrap();
  std::vector<T> all(send.size() * static_cast<std::size_t>(boot.size()));
  boot.allgather(send.data(), all.data(), send.size() * sizeof(T));
  return all;
}

/// Device error counter per PE: a small symmetric array, zeroed.
inline sym_array<unsigned long long> make_counters(gpucomm::world& w, std::size_t n = 8) {
  auto a = w.alloc<unsigned long long>(n);
  fill_all(w, a, 0ull);
  return a;
}
/// Sum of counter `index` over the local PEs.
inline unsigned long long local_counter_sum(gpucomm::world& w, sym_array<unsigned long long> const& a,
                                            std::size_t index = 0) {
  unsigned long long s = 0;
  for (int pe : w.local_pes()) s += download(w, pe, a.ptr(pe), a.size())[index];
  return s;
}

// ---- data patterns ------------------------------------------------------------------------------

constexpr unsigned char poison_byte = 0xA5;       // never a pattern byte
constexpr unsigned char overwritten_byte = 0x3C;  // what a put's source becomes once reusable

/// Byte k of PE `pe`'s source arena in test `salt`; never equal to the poison.
__host__ __device__ inline unsigned char pattern_byte(std::uint64_t salt, int pe, std::uint64_t k) {
  auto const b = static_cast<unsigned char>(mix(salt, static_cast<std::uint64_t>(pe), k >> 3) >> ((k & 7) * 8));
  return b == poison_byte ? static_cast<unsigned char>(0x5A) : b;
}

inline std::vector<unsigned char> pattern_arena(std::uint64_t salt, int pe, std::size_t bytes) {
  std::vector<unsigned char> v(bytes);
  for (std::size_t k = 0; k < bytes; ++k) v[k] = pattern_byte(salt, pe, k);
  return v;
}

// ---- the put / get matrix -------------------------------------------------------------------------

enum copy_op : int { op_put, op_put_nbi, op_get, op_get_nbi, op_put_signal, op_put_signal_nbi, op_count };
inline char const* copy_op_name(int op) {
  static char const* const names[] = {"put", "put_nbi", "get", "get_nbi", "put_signal", "put_signal_nbi"};
  return op >= 0 && op < op_count ? names[op] : "?";
}
__host__ __device__ inline bool is_get(int op) { return op == op_get || op == op_get_nbi; }
__host__ __device__ inline bool is_nbi(int op) {
  return op == op_put_nbi || op == op_get_nbi || op == op_put_signal_nbi;
}
__host__ __device__ inline bool is_put_signal(int op) { return op == op_put_signal || op == op_put_signal_nbi; }

struct rgb3 {
  unsigned char c[3];
};
struct v16 {
  std::uint32_t w[4];
};
static_assert(sizeof(rgb3) == 3 && alignof(rgb3) == 1 && sizeof(v16) == 16 && alignof(v16) == 4);

/// Element types of the matrix: sizes 1, 2, 3 (odd struct), 4, 8, 16 (struct).
constexpr int elem_sizes[] = {1, 2, 3, 4, 8, 16};
constexpr int elem_aligns[] = {1, 2, 1, 4, 8, 4};
constexpr int elem_kinds = 6;  // the first n of elem_sizes a matrix uses

struct copy_job {
  int op;
  int elem;  // size in bytes: 1, 2, 3, 4, 8 or 16
  int initiator;
  int target;
  std::uint64_t n;        // elements
  std::uint64_t src_off;  // bytes into the source arena (at the PE the data comes from)
  std::uint64_t dst_off;  // bytes into the destination arena (at the PE that is written)
  std::uint64_t sig_index;
  std::uint64_t sig_value;
  int sig_op;
  int pad;
  __host__ __device__ std::uint64_t bytes() const { return n * static_cast<std::uint64_t>(elem); }
  __host__ __device__ int written_pe() const { return is_get(op) ? initiator : target; }
  __host__ __device__ int source_pe() const { return is_get(op) ? target : initiator; }
};

struct copy_args {
  comm_t c;
  sym_ptr<unsigned char> src;  // this PE's view of the source arena
  sym_ptr<unsigned char> dst;  // this PE's view of the destination arena
  sym_ptr<signal_t> sigs;
  copy_job const* jobs;  // this PE's jobs (local memory)
  int njobs;
  std::uint64_t salt;
  unsigned long long* errors;  // [0]: device-side check failures
};

// Compile-time selections keep instantiations bounded: each (op, element type) pair compiled
// into a kernel inlines a whole vectorised group copy.
constexpr unsigned ops_all = (1u << op_count) - 1;
constexpr unsigned ops_plain = (1u << op_put) | (1u << op_put_nbi) | (1u << op_get) | (1u << op_get_nbi);
constexpr unsigned elems_bytes = 1u << 0;               // element size 1
constexpr unsigned elems_2_4 = (1u << 1) | (1u << 3);   // sizes 2, 4
constexpr unsigned elems_8_16 = (1u << 4) | (1u << 5);  // sizes 8, 16
constexpr unsigned elems_3 = 1u << 2;                   // the 3-byte struct

template <class T, unsigned Ops, class G>
__device__ void issue_typed(copy_args const& a, G const& g, copy_job const& j) {
  auto const dst_sym = gpucomm::sym_ptr_cast<T>(a.dst + static_cast<std::ptrdiff_t>(j.dst_off));
  auto const src_sym = gpucomm::sym_ptr_cast<T const>(a.src + static_cast<std::ptrdiff_t>(j.src_off));
  T const* src_local = reinterpret_cast<T const*>(a.src.get() + j.src_off);
  T* dst_local = reinterpret_cast<T*>(a.dst.get() + j.dst_off);
  auto const sop = static_cast<gpucomm::signal_op>(j.sig_op);
  auto const sig = a.sigs + static_cast<std::ptrdiff_t>(j.sig_index);
  if constexpr ((Ops & (1u << op_put)) != 0)
    if (j.op == op_put) a.c.put(g, dst_sym, src_local, j.n, j.target);
  if constexpr ((Ops & (1u << op_put_nbi)) != 0)
    if (j.op == op_put_nbi) a.c.put_nbi(g, dst_sym, src_local, j.n, j.target);
  if constexpr ((Ops & (1u << op_get)) != 0)
    if (j.op == op_get) a.c.get(g, dst_local, src_sym, j.n, j.target);
  if constexpr ((Ops & (1u << op_get_nbi)) != 0)
    if (j.op == op_get_nbi) a.c.get_nbi(g, dst_local, src_sym, j.n, j.target);
  if constexpr ((Ops & (1u << op_put_signal)) != 0)
    if (j.op == op_put_signal) a.c.put_signal(g, dst_sym, src_local, j.n, sig, j.sig_value, sop, j.target);
  if constexpr ((Ops & (1u << op_put_signal_nbi)) != 0)
    if (j.op == op_put_signal_nbi) a.c.put_signal_nbi(g, dst_sym, src_local, j.n, sig, j.sig_value, sop, j.target);
}

template <unsigned Elems, unsigned Ops, class G>
__device__ void issue(copy_args const& a, G const& g, copy_job const& j) {
  if constexpr ((Elems & (1u << 0)) != 0)
    if (j.elem == 1) issue_typed<unsigned char, Ops>(a, g, j);
  if constexpr ((Elems & (1u << 1)) != 0)
    if (j.elem == 2) issue_typed<std::uint16_t, Ops>(a, g, j);
  if constexpr ((Elems & (1u << 2)) != 0)
    if (j.elem == 3) issue_typed<rgb3, Ops>(a, g, j);
  if constexpr ((Elems & (1u << 3)) != 0)
    if (j.elem == 4) issue_typed<std::uint32_t, Ops>(a, g, j);
  if constexpr ((Elems & (1u << 4)) != 0)
    if (j.elem == 8) issue_typed<std::uint64_t, Ops>(a, g, j);
  if constexpr ((Elems & (1u << 5)) != 0)
    if (j.elem == 16) issue_typed<v16, Ops>(a, g, j);
}

/// What the group does once it may touch a job's buffers again: a put's source is overwritten
/// (it must already be free: the target must still get the original bytes), a get's destination
/// is checked against the source PE's pattern (it must already hold the data).
template <class G>
__device__ void after(copy_args const& a, G const& g, copy_job const& j) {
  unsigned const rank = gpucomm::group_rank(g);
  unsigned const size = gpucomm::group_size(g);
  std::uint64_t const bytes = j.bytes();
  if (is_get(j.op)) {
    unsigned char const* d = a.dst.get() + j.dst_off;
    unsigned long long bad = 0;
    for (std::uint64_t k = rank; k < bytes; k += size) bad += d[k] != pattern_byte(a.salt, j.target, j.src_off + k);
    report(a.errors, bad);
  } else {
    unsigned char* s = a.src.get() + j.src_off;
    for (std::uint64_t k = rank; k < bytes; k += size) s[k] = overwritten_byte;
  }
}

template <class M, unsigned Elems, unsigned Ops>
__global__ void __launch_bounds__(1024) copy_matrix_kernel(copy_args a) {
  auto const made = M::make();  // collective over the warp for coalesced groups: before anyone leaves
  if (!M::active()) return;
  auto const g = with_test_staging<M>(made);
  unsigned const gid = global_group<M>();
  unsigned const ngroups = groups_in_grid<M>();
  for (unsigned k = gid; k < static_cast<unsigned>(a.njobs); k += ngroups) {
    copy_job const j = a.jobs[k];
    issue<Elems, Ops>(a, g, j);
    if (!is_nbi(j.op)) after(a, g, j);
  }
  a.c.quiet(g);
  for (unsigned k = gid; k < static_cast<unsigned>(a.njobs); k += ngroups) {
    copy_job const j = a.jobs[k];
    if (is_nbi(j.op)) after(a, g, j);
  }
}

struct matrix_opts {
  std::uint64_t salt = 1;
  int jobs_per_pe = 0;  // regular jobs per initiating PE
  unsigned grid = 1;
  unsigned block = 256;
  std::size_t mid_max_bytes = 16384;  // largest regular job
  int large_jobs = 0;                 // extra jobs per PE of [large_min, large_max] bytes
  std::size_t large_min = 0, large_max = 0;
  int force_target = -1;  // >= 0: every job targets this PE (many groups hitting one PE)
  unsigned op_mask = (1u << op_count) - 1;
  unsigned elem_mask = (1u << elem_kinds) - 1;  // bit i: elem_sizes[i]
};

struct matrix_plan {
  std::vector<copy_job> jobs;  // all PEs' jobs, grouped by initiator in order
  std::size_t src_bytes = 0, dst_bytes = 0, nsig = 0;
};

inline signal_t sig_initial(std::uint64_t index) { return 0x1000 + index * 7; }

inline matrix_plan plan_matrix(matrix_opts const& o, int npes) {
  matrix_plan p;
  std::mt19937_64 rng(o.salt * 0x9E3779B97F4A7C15ull + 12345);
  std::vector<int> ops;
  for (int op = 0; op < op_count; ++op)
    if (o.op_mask & (1u << op)) ops.push_back(op);
  int const nops = static_cast<int>(ops.size());
  std::vector<int> elems;
  for (int e = 0; e < elem_kinds; ++e)
    if (o.elem_mask & (1u << e)) elems.push_back(e);
  std::vector<std::size_t> src_cursor(static_cast<std::size_t>(npes), 0), dst_cursor(static_cast<std::size_t>(npes), 0);
  auto place = [&](std::size_t& cursor, std::size_t mis, std::size_t bytes) {
    std::size_t const guard = 16 + rng() % 48;
    std::size_t const off = (cursor + guard + 15) / 16 * 16 + mis;
    cursor = off + bytes;
    return off;
  };
  for (int pe = 0; pe < npes; ++pe) {
    for (int k = 0; k < o.jobs_per_pe + o.large_jobs; ++k) {
      copy_job j{};
      bool const large = k >= o.jobs_per_pe;
      int const nel = static_cast<int>(elems.size());
      int const ek = elems[static_cast<std::size_t>(large ? (k * 5 + pe) % nel
                                                          : (k / nops / (o.force_target >= 0 ? 1 : npes)) % nel)];
      j.op = large ? ops[static_cast<std::size_t>((k + pe * 2 + static_cast<int>(o.salt % 6)) % nops)]
                   : ops[static_cast<std::size_t>(k % nops)];
      j.elem = elem_sizes[ek];
      j.initiator = pe;
      j.target = o.force_target >= 0 ? o.force_target : (pe + k / nops) % npes;
      if (large) j.target = o.force_target >= 0 ? o.force_target : (pe + k) % npes;
      std::uint64_t const e = static_cast<std::uint64_t>(j.elem);
      if (large) {
        std::uint64_t const bytes = o.large_min + rng() % (o.large_max - o.large_min + 1);
        j.n = bytes / e;
      } else {
        switch (rng() % 6) {
          case 0:
            j.n = 0;
            break;
          case 1:
            j.n = 1;
            break;
          case 2:
            j.n = 3 + 2 * (rng() % 16);
            break;  // odd
          case 3:
            j.n = 34 + rng() % 300;
            break;
          case 4:
            j.n = (64 + rng() % (o.mid_max_bytes / 2)) / e;
            break;
          default:
            j.n = (o.mid_max_bytes / 2 + rng() % (o.mid_max_bytes / 2)) / e | 1;
            break;
        }
      }
      std::size_t const align = static_cast<std::size_t>(elem_aligns[ek]);
      std::size_t const src_mis = (rng() % 16) / align * align;
      std::size_t const dst_mis = (rng() % 16) / align * align;
      j.src_off = place(src_cursor[static_cast<std::size_t>(j.source_pe())], src_mis, j.bytes());
      j.dst_off = place(dst_cursor[static_cast<std::size_t>(j.written_pe())], dst_mis, j.bytes());
      j.sig_index = p.jobs.size();
      j.sig_op = static_cast<int>((k / nops) % 2 == 0 ? gpucomm::signal_op::set : gpucomm::signal_op::add);
      j.sig_value = mix(o.salt ^ 0x5157, j.sig_index, 7);
      p.jobs.push_back(j);
    }
  }
  p.src_bytes = *std::max_element(src_cursor.begin(), src_cursor.end()) + 64;
  p.dst_bytes = *std::max_element(dst_cursor.begin(), dst_cursor.end()) + 64;
  p.nsig = p.jobs.size();
  return p;
}

inline std::string describe(copy_job const& j) {
  std::ostringstream s;
  s << copy_op_name(j.op) << " elem=" << j.elem << " n=" << j.n << " PE " << j.initiator << "->PE " << j.target
    << " src_off=" << j.src_off << " (mod16 " << j.src_off % 16 << ") dst_off=" << j.dst_off << " (mod16 "
    << j.dst_off % 16 << ")";
  return s.str();
}

/// Host reference for PE q's arenas and signals after the matrix ran; returns mismatch count and
/// fills `first` with a description of the first one.
struct arena_check {
  std::uint64_t dst_bad = 0, src_bad = 0, sig_bad = 0;
  std::string first;
};

inline std::string locate(matrix_plan const& p, int pe, std::size_t off, bool dst) {
  for (auto const& j : p.jobs) {
    std::size_t const o = dst ? j.dst_off : j.src_off;
    int const owner = dst ? j.written_pe() : j.source_pe();
    if (owner == pe && off >= o && off < o + j.bytes()) return "inside job {" + describe(j) + "}";
  }
  return "outside every job region (a guard byte)";
}

inline arena_check check_matrix_pe(matrix_plan const& p, std::uint64_t salt, int q,
                                   std::vector<unsigned char> const& dst, std::vector<unsigned char> const& src,
                                   std::vector<signal_t> const& sigs) {
  arena_check r;
  std::vector<unsigned char> exp_dst(p.dst_bytes, poison_byte);
  std::vector<unsigned char> exp_src = pattern_arena(salt, q, p.src_bytes);
  std::vector<signal_t> exp_sig(p.nsig);
  for (std::size_t i = 0; i < p.nsig; ++i) exp_sig[i] = sig_initial(i);
  for (auto const& j : p.jobs) {
    if (j.written_pe() == q) {
      for (std::uint64_t k = 0; k < j.bytes(); ++k)
        exp_dst[j.dst_off + k] = pattern_byte(salt, j.source_pe(), j.src_off + k);
    }
    if (!is_get(j.op) && j.initiator == q) {
      for (std::uint64_t k = 0; k < j.bytes(); ++k) exp_src[j.src_off + k] = overwritten_byte;
    }
    if (is_put_signal(j.op) && j.target == q) {
      exp_sig[j.sig_index] =
          j.sig_op == static_cast<int>(gpucomm::signal_op::set) ? j.sig_value : exp_sig[j.sig_index] + j.sig_value;
    }
  }
  auto note = [&](std::string const& s) {
    if (r.first.empty()) r.first = s;
  };
  for (std::size_t k = 0; k < p.dst_bytes; ++k) {
    if (dst[k] != exp_dst[k]) {
      ++r.dst_bad;
      if (r.first.empty()) {
        std::ostringstream s;
        s << "PE " << q << " dst byte " << k << ": expected " << int(exp_dst[k]) << " got " << int(dst[k]) << ", "
          << locate(p, q, k, true);
        note(s.str());
      }
    }
  }
  for (std::size_t k = 0; k < p.src_bytes; ++k) {
    if (src[k] != exp_src[k]) {
      ++r.src_bad;
      if (r.first.empty()) {
        std::ostringstream s;
        s << "PE " << q << " src byte " << k << ": expected " << int(exp_src[k]) << " got " << int(src[k]) << ", "
          << locate(p, q, k, false);
        note(s.str());
      }
    }
  }
  for (std::size_t i = 0; i < p.nsig; ++i) {
    if (sigs[i] != exp_sig[i]) {
      ++r.sig_bad;
      if (r.first.empty()) {
        std::ostringstream s;
        s << "PE " << q << " signal " << i << ": expected " << exp_sig[i] << " got " << sigs[i] << " (job {"
          << describe(p.jobs[i]) << "})";
        note(s.str());
      }
    }
  }
  return r;
}

/// Runs the matrix for group kind M in the shared world. Collective.
/// Elems / Ops: what the kernel compiles in; the plan only uses those (o.op_mask is intersected).
template <class M, unsigned Elems = elems_bytes, unsigned Ops = ops_all>
void run_copy_matrix(matrix_opts o) {
  o.elem_mask = Elems;
  o.op_mask &= Ops;
  auto& w = the_world();
  int const npes = w.npes();
  matrix_plan const p = plan_matrix(o, npes);
  auto src = w.alloc<unsigned char>(p.src_bytes);
  auto dst = w.alloc<unsigned char>(p.dst_bytes);
  auto sigs = w.alloc<signal_t>(p.nsig);
  std::size_t max_jobs = 1;
  std::map<int, std::vector<copy_job>> mine;
  for (auto const& j : p.jobs) mine[j.initiator].push_back(j);
  for (auto const& [pe, v] : mine) max_jobs = std::max(max_jobs, v.size());
  auto jobs = w.alloc<copy_job>(max_jobs);
  auto errors = make_counters(w);
  std::vector<signal_t> sig0(p.nsig);
  for (std::size_t i = 0; i < p.nsig; ++i) sig0[i] = sig_initial(i);
  for (int pe : w.local_pes()) {
    upload(w, pe, src.ptr(pe), pattern_arena(o.salt, pe, p.src_bytes));
    fill_bytes(w, pe, dst.ptr(pe).get(), poison_byte, p.dst_bytes);
    upload(w, pe, sigs.ptr(pe), sig0);
    if (!mine[pe].empty()) upload(w, pe, jobs.ptr(pe), mine[pe]);
  }
  w.barrier();  // every PE initialised before any PE writes into or reads from a peer
  std::size_t const smem = prepare_staging<M>(w, copy_matrix_kernel<M, Elems, Ops>, o.block);
  for_each_local_pe(w, [&](int pe) {
    copy_args a{w.comm<transport_under_test>(pe),  src.ptr(pe), dst.ptr(pe),         sigs.ptr(pe), jobs.ptr(pe).get(),
                static_cast<int>(mine[pe].size()), o.salt,      errors.ptr(pe).get()};
    copy_matrix_kernel<M, Elems, Ops><<<o.grid, o.block, smem, w.stream(pe)>>>(a);
  });
  finish(w);
  w.barrier();  // every PE's kernel has finished writing into every other PE
  for (int pe : w.local_pes()) {
    auto const d = download(w, pe, dst.ptr(pe), p.dst_bytes);
    auto const s = download(w, pe, src.ptr(pe), p.src_bytes);
    auto const g = download(w, pe, sigs.ptr(pe), p.nsig);
    auto const r = check_matrix_pe(p, o.salt, pe, d, s, g);
    unsigned long long const dev_errors = download(w, pe, errors.ptr(pe), errors.size())[0];
    INFO("group " << M::name << ", " << npes << " PEs, PE " << pe << ", " << mine[pe].size() << " jobs, salt " << o.salt
                  << ", dst arena " << p.dst_bytes << " B; first mismatch: " << r.first);
    CHECK(r.dst_bad == 0);
    CHECK(r.src_bad == 0);
    CHECK(r.sig_bad == 0);
    CHECK(dev_errors == 0);  // a get's destination not complete when get / quiet returned
  }
  w.barrier();  // nobody frees (collectively) while a peer still checks
}

}  // namespace gpucomm::test::ops
