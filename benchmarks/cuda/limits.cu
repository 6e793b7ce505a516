// bench_cuda's isolating variants: raw CUDA kernels that each differ from the NVLinkStore path by
// one thing, so the cost of that thing is the difference between two rows of the same run. They
// explain the targets NVLinkStore misses (docs/contributing/benchmarks.md, "What limits it"):
//   copy_limits      PE 0 -> PE 1, block scope as in put_bw (each CTA its own contiguous share,
//                    a grid barrier every iteration): store only (no loads), the SM copy loop at
//                    unroll 2 (gpucomm's) / 4 / 8 (gpucomm's before) / 8 with non-coherent loads,
//                    and the bulk-copy unit (cp.async.bulk global -> shared -> peer, one thread per
//                    CTA, S stages). On a one-GPU machine PE 1 is GPU 0 itself: local -> local, a
//                    smoke figure to tune copy pipelines against.
//   copy_profile     not timed: each copy variant launched once at 1 and 4 CTAs, for ncu.
//   pingpong_limits  one thread per GPU, 8-byte flag (and an 8-byte data store first): which of
//                    data, release, acquire costs what in put_signal's one-way latency.
//   quiet_limits     512 threads store 4 B each to the peer, then the block completes them: the
//                    fence NVLinkStore's quiet uses, its alternatives, and no fence at all.
//   barrier_limits   one thread per PE, 2 PEs, epoch flags in each other's memory: the barrier's
//                    fence, its flag stores and its polling, each varied alone.
// Variants marked "not ordered" drop a fence the semantics need; they are lower bounds, never a
// way to run.
#include <cuda/atomic>
#include <cuda/ptx>

#include <cstdint>
#include <string>
#include <vector>

#include <gpucomm/host/detail/driver.hpp>

#include "../harness/device.cuh"
#include "../harness/device_buffer.hpp"
#include "../harness/harness.hpp"
#include "common.hpp"

namespace bench_cuda {
namespace {

constexpr int threads_per_cta = 1024;

bench::row base(char const* case_name, std::string variant) {
  bench::row r;
  r.case_name = case_name;
  r.library = "cuda";
  r.transport = "variant";
  r.variant = std::move(variant);
  r.npes = 2;
  return r;
}

// ---- where the flags live -------------------------------------------------------------------------

/// The latency variants run on flags in three kinds of memory, since the library's symmetric heap
/// is not cudaMalloc memory: CUDA VMM (cuMemCreate, mapped for both GPUs), with and without
/// gpuDirectRDMACapable (the heap asks for it where the device supports it).
enum class memory_kind { cuda_malloc, vmm, vmm_rdma };

char const* name(memory_kind k) {
  return k == memory_kind::cuda_malloc ? "cudaMalloc" : k == memory_kind::vmm ? "VMM" : "VMM+RDMA-capable";
}

/// `n` zeroed 64-bit words on `device`, mapped so that GPUs 0 and 1 reach them at the same address.
class words_on {
 public:
  words_on(int device, std::size_t n, memory_kind kind) : device_(device), bytes_(n * 8), kind_(kind) {
    BENCH_CUDA(cudaSetDevice(device));
    if (kind == memory_kind::cuda_malloc) {
      void* p = nullptr;
      BENCH_CUDA(cudaMalloc(&p, bytes_));
      ptr_ = static_cast<unsigned long long*>(p);
    } else {
      auto const& d = gpucomm::detail::driver();
      CUmemAllocationProp prop{};
      prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
      prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      prop.location.id = device;
      prop.allocFlags.gpuDirectRDMACapable = kind == memory_kind::vmm_rdma ? 1 : 0;
      std::size_t gran = 0;
      GPUCOMM_CU_CHECK(d.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), device);
      bytes_ = (bytes_ + gran - 1) / gran * gran;
      GPUCOMM_CU_CHECK(d.cuMemCreate(&handle_, bytes_, &prop, 0), device);
      GPUCOMM_CU_CHECK(d.cuMemAddressReserve(&va_, bytes_, gran, 0, 0), device);
      GPUCOMM_CU_CHECK(d.cuMemMap(va_, bytes_, 0, handle_, 0), device);
      CUmemAccessDesc access[2]{};
      for (int g = 0; g < 2; ++g) {
        access[g].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access[g].location.id = g;
        access[g].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      }
      GPUCOMM_CU_CHECK(d.cuMemSetAccess(va_, bytes_, access, 2), device);
      ptr_ = reinterpret_cast<unsigned long long*>(va_);
    }
    BENCH_CUDA(cudaMemset(ptr_, 0, bytes_));
  }
  words_on(words_on const&) = delete;
  words_on& operator=(words_on const&) = delete;
  ~words_on() {
    cudaSetDevice(device_);
    if (kind_ == memory_kind::cuda_malloc) {
      cudaFree(ptr_);
    } else {
      auto const& d = gpucomm::detail::driver();
      d.cuMemUnmap(va_, bytes_);
      d.cuMemAddressFree(va_, bytes_);
      d.cuMemRelease(handle_);
    }
  }
  unsigned long long* get() const { return ptr_; }
  void zero(cudaStream_t st) const {
    BENCH_CUDA(cudaSetDevice(device_));
    BENCH_CUDA(cudaMemsetAsync(ptr_, 0, bytes_, st));
  }

