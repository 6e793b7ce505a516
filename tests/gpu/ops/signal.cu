// The op suite (every transport under test): signals: wait_until with each of the six comparisons being the one that
// releases the waiter (with values the wrong signedness or width would get wrong), the value returned to every thread
// of the group, signal / put_signal set and add from many groups of every PE onto one PE, checked exactly.
#include "common.cuh"

using namespace gpucomm::test::ops;

namespace {

using gpucomm::cmp;
using gpucomm::signal_op;

constexpr int ncases = 6;
constexpr signal_t two32 = 1ull << 32, two63 = 1ull << 63;

// Case c: the waiter waits for `*sig <cmp c> wait_value`, starting from `initial`; the signaller's
// updates pass only through values that do not satisfy it until the last, `released`.
__host__ __device__ inline signal_t case_initial(int c) {
  signal_t const v[] = {0, 5, 100, 100, two32 - 20, two63 - 20};
  return v[c];
}
__host__ __device__ inline signal_t case_wait_value(int c) {
  signal_t const v[] = {77, 5, 50, 50, two32 + 20, two63 + 20};
  return v[c];
}
__host__ __device__ inline signal_t case_released(int c) {
  signal_t const v[] = {77, 6, 49, 50, two32 + 21, two63 + 20};
  return v[c];
}
__host__ __device__ inline int case_steps(int c) {
  int const v[] = {77, 21, 51, 50, 41, 20};
  return v[c];
}
/// Update s of case c: its op and value.
__device__ inline void case_step(int c, int s, signal_op& op, signal_t& value) {
  switch (c) {
    case 0:
      op = signal_op::add;
      value = 1;
      break;  // 1, 2, ..., 77
    case 1:
      op = signal_op::set;
      value = s == 20 ? 6 : 5;
      break;  // 5, ..., 5, 6
    case 2:
      op = signal_op::set;
      value = static_cast<signal_t>(99 - s);
      break;  // 99 .. 49
    case 3:
      op = signal_op::set;
      value = static_cast<signal_t>(99 - s);
      break;  // 99 .. 50
    case 4:
      op = signal_op::add;
      value = 1;
      break;  // 2^32-19 .. 2^32+21
    default:
      op = signal_op::add;
      value = 2;
      break;  // 2^63-18 .. 2^63+20
  }
}

struct cmp_args {
  comm_t c;
  sym_ptr<signal_t> sigs;       // [ncases] words waited on here, signalled by the previous PE
  sym_ptr<std::uint64_t> data;  // [ncases] put_signal's one-element payload (at the next PE)
  std::uint64_t* src;           // local: [ncases] payload sources
  signal_t* results;            // local: [ncases] the leader's returned value
  signal_t* slots;              // local: per-group scratch for the same-value check
  unsigned long long* errors;   // local: [0] returned value wrong, [1] threads disagree
};

template <class M>
__global__ void cmp_kernel(cmp_args a) {
  auto const g = M::make();
  if (!M::active()) return;
  unsigned const gid = global_group<M>();
  bool const signaller_block = blockIdx.x == gridDim.x - 1;
  if (signaller_block) {
    if (M::index() != 0) return;
    int const next = (a.c.my_pe() + 1) % a.c.npes();
    for (int c = 0; c < ncases; ++c) {
      for (int s = 0; s < case_steps(c); ++s) {
        signal_op op{};
        signal_t value = 0;
        case_step(c, s, op, value);
        if (s % 2 == 0) {
          a.c.signal(g, a.sigs + c, value, op, next);
        } else {
          if (gpucomm::is_leader(g)) a.src[c] = static_cast<std::uint64_t>(s);
          gpucomm::group_sync(g);
          a.c.put_signal(g, a.data + c, a.src + c, 1, a.sigs + c, value, op, next);
        }
      }
    }
    return;
  }
  if (gid >= ncases) return;
  int const c = static_cast<int>(gid);
  signal_t seen;
  if constexpr (std::is_same_v<M, mk_single>) {
    // the one-thread form and the group form with gpucomm::this_thread()
    seen = c % 2 == 0 ? a.c.wait_until(a.sigs + c, static_cast<cmp>(c), case_wait_value(c))
                      : a.c.wait_until(g, a.sigs + c, static_cast<cmp>(c), case_wait_value(c));
  } else {
    seen = a.c.wait_until(g, a.sigs + c, static_cast<cmp>(c), case_wait_value(c));
  }
  report(a.errors, seen != case_released(c));
  if (!same_in_group(g, seen, a.slots + gid)) report(a.errors + 1, 1);
  if (gpucomm::is_leader(g)) a.results[c] = seen;
}

template <class M>
void run_cmp(unsigned grid, unsigned block) {
  auto& w = gpucomm::test::the_world();
  int const npes = w.npes();
  auto sigs = w.alloc<signal_t>(ncases);
  auto data = w.alloc<std::uint64_t>(ncases);
  auto src = w.alloc<std::uint64_t>(ncases);
  auto results = w.alloc<signal_t>(ncases);
  auto slots = w.alloc<signal_t>(4096);
  auto errors = make_counters(w);
  std::vector<signal_t> init(ncases);
  for (int c = 0; c < ncases; ++c) init[static_cast<std::size_t>(c)] = case_initial(c);
  for (int pe : w.local_pes()) {
    upload(w, pe, sigs.ptr(pe), init);
    upload(w, pe, results.ptr(pe), std::vector<signal_t>(ncases, 0xdeadull));
    upload(w, pe, data.ptr(pe), std::vector<std::uint64_t>(ncases, 0xbadull));
  }
  w.barrier();
  gpucomm::test::for_each_local_pe(w, [&](int pe) {
    cmp_args a{w.comm<transport_under_test>(pe),
               sigs.ptr(pe),
               data.ptr(pe),
               src.ptr(pe).get(),
               results.ptr(pe).get(),
               slots.ptr(pe).get(),
               errors.ptr(pe).get()};
    cmp_kernel<M><<<grid, block, 0, w.stream(pe)>>>(a);
  });
  gpucomm::test::finish(w);
  w.barrier();
  for (int pe : w.local_pes()) {
    auto const r = download(w, pe, results.ptr(pe), ncases);
    auto const s = download(w, pe, sigs.ptr(pe), ncases);
    auto const d = download(w, pe, data.ptr(pe), ncases);
    auto const e = download(w, pe, errors.ptr(pe), errors.size());
    for (int c = 0; c < ncases; ++c) {
      auto const i = static_cast<std::size_t>(c);
      INFO("group " << M::name << ", " << npes << " PEs, PE " << pe << ", comparison #" << c);
      CHECK(r[i] == case_released(c));
      CHECK(s[i] == case_released(c));
      CHECK(d[i] == static_cast<std::uint64_t>(case_steps(c) % 2 == 0 ? case_steps(c) - 1 : case_steps(c) - 2));
    }
    INFO("group " << M::name << ", PE " << pe);
    CHECK(e[0] == 0);  // some thread got a value other than the releasing one
    CHECK(e[1] == 0);  // threads of one group got different values
  }
  w.barrier();
}

// ---- many groups signalling one PE ----------------------------------------------------------------

constexpr int payload = 16;  // uint64 per participant's put_signal

struct storm_args {
  comm_t c;
  sym_ptr<signal_t> sigs;       // [0] add-signal sum, [1] put_signal add count, [2] set target
  sym_ptr<std::uint64_t> data;  // [participants * payload] at the target
  std::uint64_t* src;           // local [groups * payload]
  int target;
  int iters;
  std::uint64_t salt;
};

__host__ __device__ inline signal_t storm_add(unsigned p, int k) {
  return (static_cast<signal_t>(p) << 20) + static_cast<signal_t>(k) + 1;
}
__host__ __device__ inline signal_t storm_set(unsigned p, int k) { return mix(77, p, static_cast<std::uint64_t>(k)); }

template <class M>
__global__ void storm_kernel(storm_args a) {
  auto const g = M::make();
  if (!M::active()) return;
  unsigned const gid = global_group<M>();
  unsigned const p = static_cast<unsigned>(a.c.my_pe()) * groups_in_grid<M>() + gid;  // participant
  std::uint64_t* src = a.src + static_cast<std::size_t>(gid) * payload;
  for (int k = 0; k < a.iters; ++k) {
    a.c.signal(g, a.sigs + 0, storm_add(p, k), signal_op::add, a.target);
    for (unsigned i = gpucomm::group_rank(g); i < payload; i += gpucomm::group_size(g))
      src[i] = mix(a.salt + static_cast<std::uint64_t>(k), p, i);
    gpucomm::group_sync(g);
    a.c.put_signal(g, a.data + static_cast<std::ptrdiff_t>(p) * payload, src, payload, a.sigs + 1, 1, signal_op::add,
                   a.target);
    a.c.signal(g, a.sigs + 2, storm_set(p, k), signal_op::set, a.target);
  }
}

template <class M>
void run_storm(unsigned grid, unsigned block, unsigned groups_per_block, int iters) {
  auto& w = gpucomm::test::the_world();
  int const npes = w.npes();
  unsigned const ngroups = grid * groups_per_block;
  unsigned const participants = ngroups * static_cast<unsigned>(npes);
  std::uint64_t const salt = 900;
  auto sigs = w.alloc<signal_t>(3);
  auto data = w.alloc<std::uint64_t>(static_cast<std::size_t>(participants) * payload);
  auto src = w.alloc<std::uint64_t>(static_cast<std::size_t>(ngroups) * payload);
  std::vector<signal_t> const init{11, 22, 33};
  for (int pe : w.local_pes()) {
    upload(w, pe, sigs.ptr(pe), init);
    fill_bytes(w, pe, data.ptr(pe).get(), poison_byte, data.size_bytes());
  }
  for (int target = 0; target < npes; ++target) {
    w.barrier();
    gpucomm::test::for_each_local_pe(w, [&](int pe) {
      storm_args a{
          w.comm<transport_under_test>(pe), sigs.ptr(pe), data.ptr(pe), src.ptr(pe).get(), target, iters, salt};
      storm_kernel<M><<<grid, block, 0, w.stream(pe)>>>(a);
    });
    gpucomm::test::finish(w);
    w.barrier();
    if (!w.is_local(target)) continue;
    auto const s = download(w, target, sigs.ptr(target), 3);
    auto const d = download(w, target, data.ptr(target), data.size());
    signal_t sum = init[0];
    bool set_ok = false;
    std::uint64_t bad_data = 0;
    for (unsigned p = 0; p < participants; ++p) {
      for (int k = 0; k < iters; ++k) {
        sum += storm_add(p, k);
        set_ok = set_ok || s[2] == storm_set(p, k);
      }
      for (int i = 0; i < payload; ++i)
        bad_data += d[static_cast<std::size_t>(p) * payload + static_cast<std::size_t>(i)] !=
                    mix(salt + static_cast<std::uint64_t>(iters - 1), p, static_cast<std::uint64_t>(i));
    }
    INFO("group " << M::name << ", " << npes << " PEs, target PE " << target << ", " << participants << " groups x "
                  << iters << " iterations");
    CHECK(s[0] == sum);
    CHECK(s[1] == init[1] + static_cast<signal_t>(participants) * static_cast<signal_t>(iters));
    CHECK(set_ok);  // the set word holds one of the values set
    CHECK(bad_data == 0);
    // the next target starts from the same initial words
    upload(w, target, sigs.ptr(target), init);
    fill_bytes(w, target, data.ptr(target).get(), poison_byte, data.size_bytes());
  }
  w.barrier();
}

}  // namespace

