// IBGDAPost's own tests, through the NIC model (the op suite in ../ops runs on it too):
//   - quiet with thousands of WQEs outstanding: every warp of every PE posts put_nbi to every PE
//     and quiets; then every one of its queues must show every published WQE completed, and the
//     host checks every byte;
//   - error paths: an out-of-bounds put, a put into a freed allocation and a put with a corrupted
//     rkey end in an error the host gets from world::synchronize() naming the PE, the peer, the
//     operation and the syndrome, and later operations on the failed queue (put, get, fetch_add,
//     quiet) return instead of hanging;
//   - the heap's keys: each allocation is a memory region of its own on every PE, whose keys the
//     kernels' table holds for exactly its pages, and which is gone once the block is freed.
#include <cooperative_groups.h>

#include <string>
#include <vector>

#include "../ops/common.cuh"
#include "bad_key.cuh"

using namespace gpucomm::test::ops;

// The host half answers world::reaches (tests/host/world_api_test.cpp checks the host-only ones).
static_assert(gpucomm::reach_reporting<gpucomm::IBGDAPost>);

namespace {

using gpucomm::test::error_of;

constexpr int puts_per_warp = 128;
constexpr int words_per_put = 8;  // 64 bytes: not inline, read from the heap by the NIC

__host__ __device__ std::uint64_t qval(int from, int warp, int k, int w) {
  return mix(4242, static_cast<std::uint64_t>(from), static_cast<std::uint64_t>((warp * puts_per_warp + k) * 8 + w));
}

/// dst layout at every PE: [from PE][warp][put][word]. src: [warp][put][word], the same for every
/// target.
__global__ void many_nbi_then_quiet(comm_t c, sym_ptr<std::uint64_t> dst, sym_ptr<std::uint64_t> src,
                                    unsigned long long* errors) {
  auto const warp = cg::tiled_partition<32>(cg::this_thread_block());
  int const wid = static_cast<int>(threadIdx.x / 32);
  int const warps = static_cast<int>(blockDim.x / 32);
  int const me = c.my_pe();
  std::size_t const per_warp = static_cast<std::size_t>(puts_per_warp) * words_per_put;
  std::uint64_t* const mine = src.get() + static_cast<std::size_t>(wid) * per_warp;
  for (std::size_t i = warp.thread_rank(); i < per_warp; i += 32)
    mine[i] = qval(me, wid, static_cast<int>(i / words_per_put), static_cast<int>(i % words_per_put));
  for (int pe = 0; pe < c.npes(); ++pe) {
    auto const base = dst + static_cast<std::ptrdiff_t>((static_cast<std::size_t>(me) * warps + wid) * per_warp);
    for (int k = 0; k < puts_per_warp; ++k) {
      c.put_nbi(warp, base + k * words_per_put, mine + k * words_per_put, words_per_put, pe);
    }
  }
  // quiet's promise, read off the queues themselves: on each of this warp's QPs, every WQE
  // published before the quiet (this warp's, and whatever other warps sharing the QP had
  // published) has completed. (world::synchronize() quiets too, so the host's data check alone
  // could not tell a quiet that returned early.)
  constexpr int max_pes = 16;
  std::uint64_t published[max_pes] = {};
  auto counters = [&](int pe) -> gpucomm::verbs_gpu::qp_counters& {
    return *gpucomm::IBGDAPost::queue(c, pe).counters;
  };
  if (warp.thread_rank() == 0) {
    for (int pe = 0; pe < c.npes() && pe < max_pes; ++pe)
      published[pe] = cuda::atomic_ref<std::uint64_t, cuda::thread_scope_device>(counters(pe).ready).load();
  }
  c.quiet(warp);
  if (warp.thread_rank() == 0) {
    unsigned long long open = 0;
    for (int pe = 0; pe < c.npes() && pe < max_pes; ++pe) {
      open += cuda::atomic_ref<std::uint64_t, cuda::thread_scope_device>(counters(pe).consumer).load() < published[pe];
    }
    report(errors, open);
  }
}

}  // namespace

