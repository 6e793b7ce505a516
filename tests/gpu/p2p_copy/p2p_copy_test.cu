// P2PCopy's own tests (gpucomm_gpu_tests_p2p, next to the op suite built for BasicP2PCopy<256, 3>):
//   - every (src, dst) misalignment pair 0..15 x 0..15 at sizes around every edge of the bulk path
//     (0, 1, 15..17, 511..513, 528, stage multiples +- a few bytes), for put / put_nbi /
//     put_signal from shared memory and from global memory through the staging, and for get into
//     shared memory and into global memory; the default P2PCopy at block scope and the suite's
//     small-stage policy for warps and single threads; every byte of every PE's arena checked on
//     the host against the pattern, guards included; a blocking put's source overwritten as soon
//     as it returns (the target must still get the original bytes);
//   - 64 MiB puts and gets through the default staging;
//   - the recommended P2PCopy128K (8 x 16 KiB in dynamic shared memory, taken through
//     gpucomm::dynamic_staging as every case here takes its stagings) over the same matrix from
//     global memory, up to 9 stages' worth (stages refilled at every misalignment), and 8 MiB puts
//     and gets;
//   - a policy with the L2 prefetch (BasicP2PCopy<8192, 5, 1, 2>) over the same matrix from
//     global memory, to 9 stages' worth, and 8 MiB puts and gets;
//   - every call through gpucomm::without_staging (the group's own stores from global memory, bulk
//     stores from shared memory) over the matrix, at block and warp scope;
//   - put_signal rounds around the ring on every group kind, each group with its own staging, the
//     receiver checking every byte right after its wait_until returns (a missing completion or
//     proxy fence before the signal shows up as stale bytes).
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "../ops/common.cuh"

using namespace gpucomm::test::ops;
using gpucomm::test::the_world;

