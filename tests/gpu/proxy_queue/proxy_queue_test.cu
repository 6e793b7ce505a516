// ProxyQueue's own tests (gpucomm_gpu_tests_proxy, next to the op suite built for ProxyQueue on
// rings of 64 commands; gpucomm_gpu_tests_proxy_nic runs them through the NIC backend too, except
// those about local buffers outside the heap, which the NIC cannot reach, and adds nic_test.cu):
//   - far more commands than the ring holds, from every thread of several CTAs at once, blocking
//     and non-blocking mixed; every byte checked at the receiver against the sender's pattern;
//   - the same with one proxy thread for the process instead of one per PE (a world of its own);
//   - local buffers the copy engine cannot reach (shared memory) and ones outside the heap it can
//     (cudaMalloc'd), both ways, and put_signal from each;
//   - commands still in flight when the world goes: the kernels end without quiet, the world is
//     destroyed at once, and every get must still have landed in a buffer that outlives it; the
//     same when only the gets' source block is freed at once (world::deallocate waits for the proxy);
//   - failed commands (a destination outside the heap, a source CUDA does not know) are completed
//     without effect, reported by world::synchronize with PE, peer and operation, and the ring goes
//     on working.
//   - the store path: operations up to proxy_options::store_path_bytes post no command (the ring's
//     ticket count does not move), larger ones one each; with a fence between them, a small put
//     (stores) after a bulk put (copy engine) to the same bytes lands last.
// Every case but the store path's runs in a world with the store path off (make_proxy_world).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../ops/common.cuh"

using namespace gpucomm::test::ops;