TEST_CASE("IBGDAPost: quiet completes thousands of outstanding put_nbi", "[gpu][ibgda][order]") {
  auto& w = gpucomm::test::the_world();
  int const npes = w.npes();
  constexpr int warps = 8;
  std::size_t const per_pe = static_cast<std::size_t>(warps) * puts_per_warp * words_per_put;
  auto dst = w.alloc<std::uint64_t>(per_pe * static_cast<std::size_t>(npes));
  auto src = w.alloc<std::uint64_t>(per_pe);
  auto errors = make_counters(w);
  for (int pe : w.local_pes()) fill_bytes(w, pe, dst.ptr(pe).get(), poison_byte, dst.size_bytes());
  w.barrier();
  for_each_local_pe(w, [&](int pe) {
    many_nbi_then_quiet<<<1, warps * 32, 0, w.stream(pe)>>>(w.comm<transport_under_test>(pe), dst.ptr(pe), src.ptr(pe),
                                                            errors.ptr(pe).get());
  });
  finish(w);
  w.barrier();  // host-side only: no NIC operation between the quiets and the checks
  for (int pe : w.local_pes()) {
    auto const d = download(w, pe, dst.ptr(pe), dst.size());
    std::size_t bad = 0;
    for (int from = 0; from < npes; ++from)
      for (int wid = 0; wid < warps; ++wid)
        for (int k = 0; k < puts_per_warp; ++k)
          for (int x = 0; x < words_per_put; ++x)
            bad += d[((static_cast<std::size_t>(from) * warps + wid) * puts_per_warp + k) * words_per_put + x] !=
                   qval(from, wid, k, x);
    INFO(npes << " PEs, PE " << pe << ": " << warps * puts_per_warp * npes << " WQEs posted per PE before quiet");
    CHECK(download(w, pe, errors.ptr(pe), errors.size())[0] == 0);  // a queue still had work after quiet
    CHECK(bad == 0);
  }
  w.barrier();
}

namespace {

struct fail_args {
  comm_t c;
  sym_ptr<std::uint64_t> data;     // a few words, in the heap
  sym_ptr<std::uint64_t> outside;  // where the failing put goes
  int target;
  unsigned long long* seen;  // local [0]: fetch_add's result after the failure
};

/// PE 0's one thread posts the failing put, then more work on the same (failed) queue; all of it
/// must return. The other PEs do nothing.
__global__ void failing_put(fail_args a) {
  if (a.c.my_pe() != 0) return;
  auto const one = gpucomm::this_thread();
  a.c.put(one, a.outside, a.data.get(), 8, a.target);
  a.c.put(one, a.data, a.data.get() + 8, 8, a.target);
  a.c.get(one, a.data.get() + 16, a.data, 8, a.target);
  a.seen[0] = a.c.fetch_add(one, a.data, std::uint64_t{1}, a.target);
  a.c.quiet(one);
}

/// Where failing_put's first put goes.
enum class failure { past_the_slot, freed_block, bad_key };

/// Runs failing_put in a world of its own (its queues end in error), returns the error text PE 0's
/// process got (or "(no error)").
std::string run_failure(failure how) {
  auto w = gpucomm::test::make_world();
  int const npes = w->npes();
  int const target = npes - 1;
  auto data = w->alloc<std::uint64_t>(64);
  auto seen = make_counters(*w);
  // An allocation freed at once, after the last one (so no later block reuses its place): its
  // block is mapped no more, and no region covers it.
  sym_ptr<std::uint64_t> const freed = w->alloc<std::uint64_t>(64).ptr(w->local_pes().front());
  std::string message = "(no error)";
  std::vector<void*> tables;
  for_each_local_pe(*w, [&](int pe) {
    auto c = w->comm<transport_under_test>(pe);
    auto state = c.state();
    auto const stride = w->heap_layout().stride;
    // 8 words starting 16 bytes before the end of the slot: past the registered region.
    sym_ptr<std::uint64_t> outside(
        reinterpret_cast<std::uint64_t*>(w->heap_layout().base + static_cast<std::size_t>(pe) * stride + stride - 16));
    if (how == failure::bad_key) {
      tables.push_back(gpucomm::test::corrupt_rkey(*w, pe, target, state));
      outside = data.ptr(pe);  // a good address: only the key is wrong
    } else if (how == failure::freed_block) {
      outside = sym_ptr<std::uint64_t>(reinterpret_cast<std::uint64_t*>(
          reinterpret_cast<char*>(freed.get()) + (pe - w->local_pes().front()) * static_cast<std::ptrdiff_t>(stride)));
    }
    fail_args a{comm_t(pe, npes, w->team_states(pe), state), data.ptr(pe), outside, target, seen.ptr(pe).get()};
    failing_put<<<1, 1, 0, w->stream(pe)>>>(a);
    GPUCOMM_TEST_CUDA(cudaGetLastError());
  });
  message = error_of([&] { w->synchronize(); });
  for (void* t : tables) cudaFree(t);
  w->bootstrap().barrier();
  return message;
}

/// PE 0's process got the error naming PE 0, the target, the operation and the syndrome; the
/// others got none.
void check_reported(std::string const& e) {
  auto& w = gpucomm::test::the_world();
  if (w.is_local(0)) {
    CHECK_THAT(e, Catch::Contains("PE 0") && Catch::Contains("to PE " + std::to_string(w.npes() - 1)) &&
                      Catch::Contains("RDMA_WRITE") && Catch::Contains("REMOTE_ACCESS_ERR"));
  } else {
    CHECK(e == "(no error)");
  }
}

}  // namespace

TEST_CASE("IBGDAPost: an out-of-bounds put is reported with PE, peer, operation and syndrome, no hang",
          "[gpu][ibgda][errors]") {
  check_reported(run_failure(failure::past_the_slot));
}