namespace {

using small_policy = gpucomm::test::transport_under_test;  // BasicP2PCopy<256, 3>
static_assert(std::is_same_v<small_policy, gpucomm::BasicP2PCopy<256, 3>>);

enum align_op : int { a_put, a_put_nbi, a_put_signal, a_get, a_op_count };
constexpr char const* align_op_names[] = {"put", "put_nbi", "put_signal", "get"};

constexpr std::size_t guard = 16;

/// Byte distance between two jobs' regions in an arena: the copy, its misalignment and guards.
std::size_t region_stride(std::size_t bytes) { return (bytes + 2 * guard + 15) / 16 * 16 + 16; }

struct align_args {
  sym_ptr<unsigned char> src;  // [npes * jobs] regions, the pattern of the PE that owns them
  sym_ptr<unsigned char> dst;  // [npes * jobs] regions: region (writer * jobs + job)
  sym_ptr<signal_t> sigs;      // [npes * jobs]
  std::size_t bytes;
  std::size_t stride;
  std::size_t smem_region;  // per group, when the shared-memory side is used
  int jobs;                 // groups in the grid: job = group, misalignments (job % 16, job / 16 % 16)
  int op;
  bool shared_side;  // put: src in shared memory; get: dst in shared memory
  std::uint64_t salt;
  unsigned long long* errors;
};

__host__ __device__ inline unsigned char job_byte(std::uint64_t salt, int pe, int job, std::uint64_t k) {
  return pattern_byte(salt + static_cast<std::uint64_t>(job) * 1000003u, pe, k);
}

// without_staging keeps what the group it wraps can do: a whole CTA stays one that broadcasts.
static_assert(gpucomm::broadcasting_group<gpucomm::unstaged_group<cooperative_groups::thread_block>>);
static_assert(gpucomm::detail::is_unstaged_group_v<gpucomm::unstaged_group<gpucomm::single_thread>>);
static_assert(gpucomm::group_static_size_v<gpucomm::unstaged_group<cooperative_groups::thread_block_tile<32>>> == 32);

/// The group a job calls with: M's group with its staging, or (Unstaged) through without_staging.
template <bool Unstaged, class Staging, class G>
__device__ auto align_group(G const& made, unsigned index) {
  if constexpr (Unstaged)
    return gpucomm::without_staging(made);
  else
    return gpucomm::with_staging(made, gpucomm::dynamic_staging<Staging>(index));
}

template <class M, class Policy, bool Unstaged>
__global__ void __launch_bounds__(1024) align_kernel(gpucomm::comm<Policy> c, align_args a) {
  auto const made = M::make();
  if (!M::active()) return;
  extern __shared__ __align__(128) unsigned char smem[];
  using staging = typename Policy::staging;
  unsigned const per_block = M::per_block();
  // The stagings first in the dynamic shared memory, one per group; the shared-memory regions after them.
  unsigned char* const region = smem + per_block * sizeof(staging) + M::index() * a.smem_region;
  auto const g = align_group<Unstaged, staging>(made, M::index());
  int const job = static_cast<int>(global_group<M>());
  if (job >= a.jobs) return;
  int const me = c.my_pe(), npes = c.npes();
  int const peer = (me + 1 + job) % npes;
  std::size_t const src_mis = static_cast<std::size_t>(job % 16), dst_mis = static_cast<std::size_t>(job / 16 % 16);
  unsigned const rank = gpucomm::group_rank(g), size = gpucomm::group_size(g);
  std::size_t const n = a.bytes;
  if (a.op != a_get) {
    // Put my job's bytes into my region of the peer's dst arena.
    unsigned char* src = a.src.get() + static_cast<std::size_t>(me * a.jobs + job) * a.stride + guard + src_mis;
    if (a.shared_side) {
      src = region + src_mis;
      for (std::size_t k = rank; k < n; k += size) src[k] = job_byte(a.salt, me, job, k);
    }
    auto const dst =
        a.dst + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(me * a.jobs + job) * a.stride + guard + dst_mis);
    if (a.op == a_put) c.put(g, dst, src, n, peer);
    if (a.op == a_put_nbi) c.put_nbi(g, dst, src, n, peer);
    if (a.op == a_put_signal)
      c.put_signal(g, dst, src, n, a.sigs + (me * a.jobs + job), 1, gpucomm::signal_op::add, peer);
    if (a.op != a_put_nbi) {
      for (std::size_t k = rank; k < n; k += size) src[k] = overwritten_byte;  // src is free again
    }
    c.quiet(g);
  } else {
    // Get the peer's job bytes (its src region `job`) into my dst region `job`.
    auto const from = gpucomm::sym_ptr<unsigned char const>(
        a.src +
        static_cast<std::ptrdiff_t>(static_cast<std::size_t>(peer * a.jobs + job) * a.stride + guard + src_mis));
    unsigned char* const out = a.dst.get() + static_cast<std::size_t>(me * a.jobs + job) * a.stride + guard + dst_mis;
    unsigned char* const to = a.shared_side ? region + dst_mis : out;
    c.get(g, to, from, n, peer);
    unsigned long long bad = 0;
    for (std::size_t k = rank; k < n; k += size) {
      bad += to[k] != job_byte(a.salt, peer, job, k);
      if (a.shared_side) out[k] = to[k];  // for the host's check of every byte
    }
    report(a.errors, bad);
  }
}

