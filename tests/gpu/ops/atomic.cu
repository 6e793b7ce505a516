// The op suite (every transport under test): atomics under contention: many groups of every PE hammer words at one PE,
// final values checked exactly and every fetched value checked (fetch_add results form a permutation, swap results
// chain, bitwise ops on disjoint bits see their own bit exactly, a compare_swap lock with fences protects a counter),
// group-form fetches return one value to every thread.
#include <type_traits>

#include "common.cuh"

using namespace gpucomm::test::ops;

namespace {

enum aop : int { a_fetch_add_one, a_add, a_or_and, a_xor, a_swap, a_cas_lock, a_own_word };
char const* aop_name(int op) {
  static char const* const n[] = {"fetch_add(1)",
                                  "add",
                                  "fetch_or/fetch_and",
                                  "fetch_xor",
                                  "swap",
                                  "compare_swap lock",
                                  "set/fetch/compare_swap on own word"};
  return n[op];
}

template <class T>
struct atomic_args {
  comm_t c;
  sym_ptr<T> words;
  int op;
  int target;
  int iters;
  T* out;                      // local [groups * iters] fetched values
  T* slots;                    // local [groups] scratch for same_in_group
  unsigned long long* errors;  // local: [0] threads of a group got different values, [1] wrong fetched value
};

template <class T>
__host__ __device__ T add_value(unsigned p, int k) {
  return static_cast<T>(1 + (p * 7u + static_cast<unsigned>(k)) % 5u);
}
template <class T>
__host__ __device__ T unique_value(unsigned p, int k) {
  return static_cast<T>((static_cast<std::uint64_t>(p) << 10) + static_cast<std::uint64_t>(k) + 1);
}
template <class T>
__host__ __device__ T own_value(unsigned p, int k) {
  return static_cast<T>(mix(55, p, static_cast<std::uint64_t>(k)) | 1u);
}
template <class T>
__host__ __device__ T own_value2(unsigned p, int k) {
  return static_cast<T>(own_value<T>(p, k) ^ static_cast<T>(0x5A));
}
template <class T>
__host__ __device__ T xor_initial() {
  return static_cast<T>(0xA5C3A5C3A5C3A5C3ull);
}
template <class T>
inline constexpr unsigned bits_of_v = 8 * sizeof(T);
template <class T>
__host__ __device__ T bit_of(unsigned p) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(U{1} << (p % bits_of_v<T>)));
}