TEST_CASE("IBGDAPost: a put into a freed allocation is reported with PE, peer, operation and syndrome, no hang",
          "[gpu][ibgda][errors]") {
  check_reported(run_failure(failure::freed_block));
}

TEST_CASE("IBGDAPost: a put with a bad rkey is reported with PE, peer, operation and syndrome, no hang",
          "[gpu][ibgda][errors]") {
  check_reported(run_failure(failure::bad_key));
}

TEST_CASE("IBGDAPost: each allocation is a region of its own, its keys in the kernels' table for its pages only",
          "[gpu][ibgda][keys]") {
  auto& w = gpucomm::test::the_world();
  int const npes = w.npes();
  using gpucomm::detail::heap_keys;
  // Three blocks of different sizes, the middle one freed again.
  std::size_t const page = w.heap_granularity();
  auto a = w.alloc<char>(page);
  auto b = w.alloc<char>(3 * page);
  auto c = w.alloc<char>(2 * page + 1);  // rounds up to 3 pages
  for (int pe : w.local_pes()) {
    auto const state = w.comm<transport_under_test>(pe).state();
    heap_keys const& keys = state.keys;
    REQUIRE(keys.row_words == static_cast<std::uint32_t>(npes) + 1);
    REQUIRE((std::uint64_t{1} << keys.log_page) <= page);
    std::vector<std::uint32_t> rows(keys.pages * keys.row_words);
    GPUCOMM_TEST_CUDA(cudaMemcpy(rows.data(), keys.rows, rows.size() * sizeof(rows[0]), cudaMemcpyDeviceToHost));
    heap_keys host = keys;
    host.rows = rows.data();
    auto offset_of = [&](auto const& arr) {
      return static_cast<std::uint64_t>(arr.ptr(pe).get() - w.heap_layout().base) -
             static_cast<std::uint64_t>(pe) * w.heap_layout().stride;
    };
    // Each block: the same real keys on every page of it, for this PE and every PE.
    std::vector<std::vector<std::uint32_t>> seen;  // [block] -> lkey, rkeys
    for (std::uint64_t const first : {offset_of(a), offset_of(b), offset_of(c)}) {
      std::size_t const bytes = first == offset_of(a) ? page : 3 * page;
      std::vector<std::uint32_t> k{host.lkey_wire(first)};
      for (int p = 0; p < npes; ++p) k.push_back(host.rkey_wire(first, p));
      for (std::uint32_t key : k) CHECK(key != heap_keys::none);
      for (std::uint64_t o = first; o < first + bytes; o += page / 2) {
        CHECK(host.lkey_wire(o) == k[0]);
        for (int p = 0; p < npes; ++p) CHECK(host.rkey_wire(o, p) == k[1 + static_cast<std::size_t>(p)]);
      }
      CHECK(host.lkey_wire(first + bytes) != k[0]);  // the next page is not this block's
      seen.push_back(k);
    }
    // Different blocks, different regions: every key of a block differs from the others'.
    for (std::size_t i = 0; i < seen.size(); ++i)
      for (std::size_t j = i + 1; j < seen.size(); ++j)
        for (std::size_t x = 0; x < seen[i].size(); ++x) CHECK(seen[i][x] != seen[j][x]);
    // Past the last block: nothing.
    CHECK(host.lkey_wire(offset_of(c) + 3 * page) == heap_keys::none);
  }
  // Freed: the block's rows are cleared on every PE, the others' stay.
  std::vector<std::uint64_t> b_offsets;
  for (int pe : w.local_pes())
    b_offsets.push_back(static_cast<std::uint64_t>(b.ptr(pe).get() - w.heap_layout().base) -
                        static_cast<std::uint64_t>(pe) * w.heap_layout().stride);
  std::uint64_t const a_offset = static_cast<std::uint64_t>(a.ptr(w.local_pes().front()).get() - w.heap_layout().base) -
                                 static_cast<std::uint64_t>(w.local_pes().front()) * w.heap_layout().stride;
  { auto gone = std::move(b); }
  std::size_t i = 0;
  for (int pe : w.local_pes()) {
    auto const state = w.comm<transport_under_test>(pe).state();
    std::vector<std::uint32_t> rows(state.keys.pages * state.keys.row_words);
    GPUCOMM_TEST_CUDA(cudaMemcpy(rows.data(), state.keys.rows, rows.size() * sizeof(rows[0]), cudaMemcpyDeviceToHost));
    heap_keys host = state.keys;
    host.rows = rows.data();
    for (std::uint64_t o = b_offsets[i]; o < b_offsets[i] + 3 * page; o += page / 2) {
      CHECK(host.lkey_wire(o) == heap_keys::none);
      for (int p = 0; p < npes; ++p) CHECK(host.rkey_wire(o, p) == heap_keys::none);
    }
    CHECK(host.lkey_wire(a_offset) != heap_keys::none);
    ++i;
  }
  w.barrier();
}