namespace proxy_queue_tests {

using proxy_comm = gpucomm::comm<gpucomm::ProxyQueue>;
static_assert(std::is_same_v<gpucomm::test::transport_under_test, gpucomm::ProxyQueue>);

/// A world in which every ProxyQueue operation goes through the proxy (the store path off): the
/// cases below are about the proxy, its ring and its backends.
std::unique_ptr<gpucomm::world> make_proxy_world(gpucomm::proxy_options o = gpucomm::test::proxy_test_options()) {
  auto w = gpucomm::test::make_world();
  o.store_path_bytes = 0;
  w->configure<gpucomm::ProxyQueue>(o);
  return w;
}

constexpr std::size_t chunk = 64;  // bytes per command in the many-commands test

/// How many bytes of `got` differ from PE `pe`'s pattern in test `salt` (ops/common.cuh).
std::size_t bytes_differing(std::vector<unsigned char> const& got, std::uint64_t salt, int pe) {
  std::size_t bad = 0;
  for (std::size_t k = 0; k < got.size(); ++k) bad += got[k] != pattern_byte(salt, pe, k);
  return bad;
}

struct many_args {
  proxy_comm c;
  sym_ptr<unsigned char> src;  // [threads * per_thread * chunk]: this PE's pattern
  sym_ptr<unsigned char> dst;  // the same size: what the PE before this one sent
  int per_thread;
};

/// Every thread sends its chunks to the next PE, alternating put and put_nbi, then quiets.
__global__ void many_commands_kernel(many_args a) {
  int const me = a.c.my_pe(), to = (me + 1) % a.c.npes();
  std::size_t const thread = blockIdx.x * blockDim.x + threadIdx.x;
  auto const g = gpucomm::this_thread();
  for (int k = 0; k < a.per_thread; ++k) {
    std::size_t const off = (thread * static_cast<std::size_t>(a.per_thread) + static_cast<std::size_t>(k)) * chunk;
    auto const dst = a.dst + static_cast<std::ptrdiff_t>(off);
    if (k % 2 == 0)
      a.c.put(g, dst, a.src.get() + off, chunk, to);
    else
      a.c.put_nbi(g, dst, a.src.get() + off, chunk, to);
  }
  a.c.quiet(g);
}

/// Runs the many-commands kernel on world w and checks every byte at every local PE.
void run_many_commands(gpucomm::world& w, unsigned grid, unsigned block, int per_thread, std::uint64_t salt) {
  int const npes = w.npes();
  std::size_t const bytes = std::size_t{grid} * block * static_cast<std::size_t>(per_thread) * chunk;
  auto src = w.alloc<unsigned char>(bytes);
  auto dst = w.alloc<unsigned char>(bytes);
  for (int pe : w.local_pes()) {
    upload(w, pe, src.ptr(pe), pattern_arena(salt, pe, bytes));
    fill_bytes(w, pe, dst.ptr(pe).get(), poison_byte, bytes);
  }
  w.barrier();
  for_each_local_pe(w, [&](int pe) {
    many_commands_kernel<<<grid, block, 0, w.stream(pe)>>>(
        many_args{w.comm<gpucomm::ProxyQueue>(pe), src.ptr(pe), dst.ptr(pe), per_thread});
  });
  finish(w);
  w.barrier();
  for (int pe : w.local_pes()) {
    INFO("PE " << pe << ": " << bytes << " bytes in " << bytes / chunk << " commands");
    CHECK(bytes_differing(download(w, pe, dst.ptr(pe), bytes), salt, (pe + npes - 1) % npes) == 0);
  }
  w.barrier();
}

TEST_CASE("ProxyQueue: far more commands than the ring holds, from every thread of 8 CTAs", "[proxy][sanitize]") {
  // 8 x 128 threads x 8 commands = 8192 per PE through a ring of 64: it wraps 128 times.
  run_many_commands(*make_proxy_world(), 8, 128, 8, 7001);
}

TEST_CASE("ProxyQueue: one proxy thread for all local PEs", "[proxy]") {
  // The suite's other tests run with the default, a thread per PE.
  gpucomm::proxy_options o = gpucomm::test::proxy_test_options();
  o.log_depth = 5;
  o.threads = gpucomm::proxy_threads::per_process;
  run_many_commands(*make_proxy_world(o), 4, 128, 8, 7002);
}

// ---- local buffers in shared memory and outside the heap (the copy engines' backend: the NIC
// reaches only the heap, and nic_test.cu has its cases) ------------------------------------------

[[maybe_unused]] constexpr std::size_t local_bytes = 1000;  // not a multiple of 16: the copy's tail is odd

struct local_args {
  proxy_comm c;
  sym_ptr<unsigned char> arena;  // [4 * local_bytes]: what peers put here, and what they get from
  sym_ptr<signal_t> sigs;        // [2]
  unsigned char* outside;        // cudaMalloc'd, [3 * local_bytes]: source of one put, target of gets
  std::uint64_t salt;
};

/// One block per PE, sending to the next PE:
///   arena[0]  a put from shared memory (the GPU's own stores)
///   arena[1]  a put from cudaMalloc'd memory outside the heap (the copy engine)
///   arena[2]  a put_signal (set) from shared memory; sigs[0] = 1
///   sigs[1]   += 5 by a put_signal_nbi (add) of no bytes
/// and getting the previous PE's arena[3] (its pattern, filled by the host) into shared memory
/// (copied out to outside[1] for the host's check) and, with get_nbi, into outside[2].
template <class Tr>  // ProxyQueue: a template, compiled only where the case below exists
__global__ void local_buffers_kernel(local_args a) {
  __shared__ unsigned char tile[local_bytes];
  auto const block = cooperative_groups::this_thread_block();
  int const me = a.c.my_pe(), npes = a.c.npes();
  int const next = (me + 1) % npes, prev = (me + npes - 1) % npes;
  for (std::size_t k = threadIdx.x; k < local_bytes; k += blockDim.x) {
    tile[k] = pattern_byte(a.salt, me, k);
    a.outside[k] = pattern_byte(a.salt + 1, me, k);
  }
  block.sync();
  auto const at = [&](int region) { return a.arena + static_cast<std::ptrdiff_t>(region * local_bytes); };
  a.c.put(block, at(0), tile, local_bytes, next);
  a.c.put(block, at(1), a.outside, local_bytes, next);
  a.c.put_signal(block, at(2), tile, local_bytes, a.sigs, 1, gpucomm::signal_op::set, next);
  a.c.put_signal_nbi(block, at(1), a.outside, 0, a.sigs + 1, 5, gpucomm::signal_op::add, next);
  // Gets of the previous PE's region 3, which the host filled before the launch.
  a.c.get(block, tile, gpucomm::sym_ptr<unsigned char const>(at(3)), local_bytes, prev);
  for (std::size_t k = threadIdx.x; k < local_bytes; k += blockDim.x) a.outside[local_bytes + k] = tile[k];
  a.c.get_nbi(block, a.outside + 2 * local_bytes, gpucomm::sym_ptr<unsigned char const>(at(3)), local_bytes, prev);
  a.c.quiet(block);
  // The previous PE's put_signal has landed once its signal is set.
  a.c.wait_until(block, a.sigs, gpucomm::cmp::eq, 1);
  a.c.wait_until(block, a.sigs + 1, gpucomm::cmp::eq, 5);
}

GPUCOMM_TEST_CASE_IF(!gpucomm::test::proxy_nic_backend,
                     "ProxyQueue: local buffers in shared memory and outside the heap, both ways",
                     "[proxy][sanitize]") {
  auto const world = make_proxy_world();
  auto& w = *world;
  int const npes = w.npes();
  std::uint64_t const salt = 7003;
  auto arena = w.alloc<unsigned char>(4 * local_bytes);
  auto sigs = w.alloc<signal_t>(2);
  std::map<int, unsigned char*> outside;
  for (int pe : w.local_pes()) {
    GPUCOMM_TEST_CUDA(cudaSetDevice(w.device(pe)));
    GPUCOMM_TEST_CUDA(cudaMalloc(&outside[pe], 3 * local_bytes));
    fill_bytes(w, pe, outside[pe], poison_byte, 3 * local_bytes);
    fill_bytes(w, pe, arena.ptr(pe).get(), poison_byte, 3 * local_bytes);
    upload(w, pe, arena.ptr(pe).get() + 3 * local_bytes, pattern_arena(salt + 2, pe, local_bytes).data(), local_bytes);
    fill_bytes(w, pe, sigs.ptr(pe).get(), 0, 2 * sizeof(signal_t));
  }
  w.barrier();
  for_each_local_pe(w, [&](int pe) {
    local_buffers_kernel<Tr><<<1, 256, 0, w.stream(pe)>>>(
        local_args{w.comm<gpucomm::ProxyQueue>(pe), arena.ptr(pe), sigs.ptr(pe), outside[pe], salt});
  });
  finish(w);
  w.barrier();
  for (int pe : w.local_pes()) {
    int const prev = (pe + npes - 1) % npes;
    auto const got = download(w, pe, arena.ptr(pe), 3 * local_bytes);
    auto const out = download(w, pe, outside[pe], 3 * local_bytes);
    auto const sig = download(w, pe, sigs.ptr(pe), 2);
    auto const from_tile = pattern_arena(salt, prev, local_bytes);
    auto const from_outside = pattern_arena(salt + 1, prev, local_bytes);
    auto const region3 = pattern_arena(salt + 2, prev, local_bytes);
    std::size_t bad[5] = {};
    for (std::size_t k = 0; k < local_bytes; ++k) {
      bad[0] += got[k] != from_tile[k];                    // put from shared memory
      bad[1] += got[local_bytes + k] != from_outside[k];   // put from cudaMalloc'd memory
      bad[2] += got[2 * local_bytes + k] != from_tile[k];  // put_signal from shared memory
      bad[3] += out[local_bytes + k] != region3[k];        // get into shared memory
      bad[4] += out[2 * local_bytes + k] != region3[k];    // get_nbi into cudaMalloc'd memory
    }
    INFO("PE " << pe);
    for (std::size_t i = 0; i < 5; ++i) CHECK(bad[i] == 0);
    CHECK(sig[0] == 1);
    CHECK(sig[1] == 5);
    GPUCOMM_TEST_CUDA(cudaSetDevice(w.device(pe)));
    GPUCOMM_TEST_CUDA(cudaFree(outside[pe]));
  }
  w.barrier();
}

// ---- teardown with commands in flight ----------------------------------------------------------

struct teardown_args {
  proxy_comm c;
  sym_ptr<unsigned char> src;  // [chunks * chunk]: this PE's pattern
  unsigned char* out;          // cudaMalloc'd, outlives the world
  int chunks;
};

/// Every thread gets chunks of the next PE's pattern with get_nbi, and the kernel ends without quiet.
__global__ void teardown_kernel(teardown_args a) {
  int const next = (a.c.my_pe() + 1) % a.c.npes();
  for (int k = static_cast<int>(threadIdx.x); k < a.chunks; k += static_cast<int>(blockDim.x)) {
    std::size_t const off = static_cast<std::size_t>(k) * 4096;
    a.c.get_nbi(gpucomm::this_thread(), a.out + off,
                gpucomm::sym_ptr<unsigned char const>(a.src + static_cast<std::ptrdiff_t>(off)), 4096, next);
  }
}

// The gets land in cudaMalloc'd memory that outlives the world: the copy engine's case (the NIC
// writes only into the heap, which goes with the world).
GPUCOMM_TEST_CASE_IF(!gpucomm::test::proxy_nic_backend,
                     "ProxyQueue: commands in flight when the world goes are carried out before it goes", "[proxy]") {
  constexpr int chunks = 2048;  // 8 MiB per PE in 4 KiB gets, through a ring of 64
  constexpr std::size_t bytes = std::size_t{chunks} * 4096;
  std::uint64_t const salt = 7004;
  std::map<int, unsigned char*> out;
  std::map<int, int> devices;
  int npes = 0;
  std::vector<int> locals;
  {
    auto w = make_proxy_world();
    npes = w->npes();
    locals = w->local_pes();
    // Never freed: world::deallocate would wait for the proxy itself, and this is about the
    // world's own teardown.
    auto const src = w->allocate<unsigned char>(bytes);
    for (int pe : w->local_pes()) {
      devices[pe] = w->device(pe);
      upload(*w, pe, w->view(src, pe), pattern_arena(salt, pe, bytes));
      GPUCOMM_TEST_CUDA(cudaMalloc(&out[pe], bytes));
      fill_bytes(*w, pe, out[pe], poison_byte, bytes);
    }
    w->barrier();
    for_each_local_pe(*w, [&](int pe) {
      teardown_kernel<<<1, 128, 0, w->stream(pe)>>>(
          teardown_args{w->comm<gpucomm::ProxyQueue>(pe), w->view(src, pe), out[pe], chunks});
      GPUCOMM_TEST_CUDA(cudaGetLastError());
    });
  }  // no synchronize, no quiet: the world's teardown drains
  for (int pe : locals) {
    GPUCOMM_TEST_CUDA(cudaSetDevice(devices[pe]));
    std::vector<unsigned char> got(bytes);
    GPUCOMM_TEST_CUDA(cudaMemcpy(got.data(), out[pe], bytes, cudaMemcpyDeviceToHost));
    INFO("PE " << pe);
    CHECK(bytes_differing(got, salt, (pe + 1) % npes) == 0);
    GPUCOMM_TEST_CUDA(cudaFree(out[pe]));
  }
}

TEST_CASE("ProxyQueue: freeing a block while the proxy still copies from it waits for the proxy", "[proxy]") {
  constexpr int chunks = 1024;
  constexpr std::size_t bytes = std::size_t{chunks} * 4096;
  std::uint64_t const salt = 7006;
  auto const world = make_proxy_world();
  auto& w = *world;
  int const npes = w.npes();
  std::map<int, unsigned char*> out;
  // The NIC writes only into the heap; the copy engines' gets land outside it.
  constexpr bool into_heap = gpucomm::test::proxy_nic_backend;
  gpucomm::sym_array<unsigned char> out_block;
  if constexpr (into_heap) out_block = w.alloc<unsigned char>(bytes);
  auto src = w.alloc<unsigned char>(bytes);
  for (int pe : w.local_pes()) {
    upload(w, pe, src.ptr(pe), pattern_arena(salt, pe, bytes));
    if constexpr (into_heap)
      out[pe] = out_block.ptr(pe).get();
    else
      GPUCOMM_TEST_CUDA(cudaMalloc(&out[pe], bytes));
    fill_bytes(w, pe, out[pe], poison_byte, bytes);
  }
  w.barrier();
  for_each_local_pe(w, [&](int pe) {
    teardown_kernel<<<1, 128, 0, w.stream(pe)>>>(
        teardown_args{w.comm<gpucomm::ProxyQueue>(pe), src.ptr(pe), out[pe], chunks});
    GPUCOMM_TEST_CUDA(cudaGetLastError());
  });
  src.reset();  // at once: the gets may not even be issued yet
  for (int pe : w.local_pes()) {
    INFO("PE " << pe);
    CHECK(bytes_differing(download(w, pe, out[pe], bytes), salt, (pe + 1) % npes) == 0);
    if constexpr (!into_heap) GPUCOMM_TEST_CUDA(cudaFree(out[pe]));
  }
  w.barrier();
}

// ---- failed commands ------------------------------------------------------------------------------

struct failing_args {
  proxy_comm c;
  sym_ptr<unsigned char> src;
  sym_ptr<unsigned char> dst;
  unsigned char const* pageable;  // ordinary host memory, which CUDA does not know
  int mode;  // 0: destination outside the heap; 1: source CUDA does not know (not to NIC peers); 2: a good put
};

__global__ void failing_kernel(failing_args a) {
  int const next = (a.c.my_pe() + 1) % a.c.npes();
  auto const g = gpucomm::this_thread();
  if (a.mode == 0) {
    // 1 TiB below the heap: refused by the proxy, never copied.
    a.c.put(g, gpucomm::sym_ptr<unsigned char>(a.dst.get() - (1ull << 40)), a.src.get(), 64, next);
  } else if (a.mode == 1) {
    a.c.put(g, a.dst, a.pageable, 64, next);
  } else {
    a.c.put(g, a.dst, a.src.get(), 64, next);
  }
  a.c.quiet(g);
}

TEST_CASE("ProxyQueue: failed commands are reported by world::synchronize, and the ring goes on", "[proxy]") {
  auto const world = make_proxy_world();
  auto& w = *world;
  int const npes = w.npes();
  auto src = w.alloc<unsigned char>(64);
  auto dst = w.alloc<unsigned char>(64);
  for (int pe : w.local_pes()) {
    upload(w, pe, src.ptr(pe), pattern_arena(7005, pe, 64));
    fill_bytes(w, pe, dst.ptr(pe).get(), poison_byte, 64);
  }
  w.barrier();
  std::vector<unsigned char> const pageable(64, 0x11);
  auto const launch = [&](int mode) {
    for_each_local_pe(w, [&](int pe) {
      failing_kernel<<<1, 1, 0, w.stream(pe)>>>(
          failing_args{w.comm<gpucomm::ProxyQueue>(pe), src.ptr(pe), dst.ptr(pe), pageable.data(), mode});
      GPUCOMM_TEST_CUDA(cudaGetLastError());
    });
  };
  // Every local PE's put fails; the report names the first recorded, and counts the others.
  bool const several = w.local_pes().size() > 1;
  auto const names_a_put = [&](std::string const& e) {
    for (int pe : w.local_pes()) {
      std::string const who = "on PE " + std::to_string(pe) + ": the put of 64 bytes from PE " + std::to_string(pe) +
                              " to PE " + std::to_string((pe + 1) % npes) + " (ticket ";
      if (e.find(who) != std::string::npos) return true;
    }
    return false;
  };
  launch(0);
  std::string const outside = gpucomm::test::error_of([&] { w.synchronize(); });
  INFO(outside);
  CHECK(names_a_put(outside));
  CHECK(outside.find("destination is not in this PE's symmetric heap") != std::string::npos);
  CHECK((outside.find("more failed commands") != std::string::npos) == several);
  CHECK(gpucomm::test::error_of([&] { w.synchronize(); }) == "(no error)");  // reported once
  // A source in ordinary host memory: the copy engine and an engine refuse it. To a NIC peer the
  // device stages it instead (its group reads it, as a kernel reads any pointer), so it is not
  // sent there.
  if constexpr (!gpucomm::test::proxy_nic_backend) {
    launch(1);
    std::string const unknown = gpucomm::test::error_of([&] { w.synchronize(); });
    INFO(unknown);
    CHECK(names_a_put(unknown));
    CHECK(unknown.find("source is not memory CUDA knows") != std::string::npos);
  }
  w.barrier();
  for (int pe : w.local_pes()) {  // nothing was written by either
    auto const got = download(w, pe, dst.ptr(pe), 64);
    CHECK(std::count(got.begin(), got.end(), poison_byte) == 64);
  }
  w.barrier();
  launch(2);
  finish(w);
  w.barrier();
  for (int pe : w.local_pes()) {
    auto const got = download(w, pe, dst.ptr(pe), 64);
    CHECK(got == pattern_arena(7005, (pe + npes - 1) % npes, 64));
  }
  w.barrier();
}

// ---- the store path -------------------------------------------------------------------------------

constexpr std::size_t store_limit = 4096;    // the store path's limit in these cases
constexpr std::size_t bulk_bytes = 1 << 20;  // a copy engine's put
constexpr std::size_t small_bytes = 256;     // then a store put onto its first bytes
constexpr int store_rounds = 4;

struct store_args {
  proxy_comm c;
  sym_ptr<unsigned char> src;  // [bulk_bytes + small_bytes]: this PE's pattern
  sym_ptr<unsigned char> dst;  // [store_rounds * bulk_bytes]: region r written in round r
  sym_ptr<signal_t> sig;       // [1]
  unsigned long long* errors;  // local: [0] commands posted where none or one was due
};

/// Which operations post a command: each size at and just above the limit, by put, get and
/// put_signal, by the block and by one thread alone (its own, lower limit); then per round a bulk
/// put_nbi, a fence and a small put onto the same bytes.
__global__ void store_path_kernel(store_args a) {
  auto const block = cooperative_groups::this_thread_block();
  int const next = (a.c.my_pe() + 1) % a.c.npes();
  unsigned char* const scratch = a.src.get() + bulk_bytes + small_bytes;  // a get's local destination
  auto const posted = [&](auto&& op) {
    block.sync();
    std::uint64_t const before = a.c.state().ring.tickets_issued();
    op();
    block.sync();
    return a.c.state().ring.tickets_issued() - before;
  };
  std::size_t const sizes[] = {8, store_limit, store_limit + 16};
  for (std::size_t const bytes : sizes) {
    std::uint64_t const due = bytes > store_limit ? 1 : 0;
    std::uint64_t const put = posted([&] { a.c.put(block, a.dst, a.src.get(), bytes, next); });
    std::uint64_t const get =
        posted([&] { a.c.get(block, scratch, gpucomm::sym_ptr<unsigned char const>(a.src.get()), bytes, next); });
    std::uint64_t const ps =
        posted([&] { a.c.put_signal(block, a.dst, a.src.get(), bytes, a.sig, 1, gpucomm::signal_op::set, next); });
    if (block.thread_rank() == 0) report(a.errors, (put != due) + (get != due) + (ps != due));
  }
  // One thread alone carries at most store_path_bytes_per_thread itself, below the limit above.
  std::size_t const per_thread = gpucomm::detail::store_path_bytes_per_thread;
  static_assert(gpucomm::detail::store_path_bytes_per_thread + 16 <= store_limit);
  for (std::size_t const bytes : {per_thread, per_thread + 16}) {
    std::uint64_t const due = bytes > per_thread ? 1 : 0;
    bool const first = block.thread_rank() == 0;
    auto const one = gpucomm::this_thread();
    std::uint64_t const put = posted([&] {
      if (first) a.c.put(one, a.dst, a.src.get(), bytes, next);
    });
    std::uint64_t const get = posted([&] {
      if (first) a.c.get(one, scratch, gpucomm::sym_ptr<unsigned char const>(a.src.get()), bytes, next);
    });
    std::uint64_t const ps = posted([&] {
      if (first) a.c.put_signal(one, a.dst, a.src.get(), bytes, a.sig, 1, gpucomm::signal_op::set, next);
    });
    if (first) report(a.errors, (put != due) + (get != due) + (ps != due));
  }
  a.c.quiet(block);
  a.c.barrier(block);  // the peers' checks above are done with dst
  for (int r = 0; r < store_rounds; ++r) {
    auto const region = a.dst + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * bulk_bytes);
    a.c.put_nbi(block, region, a.src.get(), bulk_bytes, next);
    a.c.fence(block);
    a.c.put(block, region, a.src.get() + bulk_bytes, small_bytes, next);
  }
  a.c.quiet(block);
}