TEST_CASE("wait_until: all six comparisons, this_thread() and the one-thread form", "[gpu][ops][signal][sanitize]") {
  run_cmp<mk_single>(2, 32);
}
TEST_CASE("wait_until: all six comparisons, thread_block_tile<32>", "[gpu][ops][signal]") {
  run_cmp<mk_tile<32>>(4, 64);
}
TEST_CASE("wait_until: all six comparisons, thread_block", "[gpu][ops][signal][sanitize]") {
  run_cmp<mk_block>(7, 128);
}
TEST_CASE("wait_until: all six comparisons, user lane_pair", "[gpu][ops][signal]") { run_cmp<mk_pair>(2, 32); }
TEST_CASE("wait_until: all six comparisons, coalesced_group of even lanes", "[gpu][ops][signal]") {
  run_cmp<mk_coalesced_even>(4, 64);
}
TEST_CASE("wait_until: all six comparisons, user group without shfl", "[gpu][ops][signal]") {
  run_cmp<mk_bar64>(4, 128);
}
TEST_CASE("signal storm: many warps of every PE signal one PE", "[gpu][ops][signal]") {
  run_storm<mk_tile<32>>(8, 256, 8, 20);
}
TEST_CASE("signal storm: many single threads of every PE signal one PE", "[gpu][ops][signal]") {
  run_storm<mk_single>(4, 128, 128, 4);
}
TEST_CASE("signal storm: coalesced groups by lane % 3", "[gpu][ops][signal]") {
  run_storm<mk_coalesced_mod3>(4, 128, 12, 10);
}