template <class T, class M>
__global__ void atomic_kernel(atomic_args<T> a) {
  auto const g = M::make();
  if (!M::active()) return;
  unsigned const gid = global_group<M>();
  unsigned const ngroups = groups_in_grid<M>();
  unsigned const p = static_cast<unsigned>(a.c.my_pe()) * ngroups + gid;
  unsigned const P = static_cast<unsigned>(a.c.npes()) * ngroups;
  int const t = a.target;
  T* const slot = a.slots + gid;
  T* const out = a.out + static_cast<std::size_t>(gid) * static_cast<std::size_t>(a.iters);
  bool const leader = gpucomm::is_leader(g);
  unsigned long long disagree = 0, wrong = 0;
  auto fetched = [&](T v) {
    disagree += !same_in_group(g, v, slot);
    return v;
  };
  if (a.op == a_fetch_add_one) {
    for (int k = 0; k < a.iters; ++k) {
      T const v = fetched(a.c.fetch_add(g, a.words, T(1), t));
      if (leader) out[k] = v;
    }
  } else if (a.op == a_add) {
    for (int k = 0; k < a.iters; ++k) a.c.add(g, a.words, add_value<T>(p, k), t);
  }
  if constexpr (gpucomm::atomic_integer<T>) {
    if (a.op == a_or_and) {
      auto const word = a.words + static_cast<std::ptrdiff_t>(p / bits_of_v<T>);
      T const bit = bit_of<T>(p);
      for (int k = 0; k < a.iters; ++k) {
        wrong += (fetched(a.c.fetch_or(g, word, bit, t)) & bit) != 0;
        wrong += (fetched(a.c.fetch_and(g, word, static_cast<T>(~bit), t)) & bit) == 0;
      }
      wrong += (fetched(a.c.fetch_or(g, word, bit, t)) & bit) != 0;
    } else if (a.op == a_xor) {
      auto const word = a.words + static_cast<std::ptrdiff_t>(p / bits_of_v<T>);
      T const bit = bit_of<T>(p);
      bool const initially = (xor_initial<T>() & bit) != 0;
      int const toggles = a.iters + static_cast<int>(p & 1u);
      for (int k = 0; k < toggles; ++k) {
        bool const seen = (fetched(a.c.fetch_xor(g, word, bit, t)) & bit) != 0;
        wrong += seen != (initially != ((k & 1) != 0));
      }
    } else if (a.op == a_swap) {
      for (int k = 0; k < a.iters; ++k) {
        T const v = fetched(a.c.swap(g, a.words, unique_value<T>(p, k), t));
        if (leader) out[k] = v;
      }
    } else if (a.op == a_cas_lock) {
      T const me = static_cast<T>(p + 1);
      for (int k = 0; k < a.iters; ++k) {
        for (;;) {
          T const old = fetched(a.c.compare_swap(g, a.words, T(0), me, t));
          if (old == T(0)) break;
          wrong += old < T(1) || old > static_cast<T>(P);  // a failing compare_swap returns the holder
        }
        a.c.fence(g);
        T const count = fetched(a.c.fetch(g, a.words + 1, t));
        a.c.set(g, a.words + 1, static_cast<T>(count + 1), t);
        wrong += fetched(a.c.fetch(g, a.words, t)) != me;  // still ours
        a.c.fence(g);
        a.c.set(g, a.words, T(0), t);
      }
    } else if (a.op == a_own_word) {
      auto const word = a.words + static_cast<std::ptrdiff_t>(p);
      for (int k = 0; k < a.iters; ++k) {
        T const v = own_value<T>(p, k), v2 = own_value2<T>(p, k);
        a.c.set(g, word, v, t);
        wrong += fetched(a.c.fetch(g, word, t)) != v;
        wrong += fetched(a.c.compare_swap(g, word, static_cast<T>(v ^ T(2)), T(0), t)) != v;  // fails, returns v
        wrong += fetched(a.c.fetch(g, word, t)) != v;                                         // unchanged
        wrong += fetched(a.c.compare_swap(g, word, v, v2, t)) != v;                           // succeeds
        wrong += fetched(a.c.fetch(g, word, t)) != v2;
      }
    }
  }
  report(a.errors, disagree);
  report(a.errors + 1, wrong);
}

template <class T>
std::string show(T v) {
  std::ostringstream s;
  if constexpr (sizeof(T) == 1)
    s << static_cast<int>(v);
  else
    s << v;
  return s.str();
}

