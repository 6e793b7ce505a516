// The op suite (every transport under test): barrier and remote(): thousands of barriers in one kernel with data that
// changes every round (every PE writes the round's values into every PE by remote() stores, put or put_nbi, one
// barrier, every PE checks every PE's values; double-buffered so the next round's writes also test that the barrier
// orders reads before peers' later writes), with block, warp, single-thread, tile<4>, user and partial-warp groups;
// barriers across many kernel launches; direct loads and stores through comm::remote().
#include "common.cuh"

using namespace gpucomm::test::ops;

namespace {

constexpr int W = 8;  // words per (writer, reader) pair per round

__host__ __device__ inline std::uint64_t bval(std::uint64_t salt, int round, int from, int to, int w) {
  return mix(salt + static_cast<std::uint64_t>(round), static_cast<std::uint64_t>(from * 64 + to),
             static_cast<std::uint64_t>(w));
}

struct bar_args {
  comm_t c;
  sym_ptr<std::uint64_t> slots;  // [2][npes][W]: slots[b][q] written by PE q
  std::uint64_t* stage;          // local [npes][W]
  int first_round;
  int rounds;
  std::uint64_t salt;
  unsigned long long* errors;  // local [0]
};

/// c.remote(p, pe)[0] = v, for transports whose remote() reaches every peer: a template, so that
/// the others (remote() does not exist for them) never compile it.
template <class C, class T>
__device__ void remote_store(C const& c, sym_ptr<T> p, int pe, T v) {
  c.remote(p, pe)[0] = v;
}

/// One group per PE (group 0 of block 0) runs the rounds.
template <class M>
__global__ void barrier_kernel(bar_args a) {
  auto const g = M::make();
  if (!M::active() || blockIdx.x != 0 || M::index() != 0) return;
  int const me = a.c.my_pe();
  int const npes = a.c.npes();
  unsigned const rank = gpucomm::group_rank(g), size = gpucomm::group_size(g);
  int const n = npes * W;
  unsigned long long bad = 0;
  for (int r = a.first_round; r < a.first_round + a.rounds; ++r) {
    int const buf = r & 1;
    auto const mine = a.slots + static_cast<std::ptrdiff_t>((buf * npes + me) * W);
    // Direct remote() stores only where every peer is reached by load/store.
    int const mode = gpucomm::test::load_store_everywhere ? r % 3 : 1 + r % 2;
    if (mode == 0) {
      if constexpr (gpucomm::test::load_store_everywhere) {
        for (int i = static_cast<int>(rank); i < n; i += static_cast<int>(size))
          remote_store(a.c, mine + i % W, i / W, bval(a.salt, r, me, i / W, i % W));
      }
    } else {
      for (int i = static_cast<int>(rank); i < n; i += static_cast<int>(size))
        a.stage[i] = bval(a.salt, r, me, i / W, i % W);
      gpucomm::group_sync(g);
      for (int p = 0; p < npes; ++p) {
        if (mode == 1)
          a.c.put(g, mine, a.stage + p * W, W, p);
        else
          a.c.put_nbi(g, mine, a.stage + p * W, W, p);
      }
    }
    a.c.barrier(g);
    for (int i = static_cast<int>(rank); i < n; i += static_cast<int>(size))
      bad += a.slots[(buf * npes + i / W) * W + i % W] != bval(a.salt, r, i / W, me, i % W);
  }
  report(a.errors, bad);
}

template <class M>
void run_barrier_rounds(unsigned block, int rounds, int launches, std::uint64_t salt) {
  auto& w = gpucomm::test::the_world();
  int const npes = w.npes();
  std::size_t const n = 2 * static_cast<std::size_t>(npes) * W;
  auto slots = w.alloc<std::uint64_t>(n);
  auto stage = w.alloc<std::uint64_t>(static_cast<std::size_t>(npes) * W);
  auto errors = make_counters(w);
  for (int pe : w.local_pes()) fill_bytes(w, pe, slots.ptr(pe).get(), poison_byte, slots.size_bytes());
  w.barrier();
  for (int l = 0; l < launches; ++l) {
    for_each_local_pe(w, [&](int pe) {
      bar_args a{w.comm<transport_under_test>(pe),
                 slots.ptr(pe),
                 stage.ptr(pe).get(),
                 l * rounds,
                 rounds,
                 salt,
                 errors.ptr(pe).get()};
      barrier_kernel<M><<<1, block, 0, w.stream(pe)>>>(a);
    });
  }
  finish(w);
  w.barrier();
  int const total = launches * rounds;
  for (int pe : w.local_pes()) {
    auto const s = download(w, pe, slots.ptr(pe), n);
    std::uint64_t bad = 0;
    for (int r = std::max(0, total - 2); r < total; ++r)
      for (int q = 0; q < npes; ++q)
        for (int k = 0; k < W; ++k)
          bad += s[static_cast<std::size_t>(((r & 1) * npes + q) * W + k)] != bval(salt, r, q, pe, k);
    INFO("group " << M::name << ", " << npes << " PEs, PE " << pe << ", " << launches << " launches x " << rounds
                  << " barriers");
    CHECK(download(w, pe, errors.ptr(pe), errors.size())[0] == 0);  // a PE saw a peer's value of another round
    CHECK(bad == 0);
  }
  w.barrier();
}

// ---- remote(), where it reaches every peer (load_store_everywhere; elsewhere the helpers are unused)

[[maybe_unused]] __host__ __device__ inline std::uint32_t rval32(int from, int at, std::size_t i) {
  return static_cast<std::uint32_t>(mix(3131, static_cast<std::uint64_t>(from * 64 + at), i));
}
[[maybe_unused]] __host__ __device__ inline unsigned char rval8(int from, int at, std::size_t i) {
  return static_cast<unsigned char>(mix(3132, static_cast<std::uint64_t>(from * 64 + at), i) | 1u);
}

template <class Tr>
struct remote_args {
  gpucomm::comm<Tr> c;
  sym_ptr<std::uint32_t> a32;  // [npes][N]: region q written by PE q
  sym_ptr<unsigned char> a8;   // [npes][N + 1], regions at odd offsets
  std::size_t N;
  unsigned long long* errors;  // local [0] values, [1] pointer arithmetic
};

template <class Tr>
__global__ void remote_kernel(remote_args<Tr> a) {
  auto const block = cg::this_thread_block();
  int const me = a.c.my_pe();
  int const npes = a.c.npes();
  std::size_t const N = a.N, N8 = a.N + 1;
  unsigned long long bad = 0, bad_ptr = 0;
  for (int p = 0; p < npes; ++p) {
    std::uint32_t* r32 = a.c.remote(a.a32, p);
    unsigned char* r8 = a.c.remote(a.a8, p);
    bad_ptr += a.c.remote(a.a32 + 5, p) != r32 + 5;
    bad_ptr += p == me && r32 != a.a32.get();
    for (std::size_t i = block.thread_rank(); i < N; i += block.num_threads()) {
      r32[static_cast<std::size_t>(me) * N + i] = rval32(me, p, i);
      r8[static_cast<std::size_t>(me) * N8 + 1 + i] = rval8(me, p, i);
    }
  }
  a.c.barrier(block);
  for (int p = 0; p < npes; ++p) {
    std::uint32_t const* r32 = a.c.remote(a.a32, p);
    unsigned char const* r8 = a.c.remote(a.a8, p);
    for (int q = 0; q < npes; ++q) {
      for (std::size_t i = block.thread_rank(); i < N; i += block.num_threads()) {
        bad += r32[static_cast<std::size_t>(q) * N + i] != rval32(q, p, i);
        bad += r8[static_cast<std::size_t>(q) * N8 + 1 + i] != rval8(q, p, i);
      }
    }
  }
  report(a.errors, bad);
  report(a.errors + 1, bad_ptr);
}

}  // namespace