/// Runs one size of the alignment matrix for group kind M on policy P (Unstaged: every call through
/// without_staging); checks every byte.
template <class M, class P, bool Unstaged = false>
void run_align(std::size_t bytes, int op, bool shared_side, unsigned block, std::uint64_t salt, int jobs = 256) {
  auto& w = the_world();
  int const npes = w.npes();
  std::size_t const stride = region_stride(bytes);
  std::size_t const arena = stride * static_cast<std::size_t>(npes * jobs);
  std::size_t const smem_region = shared_side ? (bytes + 32 + 127) / 128 * 128 : 0;
  unsigned const per_block = M::per_block(block);
  unsigned const grid = (static_cast<unsigned>(jobs) + per_block - 1) / per_block;
  std::size_t const smem = per_block * (sizeof(typename P::staging) + smem_region);
  REQUIRE(smem <= 200 * 1024);
  auto src = w.alloc<unsigned char>(arena);
  auto dst = w.alloc<unsigned char>(arena);
  auto sigs = w.alloc<signal_t>(static_cast<std::size_t>(npes * jobs));
  auto errors = make_counters(w);
  auto const src_image = [&](int pe) {
    std::vector<unsigned char> v(arena, poison_byte);
    for (int j = 0; j < jobs; ++j) {
      std::size_t const at =
          static_cast<std::size_t>(pe * jobs + j) * stride + guard + static_cast<std::size_t>(j % 16);
      for (std::size_t k = 0; k < bytes; ++k) v[at + k] = job_byte(salt, pe, j, k);
    }
    return v;
  };
  for (int pe : w.local_pes()) {
    upload(w, pe, src.ptr(pe), src_image(pe));
    fill_bytes(w, pe, dst.ptr(pe).get(), poison_byte, arena);
    fill_bytes(w, pe, sigs.ptr(pe).get(), 0, sigs.size() * sizeof(signal_t));
  }
  auto kernel = align_kernel<M, P, Unstaged>;
  allow_dynamic_smem(w, kernel, smem);
  w.barrier();
  for_each_local_pe(w, [&](int pe) {
    align_args a{src.ptr(pe), dst.ptr(pe), sigs.ptr(pe),        bytes, stride, smem_region, jobs, op,
                 shared_side, salt,        errors.ptr(pe).get()};
    kernel<<<grid, block, smem, w.stream(pe)>>>(w.comm<P>(pe), a);
  });
  finish(w);
  w.barrier();
  for (int q : w.local_pes()) {
    // Expected dst arena at q: puts land in region (writer * jobs + job) from every writer whose
    // peer for that job is q; gets land in q's own regions, from q's peer of the job.
    std::vector<unsigned char> expect(arena, poison_byte);
    std::vector<signal_t> expect_sig(sigs.size(), 0);
    for (int writer = 0; writer < npes; ++writer) {
      for (int j = 0; j < jobs; ++j) {
        int const peer = (writer + 1 + j) % npes;
        bool const lands_here = op == a_get ? writer == q : peer == q;
        if (!lands_here) continue;
        int const source_pe = op == a_get ? peer : writer;
        std::size_t const at =
            static_cast<std::size_t>(writer * jobs + j) * stride + guard + static_cast<std::size_t>(j / 16 % 16);
        for (std::size_t k = 0; k < bytes; ++k) expect[at + k] = job_byte(salt, source_pe, j, k);
        if (op == a_put_signal) expect_sig[static_cast<std::size_t>(writer * jobs + j)] = 1;
      }
    }
    auto const got = download(w, q, dst.ptr(q), arena);
    auto const got_sig = download(w, q, sigs.ptr(q), sigs.size());
    std::size_t bad = 0, first = arena;
    for (std::size_t k = 0; k < arena; ++k) {
      if (got[k] != expect[k]) {
        ++bad;
        first = std::min(first, k);
      }
    }
    std::size_t sig_bad = 0;
    for (std::size_t i = 0; i < got_sig.size(); ++i) sig_bad += got_sig[i] != expect_sig[i];
    INFO(M::name << " " << P::name << "<" << P::staging::stage_bytes << "," << P::staging::stages << ","
                 << P::staging::stores_in_flight << "," << P::prefetch_ahead << ">" << (Unstaged ? " unstaged " : " ")
                 << align_op_names[op] << (shared_side ? " (shared memory side)" : " (global memory)") << ", " << bytes
                 << " B, " << npes << " PEs, PE " << q << ", first bad byte " << first << " (region " << first / stride
                 << ", offset " << first % stride << ")");
    CHECK(bad == 0);
    CHECK(sig_bad == 0);
    CHECK(download(w, q, errors.ptr(q), errors.size())[0] == 0);
  }
  w.barrier();
}

constexpr std::size_t KiB = 1024, MiB = 1024 * 1024;