/// Runs op with group kind M on type T; `gpb`: groups per block (must match M and block).
template <class T, class M>
void run_atomic(int op, unsigned grid, unsigned block, unsigned gpb, int iters, int target_hint) {
  auto& w = gpucomm::test::the_world();
  int const npes = w.npes();
  int const target = ((target_hint % npes) + npes) % npes;
  unsigned const ngroups = grid * gpb;
  unsigned const P = ngroups * static_cast<unsigned>(npes);
  std::size_t const nwords = std::max<std::size_t>(P + 2, 64);
  auto words = w.alloc<T>(nwords);
  auto out = w.alloc<T>(static_cast<std::size_t>(ngroups) * static_cast<std::size_t>(iters));
  auto slots = w.alloc<T>(ngroups);
  auto errors = make_counters(w);
  std::vector<T> init(nwords, T(7));
  T const base =
      std::is_floating_point_v<T> ? T(-1000)
      : std::is_signed_v<T>
          ? static_cast<T>(sizeof(T) == 4 ? -1000 : 0x7FFFFFFF - 500)
          : static_cast<T>(sizeof(T) == 4 ? 0xFFFFFFFFu - 300u : 0xFFFFFFFFull - 300u);  // crosses 0 / 2^31 / 2^32
  if (op == a_fetch_add_one || op == a_add || op == a_swap) init[0] = base;
  if (op == a_or_and) std::fill(init.begin(), init.end(), T(0));
  if (op == a_xor) std::fill(init.begin(), init.end(), xor_initial<T>());
  if (op == a_cas_lock) init[0] = init[1] = T(0);
  for (int pe : w.local_pes()) upload(w, pe, words.ptr(pe), init);
  w.barrier();
  gpucomm::test::for_each_local_pe(w, [&](int pe) {
    atomic_args<T> a{w.comm<transport_under_test>(pe),
                     words.ptr(pe),
                     op,
                     target,
                     iters,
                     out.ptr(pe).get(),
                     slots.ptr(pe).get(),
                     errors.ptr(pe).get()};
    atomic_kernel<T, M><<<grid, block, 0, w.stream(pe)>>>(a);
  });
  gpucomm::test::finish(w);
  w.barrier();
  std::map<int, std::vector<T>> mine;
  for (int pe : w.local_pes()) mine[pe] = download(w, pe, out.ptr(pe), out.size());
  auto const all_out = gather_pes(w, mine, out.size());  // collective, every process
  std::size_t const total = static_cast<std::size_t>(P) * static_cast<std::size_t>(iters);
  for (int pe : w.local_pes()) {
    auto const e = download(w, pe, errors.ptr(pe), errors.size());
    auto const wv = download(w, pe, words.ptr(pe), nwords);
    INFO(aop_name(op) << " on " << sizeof(T) << "-byte "
                      << (std::is_floating_point_v<T> ? "float"
                          : std::is_signed_v<T>       ? "signed"
                                                      : "unsigned")
                      << ", group " << M::name << ", " << npes << " PEs, " << P << " groups x " << iters
                      << " iterations at PE " << target << "; checking PE " << pe);
    CHECK(e[0] == 0);  // group-form fetch gave threads of one group different values
    CHECK(e[1] == 0);  // a fetched value contradicts the op's semantics
    if (pe != target) {
      std::size_t untouched_bad = 0;
      for (std::size_t i = 0; i < nwords; ++i) untouched_bad += wv[i] != init[i];
      CHECK(untouched_bad == 0);  // atomics aimed at another PE changed this one
      continue;
    }
    std::vector<T> expect = init;
    if (op == a_fetch_add_one) {
      std::vector<T> got = all_out, want;
      for (std::size_t j = 0; j < total; ++j) want.push_back(static_cast<T>(base + static_cast<T>(j)));
      std::sort(got.begin(), got.end());
      std::sort(want.begin(), want.end());
      std::size_t bad = 0;
      for (std::size_t j = 0; j < total; ++j) bad += got[j] != want[j];
      INFO("first sorted fetched value " << show(got.front()) << ", expected " << show(want.front()));
      CHECK(bad == 0);  // fetched values are not a permutation of base .. base + total - 1
      expect[0] = static_cast<T>(base + static_cast<T>(total));
    } else if (op == a_add) {
      T sum = base;
      for (unsigned p = 0; p < P; ++p)
        for (int k = 0; k < iters; ++k) sum = static_cast<T>(sum + add_value<T>(p, k));
      expect[0] = sum;
    } else if constexpr (gpucomm::atomic_integer<T>) {
      if (op == a_or_and) {
        for (unsigned p = 0; p < P; ++p)
          expect[p / bits_of_v<T>] = static_cast<T>(expect[p / bits_of_v<T>] | bit_of<T>(p));
      } else if (op == a_xor) {
        for (unsigned p = 0; p < P; ++p)
          if (((iters + static_cast<int>(p & 1u)) & 1) != 0)
            expect[p / bits_of_v<T>] = static_cast<T>(expect[p / bits_of_v<T>] ^ bit_of<T>(p));
      } else if (op == a_swap) {
        std::vector<T> got = all_out, want{base};
        got.push_back(wv[0]);
        for (unsigned p = 0; p < P; ++p)
          for (int k = 0; k < iters; ++k) want.push_back(unique_value<T>(p, k));
        std::sort(got.begin(), got.end());
        std::sort(want.begin(), want.end());
        std::size_t bad = 0;
        for (std::size_t j = 0; j < want.size(); ++j) bad += got[j] != want[j];
        CHECK(bad ==
              0);  // swapped-out values plus the final value are not exactly the initial plus every swapped-in value
        expect[0] = wv[0];
      } else if (op == a_cas_lock) {
        expect[0] = T(0);
        expect[1] = static_cast<T>(total);
      } else if (op == a_own_word) {
        for (unsigned p = 0; p < P; ++p) expect[p] = own_value2<T>(p, iters - 1);
      }
    }
    std::size_t bad = 0, first = nwords;
    for (std::size_t i = 0; i < nwords; ++i) {
      if (wv[i] != expect[i]) {
        ++bad;
        if (first == nwords) first = i;
      }
    }
    INFO("first wrong word " << first << ": expected " << (first < nwords ? show(expect[first]) : "") << " got "
                             << (first < nwords ? show(wv[first]) : ""));
    CHECK(bad == 0);
  }
  w.barrier();
}

