// The contract, checked by the compiler: what each transport offers (provided or inherited), that
// comm's members exist exactly where the capability does (so generic code can ask with requires),
// and that a put-only transport offers put and nothing else. Plus one run-time case: MinimalStore's
// inherited put_signal and fence deliver the data before the signal.
#include <cooperative_groups.h>

#include "../../compile_fail/put_only_transport.cuh"  // PutOnly: a transport that can only put
#include "../harness.cuh"

namespace contract_test {

namespace cg = cooperative_groups;
using gpucomm::signal_t;
using gpucomm::sym_ptr;
using gpucomm::test::MinimalStore;

// What generic code asks: the operation, called as a user would.
template <class C>
concept has_get = requires(C const& c, int* d, sym_ptr<int const> s) {
  c.get(gpucomm::this_thread(), d, s, 1, 0);
};
template <class C>
concept has_put_signal = requires(C const& c, sym_ptr<int> d, int const* s, sym_ptr<signal_t> sig) {
  c.put_signal(gpucomm::this_thread(), d, s, 1, sig, 1, gpucomm::signal_op::set, 0);
};
template <class C>
concept has_barrier = requires(C const& c, gpucomm::team t) {
  c.barrier(gpucomm::this_thread());
  c.barrier(gpucomm::this_thread(), t);
};
template <class C>
concept has_fetch_add = requires(C const& c, sym_ptr<unsigned> p) {
  c.fetch_add(gpucomm::this_thread(), p, 1u, 0);
};
template <class C>
concept has_float_add = requires(C const& c, sym_ptr<float> p) {
  c.add(gpucomm::this_thread(), p, 1.f, 0);
};
template <class C>
concept has_remote = requires(C const& c, sym_ptr<int> p) {
  { c.remote(p, 0) } -> std::same_as<int*>;
};
template <class C>
concept has_quiet_fence = requires(C const& c) {
  c.quiet(gpucomm::this_thread());
  c.fence(gpucomm::this_thread());
};

using nvl = gpucomm::comm<gpucomm::NVLinkStore>;
using ibgda = gpucomm::comm<gpucomm::IBGDAPost>;
using routed = gpucomm::comm<gpucomm::route<gpucomm::NVLinkStore, gpucomm::IBGDAPost>>;
using minimal = gpucomm::comm<MinimalStore>;
using put_only = gpucomm::comm<PutOnly>;

// NVLinkStore: everything, its own put_signal, fence and barrier.
static_assert(has_get<nvl> && has_put_signal<nvl> && has_barrier<nvl> && has_fetch_add<nvl> && has_float_add<nvl> &&
              has_remote<nvl> && has_quiet_fence<nvl>);
static_assert(gpucomm::provides_put_signal<gpucomm::NVLinkStore> && gpucomm::provides_fence<gpucomm::NVLinkStore> &&
              gpucomm::provides_barrier<gpucomm::NVLinkStore>);
// IBGDAPost: no float add, no remote; the contract's barrier.
static_assert(has_get<ibgda> && has_put_signal<ibgda> && has_barrier<ibgda> && has_fetch_add<ibgda> &&
              !has_float_add<ibgda> && !has_remote<ibgda> && has_quiet_fence<ibgda>);
static_assert(!gpucomm::provides_barrier<gpucomm::IBGDAPost> && gpucomm::provides_quiet_pe<gpucomm::IBGDAPost>);
// route<NVLinkStore, IBGDAPost>: what both legs have; remote through the first leg.
static_assert(has_get<routed> && has_put_signal<routed> && has_barrier<routed> && has_fetch_add<routed> &&
              !has_float_add<routed> && has_remote<routed>);
// MinimalStore: its primitives, and put_signal, fence and barrier inherited from the contract.
static_assert(has_get<minimal> && has_put_signal<minimal> && has_barrier<minimal> && has_fetch_add<minimal> &&
              !has_float_add<minimal> && !has_remote<minimal> && has_quiet_fence<minimal>);
static_assert(!gpucomm::provides_put_signal<MinimalStore> && !gpucomm::provides_fence<MinimalStore> &&
              !gpucomm::provides_barrier<MinimalStore> && gpucomm::can_put_signal<MinimalStore> &&
              gpucomm::can_fence<MinimalStore> && gpucomm::can_barrier<MinimalStore>);
// A put-only transport: put, and nothing the contract could build from put alone.
static_assert(requires(put_only const& c, sym_ptr<int> d, int const* s) { c.put(gpucomm::this_thread(), d, s, 1, 0); });
static_assert(!has_get<put_only> && !has_put_signal<put_only> && !has_barrier<put_only> && !has_fetch_add<put_only> &&
              !has_float_add<put_only> && !has_remote<put_only> && !has_quiet_fence<put_only>);
static_assert(gpucomm::can_put<PutOnly> && !gpucomm::can_get<PutOnly> && !gpucomm::can_fence<PutOnly>);

/// PE pe - 1 sends `rounds` messages of n words to this PE with put_signal (or put_nbi + fence +
/// signal); each round's data must be complete when its signal value is seen.
__global__ void chain(gpucomm::comm<MinimalStore> c, sym_ptr<std::uint64_t> box, sym_ptr<std::uint64_t> src,
                      sym_ptr<signal_t> sig, int n, int rounds, unsigned long long* errors) {
  auto const block = cg::this_thread_block();
  int const me = c.my_pe(), npes = c.npes();
  int const to = (me + 1) % npes, from = (me + npes - 1) % npes;
  unsigned long long bad = 0;
  for (int r = 1; r <= rounds; ++r) {
    auto const slot = box + static_cast<std::ptrdiff_t>((r & 1) * n);
    for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x))
      src[(r & 1) * n + i] = gpucomm::test::mix(static_cast<std::uint64_t>(r), static_cast<std::uint64_t>(me),
                                                static_cast<std::uint64_t>(i));
    block.sync();
    if (r % 2) {
      c.put_signal(block, slot, src.get() + (r & 1) * n, static_cast<std::size_t>(n), sig, static_cast<signal_t>(r),
                   gpucomm::signal_op::set, to);
    } else {
      c.put_nbi(block, slot, src.get() + (r & 1) * n, static_cast<std::size_t>(n), to);
      c.fence(block);
      c.signal(block, sig, static_cast<signal_t>(r), gpucomm::signal_op::set, to);
    }
    c.wait_until(block, sig, gpucomm::cmp::ge, static_cast<signal_t>(r));
    for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x))
      bad += box[(r & 1) * n + i] != gpucomm::test::mix(static_cast<std::uint64_t>(r), static_cast<std::uint64_t>(from),
                                                        static_cast<std::uint64_t>(i));
    c.barrier(block);  // the sender may overwrite this round's buffer two rounds on
  }
  if (bad) atomicAdd(errors, bad);
}

}  // namespace contract_test

