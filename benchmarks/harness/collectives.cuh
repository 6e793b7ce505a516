#pragma once
// What the collective cases of every library share (gpucomm: gpucomm/collectives.cu; NCCL:
// nccl/main.cu), so that their rows are the same measurement with a different library:
//   - nccl-tests' size semantics and bus-bandwidth factors (shape_of, bus_factor);
//   - the size sweep, the calls per CUDA graph and the timing plan;
//   - the inputs (a kernel that fills a rank's send buffer) and the host reference that every
//     element of every rank's result is checked against (check_result);
//   - the three rows of a point: time per call (us), algbw and busbw (GB/s).
//
// Sizes follow nccl-tests (src/common.cu setupArgs and the per-collective GetCollByteCount and
// GetBw; doc/PERFORMANCE.md). For a requested size S bytes of elements of E bytes on n ranks:
//   allreduce       count = S/E elements in and out; size = count*E; busbw = algbw * 2(n-1)/n
//   allgather       count = (S/E)/n per rank (sendcount); receive buffer count*n; size = count*n*E
//                   (the total gathered buffer); busbw = algbw * (n-1)/n
//   reduce_scatter  count = (S/E)/n per rank (recvcount); send buffer count*n; size = count*n*E
//                   (the total send buffer); busbw = algbw * (n-1)/n
//   alltoall        count = (S/E)/n per peer block; send and receive buffers count*n;
//                   size = count*n*E (the whole send buffer); busbw = algbw * (n-1)/n
//   alltoallv       uniform (nccl-tests' alltoallv_perf): as alltoall. skewed (gpucomm only): rank p
//                   sends rank r m*w(p,r) elements, w(p,r) = 1 + (p+r) mod n, m = (S/E)/(n(n+1)/2),
//                   so every rank sends and receives m*n(n+1)/2 elements (size = that * E) but the
//                   pairs differ up to n-fold; busbw uses alltoall's factor (nominal: the share that
//                   stays local is not 1/n there).
// algbw = size / time (decimal GB/s), as nccl-tests prints it; a size whose per-rank count rounds
// to 0 is left out (nccl-tests prints it as a 0-byte row).

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "harness.hpp"

namespace bench::coll {

enum class op { allreduce, allgather, alltoall, reduce_scatter, alltoallv };

inline char const* name(op k) {
  switch (k) {
    case op::allreduce:
      return "allreduce";
    case op::allgather:
      return "allgather";
    case op::alltoall:
      return "alltoall";
    case op::reduce_scatter:
      return "reduce_scatter";
    case op::alltoallv:
      return "alltoallv";
  }
  return "?";
}

/// nccl-tests' bus-bandwidth factor: what each rank's link carries per byte of algbw.
inline double bus_factor(op k, int n) {
  double const f = static_cast<double>(n - 1) / static_cast<double>(n);
  return k == op::allreduce ? 2 * f : f;
}

/// alltoallv's skewed weights: rank p sends rank r m * weight(p, r) elements. Over r (or over p)
/// the weights are 1..n once each, so every rank sends and receives m * n(n+1)/2.
inline std::size_t skew_weight(int p, int r, int n) { return 1 + static_cast<std::size_t>((p + r) % n); }

/// One collective call at one point of the size axis, as nccl-tests sets it up.
struct shape {
  op kind = op::allreduce;
  int n = 2;              // ranks
  bool skewed = false;    // alltoallv only: skewed counts (else uniform, nccl-tests' alltoallv)
  std::size_t count = 0;  // the call's count argument: allreduce's elements; per rank (allgather's
                          // sendcount, reduce_scatter's recvcount) or per peer block (alltoall);
                          // alltoallv: the unit m of the counts
  std::size_t send = 0;   // elements of each rank's send buffer
  std::size_t recv = 0;   // elements of each rank's receive buffer
  std::size_t bytes = 0;  // the size axis: max(send, recv) * element size (nccl-tests' size column)