 private:
  int device_;
  std::size_t bytes_;
  memory_kind kind_;
  unsigned long long* ptr_ = nullptr;
  CUmemGenericAllocationHandle handle_{};
  CUdeviceptr va_{};
};

/// Every memory kind for the variants marked `all_memory`, cudaMalloc alone for the others.
std::vector<memory_kind> memory_kinds(bool all_memory) {
  if (!all_memory) return {memory_kind::cuda_malloc};
  return {memory_kind::cuda_malloc, memory_kind::vmm, memory_kind::vmm_rdma};
}

// ---- copy ---------------------------------------------------------------------------------------

enum class copy_variant { store, copy_u2, copy_u4, copy_u8, copy_u8_nc, bulk };

struct copy_config {
  copy_variant variant;
  char const* name;
  int stages = 0;            // bulk only
  unsigned stage_bytes = 0;  // bulk only
  std::size_t smem() const { return std::size_t{static_cast<unsigned>(stages)} * stage_bytes; }
};

std::vector<copy_config> const copy_configs{
    {copy_variant::store, "store-only"},
    {copy_variant::copy_u2, "copy-unroll2"},
    {copy_variant::copy_u4, "copy-unroll4"},
    {copy_variant::copy_u8, "copy-unroll8"},
    {copy_variant::copy_u8_nc, "copy-unroll8-nc"},
    {copy_variant::bulk, "bulk-4x16KiB", 4, 16384},
    {copy_variant::bulk, "bulk-8x16KiB", 8, 16384},
    {copy_variant::bulk, "bulk-4x32KiB", 4, 32768},
};

template <unsigned Unroll, bool NonCoherent>
__device__ void copy_loop(uint4* __restrict__ dst, uint4 const* __restrict__ src, std::size_t count) {
  std::size_t i = threadIdx.x;
  std::size_t const size = blockDim.x;
  for (; i + (Unroll - 1) * size < count; i += Unroll * size) {
    uint4 v[Unroll];
#pragma unroll
    for (unsigned u = 0; u < Unroll; ++u) v[u] = NonCoherent ? __ldg(src + i + u * size) : src[i + u * size];
#pragma unroll
    for (unsigned u = 0; u < Unroll; ++u) dst[i + u * size] = v[u];
  }
  for (; i < count; i += size) dst[i] = src[i];
}

/// The bulk-copy unit moves `bytes` (a multiple of 16) from local global memory through `stages`
/// shared-memory buffers to the peer, driven by one thread. Chunk k is loaded into stage k % S
/// (completing on that stage's mbarrier), then stored to the peer as one bulk group; a stage is
/// refilled once the store that read it has finished reading (wait_group.read), so S - 1 loads
/// and one or two stores are in flight. `parity` carries each mbarrier's phase across calls.
__device__ void bulk_copy(char* dst, char const* src, std::size_t bytes, char* smem, std::uint64_t* bars, int stages,
                          unsigned stage_bytes, unsigned& parity) {
  namespace ptx = cuda::ptx;
  std::size_t const chunks = (bytes + stage_bytes - 1) / stage_bytes;
  auto length = [&](std::size_t k) {
    std::size_t const left = bytes - k * stage_bytes;
    return static_cast<unsigned>(left < stage_bytes ? left : stage_bytes);
  };
  auto load = [&](std::size_t k) {
    int const s = static_cast<int>(k % stages);
    ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared, &bars[s], length(k));
    ptx::cp_async_bulk(ptx::space_shared, ptx::space_global, smem + std::size_t{unsigned(s)} * stage_bytes,
                       src + k * stage_bytes, length(k), &bars[s]);
  };
  for (std::size_t k = 0; k < chunks && k < static_cast<std::size_t>(stages); ++k) load(k);
  for (std::size_t k = 0; k < chunks; ++k) {
    int const s = static_cast<int>(k % stages);
    while (!ptx::mbarrier_try_wait_parity(&bars[s], (parity >> s) & 1u)) {
    }
    parity ^= 1u << s;
    ptx::cp_async_bulk(ptx::space_global, ptx::space_shared, dst + k * stage_bytes,
                       smem + std::size_t{unsigned(s)} * stage_bytes, length(k));
    ptx::cp_async_bulk_commit_group();
    if (k >= 1 && k - 1 + stages < chunks) {
      ptx::cp_async_bulk_wait_group_read(ptx::n32_t<1>{});  // the store of chunk k - 1 has read its stage
      load(k - 1 + stages);
    }
  }
  ptx::cp_async_bulk_wait_group_read(ptx::n32_t<0>{});  // every stage free for the next call
}

