// The op suite (every transport under test): ordering: data before signal (big put_signal / put_signal_nbi from many
// groups, receivers that see the signal check every word at once), fence (put_nbi data; fence; flag by put / atomic set
// / signal: a receiver that sees the flag sees the data), quiet (put_nbi data; quiet; flag), over several rounds with
// data changing every round and acknowledgements so no round overwrites data a receiver is still checking; flush
// (put_nbi; flush; the source rewritten at once: the target still receives what was there at the put).
#include "common.cuh"

using namespace gpucomm::test::ops;

namespace {

using gpucomm::cmp;
using gpucomm::signal_op;

__host__ __device__ inline std::uint32_t dbs_value(std::uint64_t salt, int round, int pe, std::uint64_t i) {
  return static_cast<std::uint32_t>(mix(salt + static_cast<std::uint64_t>(round), static_cast<std::uint64_t>(pe), i));
}

struct dbs_args {
  comm_t c;
  sym_ptr<std::uint32_t> data;  // [words] at the receiver, written by the previous PE
  sym_ptr<signal_t> sig;        // [sender groups] at the receiver
  sym_ptr<signal_t> ack;        // [1] at the sender, one add per receiver block per round
  std::uint32_t* src;           // local [words]
  std::size_t words;
  int rounds;
  int sender_blocks;
  bool nbi;
  bool per_group_set;  // true: sender group s sets sig[s] = round + 1; false: each adds 1 to sig[0]
  std::uint64_t salt;
  unsigned long long* errors;  // local: [0] data seen wrong after the signal, [1] wrong signal value
};

template <class M>
__global__ void __launch_bounds__(256) dbs_kernel(dbs_args a) {
  int const me = a.c.my_pe();
  int const npes = a.c.npes();
  if (static_cast<int>(blockIdx.x) < a.sender_blocks) {
    auto const g = M::make();
    if (!M::active()) return;
    unsigned const gid = global_group<M>();
    unsigned const ngs = static_cast<unsigned>(a.sender_blocks) * M::per_block();
    std::size_t const begin = a.words * gid / ngs, end = a.words * (gid + 1) / ngs;
    unsigned const receivers = gridDim.x - static_cast<unsigned>(a.sender_blocks);
    int const next = (me + 1) % npes;
    for (int r = 0; r < a.rounds; ++r) {
      if (r > 0) {
        signal_t const seen = a.c.wait_until(g, a.ack, cmp::ge, static_cast<signal_t>(r) * receivers);
        report(a.errors + 1, seen != static_cast<signal_t>(r) * receivers);
      }
      for (std::size_t i = begin + gpucomm::group_rank(g); i < end; i += gpucomm::group_size(g))
        a.src[i] = dbs_value(a.salt, r, me, i);
      gpucomm::group_sync(g);
      auto const sig = a.per_group_set ? a.sig + gid : a.sig;
      signal_t const value = a.per_group_set ? static_cast<signal_t>(r + 1) : 1;
      signal_op const op = a.per_group_set ? signal_op::set : signal_op::add;
      auto const dst = a.data + static_cast<std::ptrdiff_t>(begin);
      if (a.nbi) {
        a.c.put_signal_nbi(g, dst, a.src + begin, end - begin, sig, value, op, next);
        a.c.quiet(g);  // src is rewritten next round
      } else {
        a.c.put_signal(g, dst, a.src + begin, end - begin, sig, value, op, next);
      }
    }
    return;
  }
  // receiver blocks
  auto const block = cg::this_thread_block();
  unsigned const b = blockIdx.x - static_cast<unsigned>(a.sender_blocks);
  unsigned const receivers = gridDim.x - static_cast<unsigned>(a.sender_blocks);
  unsigned const ngs = static_cast<unsigned>(a.sender_blocks) * M::per_block();
  int const prev = (me + npes - 1) % npes;
  for (int r = 0; r < a.rounds; ++r) {
    if (a.per_group_set) {
      for (unsigned s = 0; s < ngs; ++s) {
        signal_t const seen = a.c.wait_until(block, a.sig + s, cmp::ge, static_cast<signal_t>(r + 1));
        report(a.errors + 1, seen != static_cast<signal_t>(r + 1));
      }
    } else {
      signal_t const want = static_cast<signal_t>(ngs) * static_cast<signal_t>(r + 1);
      signal_t const seen = a.c.wait_until(block, a.sig, cmp::eq, want);
      report(a.errors + 1, seen != want);
    }
    // Everything the signals released must be visible now: check this block's share (rotating,
    // so each block checks every part over the rounds) of every word.
    std::size_t const part = (b + static_cast<unsigned>(r)) % receivers;
    std::size_t const begin = a.words * part / receivers, end = a.words * (part + 1) / receivers;
    unsigned long long bad = 0;
    for (std::size_t i = begin + block.thread_rank(); i < end; i += block.num_threads())
      bad += a.data[static_cast<std::ptrdiff_t>(i)] != dbs_value(a.salt, r, prev, i);
    report(a.errors, bad);
    a.c.signal(block, a.ack, 1, signal_op::add, prev);  // after every thread's reads (group sync)
  }
}

template <class M>
void run_dbs(unsigned sender_blocks, unsigned receiver_blocks, unsigned block, unsigned groups_per_block,
             std::size_t words, int rounds, bool nbi, bool per_group_set, std::uint64_t salt) {
  auto& w = gpucomm::test::the_world();
  int const npes = w.npes();
  unsigned const ngs = sender_blocks * groups_per_block;
  auto data = w.alloc<std::uint32_t>(words);
  auto sig = w.alloc<signal_t>(ngs);
  auto ack = w.alloc<signal_t>(1);
  auto src = w.alloc<std::uint32_t>(words);
  auto errors = make_counters(w);
  for (int pe : w.local_pes()) {
    fill_bytes(w, pe, data.ptr(pe).get(), poison_byte, data.size_bytes());
    fill_bytes(w, pe, sig.ptr(pe).get(), 0, sig.size_bytes());
    fill_bytes(w, pe, ack.ptr(pe).get(), 0, ack.size_bytes());
  }
  w.barrier();
  gpucomm::test::for_each_local_pe(w, [&](int pe) {
    dbs_args a{
        w.comm<transport_under_test>(pe), data.ptr(pe), sig.ptr(pe),   ack.ptr(pe), src.ptr(pe).get(),   words, rounds,
        static_cast<int>(sender_blocks),  nbi,          per_group_set, salt,        errors.ptr(pe).get()};
    dbs_kernel<M><<<sender_blocks + receiver_blocks, block, 0, w.stream(pe)>>>(a);
  });
  gpucomm::test::finish(w);
  w.barrier();
  for (int pe : w.local_pes()) {
    int const prev = (pe + npes - 1) % npes;
    auto const d = download(w, pe, data.ptr(pe), words);
    auto const s = download(w, pe, sig.ptr(pe), ngs);
    auto const k = download(w, pe, ack.ptr(pe), 1);
    auto const e = download(w, pe, errors.ptr(pe), errors.size());
    std::uint64_t bad = 0, bad_sig = 0;
    for (std::size_t i = 0; i < words; ++i) bad += d[i] != dbs_value(salt, rounds - 1, prev, i);
    if (per_group_set) {
      for (auto v : s) bad_sig += v != static_cast<signal_t>(rounds);
    } else {
      bad_sig = s[0] != static_cast<signal_t>(ngs) * static_cast<signal_t>(rounds);
    }
    INFO("sender group " << M::name << ", " << npes << " PEs, PE " << pe << ", " << ngs << " sender groups, "
                         << words * 4 << " bytes per round, " << (nbi ? "put_signal_nbi" : "put_signal") << ", "
                         << (per_group_set ? "set per group" : "add to one word"));
    CHECK(e[0] == 0);  // data not visible to a receiver that saw the signal
    CHECK(e[1] == 0);  // a wait returned a value other than the releasing one
    CHECK(bad == 0);
    CHECK(bad_sig == 0);
    CHECK(k[0] == static_cast<signal_t>(receiver_blocks) * static_cast<signal_t>(rounds));
  }
  w.barrier();
}

// ---- fence and quiet ----------------------------------------------------------------------------

enum fq_mode : int { mode_fence, mode_quiet };

__host__ __device__ inline std::uint64_t fq_value(std::uint64_t salt, int round, int from, std::uint64_t i) {
  return mix(salt + static_cast<std::uint64_t>(round) * 131, static_cast<std::uint64_t>(from), i);
}

struct fq_args {
  comm_t c;
  sym_ptr<std::uint64_t> A;  // [npes * L]: region q written by PE q
  sym_ptr<signal_t> flags;   // [npes]: flag q written by PE q
  std::uint64_t* stage;      // local [npes * L]
  signal_t* flag_src;        // local [1]
  std::size_t L;
  int rounds;
  int mode;
  std::uint64_t salt;
  unsigned long long* errors;  // local: [0] data not there when the flag was, [1] wrong flag value
};

/// One group per PE (group 0 of block 0).
template <class M>
__global__ void fq_kernel(fq_args a) {
  auto const g = M::make();
  if (!M::active() || blockIdx.x != 0 || M::index() != 0) return;
  int const me = a.c.my_pe();
  int const npes = a.c.npes();
  unsigned const rank = gpucomm::group_rank(g), size = gpucomm::group_size(g);
  std::size_t const L = a.L;
  for (int r = 0; r < a.rounds; ++r) {
    for (std::size_t i = rank; i < L * static_cast<std::size_t>(npes); i += size)
      a.stage[i] = fq_value(a.salt, r, me, i);
    if (gpucomm::is_leader(g)) *a.flag_src = static_cast<signal_t>(r + 1);
    gpucomm::group_sync(g);
    for (int p = 0; p < npes; ++p)
      a.c.put_nbi(g, a.A + static_cast<std::ptrdiff_t>(me) * static_cast<std::ptrdiff_t>(L),
                  a.stage + static_cast<std::size_t>(p) * L, L, p);
    if (a.mode == mode_fence)
      a.c.fence(g);
    else
      a.c.quiet(g);
    int const kind = r % 3;
    for (int p = 0; p < npes; ++p) {
      auto const flag = a.flags + me;
      if (kind == 0)
        a.c.put_nbi(g, flag, static_cast<signal_t const*>(a.flag_src), 1, p);
      else if (kind == 1)
        a.c.set(g, flag, static_cast<signal_t>(r + 1), p);
      else
        a.c.signal(g, flag, static_cast<signal_t>(r + 1), signal_op::set, p);
    }
    unsigned long long bad = 0;
    for (int q = 0; q < npes; ++q) {
      signal_t const seen = a.c.wait_until(g, a.flags + q, cmp::eq, static_cast<signal_t>(r + 1));
      report(a.errors + 1, seen != static_cast<signal_t>(r + 1));
      for (std::size_t i = rank; i < L; i += size)
        bad += a.A[static_cast<std::ptrdiff_t>(static_cast<std::size_t>(q) * L + i)] !=
               fq_value(a.salt, r, q, static_cast<std::size_t>(me) * L + i);
    }
    report(a.errors, bad);
    a.c.barrier(g);  // nobody starts the next round while a peer still checks this one
  }
}

template <class M>
void run_fq(unsigned block, std::size_t L, int rounds, int mode, std::uint64_t salt) {
  auto& w = gpucomm::test::the_world();
  int const npes = w.npes();
  std::size_t const n = L * static_cast<std::size_t>(npes);
  auto A = w.alloc<std::uint64_t>(n);
  auto flags = w.alloc<signal_t>(static_cast<std::size_t>(npes));
  auto stage = w.alloc<std::uint64_t>(n);
  auto flag_src = w.alloc<signal_t>(1);
  auto errors = make_counters(w);
  for (int pe : w.local_pes()) {
    fill_bytes(w, pe, A.ptr(pe).get(), poison_byte, A.size_bytes());
    fill_bytes(w, pe, flags.ptr(pe).get(), 0, flags.size_bytes());
  }
  w.barrier();
  gpucomm::test::for_each_local_pe(w, [&](int pe) {
    fq_args a{w.comm<transport_under_test>(pe),
              A.ptr(pe),
              flags.ptr(pe),
              stage.ptr(pe).get(),
              flag_src.ptr(pe).get(),
              L,
              rounds,
              mode,
              salt,
              errors.ptr(pe).get()};
    fq_kernel<M><<<1, block, 0, w.stream(pe)>>>(a);
  });
  gpucomm::test::finish(w);
  w.barrier();
  for (int pe : w.local_pes()) {
    auto const d = download(w, pe, A.ptr(pe), n);
    auto const f = download(w, pe, flags.ptr(pe), static_cast<std::size_t>(npes));
    auto const e = download(w, pe, errors.ptr(pe), errors.size());
    std::uint64_t bad = 0, bad_flags = 0;
    for (int q = 0; q < npes; ++q) {
      for (std::size_t i = 0; i < L; ++i)
        bad += d[static_cast<std::size_t>(q) * L + i] !=
               fq_value(salt, rounds - 1, q, static_cast<std::size_t>(pe) * L + i);
      bad_flags += f[static_cast<std::size_t>(q)] != static_cast<signal_t>(rounds);
    }
    INFO("group " << M::name << ", " << npes << " PEs, PE " << pe << ", " << (mode == mode_fence ? "fence" : "quiet")
                  << ", " << L * 8 << " bytes per peer per round");
    CHECK(e[0] == 0);  // a receiver saw the flag but not the data put before the fence / quiet
    CHECK(e[1] == 0);
    CHECK(bad == 0);
    CHECK(bad_flags == 0);
  }
  w.barrier();
}

__host__ __device__ inline std::uint32_t flush_value(std::uint64_t salt, int round, int pe, std::size_t i) {
  return static_cast<std::uint32_t>(mix(salt + static_cast<std::uint64_t>(round), static_cast<std::uint64_t>(pe), i));
}

struct flush_args {
  comm_t c;
  sym_ptr<std::uint32_t> dst;  // [rounds * words] at the next PE: round r's copy of this PE's source
  std::uint32_t* src;          // local [words] in global memory; null: in the block's shared memory
  std::size_t words;
  int rounds;
  bool flush;  // false: a group sync stands where flush belongs (the control)
  std::uint64_t salt;
};

/// One group per PE (group 0 of block 0): each round it fills the source, put_nbi's it to the next
/// PE, flushes, and at once rewrites the source in the reverse order of the fill (so each thread
/// rewrites words another thread sent). The target must hold every round's first contents.
template <class M>
__global__ void flush_kernel(flush_args a) {
  extern __shared__ std::uint32_t tile[];
  auto const g = M::make();
  if (!M::active() || blockIdx.x != 0 || M::index() != 0) return;
  std::uint32_t* const src = a.src != nullptr ? a.src : tile;
  int const me = a.c.my_pe();
  int const next = (me + 1) % a.c.npes();
  unsigned const rank = gpucomm::group_rank(g), size = gpucomm::group_size(g);
  for (int r = 0; r < a.rounds; ++r) {
    for (std::size_t i = rank; i < a.words; i += size) src[i] = flush_value(a.salt, r, me, i);
    gpucomm::group_sync(g);
    a.c.put_nbi(g, a.dst + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * a.words), src, a.words, next);
    if (a.flush)
      a.c.flush(g);
    else
      gpucomm::group_sync(g);
    for (std::size_t i = rank; i < a.words; i += size)
      src[a.words - 1 - i] = ~flush_value(a.salt, r, me, a.words - 1 - i);
    gpucomm::group_sync(g);
  }
  a.c.quiet(g);
}