  /// alltoallv: elements rank p sends rank r, and where they start in p's send buffer.
  std::size_t pair_count(int p, int r) const { return skewed ? count * skew_weight(p, r, n) : count; }
  std::size_t pair_offset(int p, int r) const {
    std::size_t at = 0;
    for (int q = 0; q < r; ++q) at += pair_count(p, q);
    return at;
  }
};

inline shape shape_of(op k, std::size_t size_bytes, std::size_t element_bytes, int n, bool skewed = false) {
  shape s;
  s.kind = k;
  s.n = n;
  s.skewed = k == op::alltoallv && skewed;
  std::size_t const elements = size_bytes / element_bytes;
  auto const un = static_cast<std::size_t>(n);
  switch (k) {
    case op::allreduce:
      s.count = s.send = s.recv = elements;
      break;
    case op::allgather:
      s.count = s.send = elements / un;
      s.recv = s.count * un;
      break;
    case op::reduce_scatter:
      s.count = s.recv = elements / un;
      s.send = s.count * un;
      break;
    case op::alltoall:
      s.count = elements / un;
      s.send = s.recv = s.count * un;
      break;
    case op::alltoallv: {
      std::size_t const units = s.skewed ? un * (un + 1) / 2 : un;
      s.count = elements / units;
      s.send = s.recv = s.count * units;
      break;
    }
  }
  s.bytes = (s.send > s.recv ? s.send : s.recv) * element_bytes;
  return s;
}

/// The largest size of the sweep: --max-size, else the case's default for the mode.
inline std::size_t max_bytes(options const& o, std::size_t full_max, std::size_t quick_max) {
  return o.max_size ? o.max_size : (o.quick ? quick_max : full_max);
}

/// The size axis: 8 B up by x2 (x4 in --quick) to `hi`, `hi` itself always included.
inline std::vector<std::size_t> sizes(options const& o, std::size_t hi) {
  std::vector<std::size_t> v = geometric(8, hi, o.quick ? 4 : 2);
  if (hi >= 8 && (v.empty() || v.back() != hi)) v.push_back(hi);
  return v;
}

/// The collective cases' default largest sizes: 256 MiB (full), 64 MiB (--quick).
inline constexpr std::size_t full_max_bytes = 256 * MiB;
inline constexpr std::size_t quick_max_bytes = 64 * MiB;

/// Calls captured in one CUDA graph (nccl-tests -G replays graphs of its -n iterations): 20, as
/// the all_reduce cases; 5 above 16 MiB, where one call is long enough to time on its own.
inline int calls_per_graph(std::size_t bytes) { return bytes <= 16 * MiB ? 20 : 5; }

/// Graph launches per timed repetition, calibrated to about 5 ms (2 ms in --quick), at most 25.
inline plan graph_plan(options const& o) {
  plan p;
  p.target_ms = o.quick ? 2.0 : 5.0;
  p.min_iters = 1;
  p.max_iters = 25;
  p.reps = o.reps ? o.reps : (o.quick ? 3 : 5);
  return p;
}

// ---- inputs and the host reference ---------------------------------------------------------------

/// Element j of rank p's send buffer: an integer in [-30, 30], mixed from p and j so that a block
/// from the wrong rank or the wrong offset shows. Sums of up to 8 of them (|sum| <= 240) are exact
/// in float and in bf16 (8 significant bits), in any order, so results are compared exactly.
__host__ __device__ inline int input_value(int p, std::size_t j) {
  std::uint64_t x = (static_cast<std::uint64_t>(j) + 1) * 0x9E3779B97F4A7C15ull;
  x ^= (static_cast<std::uint64_t>(p) + 1) * 0xC2B2AE3D27D4EB4Full;
  x ^= x >> 31;
  return static_cast<int>(x % 61) - 30;
}

template <class T>
__global__ void fill_inputs(T* dst, std::size_t n, int p) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    dst[i] = static_cast<T>(static_cast<float>(input_value(p, i)));
}

/// Fill rank p's send buffer (n elements, on the current device) on `stream`.
template <class T>
void fill(T* dst, std::size_t n, int p, cudaStream_t stream) {
  if (n == 0) return;
  std::size_t const blocks = (n + 1023) / 1024;
  fill_inputs<T><<<static_cast<unsigned>(blocks < 1024 ? blocks : 1024), 1024, 0, stream>>>(dst, n, p);
  BENCH_CUDA(cudaGetLastError());
}

/// The largest number of ranks whose sums check_result can compare exactly (see input_value).
inline constexpr int max_checked_ranks = 8;