template <copy_variant V>
__global__ void __launch_bounds__(threads_per_cta, 1)
    copy_limit_kernel(uint4* remote, uint4 const* local, std::size_t per_cta, int iters, unsigned* counter, int stages,
                      unsigned stage_bytes) {
  extern __shared__ __align__(128) char smem[];
  __shared__ std::uint64_t bars[16];
  std::size_t const first = std::size_t{blockIdx.x} * per_cta;
  uint4* const dst = remote + first;
  uint4 const* const src = local + first;
  unsigned parity = 0;
  if constexpr (V == copy_variant::bulk) {
    if (threadIdx.x == 0) {
      for (int s = 0; s < stages; ++s) cuda::ptx::mbarrier_init(&bars[s], 1);
      // Orders the initialisations before the bulk copies that complete on these barriers.
      cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);
    }
    __syncthreads();
  }
  for (int it = 0; it < iters; ++it) {
    if constexpr (V == copy_variant::store) {
      uint4 const v{static_cast<unsigned>(it), 1u, 2u, 3u};
      for (std::size_t i = threadIdx.x; i < per_cta; i += blockDim.x) dst[i] = v;
    } else if constexpr (V == copy_variant::copy_u2) {
      copy_loop<2, false>(dst, src, per_cta);
    } else if constexpr (V == copy_variant::copy_u4) {
      copy_loop<4, false>(dst, src, per_cta);
    } else if constexpr (V == copy_variant::copy_u8) {
      copy_loop<8, false>(dst, src, per_cta);
    } else if constexpr (V == copy_variant::copy_u8_nc) {
      copy_loop<8, true>(dst, src, per_cta);
    } else {
      if (threadIdx.x == 0)
        bulk_copy(reinterpret_cast<char*>(dst), reinterpret_cast<char const*>(src), per_cta * sizeof(uint4), smem, bars,
                  stages, stage_bytes, parity);
    }
    bench::grid_barrier(counter, static_cast<unsigned>(it + 1) * gridDim.x);
  }
  if constexpr (V == copy_variant::bulk) {
    if (threadIdx.x == 0) cuda::ptx::cp_async_bulk_wait_group(cuda::ptx::n32_t<0>{});  // writes complete
  }
}

using copy_kernel_t = void (*)(uint4*, uint4 const*, std::size_t, int, unsigned*, int, unsigned);

copy_kernel_t kernel_for(copy_variant v) {
  switch (v) {
    case copy_variant::store:
      return copy_limit_kernel<copy_variant::store>;
    case copy_variant::copy_u2:
      return copy_limit_kernel<copy_variant::copy_u2>;
    case copy_variant::copy_u4:
      return copy_limit_kernel<copy_variant::copy_u4>;
    case copy_variant::copy_u8:
      return copy_limit_kernel<copy_variant::copy_u8>;
    case copy_variant::copy_u8_nc:
      return copy_limit_kernel<copy_variant::copy_u8_nc>;
    case copy_variant::bulk:
      break;
  }
  return copy_limit_kernel<copy_variant::bulk>;
}