/// Sizes around every edge of the split: none, tiny, a granule, the bulk threshold, odd sizes.
std::vector<std::size_t> edge_sizes(std::size_t stage_bytes, std::size_t largest) {
  std::vector<std::size_t> v{0, 1, 15, 16, 17, 511, 512, 513, 528, 1000};
  for (std::size_t s : {stage_bytes - 3, stage_bytes, stage_bytes + 5, 3 * stage_bytes + 7, 9 * stage_bytes + 1})
    if (s <= largest) v.push_back(s);
  return v;
}

template <class M, class P, bool Unstaged = false>
void align_matrix(bool shared_side, unsigned block, std::size_t largest, std::uint64_t salt) {
  for (std::size_t const bytes : edge_sizes(P::staging::stage_bytes, largest)) {
    for (int op = 0; op < a_op_count; ++op) run_align<M, P, Unstaged>(bytes, op, shared_side, block, salt++);
  }
}

/// The default staging with the source prefetched into L2 two chunks ahead of the loads.
using prefetch_policy = gpucomm::BasicP2PCopy<8192, 5, 1, 2>;

}  // namespace

TEST_CASE("P2PCopy: every misalignment and edge size, from and into shared memory, block scope",
          "[gpu][p2p][put][get]") {
  align_matrix<mk_block, gpucomm::P2PCopy>(/*shared_side=*/true, 128, 40 * KiB, 7000);
}

TEST_CASE("P2PCopy: every misalignment and edge size, global memory through the staging, block scope",
          "[gpu][p2p][put][get]") {
  align_matrix<mk_block, gpucomm::P2PCopy>(/*shared_side=*/false, 128, 256 * KiB, 7100);
}

TEST_CASE("P2PCopy: every misalignment and edge size, warps and single threads with small stages",
          "[gpu][p2p][put][get]") {
  align_matrix<mk_tile<32>, small_policy>(true, 128, 4 * KiB, 7200);
  align_matrix<mk_tile<32>, small_policy>(false, 128, 64 * KiB, 7300);
  align_matrix<mk_single, small_policy>(true, 32, 2 * KiB, 7400);
  align_matrix<mk_single, small_policy>(false, 32, 8 * KiB, 7500);
}

TEST_CASE("P2PCopy: 64 MiB puts and gets through the default staging", "[gpu][p2p][put][get]") {
  std::uint64_t salt = 7600;
  for (int op = 0; op < a_op_count; ++op)
    run_align<mk_block, gpucomm::P2PCopy>(64 * MiB + 5, op, false, 1024, salt++,
                                          1);  // one job per PE: npes x 64 MiB, twice (harness.cuh sizes the heap)
}

TEST_CASE("P2PCopy128K: every misalignment and edge size, global memory through 8 x 16 KiB of dynamic shared memory",
          "[gpu][p2p][put][get]") {
  align_matrix<mk_block, gpucomm::P2PCopy128K>(/*shared_side=*/false, 128, 160 * KiB, 7800);  // to 9 x 16 KiB + 1
}

TEST_CASE("P2PCopy128K: 8 MiB puts and gets, each stage refilled many times", "[gpu][p2p][put][get]") {
  std::uint64_t salt = 7850;
  for (int op = 0; op < a_op_count; ++op)
    run_align<mk_block, gpucomm::P2PCopy128K>(8 * MiB + 5, op, false, 1024, salt++, 1);  // one job per PE
}

TEST_CASE("P2PCopy with an L2 prefetch two chunks ahead: every misalignment and edge size, and 8 MiB",
          "[gpu][p2p][put][get]") {
  // To 9 x 8 KiB + 1: prefetches beyond the first 5 chunks, a short last chunk prefetched.
  align_matrix<mk_block, prefetch_policy>(/*shared_side=*/false, 128, 80 * KiB, 8000);
  std::uint64_t salt = 8100;
  for (int op = 0; op < a_op_count; ++op)
    run_align<mk_block, prefetch_policy>(8 * MiB + 5, op, false, 1024, salt++, 1);  // one job per PE
}