/// Compares rank `rank`'s receive buffer (`got`, s.recv elements, copied to the host) with the
/// reference; alltoallv also its recv_counts. Empty when every element matches, else the number of
/// wrong elements and the first few.
template <class T>
std::string check_result(shape const& s, int rank, std::vector<T> const& got,
                         std::vector<std::size_t> const& recv_counts = {}) {
  std::size_t wrong = 0;
  std::string first;
  auto test = [&](std::size_t i, float expected) {
    float const v = static_cast<float>(got[i]);
    if (v == expected) return;
    if (wrong++ < 4)
      first += " [" + std::to_string(i) + "] = " + std::to_string(v) + ", expected " + std::to_string(expected) + ";";
  };
  int const n = s.n;
  std::size_t const c = s.count;
  switch (s.kind) {
    case op::allreduce:
      for (std::size_t i = 0; i < c; ++i) {
        int sum = 0;
        for (int p = 0; p < n; ++p) sum += input_value(p, i);
        test(i, static_cast<float>(sum));
      }
      break;
    case op::allgather:
      for (int r = 0; r < n; ++r)
        for (std::size_t i = 0; i < c; ++i) test(r * c + i, static_cast<float>(input_value(r, i)));
      break;
    case op::reduce_scatter:
      for (std::size_t i = 0; i < c; ++i) {
        int sum = 0;
        for (int p = 0; p < n; ++p) sum += input_value(p, rank * c + i);
        test(i, static_cast<float>(sum));
      }
      break;
    case op::alltoall:
      for (int q = 0; q < n; ++q)
        for (std::size_t i = 0; i < c; ++i) test(q * c + i, static_cast<float>(input_value(q, rank * c + i)));
      break;
    case op::alltoallv: {
      std::size_t at = 0;
      for (int q = 0; q < n; ++q) {
        std::size_t const cnt = s.pair_count(q, rank), off = s.pair_offset(q, rank);
        if (recv_counts.size() != static_cast<std::size_t>(n) || recv_counts[static_cast<std::size_t>(q)] != cnt) {
          ++wrong;
          first += " recv_counts[" + std::to_string(q) + "] = " +
                   (recv_counts.size() > static_cast<std::size_t>(q) ? std::to_string(recv_counts[q]) : "missing") +
                   ", expected " + std::to_string(cnt) + ";";
        }
        for (std::size_t i = 0; i < cnt && at + i < s.recv; ++i)
          test(at + i, static_cast<float>(input_value(q, off + i)));
        at += cnt;
      }
      break;
    }
  }
  if (!wrong) return {};
  return std::to_string(wrong) + " wrong at rank " + std::to_string(rank) + ":" + first;
}

/// Copies rank `rank`'s receive buffer (device memory of the current device) back and checks it;
/// throws bench::fatal, ending the case, when it is wrong: a wrong collective must not produce a
/// figure, and nothing later in this process could be trusted either.
template <class T>
void verify(shape const& s, int rank, T const* device_dst, std::vector<std::size_t> const& recv_counts,
            std::string const& when) {
  std::vector<T> got(s.recv);
  if (s.recv) BENCH_CUDA(cudaMemcpy(got.data(), device_dst, s.recv * sizeof(T), cudaMemcpyDeviceToHost));
  std::string const why = check_result(s, rank, got, recv_counts);
  if (!why.empty()) {
    std::fprintf(stderr, "bench: WRONG RESULT: %s, %s (size %zu): %s\n", name(s.kind), when.c_str(), s.bytes,
                 why.c_str());
    throw fatal(std::string("WRONG RESULT ") + when + ": " + why);
  }
}

template <class T>
char const* type_name() {
  if constexpr (std::is_same_v<T, float>)
    return "float32";
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return "bf16";
  else
    return "?";
}

// ---- rows ---------------------------------------------------------------------------------------

/// The time row of a measured point (`lat`: metric latency, us per call) as algbw and busbw rows;
/// their min and max come from the time's max and min.
inline std::vector<row> bandwidth_rows(row const& lat, shape const& s) {
  auto gbs = [&](double us) { return us > 0 ? static_cast<double>(s.bytes) / (us * 1e3) : 0.0; };
  std::vector<row> out;
  for (char const* metric : {"algbw", "busbw"}) {
    row r = lat;
    double const f = std::string(metric) == "busbw" ? bus_factor(s.kind, s.n) : 1.0;
    r.metric = metric;
    r.unit = "GB/s";
    r.value = gbs(lat.value) * f;
    r.min = gbs(lat.max) * f;
    r.max = gbs(lat.min) * f;
    out.push_back(r);
  }
  return out;
}

}  // namespace bench::coll