/// The GPU copy_limits writes to: GPU 1, or GPU 0 itself on a one-GPU machine (local -> local, a
/// smoke figure for tuning copy pipelines; the rows' note says so).
inline int copy_target_device() {
  int count = 0;
  BENCH_CUDA(cudaGetDeviceCount(&count));
  return count >= 2 ? 1 : 0;
}

/// GPU 0's source and the target GPU's destination, peer access on, each kernel's shared-memory
/// limit raised.
struct copy_setup {
  static constexpr std::size_t max_size = 256 * bench::MiB;
  bench::device_buffer<uint4> local{0, max_size / 16};
  bench::device_buffer<uint4> remote{copy_target_device(), max_size / 16};
  bench::device_buffer<unsigned> counter{0, 1};
  copy_setup() {
    if (copy_target_device() != 0) require_peer_access();
    BENCH_CUDA(cudaSetDevice(0));
    BENCH_CUDA(cudaMemset(local.get(), 1, max_size));
    for (auto const& c : copy_configs) {
      BENCH_CUDA(cudaFuncSetAttribute(kernel_for(c.variant), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(c.smem())));
    }
  }
  void launch(copy_config const& c, int ctas, std::size_t size, int iters, cudaStream_t st) {
    BENCH_CUDA(cudaSetDevice(0));
    counter.zero(st);
    kernel_for(c.variant)<<<ctas, threads_per_cta, c.smem(), st>>>(remote.get(), local.get(), size / 16 / ctas, iters,
                                                                   counter.get(), c.stages, c.stage_bytes);
    BENCH_CUDA(cudaGetLastError());
  }
};

void copy_limits(bench::session& s) {
  auto const& o = s.opt();
  copy_setup setup;
  stream_pair st;
  bench::event_timer timer(0);
  bench::plan const plan = bench::bandwidth_plan(o);
  std::vector<std::size_t> const sizes{16 * bench::MiB, 256 * bench::MiB};
  std::vector<int> const grid = o.quick ? std::vector<int>{1, 4, 16, 132} : std::vector<int>{1, 4, 8, 16, 32, 132};
  for (auto const& c : copy_configs) {
    for (int const ctas : grid) {
      for (std::size_t const size : sizes) {
        bench::row where = base("copy_limits", c.name);
        where.scope = "block";
        where.ctas = ctas;
        where.threads = threads_per_cta;
        where.size = size;
        where.metric = "bandwidth";
        where.unit = "GB/s";
        where.grid_barrier = true;
        where.note = c.variant == copy_variant::bulk ? "one thread per CTA drives the bulk-copy unit" : "";
        if (copy_target_device() == 0) {
          where.npes = 1;
          where.note += std::string(where.note.empty() ? "" : "; ") + "one GPU: local -> local (smoke)";
        }
        std::size_t const moved = size / 16 / ctas * 16 * ctas;
        s.point(where, [&] {
          auto run = [&](int iters) {
            timer.start(st.s[0]);
            setup.launch(c, ctas, size, iters, st.s[0]);
            timer.stop(st.s[0]);
            return std::vector<double>{timer.ms()};
          };
          auto value = [&](std::vector<double> const& ms, int iters) {
            return bench::gbps(static_cast<double>(moved), ms[0], iters);
          };
          return bench::finish(where, bench::measure(plan, s.coll(), run, value));
        });
      }
    }
  }
}

/// One launch of each copy variant at 1 and 4 CTAs, for ncu; each launch is written as a row (metric
/// "launch", in launch order) so the profile's kernels can be named.
void copy_profile(bench::session& s) {
  copy_setup setup;
  stream_pair st;
  for (auto const& c : copy_configs) {
    for (int const ctas : {1, 4}) {
      setup.launch(c, ctas, 64 * bench::MiB, 1, st.s[0]);
      BENCH_CUDA(cudaStreamSynchronize(st.s[0]));
      bench::row r = base("copy_profile", c.name);
      r.scope = "block";
      r.ctas = ctas;
      r.threads = threads_per_cta;
      r.size = 64 * bench::MiB;
      r.metric = "launch";
      s.out().write(r);
    }
  }
}

// ---- ping-pong ----------------------------------------------------------------------------------

enum class post_kind { plain, relaxed, release };  // volatile store; st.relaxed.sys; st.release.sys
enum class wait_kind { plain, acquire, relaxed_then_fence };

enum class data_kind { none, from_register, from_memory };  // the 8-byte payload stored before the flag