TEST_CASE("P2PCopy through without_staging: every misalignment and edge size, both memories", "[gpu][p2p][put][get]") {
  align_matrix<mk_block, gpucomm::P2PCopy, true>(/*shared_side=*/false, 128, 40 * KiB, 8200);
  align_matrix<mk_block, gpucomm::P2PCopy, true>(/*shared_side=*/true, 128, 40 * KiB, 8300);
  align_matrix<mk_tile<32>, small_policy, true>(/*shared_side=*/false, 128, 4 * KiB, 8400);
}

TEST_CASE("sanitize: P2PCopy alignment matrix, a few sizes", "[gpu][p2p][put][get][sanitize]") {
  std::uint64_t salt = 7700;
  for (std::size_t const bytes : {std::size_t{17}, std::size_t{600}, std::size_t{4 * KiB + 3}}) {
    for (int op = 0; op < a_op_count; ++op) {
      run_align<mk_block, gpucomm::P2PCopy>(bytes, op, true, 128, salt++, 16);
      run_align<mk_tile<32>, small_policy>(bytes, op, false, 64, salt++, 16);
    }
  }
  // The L2 prefetch past the first stages, and the wrapped group of without_staging.
  for (int op = 0; op < a_op_count; ++op) {
    run_align<mk_block, prefetch_policy>(9 * 8 * KiB + 1, op, false, 128, salt++, 4);
    run_align<mk_block, gpucomm::P2PCopy, true>(4 * KiB + 3, op, false, 128, salt++, 16);
  }
}

// ---- put_signal rounds --------------------------------------------------------------------------