TEST_CASE("barrier: 4000 rounds (400 through the NIC model), thread_block", "[gpu][ops][barrier]") {
  run_barrier_rounds<mk_block>(256, 4000 / model_slowdown, 1, 2001);
}
TEST_CASE("barrier: 4000 rounds (400 through the NIC model), thread_block_tile<32>", "[gpu][ops][barrier]") {
  run_barrier_rounds<mk_tile<32>>(64, 4000 / model_slowdown, 1, 2002);
}
TEST_CASE("barrier: 4000 rounds (400 through the NIC model), this_thread()", "[gpu][ops][barrier]") {
  run_barrier_rounds<mk_single>(32, 4000 / model_slowdown, 1, 2003);
}
TEST_CASE(
    "barrier: 1000 rounds each (100 through the NIC model), tile<4>, lane_pair, even-lane coalesced, no-shfl user "
    "group",
    "[gpu][ops][barrier]") {
  run_barrier_rounds<mk_tile<4>>(32, 1000 / model_slowdown, 1, 2004);
  run_barrier_rounds<mk_pair>(32, 1000 / model_slowdown, 1, 2005);
  run_barrier_rounds<mk_coalesced_even>(32, 1000 / model_slowdown, 1, 2006);
  run_barrier_rounds<mk_bar64>(128, 1000 / model_slowdown, 1, 2007);
}
TEST_CASE("barrier: one barrier per kernel over 300 launches (30 through the NIC model)", "[gpu][ops][barrier]") {
  run_barrier_rounds<mk_block>(128, 1, 300 / model_slowdown, 2008);
  run_barrier_rounds<mk_single>(32, 2, 150 / model_slowdown, 2009);  // epochs carry over between group kinds
}
TEST_CASE("sanitize: barrier, small", "[gpu][ops][barrier][sanitize]") {
  run_barrier_rounds<mk_block>(64, 30, 1, 2010);
  run_barrier_rounds<mk_tile<32>>(32, 30, 1, 2011);
}