struct pingpong_config {
  char const* name;
  data_kind data;
  post_kind post;
  wait_kind wait;
  bool all_memory = false;  // also on VMM memory (the heap's kind)
};

std::vector<pingpong_config> const pingpong_configs{
    {"volatile-flag (not ordered)", data_kind::none, post_kind::plain, wait_kind::plain},
    {"relaxed-post acquire-poll", data_kind::none, post_kind::relaxed, wait_kind::acquire},
    {"release-post volatile-poll", data_kind::none, post_kind::release, wait_kind::plain},
    {"release-post acquire-poll", data_kind::none, post_kind::release, wait_kind::acquire, true},
    {"release-post relaxed-poll+fence", data_kind::none, post_kind::release, wait_kind::relaxed_then_fence},
    {"data volatile-flag (not ordered)", data_kind::from_register, post_kind::plain, wait_kind::plain},
    {"data release-post volatile-poll", data_kind::from_register, post_kind::release, wait_kind::plain},
    {"data release-post acquire-poll", data_kind::from_register, post_kind::release, wait_kind::acquire},
    {"data release-post relaxed-poll+fence", data_kind::from_register, post_kind::release,
     wait_kind::relaxed_then_fence},
    {"loaded data release-post acquire-poll (put_signal)", data_kind::from_memory, post_kind::release,
     wait_kind::acquire, true},
};

using flag_ref = cuda::atomic_ref<unsigned long long, cuda::thread_scope_system>;

__device__ void post_flag(post_kind k, unsigned long long* flag, unsigned long long v) {
  if (k == post_kind::plain)
    *static_cast<unsigned long long volatile*>(flag) = v;
  else if (k == post_kind::relaxed)
    flag_ref(*flag).store(v, cuda::memory_order_relaxed);
  else
    flag_ref(*flag).store(v, cuda::memory_order_release);
}

__device__ void wait_flag(wait_kind k, unsigned long long* flag, unsigned long long v) {
  if (k == wait_kind::plain) {
    while (*static_cast<unsigned long long volatile*>(flag) < v) {
    }
  } else if (k == wait_kind::acquire) {
    while (flag_ref(*flag).load(cuda::memory_order_acquire) < v) {
    }
  } else {
    while (flag_ref(*flag).load(cuda::memory_order_relaxed) < v) {
    }
    // The relaxed load that saw the flag, then this fence: an acquire pattern, ordering the
    // peer's writes before the flag ahead of this thread's later reads.
    cuda::atomic_thread_fence(cuda::memory_order_acquire, cuda::thread_scope_system);
  }
}

/// `my_data` is where the peer's payload lands: put_signal's source in the benchmark, so the
/// from_memory payload is read from a line the peer just wrote, as in put_signal_pingpong.
__global__ void pingpong_limit_kernel(unsigned long long* mine, unsigned long long* theirs, unsigned long long* my_data,
                                      unsigned long long* their_data, int iters, bool initiator, pingpong_config c) {
  for (int i = 1; i <= iters; ++i) {
    auto const v = static_cast<unsigned long long>(i);
    auto post = [&] {
      if (c.data == data_kind::from_register) *their_data = v;
      if (c.data == data_kind::from_memory) *their_data = *static_cast<unsigned long long volatile*>(my_data);
      post_flag(c.post, theirs, v);
    };
    if (initiator) {
      post();
      wait_flag(c.wait, mine, v);
    } else {
      wait_flag(c.wait, mine, v);
      post();
    }
  }
}

void pingpong_limits(bench::session& s) {
  auto const& o = s.opt();
  require_peer_access();
  stream_pair st;
  bench::event_timer timer(0);
  bench::plan const plan = bench::latency_plan(o, 1000, 200);
  for (auto const& c : pingpong_configs) {
    for (memory_kind const mem : memory_kinds(c.all_memory)) {
      bench::row where = base("pingpong_limits", std::string(c.name) + " [" + name(mem) + "]");
      where.scope = "thread";
      where.ctas = 1;
      where.threads = 1;
      where.size = 8;
      where.metric = "one_way_latency";
      where.unit = "us";
      where.note = "round trip / 2";
      s.point(where, [&] {
        words_on flag[2] = {{0, 1, mem}, {1, 1, mem}};
        words_on data[2] = {{0, 1, mem}, {1, 1, mem}};
        auto run = [&](int iters) {
          for (int d = 0; d < 2; ++d) {
            flag[d].zero(st.s[d]);
            BENCH_CUDA(cudaStreamSynchronize(st.s[d]));
          }
          return time_initiator(st, timer, [&](int d, cudaStream_t stream) {
            pingpong_limit_kernel<<<1, 1, 0, stream>>>(flag[d].get(), flag[1 - d].get(), data[d].get(),
                                                       data[1 - d].get(), iters, d == 0, c);
          });
        };
        auto value = [](std::vector<double> const& ms, int iters) { return bench::us_per_iter(ms[0], iters) / 2; };
        return bench::finish(where, bench::measure(plan, s.coll(), run, value));
      });
    }
  }
}