/// Runs flush_kernel on every local PE of w; returns, per local PE, the words that differ from
/// what the previous PE's source held at its puts.
template <class M>
std::vector<std::uint64_t> run_flush(gpucomm::world& w, unsigned block, std::size_t words, int rounds, bool shared_src,
                                     bool flush, std::uint64_t salt) {
  int const npes = w.npes();
  std::size_t const n = words * static_cast<std::size_t>(rounds);
  auto dst = w.alloc<std::uint32_t>(n);
  auto src = w.alloc<std::uint32_t>(words);
  for (int pe : w.local_pes()) fill_bytes(w, pe, dst.ptr(pe).get(), poison_byte, dst.size_bytes());
  w.barrier();
  std::size_t const smem = shared_src ? words * sizeof(std::uint32_t) : 0;
  gpucomm::test::for_each_local_pe(w, [&](int pe) {
    flush_args a{w.comm<transport_under_test>(pe),
                 dst.ptr(pe),
                 shared_src ? nullptr : src.ptr(pe).get(),
                 words,
                 rounds,
                 flush,
                 salt};
    flush_kernel<M><<<1, block, smem, w.stream(pe)>>>(a);
  });
  gpucomm::test::finish(w);
  w.barrier();
  std::vector<std::uint64_t> bad;
  for (int pe : w.local_pes()) {
    int const prev = (pe + npes - 1) % npes;
    auto const d = download(w, pe, dst.ptr(pe), n);
    std::uint64_t wrong = 0;
    for (int r = 0; r < rounds; ++r)
      for (std::size_t i = 0; i < words; ++i)
        wrong += d[static_cast<std::size_t>(r) * words + i] != flush_value(salt, r, prev, i);
    bad.push_back(wrong);
  }
  w.barrier();
  return bad;
}