GPUCOMM_TEST_CASE_IF(gpucomm::test::load_store_everywhere, "remote(): direct stores to and loads from every PE",
                     "[gpu][ops][put][get]") {
  auto& w = gpucomm::test::the_world();
  int const npes = w.npes();
  std::size_t const N = 100003;  // odd
  auto a32 = w.alloc<std::uint32_t>(N * static_cast<std::size_t>(npes));
  auto a8 = w.alloc<unsigned char>((N + 1) * static_cast<std::size_t>(npes));
  auto errors = make_counters(w);
  for (int pe : w.local_pes()) {
    fill_bytes(w, pe, a32.ptr(pe).get(), poison_byte, a32.size_bytes());
    fill_bytes(w, pe, a8.ptr(pe).get(), 0, a8.size_bytes());
  }
  w.barrier();
  for_each_local_pe(w, [&](int pe) {
    remote_args<Tr> a{w.comm<Tr>(pe), a32.ptr(pe), a8.ptr(pe), N, errors.ptr(pe).get()};
    remote_kernel<Tr><<<1, 512, 0, w.stream(pe)>>>(a);
  });
  finish(w);
  w.barrier();
  for (int pe : w.local_pes()) {
    auto const d32 = download(w, pe, a32.ptr(pe), a32.size());
    auto const d8 = download(w, pe, a8.ptr(pe), a8.size());
    auto const e = download(w, pe, errors.ptr(pe), errors.size());
    std::uint64_t bad = 0;
    for (int q = 0; q < npes; ++q) {
      auto const qs = static_cast<std::size_t>(q);
      bad += d8[qs * (N + 1)] != 0;  // the byte before each region stays untouched
      for (std::size_t i = 0; i < N; ++i) {
        bad += d32[qs * N + i] != rval32(q, pe, i);
        bad += d8[qs * (N + 1) + 1 + i] != rval8(q, pe, i);
      }
    }
    INFO(npes << " PEs, PE " << pe);
    CHECK(e[0] == 0);  // a remote load after the barrier missed a peer's remote store
    CHECK(e[1] == 0);  // remote(p + k, pe) != remote(p, pe) + k, or remote(p, me) != p
    CHECK(bad == 0);
  }
  w.barrier();
}
