// A fixed 20-kernel program for the compile-cost benchmark: kernels shaped like the unit tests of an
// OpenSHMEM implementation's own suite (hello, element-wise put and get, non-blocking forms with
// quiet, put_signal and signal with waits, every atomic, a lock by compare_swap, fence ordering,
// barriers in a loop, block and warp groups, local buffers in shared memory, an all-to-all and a
// broadcast), each a separate kernel as a user's program would have them; the typed ones for eight
// element types (75 kernels in all). It is compiled, never run:
//   scripts/compile-cost.sh --sources benchmarks/compile/twenty_kernels.cu   (front end, ptxas)
//   scripts/compile-cost.sh --headers                                         (nvcc -c, with the headers')
// measure it per transport (GPUCOMM_TEST_TRANSPORT: 1 NVLinkStore, 2 IBGDAPost, 3 route).
#include <cooperative_groups.h>
#include <gpucomm/gpucomm.cuh>

#include <cstdint>

#if !defined(GPUCOMM_TEST_TRANSPORT) || GPUCOMM_TEST_TRANSPORT == 1
using transport = gpucomm::NVLinkStore;
#elif GPUCOMM_TEST_TRANSPORT == 2
using transport = gpucomm::IBGDAPost;
#else
using transport = gpucomm::route<gpucomm::NVLinkStore, gpucomm::IBGDAPost>;
#endif

namespace cg = cooperative_groups;
using comm_t = gpucomm::comm<transport>;
using gpucomm::signal_t;
using gpucomm::sym_ptr;

namespace {

constexpr int n = 64;

/// Buffers every kernel gets: longs, ints, doubles, a signal array, counters, a lock, and raw bytes
/// that the typed kernels view as their element type (OpenSHMEM's tests run each case for every
/// standard type).
struct heap {
  sym_ptr<long> longs;
  sym_ptr<int> ints;
  sym_ptr<double> doubles;
  sym_ptr<signal_t> sigs;
  sym_ptr<std::uint64_t> counters;
  sym_ptr<std::uint32_t> words;
  sym_ptr<std::uint64_t> lock;
  sym_ptr<unsigned char> bytes;
};

template <class T>
__device__ sym_ptr<T> typed(heap const& h) {
  return gpucomm::sym_ptr_cast<T>(h.bytes);
}

__device__ int next_pe(comm_t const& c) { return (c.my_pe() + 1) % c.npes(); }

__global__ void k01_hello(comm_t c, heap h) {
  h.ints.get()[0] = c.my_pe() * 100 + c.npes();
  c.barrier(cg::this_thread_block());
}

template <class T>
__global__ void k02_put_elements(comm_t c, heap h) {
  auto const one = gpucomm::this_thread();
  auto const a = typed<T>(h);
  if (threadIdx.x != 0) return;
  for (int i = 0; i < n; ++i) c.put(one, a + i, a.get() + n + i, 1, next_pe(c));
  c.quiet(one);
}

template <class T>
__global__ void k03_get_elements(comm_t c, heap h) {
  auto const one = gpucomm::this_thread();
  auto const a = typed<T>(h);
  if (threadIdx.x != 0) return;
  for (int i = 0; i < n; ++i) c.get(one, a.get() + n + i, sym_ptr<T const>(a + i), 1, next_pe(c));
}

template <class T>
__global__ void k04_put_nbi(comm_t c, heap h) {
  auto const warp = cg::tiled_partition<32>(cg::this_thread_block());
  auto const a = typed<T>(h);
  c.put_nbi(warp, a, a.get() + n, n, next_pe(c));
  c.quiet(warp);
}

template <class T>
__global__ void k05_get_nbi(comm_t c, heap h) {
  auto const warp = cg::tiled_partition<32>(cg::this_thread_block());
  auto const a = typed<T>(h);
  c.get_nbi(warp, a.get() + n, sym_ptr<T const>(a), n, next_pe(c));
  c.quiet(warp);
}

__global__ void k06_put_signal_wait(comm_t c, heap h) {
  auto const block = cg::this_thread_block();
  c.put_signal(block, h.longs, h.longs.get() + n, n, h.sigs, 1, gpucomm::signal_op::add, next_pe(c));
  c.wait_until(block, h.sigs, gpucomm::cmp::ge, 1);
}

__global__ void k07_signal_set(comm_t c, heap h) {
  auto const one = gpucomm::this_thread();
  if (threadIdx.x != 0) return;
  c.signal(one, h.sigs + 1, 7, gpucomm::signal_op::set, next_pe(c));
  c.wait_until(one, h.sigs + 1, gpucomm::cmp::eq, 7);
}

template <class T>
__global__ void k08_fetch_add_ring(comm_t c, heap h) {
  auto const one = gpucomm::this_thread();
  auto const a = typed<T>(h);
  if (threadIdx.x != 0) return;
  for (int pe = 0; pe < c.npes(); ++pe) a.get()[pe + 1] = c.fetch_add(one, a, T{1}, pe);
}

__global__ void k09_lock(comm_t c, heap h) {
  auto const one = gpucomm::this_thread();
  if (threadIdx.x != 0) return;
  while (c.compare_swap(one, h.lock, std::uint64_t{0}, std::uint64_t{1}, 0) != 0) {
  }
  c.add(one, h.counters + 1, std::uint64_t{1}, 0);
  c.fence(one);
  c.set(one, h.lock, std::uint64_t{0}, 0);
}

template <class T>
__global__ void k10_swap(comm_t c, heap h) {
  auto const one = gpucomm::this_thread();
  auto const a = typed<T>(h);
  if (threadIdx.x != 0) return;
  a.get()[1] = c.swap(one, a, static_cast<T>(c.my_pe()), next_pe(c));
}

template <class T>
__global__ void k11_bitwise(comm_t c, heap h) {
  auto const one = gpucomm::this_thread();
  auto const a = typed<T>(h);
  if (threadIdx.x != 0) return;
  T v = c.fetch_and(one, a + 2, static_cast<T>(~T{1}), next_pe(c));
  v ^= c.fetch_or(one, a + 2, T{2}, next_pe(c));
  v ^= c.fetch_xor(one, a + 2, T{4}, next_pe(c));
  a.get()[3] = v;
}

template <class T>
__global__ void k12_fetch_set(comm_t c, heap h) {
  auto const one = gpucomm::this_thread();
  auto const a = typed<T>(h);
  if (threadIdx.x != 0) return;
  c.set(one, a + 1, T{5}, next_pe(c));
  a.get()[2] = c.fetch(one, a + 1, next_pe(c));
}

__global__ void k13_fence_order(comm_t c, heap h) {
  auto const one = gpucomm::this_thread();
  if (threadIdx.x != 0) return;
  c.put(one, h.ints + 8, h.ints.get() + 16, 8, next_pe(c));
  c.fence(one);
  c.put(one, h.ints + 24, h.ints.get() + 32, 1, next_pe(c));
}

__global__ void k14_barrier_loop(comm_t c, heap h) {
  auto const block = cg::this_thread_block();
  for (int i = 0; i < 10; ++i) {
    if (block.thread_rank() == 0) h.ints.get()[3] = i;
    c.barrier(block);
  }
}

template <class T>
__global__ void k15_block_put(comm_t c, heap h) {
  auto const block = cg::this_thread_block();
  auto const a = typed<T>(h);
  for (int pe = 0; pe < c.npes(); ++pe) c.put(block, a + pe * n, a.get(), n, pe);
  c.barrier(block);
}

template <class T>
__global__ void k16_warp_get(comm_t c, heap h) {
  auto const warp = cg::tiled_partition<32>(cg::this_thread_block());
  auto const a = typed<T>(h);
  c.get(warp, a.get() + 2 * n, sym_ptr<T const>(a), n, next_pe(c));
}

__global__ void k17_put_from_shared(comm_t c, heap h) {
  __shared__ long tile[n];
  auto const block = cg::this_thread_block();
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) tile[i] = c.my_pe() + i;
  block.sync();
  c.put(block, h.longs + 3 * n, tile, n, next_pe(c));
}

