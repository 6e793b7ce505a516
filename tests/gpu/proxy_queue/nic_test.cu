// ProxyQueue's NIC backend, beyond the op suite and proxy_queue_test.cu (gpucomm_gpu_tests_proxy_nic):
//   - the NIC model injecting faults (delayed doorbells, dropped and duplicated doorbells, slow
//     completions) under puts, fetching atomics and put_signal adds from every thread of two CTAs:
//     every byte, the counter, the signal, and every fetched value (a permutation) checked;
//   - asking for a hardware NIC where there is none fails with a message that says what is missing.
// Error completions of the NIC are tested on the host, against the model (tests/host).
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include <gpucomm/transport/nic/select.hpp>  // closest_nic: whether this machine has a NIC

#include "../ops/common.cuh"

using namespace gpucomm::test::ops;

// Every case here exists only in the NIC backend's suite (gpucomm::test::proxy_nic_backend).
namespace proxy_nic_tests {

[[maybe_unused]] constexpr std::size_t chunk = 64;  // used by the cases of the NIC backend only

template <class Tr>
struct faults_args {
  gpucomm::comm<Tr> c;
  sym_ptr<unsigned char> src;           // [threads * iters * chunk]: this PE's pattern
  sym_ptr<unsigned char> dst;           // the same: what the previous PE sent
  sym_ptr<unsigned long long> counter;  // [1]: the previous PE adds 1 per thread and round
  sym_ptr<signal_t> sig;                // [1]: the previous PE's put_signal adds
  unsigned long long* fetched;          // [threads * iters]: what this PE's fetch_adds returned
  int iters;
};

template <class Tr>
__global__ void faults_kernel(faults_args<Tr> a) {
  int const next = (a.c.my_pe() + 1) % a.c.npes();
  std::size_t const thread = blockIdx.x * blockDim.x + threadIdx.x;
  auto const g = gpucomm::this_thread();
  for (int k = 0; k < a.iters; ++k) {
    std::size_t const item = thread * static_cast<std::size_t>(a.iters) + static_cast<std::size_t>(k);
    std::size_t const off = item * chunk;
    if (k % 2 == 0) {
      a.c.put_nbi(g, a.dst + static_cast<std::ptrdiff_t>(off), a.src.get() + off, chunk, next);
    } else {
      a.c.put_signal_nbi(g, a.dst + static_cast<std::ptrdiff_t>(off), a.src.get() + off, chunk, a.sig, 1,
                         gpucomm::signal_op::add, next);
    }
    a.fetched[item] = a.c.fetch_add(g, a.counter, 1ull, next);
  }
  a.c.quiet(g);
}

GPUCOMM_TEST_CASE_IF(gpucomm::test::proxy_nic_backend,
                     "ProxyQueue NIC: puts, fetching atomics and signals while the NIC model injects faults",
                     "[nic][faults]") {
  auto w = gpucomm::test::make_world();
  gpucomm::proxy_options o = gpucomm::test::proxy_test_options();
  o.model_faults.doorbell_delay_us = 20;
  o.model_faults.completion_delay_us = 10;
  o.model_faults.drop_doorbell = 0.25;
  o.model_faults.duplicate_doorbell = 0.25;
  w->configure<gpucomm::ProxyQueue>(o);
  constexpr unsigned grid = 2, block = 64;
  constexpr int iters = 4;
  constexpr std::size_t items = std::size_t{grid} * block * iters;
  constexpr std::size_t bytes = items * chunk;
  std::uint64_t const salt = 7101;
  int const npes = w->npes();
  auto src = w->alloc<unsigned char>(bytes);
  auto dst = w->alloc<unsigned char>(bytes);
  auto counter = w->alloc<unsigned long long>(1);
  auto sig = w->alloc<signal_t>(1);
  auto fetched = w->alloc<unsigned long long>(items);
  for (int pe : w->local_pes()) {
    upload(*w, pe, src.ptr(pe), pattern_arena(salt, pe, bytes));
    fill_bytes(*w, pe, dst.ptr(pe).get(), poison_byte, bytes);
    fill_bytes(*w, pe, counter.ptr(pe).get(), 0, sizeof(unsigned long long));
    fill_bytes(*w, pe, sig.ptr(pe).get(), 0, sizeof(signal_t));
    fill_bytes(*w, pe, fetched.ptr(pe).get(), poison_byte, items * sizeof(unsigned long long));
  }
  w->barrier();
  gpucomm::test::for_each_local_pe(*w, [&](int pe) {
    faults_kernel<Tr><<<grid, block, 0, w->stream(pe)>>>(faults_args<Tr>{
        w->comm<Tr>(pe), src.ptr(pe), dst.ptr(pe), counter.ptr(pe), sig.ptr(pe), fetched.ptr(pe).get(), iters});
    GPUCOMM_TEST_CUDA(cudaGetLastError());
  });
  finish(*w);
  w->barrier();
  for (int pe : w->local_pes()) {
    INFO("PE " << pe);
    int const prev = (pe + npes - 1) % npes;
    auto const got = download(*w, pe, dst.ptr(pe), bytes);
    CHECK(got == pattern_arena(salt, prev, bytes));
    CHECK(download(*w, pe, counter.ptr(pe), 1)[0] == items);
    CHECK(download(*w, pe, sig.ptr(pe), 1)[0] == items / 2);  // every other round is a put_signal
    // This PE's fetch_adds were the only ones on the next PE's counter: they saw 0 .. items-1.
    auto values = download(*w, pe, fetched.ptr(pe), items);
    std::sort(values.begin(), values.end());
    std::vector<unsigned long long> expected(items);
    std::iota(expected.begin(), expected.end(), 0ull);
    CHECK(values == expected);
  }
  w->barrier();
}

GPUCOMM_TEST_CASE_IF(gpucomm::test::proxy_nic_backend,
                     "ProxyQueue NIC: a hardware NIC that is not there is an error, never replaced by the model",
                     "[proxy][nic][errors]") {
  auto w = gpucomm::test::make_world();
  gpucomm::proxy_options o = gpucomm::test::proxy_test_options();
  o.nic = gpucomm::nic_choice::hardware;
  w->configure<gpucomm::ProxyQueue>(o);
  std::string const e = gpucomm::test::error_of([&] { (void)w->comm<gpucomm::ProxyQueue>(w->local_pes().front()); });
  INFO(e);
  if (w->npes() == 1 && gpucomm::test::proxy_split()) {
    CHECK(e == "(no error)");  // one PE, reached through the mapped heap: no NIC is needed
  } else if (gpucomm::detail::closest_nic("0000:00:00.0").empty()) {
    // No RDMA device on this machine: rdma-core finds none (or the build has no rdma-core); the
    // model is never taken instead.
    CHECK(e.find("ProxyQueue") != std::string::npos);
    bool const said_why = e.find("no RDMA device found") != std::string::npos ||
                          e.find("no InfiniBand/RoCE device is visible") != std::string::npos;
    CHECK(said_why);
  }
}

}  // namespace proxy_nic_tests