/// A world whose agents read sources late: the NIC model handles each doorbell 20 us late and the
/// proxy waits 20 us before each command, so a source rewritten right after an unflushed put_nbi
/// is what they send.
inline std::unique_ptr<gpucomm::world> make_slow_world() {
  auto w = gpucomm::test::make_world();
  gpucomm::nic_model_faults f;
  f.doorbell_delay_us = 20;
  gpucomm::ibgda_options io;
  io.nic = gpucomm::test::test_nic_choice();
  io.model_faults = f;
  w->configure<gpucomm::IBGDAPost>(io);
  gpucomm::proxy_options po = gpucomm::test::proxy_test_options();
  po.model_faults = f;
  po.issue_delay_us = 20;
  w->configure<gpucomm::ProxyQueue>(po);
  return w;
}

/// Whether every put to the next PE is carried out by an agent that reads the source after the
/// put returns (the NIC or the proxy), so that without flush the rewritten source is what arrives.
inline constexpr bool agent_reads_sources = std::is_same_v<transport_under_test, gpucomm::IBGDAPost> ||
                                            std::is_same_v<transport_under_test, gpucomm::ProxyQueue>;
}  // namespace

TEST_CASE("data before signal: 8 MiB put_signal from many blocks, add", "[gpu][ops][order][signal]") {
  run_dbs<mk_block>(8, 4, 256, 1, std::size_t{2} << 20, 6, false, false, 1001);
}
TEST_CASE("data before signal: put_signal_nbi from many warps, set per warp", "[gpu][ops][order][signal]") {
  run_dbs<mk_tile<32>>(4, 4, 256, 8, std::size_t{2} << 20, 6, true, true, 1002);
}
TEST_CASE("data before signal: put_signal from many warps, add", "[gpu][ops][order][signal]") {
  run_dbs<mk_tile<32>>(4, 2, 256, 8, std::size_t{1} << 20, 6, false, false, 1003);
}
TEST_CASE("data before signal: single threads", "[gpu][ops][order][signal]") {
  run_dbs<mk_single>(1, 2, 64, 64, std::size_t{64} << 10, 6, false, false, 1004);
  run_dbs<mk_single>(1, 2, 64, 64, std::size_t{64} << 10, 6, true, true, 1005);
}
TEST_CASE("data before signal: user lane_pair and no-shfl groups", "[gpu][ops][order][signal]") {
  run_dbs<mk_pair>(1, 2, 64, 32, std::size_t{128} << 10, 4, true, false, 1006);
  run_dbs<mk_bar64>(2, 2, 256, 4, std::size_t{512} << 10, 4, false, true, 1007);
}
TEST_CASE("data before signal: small, thread_block_tile<32>", "[gpu][ops][order][signal][sanitize]") {
  run_dbs<mk_tile<32>>(1, 1, 64, 2, 4096, 3, false, false, 1008);
}