template <class T>
void integer_ops_tile32_and_single(int iters_scale) {
  for (int op : {a_fetch_add_one, a_add, a_or_and, a_xor, a_swap, a_own_word}) {
    run_atomic<T, mk_tile<32>>(op, 4, 256, 8, 10 * iters_scale, op + 1);
    run_atomic<T, mk_single>(op, 2, 128, 128, 2 * iters_scale, op);
  }
}

}  // namespace

TEST_CASE("atomics: all integer ops on uint64, contended", "[gpu][ops][atomic]") {
  integer_ops_tile32_and_single<std::uint64_t>(4);
}
TEST_CASE("atomics: all integer ops on int64, contended", "[gpu][ops][atomic]") {
  integer_ops_tile32_and_single<std::int64_t>(2);
}
TEST_CASE("atomics: all integer ops on uint32, contended", "[gpu][ops][atomic]") {
  integer_ops_tile32_and_single<std::uint32_t>(2);
}
TEST_CASE("atomics: all integer ops on int32, contended", "[gpu][ops][atomic]") {
  integer_ops_tile32_and_single<std::int32_t>(4);
}

// Transports without float add (IBGDAPost, route over it, ProxyQueue, MinimalStore) reject the calls at compile time.
GPUCOMM_TEST_CASE_IF(gpucomm::can_float_add<gpucomm::test::transport_under_test>,
                     "atomics: float and double fetch_add / add, contended", "[gpu][ops][atomic]") {
  run_atomic<float, mk_tile<32>>(a_fetch_add_one, 4, 256, 8, 40, 0);
  run_atomic<float, mk_tile<32>>(a_add, 4, 256, 8, 40, 1);
  run_atomic<float, mk_block>(a_fetch_add_one, 8, 128, 1, 50, 2);
  run_atomic<double, mk_tile<32>>(a_fetch_add_one, 4, 256, 8, 40, 3);
  run_atomic<double, mk_tile<32>>(a_add, 4, 256, 8, 40, 0);
  run_atomic<double, mk_block>(a_add, 8, 128, 1, 50, 1);
}

TEST_CASE("atomics: compare_swap lock with fences protects a counter", "[gpu][ops][atomic][order]") {
  run_atomic<std::uint64_t, mk_tile<32>>(a_cas_lock, 2, 64, 2, 25, 0);
  run_atomic<std::int32_t, mk_tile<32>>(a_cas_lock, 2, 64, 2, 25, 1);
  run_atomic<std::uint32_t, mk_single>(a_cas_lock, 1, 32, 32, 4, 2);
  run_atomic<std::int64_t, mk_single>(a_cas_lock, 1, 32, 32, 4, 3);
  run_atomic<std::uint64_t, mk_block>(a_cas_lock, 4, 128, 1, 20, 1);
}

TEST_CASE("atomics: every op with block, tile<4>, lane_pair and partial-warp groups", "[gpu][ops][atomic]") {
  for (int op : {a_fetch_add_one, a_add, a_or_and, a_xor, a_swap, a_cas_lock, a_own_word}) {
    int const it = op == a_cas_lock ? 3 : 20;
    run_atomic<std::uint64_t, mk_block>(op, 8, 128, 1, it, op);
    run_atomic<std::uint64_t, mk_tile<4>>(op, 2, 64, 16, it / 2, op + 1);
    run_atomic<std::uint64_t, mk_pair>(op, 2, 64, 32, it / 2, op + 2);
    run_atomic<std::uint64_t, mk_coalesced_even>(op, 4, 128, 4, it, op + 3);
    run_atomic<std::int32_t, mk_block>(op, 8, 128, 1, it, op);
  }
}

TEST_CASE("sanitize: atomics, small", "[gpu][ops][atomic][sanitize]") {
  run_atomic<std::uint64_t, mk_block>(a_fetch_add_one, 2, 64, 1, 4, 0);
  run_atomic<std::int32_t, mk_tile<32>>(a_or_and, 1, 64, 2, 4, 1);
  run_atomic<std::uint64_t, mk_tile<32>>(a_cas_lock, 1, 64, 2, 3, 0);
}