namespace {

struct rounds_args {
  gpucomm::comm<small_policy> c;
  sym_ptr<unsigned char> src;  // [groups] regions (global source, odd rounds)
  sym_ptr<unsigned char> dst;  // [groups] regions: what my predecessor sends me
  sym_ptr<signal_t> data_sig;  // [groups]: round whose data has arrived
  sym_ptr<signal_t> ack_sig;   // [groups]: round my successor has checked
  std::size_t max_bytes, stride, smem_region;
  int rounds;
  std::uint64_t salt;
  unsigned long long* errors;
};

__host__ __device__ inline std::size_t round_bytes(int r, std::size_t max_bytes) {
  return 1 + (static_cast<std::size_t>(r) * 7919u) % max_bytes;
}

/// Every group: for each round, wait until the successor has checked the previous round, send
/// this round's bytes (from shared memory on even rounds, global memory on odd ones, at a
/// misalignment that moves with the round) with put_signal, then wait for the predecessor's
/// bytes and check every one of them at once.
template <class M>
__global__ void __launch_bounds__(1024) rounds_kernel(rounds_args a) {
  auto const made = M::make();
  if (!M::active()) return;
  extern __shared__ __align__(128) unsigned char smem[];
  using staging = small_policy::staging;
  unsigned const per_block = M::per_block();
  unsigned char* const region = smem + per_block * sizeof(staging) + M::index() * a.smem_region;
  auto const g = gpucomm::with_staging(made, reinterpret_cast<staging*>(smem)[M::index()]);
  auto const& c = a.c;
  unsigned const job = global_group<M>();
  int const me = c.my_pe(), npes = c.npes();
  int const next = (me + 1) % npes, prev = (me + npes - 1) % npes;
  unsigned const rank = gpucomm::group_rank(g), size = gpucomm::group_size(g);
  auto const data = a.dst + static_cast<std::ptrdiff_t>(job * a.stride);
  unsigned long long bad = 0;
  for (int r = 1; r <= a.rounds; ++r) {
    std::size_t const n = round_bytes(r, a.max_bytes);
    std::size_t const mis = static_cast<std::size_t>(r * 5) % 16;
    if (r > 1) (void)c.wait_until(g, a.ack_sig + job, gpucomm::cmp::ge, static_cast<signal_t>(r - 1));
    unsigned char* const src = r % 2 == 0 ? region + mis : a.src.get() + job * a.stride + mis;
    for (std::size_t k = rank; k < n; k += size)
      src[k] = pattern_byte(a.salt + static_cast<std::uint64_t>(r), me, job * 131071u + k);
    c.put_signal(g, data + static_cast<std::ptrdiff_t>(mis), static_cast<unsigned char const*>(src), n,
                 a.data_sig + job, static_cast<signal_t>(r), gpucomm::signal_op::set, next);
    (void)c.wait_until(g, a.data_sig + job, gpucomm::cmp::ge, static_cast<signal_t>(r));
    unsigned char const* const got = data.get() + mis;
    for (std::size_t k = rank; k < n; k += size)
      bad += got[k] != pattern_byte(a.salt + static_cast<std::uint64_t>(r), prev, job * 131071u + k);
    c.signal(g, a.ack_sig + job, static_cast<signal_t>(r), gpucomm::signal_op::set, prev);
  }
  report(a.errors, bad);
  c.quiet(g);
}

template <class M>
void run_rounds(unsigned grid, unsigned block, int rounds, std::size_t max_bytes, std::uint64_t salt) {
  auto& w = the_world();
  unsigned const groups = grid * M::per_block(block);
  std::size_t const stride = (max_bytes + 64 + 127) / 128 * 128;
  std::size_t const smem_region = stride;
  std::size_t const smem = M::per_block(block) * (sizeof(small_policy::staging) + smem_region);
  REQUIRE(smem <= 200 * 1024);
  auto src = w.alloc<unsigned char>(groups * stride);
  auto dst = w.alloc<unsigned char>(groups * stride);
  auto data_sig = w.alloc<signal_t>(groups);
  auto ack_sig = w.alloc<signal_t>(groups);
  auto errors = make_counters(w);
  for (int pe : w.local_pes()) {
    fill_bytes(w, pe, dst.ptr(pe).get(), poison_byte, groups * stride);
    fill_bytes(w, pe, data_sig.ptr(pe).get(), 0, groups * sizeof(signal_t));
    fill_bytes(w, pe, ack_sig.ptr(pe).get(), 0, groups * sizeof(signal_t));
  }
  auto kernel = rounds_kernel<M>;
  allow_dynamic_smem(w, kernel, smem);
  w.barrier();
  for_each_local_pe(w, [&](int pe) {
    rounds_args a{w.comm<small_policy>(pe),
                  src.ptr(pe),
                  dst.ptr(pe),
                  data_sig.ptr(pe),
                  ack_sig.ptr(pe),
                  max_bytes,
                  stride,
                  smem_region,
                  rounds,
                  salt,
                  errors.ptr(pe).get()};
    kernel<<<grid, block, smem, w.stream(pe)>>>(a);
  });
  finish(w);
  w.barrier();
  for (int q : w.local_pes()) {
    auto const sigs = download(w, q, data_sig.ptr(q), groups);
    std::size_t short_rounds = 0;
    for (signal_t const s : sigs) short_rounds += s != static_cast<signal_t>(rounds);
    INFO(M::name << ": " << groups << " groups per PE, " << rounds << " rounds of up to " << max_bytes << " B, PE "
                 << q);
    CHECK(download(w, q, errors.ptr(q), errors.size())[0] == 0);  // bytes not there when the signal was
    CHECK(short_rounds == 0);
  }
  w.barrier();
}

}  // namespace

TEST_CASE("P2PCopy: put_signal rounds, every byte checked right after the signal, every group kind",
          "[gpu][p2p][signal][order]") {
  run_rounds<mk_block>(2, 256, 300, 6000, 8000);
  run_rounds<mk_tile<32>>(2, 256, 300, 3000, 8001);  // 8 warps per CTA, each its own staging
  run_rounds<mk_tile<4>>(1, 128, 200, 1500, 8002);
  run_rounds<mk_single>(1, 32, 200, 1500, 8003);
  run_rounds<mk_pair>(1, 64, 200, 1500, 8004);
  run_rounds<mk_coalesced_even>(1, 128, 200, 2000, 8005);
  run_rounds<mk_bar64>(1, 256, 200, 3000, 8006);
}

TEST_CASE("sanitize: P2PCopy put_signal rounds", "[gpu][p2p][signal][sanitize]") {
  run_rounds<mk_block>(1, 128, 20, 3000, 8100);
  run_rounds<mk_tile<32>>(1, 64, 20, 1500, 8101);
}