// ---- quiet --------------------------------------------------------------------------------------

enum class quiet_kind { none, leader_acq_rel, leader_sc, every_thread_acq_rel };

struct quiet_config {
  char const* name;
  quiet_kind kind;
};

std::vector<quiet_config> const quiet_configs{
    {"stores + 2 syncs, no fence (not ordered)", quiet_kind::none},
    {"leader fence.acq_rel.sys (NVLinkStore quiet)", quiet_kind::leader_acq_rel},
    {"leader fence.sc.sys", quiet_kind::leader_sc},
    {"every thread fence.acq_rel.sys", quiet_kind::every_thread_acq_rel},
};

__global__ void __launch_bounds__(512, 1) quiet_limit_kernel(int* remote, int iters, quiet_kind k) {
  for (int i = 0; i < iters; ++i) {
    remote[threadIdx.x] = i;
    // The sync puts every thread's store before the leader's fence; the fence (system scope,
    // cumulative) waits until they are performed at the peer. no fence: only the syncs.
    __syncthreads();
    if (k == quiet_kind::every_thread_acq_rel) {
      cuda::ptx::fence(cuda::ptx::sem_acq_rel, cuda::ptx::scope_sys);
    } else if (threadIdx.x == 0) {
      if (k == quiet_kind::leader_acq_rel) cuda::ptx::fence(cuda::ptx::sem_acq_rel, cuda::ptx::scope_sys);
      if (k == quiet_kind::leader_sc) cuda::ptx::fence(cuda::ptx::sem_sc, cuda::ptx::scope_sys);
    }
    __syncthreads();
  }
}

void quiet_limits(bench::session& s) {
  auto const& o = s.opt();
  require_peer_access();
  bench::device_buffer<int> remote{1, 512};
  stream_pair st;
  bench::event_timer timer(0);
  bench::plan const plan = bench::latency_plan(o, 500, 200);
  for (auto const& c : quiet_configs) {
    bench::row where = base("quiet_limits", c.name);
    where.scope = "block";
    where.ctas = 1;
    where.threads = 512;
    where.size = 4;
    where.metric = "latency";
    where.unit = "us";
    where.note = "512 threads store 4 B each to the peer, then the block completes them";
    s.point(where, [&] {
      auto run = [&](int iters) {
        BENCH_CUDA(cudaSetDevice(0));
        timer.start(st.s[0]);
        quiet_limit_kernel<<<1, 512, 0, st.s[0]>>>(remote.get(), iters, c.kind);
        BENCH_CUDA(cudaGetLastError());
        timer.stop(st.s[0]);
        return std::vector<double>{timer.ms()};
      };
      auto value = [](std::vector<double> const& ms, int iters) { return bench::us_per_iter(ms[0], iters); };
      return bench::finish(where, bench::measure(plan, s.coll(), run, value));
    });
  }
}

// ---- barrier ------------------------------------------------------------------------------------

enum class barrier_kind {
  fence_relaxed_acquire,
  epoch_word_stored_before_fence,
  epoch_word_stored_after_flags,
  fence_relaxed_relaxed_fence,
  release_stores_acquire,
  no_fence
};

struct barrier_config {
  char const* name;
  barrier_kind kind;
  bool all_memory = false;  // also on VMM memory (the heap's kind)
};