using namespace contract_test;

TEST_CASE("MinimalStore's inherited put_signal and fence deliver data before the signal", "[gpu][minimal]") {
  auto& w = gpucomm::test::the_world();
  int const n = 4099, rounds = 300;
  auto box = w.alloc<std::uint64_t>(2 * n);
  auto src = w.alloc<std::uint64_t>(2 * n);
  auto sig = w.alloc<signal_t>(1);
  auto errors = w.alloc<unsigned long long>(1);
  for (int pe : w.local_pes()) {
    GPUCOMM_TEST_CUDA(cudaSetDevice(w.device(pe)));
    GPUCOMM_TEST_CUDA(cudaMemset(sig.ptr(pe).get(), 0, sizeof(signal_t)));
    GPUCOMM_TEST_CUDA(cudaMemset(errors.ptr(pe).get(), 0, sizeof(unsigned long long)));
    GPUCOMM_TEST_CUDA(cudaDeviceSynchronize());
  }
  w.barrier();
  gpucomm::test::for_each_local_pe(w, [&](int pe) {
    chain<<<1, 256, 0, w.stream(pe)>>>(w.comm<MinimalStore>(pe), box.ptr(pe), src.ptr(pe), sig.ptr(pe), n, rounds,
                                       errors.ptr(pe).get());
  });
  gpucomm::test::finish(w);
  for (int pe : w.local_pes()) {
    unsigned long long e = 1;
    GPUCOMM_TEST_CUDA(cudaMemcpy(&e, errors.ptr(pe).get(), sizeof(e), cudaMemcpyDeviceToHost));
    INFO("PE " << pe);
    CHECK(e == 0);
  }
  w.barrier();
}