GPUCOMM_TEST_CASE_IF(!gpucomm::test::proxy_nic_backend,
                     "ProxyQueue: the store path takes small operations; after a fence a small put lands last",
                     "[proxy][sanitize]") {
  gpucomm::proxy_options o = gpucomm::test::proxy_test_options();
  o.store_path_bytes = store_limit;
  auto const world = gpucomm::test::make_world();
  auto& w = *world;
  w.configure<gpucomm::ProxyQueue>(o);
  int const npes = w.npes();
  std::uint64_t const salt = 7008;
  std::size_t const src_bytes = bulk_bytes + small_bytes;
  auto src = w.alloc<unsigned char>(src_bytes + store_limit + 16);  // a get's scratch behind the pattern
  auto dst = w.alloc<unsigned char>(store_rounds * bulk_bytes);
  auto sig = w.alloc<signal_t>(1);
  auto errors = make_counters(w);
  for (int pe : w.local_pes()) {
    upload(w, pe, src.ptr(pe), pattern_arena(salt, pe, src_bytes));
    fill_bytes(w, pe, dst.ptr(pe).get(), poison_byte, dst.size_bytes());
  }
  w.barrier();
  for_each_local_pe(w, [&](int pe) {
    store_path_kernel<<<1, 256, 0, w.stream(pe)>>>(
        store_args{w.comm<gpucomm::ProxyQueue>(pe), src.ptr(pe), dst.ptr(pe), sig.ptr(pe), errors.ptr(pe).get()});
    GPUCOMM_TEST_CUDA(cudaGetLastError());
  });
  finish(w);
  w.barrier();
  for (int pe : w.local_pes()) {
    int const prev = (pe + npes - 1) % npes;
    auto const sent = pattern_arena(salt, prev, src_bytes);
    auto const got = download(w, pe, dst.ptr(pe), store_rounds * bulk_bytes);
    std::size_t wrong = 0;
    for (int r = 0; r < store_rounds; ++r) {
      for (std::size_t k = 0; k < bulk_bytes; ++k) {
        unsigned char const want = k < small_bytes ? sent[bulk_bytes + k] : sent[k];
        wrong += got[static_cast<std::size_t>(r) * bulk_bytes + k] != want;
      }
    }
    INFO("PE " << pe);
    CHECK(download(w, pe, errors.ptr(pe), 1)[0] == 0);  // the path each size took
    CHECK(wrong == 0);                                  // the small put landed last in every round
  }
  w.barrier();
}

}  // namespace proxy_queue_tests