std::vector<barrier_config> const barrier_configs{
    {"fence, relaxed flag stores, acquire poll", barrier_kind::fence_relaxed_acquire},
    {"epoch read and written in memory, then fence, flags, acquire poll (NVLinkStore)",
     barrier_kind::epoch_word_stored_before_fence},
    {"epoch read, fence, flags, then epoch written, acquire poll", barrier_kind::epoch_word_stored_after_flags, true},
    {"fence, relaxed flag stores, relaxed poll + fence", barrier_kind::fence_relaxed_relaxed_fence},
    {"release flag stores, acquire poll", barrier_kind::release_stores_acquire},
    {"relaxed flag stores, relaxed poll, no fence (not ordered)", barrier_kind::no_fence},
};

/// `at[pe]` are the two PEs' flag arrays (2 words each, then this PE's epoch word); PE `me` writes
/// word `me` of both.
struct barrier_flags {
  unsigned long long* at[2];
};

__global__ void barrier_limit_kernel(barrier_flags f, int me, int iters, barrier_kind k) {
  unsigned long long* const epoch_word = f.at[me] + 2;
  bool const in_memory =
      k == barrier_kind::epoch_word_stored_before_fence || k == barrier_kind::epoch_word_stored_after_flags;
  for (int i = 1; i <= iters; ++i) {
    // The epoch kept in memory between barriers, as a library call must keep it, or the loop's.
    auto const epoch = in_memory ? *epoch_word + 1 : static_cast<unsigned long long>(i);
    if (k == barrier_kind::epoch_word_stored_before_fence) *epoch_word = epoch;
    // This fence and the relaxed flag stores after it form a release pattern at system scope: what
    // the thread wrote before the barrier reaches each PE ahead of the flag (NVLinkStore's way).
    if (k != barrier_kind::release_stores_acquire && k != barrier_kind::no_fence)
      cuda::ptx::fence(cuda::ptx::sem_acq_rel, cuda::ptx::scope_sys);
    for (int pe = 0; pe < 2; ++pe) {
      flag_ref word(f.at[pe][me]);
      word.store(epoch,
                 k == barrier_kind::release_stores_acquire ? cuda::memory_order_release : cuda::memory_order_relaxed);
    }
    if (k == barrier_kind::epoch_word_stored_after_flags) *epoch_word = epoch;
    for (int pe = 0; pe < 2; ++pe) {
      flag_ref word(f.at[me][pe]);
      bool const acquire = k != barrier_kind::fence_relaxed_relaxed_fence && k != barrier_kind::no_fence;
      while (word.load(acquire ? cuda::memory_order_acquire : cuda::memory_order_relaxed) < epoch) {
      }
    }
    // After relaxed polls, the acquire half: orders what the peers released before this thread's
    // later reads.
    if (k == barrier_kind::fence_relaxed_relaxed_fence)
      cuda::atomic_thread_fence(cuda::memory_order_acquire, cuda::thread_scope_system);
  }
}

void barrier_limits(bench::session& s) {
  auto const& o = s.opt();
  require_peer_access();
  stream_pair st;
  bench::event_timer timer(0);
  bench::plan const plan = bench::latency_plan(o, 1000, 200);
  for (auto const& c : barrier_configs) {
    for (memory_kind const mem : memory_kinds(c.all_memory)) {
      bench::row where = base("barrier_limits", std::string(c.name) + " [" + name(mem) + "]");
      where.scope = "thread";
      where.ctas = 1;
      where.threads = 1;
      where.metric = "latency";
      where.unit = "us";
      where.note = "per barrier, 2 PEs";
      s.point(where, [&] {
        words_on words[2] = {{0, 3, mem}, {1, 3, mem}};
        barrier_flags const f{{words[0].get(), words[1].get()}};
        auto run = [&](int iters) {
          for (int d = 0; d < 2; ++d) {
            words[d].zero(st.s[d]);
            BENCH_CUDA(cudaStreamSynchronize(st.s[d]));
          }
          return time_initiator(st, timer, [&](int d, cudaStream_t stream) {
            barrier_limit_kernel<<<1, 1, 0, stream>>>(f, d, iters, c.kind);
          });
        };
        auto value = [](std::vector<double> const& ms, int iters) { return bench::us_per_iter(ms[0], iters); };
        return bench::finish(where, bench::measure(plan, s.coll(), run, value));
      });
    }
  }
}

}  // namespace

std::vector<bench::case_entry> limit_cases() {
  return {
      {"copy_limits", copy_limits},   {"copy_profile", copy_profile},     {"pingpong_limits", pingpong_limits},
      {"quiet_limits", quiet_limits}, {"barrier_limits", barrier_limits},
  };
}

}  // namespace bench_cuda