TEST_CASE("fence orders put_nbi data before the flag", "[gpu][ops][order]") {
  run_fq<mk_block>(256, 16384, 30, mode_fence, 1101);
  run_fq<mk_tile<32>>(32, 4096, 30, mode_fence, 1102);
  run_fq<mk_single>(32, 512, 30, mode_fence, 1103);
  run_fq<mk_tile<4>>(32, 1024, 30, mode_fence, 1104);
}
TEST_CASE("quiet completes put_nbi data before the flag", "[gpu][ops][order]") {
  run_fq<mk_block>(256, 16384, 30, mode_quiet, 1201);
  run_fq<mk_tile<32>>(32, 4096, 30, mode_quiet, 1202);
  run_fq<mk_single>(32, 512, 30, mode_quiet, 1203);
  run_fq<mk_tile<4>>(32, 1024, 30, mode_quiet, 1204);
}
TEST_CASE("sanitize: fence and quiet, small", "[gpu][ops][order][sanitize]") {
  run_fq<mk_tile<32>>(32, 64, 3, mode_fence, 1301);
  run_fq<mk_block>(64, 64, 3, mode_quiet, 1302);
}

TEST_CASE("flush: the source may be rewritten at once, the target gets what was sent", "[gpu][ops][order][flush]") {
  auto const w = make_slow_world();
  int const rounds = std::max(2, 12 / gpucomm::test::model_slowdown);
  auto const check = [&](char const* what, std::vector<std::uint64_t> const& bad) {
    for (std::size_t i = 0; i < bad.size(); ++i) {
      INFO(what << ", " << w->npes() << " PEs, local PE " << w->local_pes()[i]);
      CHECK(bad[i] == 0);
    }
  };
  check("block, global source", run_flush<mk_block>(*w, 256, 16384, rounds, false, true, 1401));
  check("warp, global source", run_flush<mk_tile<32>>(*w, 32, 4096, rounds, false, true, 1402));
  check("single thread, global source", run_flush<mk_single>(*w, 32, 256, rounds, false, true, 1403));
  if constexpr (!gpucomm::test::proxy_network_backend) {  // its network backend: global memory only
    check("block, shared-memory source", run_flush<mk_block>(*w, 256, 8192, rounds, true, true, 1404));
    check("warp, shared-memory source", run_flush<mk_tile<32>>(*w, 32, 1024, rounds, true, true, 1405));
  }
  if constexpr (agent_reads_sources) {
    // The control: the same program with a group sync instead of flush must see rewritten words
    // arrive, or the checks above could not fail.
    auto const bad = run_flush<mk_block>(*w, 256, 16384, rounds, false, false, 1406);
    for (std::size_t i = 0; i < bad.size(); ++i) {
      INFO("control without flush, local PE " << w->local_pes()[i]);
      CHECK(bad[i] > 0);
    }
  }
}

TEST_CASE("sanitize: flush, small", "[gpu][ops][order][flush][sanitize]") {
  auto& w = gpucomm::test::the_world();
  for (std::uint64_t const bad : run_flush<mk_tile<32>>(w, 32, 256, 2, false, true, 1501)) CHECK(bad == 0);
  if constexpr (!gpucomm::test::proxy_network_backend)
    for (std::uint64_t const bad : run_flush<mk_block>(w, 64, 256, 2, true, true, 1502)) CHECK(bad == 0);
}