__global__ void k18_get_into_shared(comm_t c, heap h) {
  __shared__ int tile[n];
  auto const block = cg::this_thread_block();
  c.get(block, tile, sym_ptr<int const>(h.ints), n, next_pe(c));
  if (threadIdx.x < n) h.ints.get()[n + threadIdx.x] = tile[threadIdx.x];
}

__global__ void k19_alltoall(comm_t c, heap h) {
  auto const warp = cg::tiled_partition<32>(cg::this_thread_block());
  int const me = c.my_pe();
  for (int pe = 0; pe < c.npes(); ++pe) c.put_nbi(warp, h.ints + me * 4, h.ints.get() + pe * 4, 4, pe);
  c.barrier(cg::this_thread_block());
}

__global__ void k20_broadcast(comm_t c, heap h) {
  auto const block = cg::this_thread_block();
  if (c.my_pe() == 0) {
    for (int pe = 1; pe < c.npes(); ++pe) {
      c.put_signal(block, h.doubles, h.doubles.get(), n, h.sigs + 2, 1, gpucomm::signal_op::set, pe);
    }
  } else {
    c.wait_until(block, h.sigs + 2, gpucomm::cmp::eq, 1);
  }
}

/// Every kernel's address, so each is compiled: the copy kernels for eight standard element types,
/// the atomics for the four integer types IBGDAPost takes.
template <class T>
void* const copy_kernels[] = {
    reinterpret_cast<void*>(&k02_put_elements<T>), reinterpret_cast<void*>(&k03_get_elements<T>),
    reinterpret_cast<void*>(&k04_put_nbi<T>),      reinterpret_cast<void*>(&k05_get_nbi<T>),
    reinterpret_cast<void*>(&k15_block_put<T>),    reinterpret_cast<void*>(&k16_warp_get<T>)};
template <class T>
void* const atomic_kernels[] = {reinterpret_cast<void*>(&k08_fetch_add_ring<T>), reinterpret_cast<void*>(&k10_swap<T>),
                                reinterpret_cast<void*>(&k11_bitwise<T>), reinterpret_cast<void*>(&k12_fetch_set<T>)};

}  // namespace

void* const* twenty_kernels[] = {
    copy_kernels<char>,      copy_kernels<short>,      copy_kernels<int>,         copy_kernels<long>,
    copy_kernels<long long>, copy_kernels<float>,      copy_kernels<double>,      copy_kernels<unsigned>,
    atomic_kernels<int>,     atomic_kernels<unsigned>, atomic_kernels<long long>, atomic_kernels<unsigned long long>};
void* twenty_kernels_untyped[] = {
    reinterpret_cast<void*>(&k01_hello),           reinterpret_cast<void*>(&k06_put_signal_wait),
    reinterpret_cast<void*>(&k07_signal_set),      reinterpret_cast<void*>(&k09_lock),
    reinterpret_cast<void*>(&k13_fence_order),     reinterpret_cast<void*>(&k14_barrier_loop),
    reinterpret_cast<void*>(&k17_put_from_shared), reinterpret_cast<void*>(&k18_get_into_shared),
    reinterpret_cast<void*>(&k19_alltoall),        reinterpret_cast<void*>(&k20_broadcast)};
