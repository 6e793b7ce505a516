#pragma once
// The differential soak (issue #19), host half: random programs of one-sided operations that are
// valid by construction, seeded and reproducible, and the host reference that says what every
// byte, counter and signal word of every PE holds afterwards and what every fetching operation and
// wait may return. Plain C++20, no CUDA: tests/gpu/ops/soak.cu runs the programs on the transport
// under test, tests/host/soak_program_test.cpp tests this file on the host.
//
// A program runs on each PE as one CTA of `lanes` calling groups ("lanes": the warps of the CTA,
// or the whole CTA). Each lane interprets its own list of ops; an op is executed by the lane's group
// or by the lane's leader alone (grp::one). The program is a sequence of epochs, each ended on every
// lane of every PE by a barrier op that the whole CTA executes: quiet for what the lane issued, then
// barrier(block, team) on the world, or on the PE's team of a partition (halves, parity). Team
// epochs come in runs on one partition; a world barrier follows every run.
//
// Validity (what the OpenSHMEM-style contract of comm.cuh defines), per epoch:
//   - a byte of a PE's data arena is written by at most one op, except in an overwrite unit: put A,
//     then fence or quiet by the same lane and group kind, then put B overlapping A at the same PE
//     (B lands after A);
//   - a byte is read (put source, get source) only if nobody writes it in the epoch, except by a
//     forward: an op after a wait_until on the signal that the writer's put_signal (or put, fence,
//     signal) updates, in the waiting lane, with the waiting group kind;
//   - each signal word is updated in an epoch by one set or by adds of one sign (or by nobody),
//     and a wait waits for a value that only the last update reaches, so it is satisfiable and
//     returns exactly the word's end-of-epoch value;
//   - before a wait, the lane quiets what it issued since its last quiet (a signal sent without
//     quiet is not guaranteed delivered, and the lane would not reach a later quiet while it waits);
//   - ops are appended to the lanes in one global order and a wait depends only on ops earlier in
//     it, so no set of waits can wait on each other;
//   - each counter word is used in an epoch in one mode: count (fetch_add, add of one increment d,
//     fetch), bits (fetch_and / fetch_or / fetch_xor, one bit each), swap (unique values), cas
//     (compare_swap with the word's known value, unique new values) or set (one set, fetches).
// The reference applies the data ops in the global order (every ordering that matters agrees with
// it), and checks fetched values by property: count-mode fetch_adds distinct multiples of d below
// the total, bits-mode fetches exact on their own bit and on untouched bits, swap results a
// permutation of the initial value and the swapped-in ones less the final value, exactly one
// compare_swap winner, set-mode fetches the old or the new value. Swap and cas epochs leave a final
// value the reference learns from the results; later epochs build on it.

#include <gpucomm/ops.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace gpucomm::test::soak {

// ---- vocabulary -------------------------------------------------------------------------------------

enum class op_kind : std::uint8_t {
  put,
  put_nbi,
  get,
  get_nbi,
  put_signal,
  put_signal_nbi,
  signal,    ///< signal(sig[index] at pe, value, aux = signal_op)
  flag_set,  ///< the atomic set(sig[index] at pe, value): a flag on a signal word
  wait,      ///< wait_until(sig[index], aux = cmp, value) on this PE; result: the value returned
  atomic,    ///< aux = atom on c64 (elem 8) or c32 (elem 4) [index] at pe
  fence,
  quiet,
  barrier,  ///< the whole CTA: quiet, then barrier(block, team of aux = scope)
};
enum class atom : std::uint8_t { fetch_add, add, fetch_and, fetch_or, fetch_xor, swap, compare_swap, fetch, set };
enum class grp : std::uint8_t { lane, one };  ///< the lane's group, or its leader alone
enum class lane_kind : std::uint8_t { warp, block };
enum class scope : std::uint8_t { world, halves, parity };
enum class amode : std::uint8_t { count, bits, swap, cas, set };

constexpr std::uint32_t no_result = 0xffffffffu;
constexpr std::uint8_t flag_forward = 1;  ///< src was written this epoch; read after a wait

/// One operation, as the device interprets it (trivially copyable, uploaded as an array).
struct op {
  op_kind kind = op_kind::quiet;
  grp group = grp::lane;
  std::uint8_t elem = 1;  ///< element bytes: 1, 2, 4, 8 (atomics: 4 or 8)
  std::uint8_t aux = 0;   ///< signal_op, cmp, atom or scope, by kind
  std::uint8_t flags = 0;
  std::uint8_t pad[3] = {};
  std::int32_t pe = 0;               ///< the peer: target of a put, source of a get, owner of the word
  std::uint32_t n = 0;               ///< elements
  std::uint32_t index = 0;           ///< signal or counter word
  std::uint32_t result = no_result;  ///< result slot at the issuing PE
  std::uint64_t dst = 0, src = 0;    ///< byte offsets into the data arena (dst where written)
  std::uint64_t value = 0;           ///< signal value, wait value, atomic operand
  std::uint64_t compare = 0;         ///< compare_swap's compare; bits ops: the op's bit
  std::uint64_t bytes() const { return std::uint64_t{n} * elem; }
};
static_assert(std::is_trivially_copyable_v<op> && sizeof(op) == 56);

inline bool is_put(op_kind k) {
  return k == op_kind::put || k == op_kind::put_nbi || k == op_kind::put_signal || k == op_kind::put_signal_nbi;
}
inline bool is_get(op_kind k) { return k == op_kind::get || k == op_kind::get_nbi; }
inline bool is_fetching(atom a) { return a != atom::add && a != atom::set; }

inline char const* kind_name(op_kind k) {
  static char const* const n[] = {"put",    "put_nbi",  "get",        "get_nbi", "put_signal", "put_signal_nbi",
                                  "signal", "flag_set", "wait_until", "atomic",  "fence",      "quiet",
                                  "barrier"};
  return n[static_cast<int>(k)];
}
inline char const* atom_name(atom a) {
  static char const* const n[] = {"fetch_add", "add",          "fetch_and", "fetch_or", "fetch_xor",
                                  "swap",      "compare_swap", "fetch",     "set"};
  return n[static_cast<int>(a)];
}

/// What a program may use (the transport under test decides) and how big it is.
struct params {
  int npes = 1;
  std::uint64_t seed = 1;
  std::uint64_t ops = 1000;             ///< at least this many ops (as executors count them)
  std::uint64_t max_bytes = 64 * 1024;  ///< largest put / get
  std::uint64_t data_bytes = 1u << 20;  ///< data arena per PE
  std::uint32_t n64 = 32, n32 = 32, nsig = 128;
  unsigned warp_lanes = 4;                                 ///< lanes of a warp-lane CTA
  unsigned elems = 1u << 1 | 1u << 2 | 1u << 4 | 1u << 8;  ///< element sizes of puts and gets (bit e: e bytes)
  bool get = true, atomics = true, signals = true, teams = true;
};

/// Where an op sits: PE, lane, position in the lane, epoch.
struct op_at {
  int pe = 0;
  int lane = 0;
  std::uint32_t index = 0;
  std::uint32_t epoch = 0;
};

/// The ops of one counter word in one epoch.
struct atomic_group {
  std::uint32_t epoch = 0;
  int pe = 0;
  std::uint8_t width = 8;
  std::uint32_t word = 0;
  amode mode = amode::count;
  std::uint64_t d = 0;             ///< count mode: the increment
  std::vector<std::uint32_t> ops;  ///< ids (positions in program::order)
};

struct program {
  params p;
  std::vector<lane_kind> kinds;                    ///< [pe]
  std::vector<std::vector<std::vector<op>>> code;  ///< [pe][lane]
  std::vector<op_at> order;                        ///< every op, in the global order; an op's id is its position
  std::vector<scope> epochs;
  std::vector<atomic_group> groups;     ///< in epoch order
  std::vector<std::uint32_t> nresults;  ///< [pe]
  std::uint64_t counted = 0;            ///< ops as executors count them (a barrier once per PE)

  op const& at(std::uint32_t id) const {
    op_at const& a = order[id];
    return code[static_cast<std::size_t>(a.pe)][static_cast<std::size_t>(a.lane)][a.index];
  }
  int lanes(int pe) const { return static_cast<int>(code[static_cast<std::size_t>(pe)].size()); }
};

// ---- initial contents (any process recomputes them for any PE) --------------------------------------

inline std::uint64_t hash64(std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  std::uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 1) * 0xC2B2AE3D27D4EB4Full ^ (c + 1) * 0x165667B19E3779F9ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 32;
  return x;
}
/// Byte k of PE pe's data arena before the program: differs per PE and offset, so a byte that a
/// put or get should have replaced and did not is caught (up to chance 1/256 per byte).
inline std::uint8_t initial_byte(std::uint64_t seed, int pe, std::uint64_t k) {
  return static_cast<std::uint8_t>(hash64(seed ^ 0xDA7A, static_cast<std::uint64_t>(pe), k >> 3) >> ((k & 7) * 8));
}
inline std::uint64_t initial_c64(std::uint64_t seed, int pe, std::uint32_t i) {
  return hash64(seed ^ 0xC64, static_cast<std::uint64_t>(pe), i);
}
inline std::uint32_t initial_c32(std::uint64_t seed, int pe, std::uint32_t i) {
  return static_cast<std::uint32_t>(hash64(seed ^ 0xC32, static_cast<std::uint64_t>(pe), i));
}
/// Signals start in [2^40, 2^41): adds of either sign never wrap within a program.
inline signal_t initial_sig(std::uint64_t seed, int pe, std::uint32_t i) {
  return (signal_t{1} << 40) + (hash64(seed ^ 0x516, static_cast<std::uint64_t>(pe), i) >> 24);
}

inline std::vector<std::uint8_t> initial_data(std::uint64_t seed, int pe, std::uint64_t bytes) {
  std::vector<std::uint8_t> v(bytes);
  for (std::uint64_t k = 0; k < bytes; ++k) v[k] = initial_byte(seed, pe, k);
  return v;
}

/// The team of a partition that `pe` belongs to: {start, stride, size}.
struct team_shape {
  int start = 0, stride = 1, size = 0;
  bool contains(int pe) const {
    int const o = pe - start;
    return o >= 0 && o % stride == 0 && o / stride < size;
  }
};
inline team_shape team_of(scope s, int npes, int pe) {
  if (s == scope::world) return {0, 1, npes};
  if (s == scope::halves) {
    int const h = (npes + 1) / 2;
    return pe < h ? team_shape{0, 1, h} : team_shape{h, 1, npes - h};
  }
  return pe % 2 == 0 ? team_shape{0, 2, (npes + 1) / 2} : team_shape{1, 2, npes / 2};
}

// ---- the generator ------------------------------------------------------------------------------------

namespace detail {

struct interval {
  std::uint64_t begin, end;
  bool write;
};

class builder {
 public:
  explicit builder(params const& p) : rng_(p.seed * 0x9E3779B97F4A7C15ull + 0x50A1) {
    prog_.p = p;
    int const n = p.npes;
    prog_.kinds.resize(static_cast<std::size_t>(n));
    prog_.code.resize(static_cast<std::size_t>(n));
    prog_.nresults.assign(static_cast<std::size_t>(n), 0);
    for (int pe = 0; pe < n; ++pe) {
      prog_.kinds[static_cast<std::size_t>(pe)] = rnd(2) == 0 ? lane_kind::warp : lane_kind::block;
      unsigned const lanes = prog_.kinds[static_cast<std::size_t>(pe)] == lane_kind::warp ? p.warp_lanes : 1;
      prog_.code[static_cast<std::size_t>(pe)].resize(lanes);
      sigv_.emplace_back();
      c64_.emplace_back();
      c32_.emplace_back();
      for (std::uint32_t i = 0; i < p.nsig; ++i) sigv_.back().push_back(initial_sig(p.seed, pe, i));
      for (std::uint32_t i = 0; i < p.n64; ++i) c64_.back().push_back({initial_c64(p.seed, pe, i), true});
      for (std::uint32_t i = 0; i < p.n32; ++i) c32_.back().push_back({initial_c32(p.seed, pe, i), true});
    }
    pending_.resize(static_cast<std::size_t>(n));
    for (int pe = 0; pe < n; ++pe) pending_[static_cast<std::size_t>(pe)].assign(lanes(pe), {false, false});
  }

  program build() {
    params const& p = prog_.p;
    while (prog_.counted < p.ops) {
      scope s = scope::world;
      int run = 1;
      if (p.teams && p.npes >= 2 && rnd(10) < 4) {
        s = rnd(2) == 0 ? scope::halves : scope::parity;
        run = 1 + static_cast<int>(rnd(3));
      }
      for (int r = 0; r < run; ++r) {
        epoch(s);
        end_epoch(s);
      }
      if (s != scope::world) end_epoch_barrier_only(scope::world);
    }
    return std::move(prog_);
  }

 private:
  struct array2 {
    bool lane, one;
  };
  struct word {
    std::uint64_t value;
    bool known;
  };
  enum class sig_use : std::uint8_t { none, chain, adds_up, adds_down, set };
  struct group_state {
    std::size_t index;  // into prog_.groups
    std::uint32_t next_bit = 0;
    std::uint32_t adds = 0;
    bool set_done = false;
  };

  std::uint64_t rnd(std::uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  bool coin(unsigned percent) { return rnd(100) < percent; }
  std::size_t lanes(int pe) const { return prog_.code[static_cast<std::size_t>(pe)].size(); }

  std::uint32_t epoch_id() const { return static_cast<std::uint32_t>(prog_.epochs.size() - 1); }

  /// Appends o to lane `lane` of `pe` (in the global order); returns its id.
  std::uint32_t emit(int pe, int lane, op o) {
    auto& list = prog_.code[static_cast<std::size_t>(pe)][static_cast<std::size_t>(lane)];
    if (o.kind == op_kind::quiet) {
      (o.group == grp::lane ? pending_[pe][lane].lane : pending_[pe][lane].one) = false;
    } else if (o.kind != op_kind::wait && o.kind != op_kind::barrier && o.kind != op_kind::fence) {
      (o.group == grp::lane ? pending_[pe][lane].lane : pending_[pe][lane].one) = true;
    }
    prog_.order.push_back({pe, lane, static_cast<std::uint32_t>(list.size()), epoch_id()});
    list.push_back(o);
    if (o.kind != op_kind::barrier || lane == 0) ++prog_.counted;
    return static_cast<std::uint32_t>(prog_.order.size() - 1);
  }

  void quiet_pending(int pe, int lane) {
    auto const p = pending_[pe][lane];
    if (p.one) emit(pe, lane, make(op_kind::quiet, grp::one));
    if (p.lane) emit(pe, lane, make(op_kind::quiet, grp::lane));
  }

  static op make(op_kind k, grp g) {
    op o;
    o.kind = k;
    o.group = g;
    return o;
  }

  grp any_group() { return rnd(3) == 0 ? grp::one : grp::lane; }
  int any_lane(int pe) { return static_cast<int>(rnd(lanes(pe))); }
  int peer_in(int pe) {
    team_shape const t = team_of(cur_, prog_.p.npes, pe);
    return t.start + t.stride * static_cast<int>(rnd(static_cast<std::uint64_t>(t.size)));
  }
  std::uint8_t any_elem() {
    std::uint8_t e[4] = {};
    unsigned n = 0;
    for (std::uint8_t size : {1, 2, 4, 8})
      if ((prog_.p.elems & (1u << size)) != 0) e[n++] = size;
    return n == 0 ? 1 : e[rnd(n)];
  }

  std::uint64_t any_bytes() {
    std::uint64_t const max = prog_.p.max_bytes;
    switch (rnd(10)) {
      case 0:
        return 0;
      case 1:
      case 2:
        return 1 + rnd(64);
      case 3:
      case 4:
      case 5:
        return std::min<std::uint64_t>(max, 64 + rnd(4032));
      case 6:
      case 7:
      case 8:
        return std::min<std::uint64_t>(max, 4096 + rnd(61440));
      default:
        return max > 65536 ? 65536 + rnd(max - 65536 + 1) : max;
    }
  }

  bool overlaps(int pe, std::uint64_t b, std::uint64_t e, bool writes_only) const {
    if (b == e) return false;
    for (auto const& iv : marks_[static_cast<std::size_t>(pe)])
      if ((!writes_only || iv.write) && b < iv.end && iv.begin < e) return true;
    return false;
  }
  void mark(int pe, std::uint64_t b, std::uint64_t e, bool write) {
    if (b != e) marks_[static_cast<std::size_t>(pe)].push_back({b, e, write});
  }

  /// An offset for `bytes` bytes of elements of `elem` bytes: aligned to elem, anywhere mod 16.
  std::uint64_t place(std::uint64_t bytes, std::uint8_t elem) {
    std::uint64_t const room = prog_.p.data_bytes - bytes;
    std::uint64_t off = rnd(room + 1) / 16 * 16 + rnd(16) / elem * elem;
    while (off + bytes > prog_.p.data_bytes) off -= 16;
    return off;
  }
  /// A region at pe nobody writes this epoch (a source): marked read.
  bool take_read(int pe, std::uint64_t bytes, std::uint8_t elem, std::uint64_t& off) {
    return take(pe, bytes, elem, off, false);
  }
  /// A region at pe nobody reads or writes this epoch: marked written.
  bool take_write(int pe, std::uint64_t bytes, std::uint8_t elem, std::uint64_t& off) {
    return take(pe, bytes, elem, off, true);
  }
  /// Up to 8 tries at a region that no access conflicting with `write` touches this epoch; marks it.
  bool take(int pe, std::uint64_t bytes, std::uint8_t elem, std::uint64_t& off, bool write) {
    for (int t = 0; t < 8; ++t) {
      off = place(bytes, elem);
      if (!overlaps(pe, off, off + bytes, !write)) {
        mark(pe, off, off + bytes, write);
        return true;
      }
    }
    return false;
  }
  void unmark_last(int pe) { marks_[static_cast<std::size_t>(pe)].pop_back(); }

  // ---- epochs ----

  void epoch(scope s) {
    cur_ = s;
    prog_.epochs.push_back(s);
    marks_.assign(static_cast<std::size_t>(prog_.p.npes), {});
    sig_use_.assign(static_cast<std::size_t>(prog_.p.npes), std::vector<sig_use>(prog_.p.nsig, sig_use::none));
    atomics_.clear();
    std::uint64_t lanes_total = 0;
    for (int pe = 0; pe < prog_.p.npes; ++pe) lanes_total += lanes(pe);
    std::uint64_t const units = lanes_total * (1 + rnd(6));
    for (std::uint64_t u = 0; u < units; ++u) {
      int const a = static_cast<int>(rnd(static_cast<std::uint64_t>(prog_.p.npes)));
      int const lane = any_lane(a);
      unsigned const r = static_cast<unsigned>(rnd(100));
      if (r < 35)
        copy(a, lane);
      else if (r < 55 && prog_.p.signals)
        chain(a, lane);
      else if (r < 65)
        overwrite(a, lane);
      else if (r < 85 && prog_.p.atomics)
        atomic(a, lane);
      else if (r < 92 && prog_.p.signals)
        lone_signal(a, lane);
      else
        emit(a, lane, make(coin(50) ? op_kind::fence : op_kind::quiet, any_group()));
    }
  }

  void end_epoch(scope s) { end_epoch_barrier_only(s); }
  void end_epoch_barrier_only(scope s) {
    for (int pe = 0; pe < prog_.p.npes; ++pe) {
      for (int lane = 0; lane < static_cast<int>(lanes(pe)); ++lane) {
        op b = make(op_kind::barrier, grp::lane);
        b.aux = static_cast<std::uint8_t>(s);
        emit(pe, lane, b);
        pending_[pe][lane] = {false, false};  // the barrier quiets the lane first
      }
    }
  }

  // ---- units ----

  void copy(int a, int lane) {
    op o = make(op_kind::put, any_group());
    int const t = peer_in(a);
    o.pe = t;
    o.elem = any_elem();
    o.n = static_cast<std::uint32_t>(any_bytes() / o.elem);
    std::uint64_t const bytes = o.bytes();
    unsigned const r = static_cast<unsigned>(rnd(prog_.p.get ? 6 : 4));
    bool const get = r >= 4;
    if (get) {
      o.kind = r == 4 ? op_kind::get : op_kind::get_nbi;
      if (!take_read(t, bytes, o.elem, o.src)) return;
      if (!take_write(a, bytes, o.elem, o.dst)) return unmark_last(t);
    } else {
      o.kind = r == 0   ? op_kind::put
               : r == 1 ? op_kind::put_nbi
               : r == 2 ? op_kind::put_signal
                        : op_kind::put_signal_nbi;
      if ((o.kind == op_kind::put_signal || o.kind == op_kind::put_signal_nbi) && !prog_.p.signals)
        o.kind = op_kind::put;
      if (!take_read(a, bytes, o.elem, o.src)) return;
      if (!take_write(t, bytes, o.elem, o.dst)) return unmark_last(a);
      if (o.kind == op_kind::put_signal || o.kind == op_kind::put_signal_nbi) {
        if (!free_signal(t, o)) o.kind = op_kind::put;
      }
    }
    emit(a, lane, o);
  }

  /// A signal update on a word of pe that no chain uses this epoch: sets o.index, aux, value.
  bool free_signal(int pe, op& o) {
    auto& use = sig_use_[static_cast<std::size_t>(pe)];
    for (int t = 0; t < 4; ++t) {
      auto const i = static_cast<std::uint32_t>(rnd(prog_.p.nsig));
      sig_use& u = use[i];
      if (u == sig_use::chain || u == sig_use::set) continue;
      if (u == sig_use::none) u = coin(30) ? sig_use::set : coin(50) ? sig_use::adds_up : sig_use::adds_down;
      o.index = i;
      if (u == sig_use::set) {
        o.aux = static_cast<std::uint8_t>(signal_op::set);
        o.value = (signal_t{1} << 40) + (rng_() >> 24);
        sigv_[pe][i] = o.value;
      } else {
        o.aux = static_cast<std::uint8_t>(signal_op::add);
        signal_t const d = 1 + rnd(1 << 20);
        o.value = u == sig_use::adds_up ? d : ~d + 1;
        sigv_[pe][i] += o.value;
      }
      return true;
    }
    return false;
  }

  void lone_signal(int a, int lane) {
    op o = make(op_kind::signal, any_group());
    o.pe = peer_in(a);
    if (!free_signal(o.pe, o)) return;
    emit(a, lane, o);
  }

  /// put A; fence or quiet; put B over part of A, at one PE from one lane: B lands last.
  void overwrite(int a, int lane) {
    int const t = peer_in(a);
    grp const g = any_group();
    std::uint8_t const e = any_elem();
    std::uint64_t const n1 =
        std::min<std::uint64_t>(std::max<std::uint64_t>(1, any_bytes() / e), prog_.p.max_bytes / e);
    std::uint64_t const shift = rnd(n1) * e;
    std::uint64_t const n2 = 1 + rnd(n1);
    std::uint64_t const span = std::max(n1 * e, shift + n2 * e);
    if (span > prog_.p.data_bytes / 4) return;
    std::uint64_t d = 0, s1 = 0, s2 = 0;
    if (!take_write(t, span, e, d)) return;
    if (!take_read(a, n1 * e, e, s1)) return unmark_last(t);
    if (!take_read(a, n2 * e, e, s2)) {
      unmark_last(a);
      return unmark_last(t);
    }
    op A = make(coin(50) ? op_kind::put : op_kind::put_nbi, g);
    A.pe = t;
    A.elem = e;
    A.n = static_cast<std::uint32_t>(n1);
    A.src = s1;
    A.dst = d;
    emit(a, lane, A);
    bool const fence = coin(60);
    emit(a, lane, make(fence ? op_kind::fence : op_kind::quiet, g));
    op B = A;
    B.kind = coin(50) ? op_kind::put : op_kind::put_nbi;
    B.group = fence ? g : any_group();
    B.n = static_cast<std::uint32_t>(n2);
    B.src = s2;
    B.dst = d + shift;
    emit(a, lane, B);
  }

  /// Senders put data into regions of b and update one signal word of b; a lane of b waits for the
  /// last update and forwards every region to some PE.
  void chain(int b, int wlane) {
    std::uint32_t sig = 0;
    bool found = false;
    for (int t = 0; t < 4 && !found; ++t) {
      sig = static_cast<std::uint32_t>(rnd(prog_.p.nsig));
      found = sig_use_[static_cast<std::size_t>(b)][sig] == sig_use::none;
    }
    if (!found) return;
    unsigned const kind = static_cast<unsigned>(rnd(3));  // 0: one set, 1: adds up, 2: adds down
    int const senders = kind == 0 ? 1 : 1 + static_cast<int>(rnd(3));
    signal_t const base = sigv_[b][sig];
    signal_t total = 0;
    std::vector<std::uint64_t> regions;
    std::vector<std::uint64_t> sizes;
    std::vector<std::uint8_t> elems;
    signal_t set_value = 0;
    if (kind == 0) {
      do {
        set_value = (signal_t{1} << 40) + (rng_() >> 24);
      } while (set_value == base);
    }
    sig_use_[static_cast<std::size_t>(b)][sig] = sig_use::chain;
    for (int s = 0; s < senders; ++s) {
      int const a = peer_in(b);
      int const lane = any_lane(a);
      grp const g = any_group();
      std::uint8_t const e = any_elem();
      std::uint64_t const bytes = any_bytes() / e * e;
      std::uint64_t src = 0, dst = 0;
      if (!take_read(a, bytes, e, src)) continue;
      if (!take_write(b, bytes, e, dst)) {
        unmark_last(a);
        continue;
      }
      signal_t const d = 1 + rnd(1 << 20);
      signal_t const value = kind == 0 ? set_value : kind == 1 ? d : ~d + 1;
      auto const sop = kind == 0 ? signal_op::set : signal_op::add;
      unsigned const variant = static_cast<unsigned>(rnd(kind == 0 ? 5 : 4));
      op data = make(op_kind::put_signal, g);
      data.pe = b;
      data.elem = e;
      data.n = static_cast<std::uint32_t>(bytes / e);
      data.src = src;
      data.dst = dst;
      data.index = sig;
      data.aux = static_cast<std::uint8_t>(sop);
      data.value = value;
      if (variant <= 1) {
        data.kind = variant == 0 ? op_kind::put_signal : op_kind::put_signal_nbi;
        emit(a, lane, data);
      } else {
        // put (or put_nbi), then fence or quiet, then the signal (or the atomic set of a flag).
        data.kind = coin(50) ? op_kind::put : op_kind::put_nbi;
        emit(a, lane, data);
        emit(a, lane, make(variant == 3 ? op_kind::quiet : op_kind::fence, g));
        op s_op = data;
        s_op.kind = variant == 4 ? op_kind::flag_set : op_kind::signal;
        s_op.n = 0;
        emit(a, lane, s_op);
      }
      total += value;
      regions.push_back(dst);
      sizes.push_back(bytes);
      elems.push_back(e);
    }
    if (regions.empty()) {
      sig_use_[static_cast<std::size_t>(b)][sig] = sig_use::none;
      return;
    }
    signal_t const final_value = kind == 0 ? set_value : base + total;
    sigv_[b][sig] = final_value;
    // The comparison: true at the final value, false at the base and at every partial update.
    cmp c = cmp::eq;
    signal_t v = final_value;
    bool const one = regions.size() == 1;
    switch (rnd(4)) {
      case 0:
        break;
      case 1:
        if (one) {
          c = cmp::ne;
          v = base;
        }
        break;
      default: {
        bool const up = final_value > base;
        bool const strict = rnd(2) == 0;
        if (up) {
          c = strict ? cmp::gt : cmp::ge;
          v = strict ? final_value - 1 : final_value;
        } else {
          c = strict ? cmp::lt : cmp::le;
          v = strict ? final_value + 1 : final_value;
        }
      }
    }
    grp const wg = any_group();
    quiet_pending(b, wlane);
    op w = make(op_kind::wait, wg);
    w.pe = b;
    w.index = sig;
    w.aux = static_cast<std::uint8_t>(c);
    w.value = v;
    w.result = prog_.nresults[static_cast<std::size_t>(b)]++;
    emit(b, wlane, w);
    for (std::size_t i = 0; i < regions.size(); ++i) {
      int const to = peer_in(b);
      std::uint64_t dst = 0;
      if (!take_write(to, sizes[i], elems[i], dst)) continue;
      op f = make(coin(50) ? op_kind::put : op_kind::put_nbi, wg);
      f.flags = flag_forward;
      f.pe = to;
      f.elem = elems[i];
      f.n = static_cast<std::uint32_t>(sizes[i] / elems[i]);
      f.src = regions[i];
      f.dst = dst;
      emit(b, wlane, f);
    }
  }

  void atomic(int a, int lane) {
    int const t = peer_in(a);
    std::uint8_t const width = coin(50) ? 8 : 4;
    std::uint32_t const nwords = width == 8 ? prog_.p.n64 : prog_.p.n32;
    auto const w = static_cast<std::uint32_t>(rnd(nwords));
    auto& words = width == 8 ? c64_[static_cast<std::size_t>(t)] : c32_[static_cast<std::size_t>(t)];
    std::uint64_t const mask = width == 8 ? ~std::uint64_t{0} : 0xffffffffull;
    auto const key = std::make_tuple(t, width, w);
    auto it = atomics_.find(key);
    if (it == atomics_.end()) {
      atomic_group gr;
      gr.epoch = epoch_id();
      gr.pe = t;
      gr.width = width;
      gr.word = w;
      unsigned const r = static_cast<unsigned>(rnd(words[w].known ? 5 : 4));
      gr.mode = r == 0 ? amode::count : r == 1 ? amode::bits : r == 2 ? amode::swap : r == 3 ? amode::set : amode::cas;
      gr.d = 1 + rnd(1 << 16);
      prog_.groups.push_back(gr);
      it = atomics_.emplace(key, group_state{prog_.groups.size() - 1}).first;
    }
    group_state& gs = it->second;
    atomic_group& gr = prog_.groups[gs.index];
    op o = make(op_kind::atomic, any_group());
    o.pe = t;
    o.elem = width;
    o.index = w;
    atom k = atom::fetch;
    switch (gr.mode) {
      case amode::count: {
        if (gs.adds >= 1000) return;
        unsigned const r = static_cast<unsigned>(rnd(5));
        k = r < 3 ? atom::fetch_add : r == 3 ? atom::add : atom::fetch;
        o.value = gr.d;
        if (k != atom::fetch) {
          ++gs.adds;
          words[w].value = (words[w].value + gr.d) & mask;
        }
        break;
      }
      case amode::bits: {
        if (gs.next_bit >= width * 8u) return;
        std::uint64_t const bit = std::uint64_t{1} << gs.next_bit++;
        unsigned const r = static_cast<unsigned>(rnd(3));
        k = r == 0 ? atom::fetch_and : r == 1 ? atom::fetch_or : atom::fetch_xor;
        o.value = (k == atom::fetch_and ? ~bit : bit) & mask;
        o.compare = bit;
        if (k == atom::fetch_and) words[w].value &= ~bit;
        if (k == atom::fetch_or) words[w].value |= bit;
        if (k == atom::fetch_xor) words[w].value ^= bit;
        break;
      }
      case amode::swap:
        k = atom::swap;
        o.value = hash64(prog_.p.seed, prog_.order.size(), 0x5A) & mask;
        words[w].known = false;
        break;
      case amode::cas:
        k = atom::compare_swap;
        o.compare = words[w].value;
        do {
          o.value = rng_() & mask;
        } while (o.value == o.compare);
        words[w].known = false;
        break;
      case amode::set:
        k = gs.set_done ? atom::fetch : atom::set;
        if (!gs.set_done) {
          o.value = rng_() & mask;
          words[w].value = o.value;
          words[w].known = true;
          gs.set_done = true;
        }
        break;
    }
    // A cas epoch's new value is known only from the results: the word is unknown afterwards
    // (swap likewise); set makes it known again.
    o.aux = static_cast<std::uint8_t>(k);
    if (is_fetching(k)) o.result = prog_.nresults[static_cast<std::size_t>(a)]++;
    gr.ops.push_back(emit(a, lane, o));
  }

  std::mt19937_64 rng_;
  program prog_;
  scope cur_ = scope::world;
  std::vector<std::vector<array2>> pending_;  // [pe][lane]: ops issued since the lane's last quiet
  std::vector<std::vector<signal_t>> sigv_;
  std::vector<std::vector<word>> c64_, c32_;
  std::vector<std::vector<interval>> marks_;                                     // this epoch, [pe]
  std::vector<std::vector<sig_use>> sig_use_;                                    // this epoch, [pe][sig]
  std::map<std::tuple<int, std::uint8_t, std::uint32_t>, group_state> atomics_;  // this epoch
};

}  // namespace detail

/// A random valid program for p (deterministic in p).
inline program generate(params const& p) { return detail::builder(p).build(); }

// ---- the reference ------------------------------------------------------------------------------------

/// What every PE holds after the program, and what the fetched values and waits got wrong.
struct expected {
  std::vector<std::vector<std::uint8_t>> data;  ///< [pe]
  std::vector<std::vector<std::uint64_t>> c64;
  std::vector<std::vector<std::uint32_t>> c32;
  std::vector<std::vector<signal_t>> sig;
  std::uint64_t result_mismatches = 0;
  std::string first_result_mismatch;
};

inline std::string describe(program const& prog, std::uint32_t id) {
  op const& o = prog.at(id);
  op_at const& w = prog.order[id];
  std::ostringstream s;
  s << "op #" << id << " (PE " << w.pe << " lane " << w.lane << " #" << w.index << ", epoch " << w.epoch << ", "
    << (o.group == grp::one ? "one thread" : "lane group") << "): " << kind_name(o.kind);
  if (o.kind == op_kind::atomic) s << " " << atom_name(static_cast<atom>(o.aux));
  if (is_put(o.kind) || is_get(o.kind)) {
    s << " elem " << int(o.elem) << " n " << o.n << (is_get(o.kind) ? " from PE " : " to PE ") << o.pe << " src "
      << o.src << " dst " << o.dst << ((o.flags & flag_forward) != 0 ? " (forward)" : "");
  }
  if (o.kind == op_kind::atomic) s << " on " << (o.elem == 8 ? "c64[" : "c32[") << o.index << "] of PE " << o.pe;
  if (o.kind == op_kind::put_signal || o.kind == op_kind::put_signal_nbi || o.kind == op_kind::signal ||
      o.kind == op_kind::flag_set || o.kind == op_kind::wait) {
    s << " sig[" << o.index << "] of PE " << o.pe << " value " << o.value;
  }
  return s.str();
}

namespace detail {

inline void apply_signal(signal_t& w, op const& o) {
  if (o.kind == op_kind::flag_set || static_cast<signal_op>(o.aux) == signal_op::set)
    w = o.value;
  else
    w += o.value;
}

/// Checks one atomic group against the fetched values and returns the word's value afterwards.
inline std::uint64_t resolve(program const& prog, atomic_group const& g, std::uint64_t init,
                             std::vector<std::vector<std::uint64_t>> const& results, expected& ex) {
  std::uint64_t const mask = g.width == 8 ? ~std::uint64_t{0} : 0xffffffffull;
  auto fetched = [&](op const& o, std::uint32_t id) {
    auto const pe = static_cast<std::size_t>(prog.order[id].pe);
    return pe < results.size() && o.result < results[pe].size() ? results[pe][o.result] & mask : ~std::uint64_t{0};
  };
  auto fail = [&](std::uint32_t id, std::uint64_t got, std::string const& why) {
    ++ex.result_mismatches;
    if (ex.first_result_mismatch.empty()) {
      std::ostringstream s;
      s << describe(prog, id) << ": fetched " << got << ", " << why << " (word's value before the epoch " << init
        << ")";
      ex.first_result_mismatch = s.str();
    }
  };
  std::uint64_t value = init;
  switch (g.mode) {
    case amode::count: {
      std::uint64_t adds = 0;
      for (auto id : g.ops)
        if (static_cast<atom>(prog.at(id).aux) != atom::fetch) ++adds;
      std::set<std::uint64_t> seen;
      for (auto id : g.ops) {
        op const& o = prog.at(id);
        auto const k = static_cast<atom>(o.aux);
        if (k == atom::add) continue;
        std::uint64_t const f = fetched(o, id);
        std::uint64_t const diff = (f - init) & mask;
        std::uint64_t const limit = k == atom::fetch ? adds + 1 : adds;
        if (diff % g.d != 0 || diff / g.d >= limit) {
          fail(id, f,
               "not the value before plus a multiple of the increment " + std::to_string(g.d) + " below " +
                   std::to_string(limit));
        } else if (k == atom::fetch_add && !seen.insert(f).second) {
          fail(id, f, "fetched by another fetch_add of the epoch too");
        }
      }
      value = (init + adds * g.d) & mask;
      break;
    }
    case amode::bits: {
      std::uint64_t touched = 0;
      for (auto id : g.ops) touched |= prog.at(id).compare;
      for (auto id : g.ops) {
        op const& o = prog.at(id);
        std::uint64_t const known = (~touched & mask) | o.compare;
        std::uint64_t const f = fetched(o, id);
        if ((f & known) != (init & known)) fail(id, f, "its own bit or an untouched bit differs from the value before");
        auto const k = static_cast<atom>(o.aux);
        if (k == atom::fetch_and) value &= ~o.compare;
        if (k == atom::fetch_or) value |= o.compare;
        if (k == atom::fetch_xor) value ^= o.compare;
      }
      break;
    }
    case amode::swap: {
      // Swaps form a chain: the values fetched are the value before and every swapped-in value,
      // less the one left in the word.
      std::multiset<std::uint64_t> left{init};
      for (auto id : g.ops) left.insert(prog.at(id).value & mask);
      for (auto id : g.ops) {
        std::uint64_t const f = fetched(prog.at(id), id);
        auto it = left.find(f);
        if (it == left.end())
          fail(id, f, "neither the value before nor a value swapped in (or fetched twice)");
        else
          left.erase(it);
      }
      value = left.size() == 1 ? *left.begin() : init;
      break;
    }
    case amode::cas: {
      std::int64_t winner = -1;
      std::uint64_t const c = prog.at(g.ops.front()).compare & mask;
      for (auto id : g.ops) {
        if (c == init && fetched(prog.at(id), id) == init) {
          if (winner >= 0)
            fail(id, init, "a second compare_swap succeeded");
          else
            winner = id;
        }
      }
      if (c == init && winner < 0)
        fail(g.ops.front(), fetched(prog.at(g.ops.front()), g.ops.front()), "none succeeded");
      value = winner >= 0 ? prog.at(static_cast<std::uint32_t>(winner)).value & mask : init;
      for (auto id : g.ops) {
        if (static_cast<std::int64_t>(id) == winner) continue;
        std::uint64_t const f = fetched(prog.at(id), id);
        if (f != value) fail(id, f, "a failing compare_swap must return the winner's value " + std::to_string(value));
      }
      break;
    }
    case amode::set: {
      std::uint64_t v = init;
      for (auto id : g.ops)
        if (static_cast<atom>(prog.at(id).aux) == atom::set) v = prog.at(id).value & mask;
      for (auto id : g.ops) {
        op const& o = prog.at(id);
        if (static_cast<atom>(o.aux) != atom::fetch) continue;
        std::uint64_t const f = fetched(o, id);
        if (f != init && f != v) fail(id, f, "neither the value before nor the one set");
      }
      value = v;
      break;
    }
  }
  return value;
}

}  // namespace detail

/// The reference: every PE's arena, counters and signals after `prog`, with the fetched values and
/// wait results (`results[pe][slot]`, 32-bit ones zero-extended) checked on the way. Swap and
/// compare_swap epochs take the final value the results imply.
inline expected simulate(program const& prog, std::vector<std::vector<std::uint64_t>> const& results) {
  params const& p = prog.p;
  expected ex;
  for (int pe = 0; pe < p.npes; ++pe) {
    ex.data.push_back(initial_data(p.seed, pe, p.data_bytes));
    ex.c64.emplace_back();
    ex.c32.emplace_back();
    ex.sig.emplace_back();
    for (std::uint32_t i = 0; i < p.n64; ++i) ex.c64.back().push_back(initial_c64(p.seed, pe, i));
    for (std::uint32_t i = 0; i < p.n32; ++i) ex.c32.back().push_back(initial_c32(p.seed, pe, i));
    for (std::uint32_t i = 0; i < p.nsig; ++i) ex.sig.back().push_back(initial_sig(p.seed, pe, i));
  }
  std::vector<std::uint8_t> tmp;
  std::vector<std::uint32_t> waits;
  std::size_t next_group = 0;
  auto close_epoch = [&](std::uint32_t epoch) {
    for (; next_group < prog.groups.size() && prog.groups[next_group].epoch == epoch; ++next_group) {
      atomic_group const& g = prog.groups[next_group];
      auto const pe = static_cast<std::size_t>(g.pe);
      if (g.width == 8) {
        ex.c64[pe][g.word] = detail::resolve(prog, g, ex.c64[pe][g.word], results, ex);
      } else {
        ex.c32[pe][g.word] = static_cast<std::uint32_t>(detail::resolve(prog, g, ex.c32[pe][g.word], results, ex));
      }
    }
    for (auto id : waits) {
      op const& o = prog.at(id);
      auto const pe = static_cast<std::size_t>(prog.order[id].pe);
      signal_t const want = ex.sig[pe][o.index];
      signal_t const got = pe < results.size() && o.result < results[pe].size() ? results[pe][o.result] : ~want;
      if (got != want) {
        ++ex.result_mismatches;
        if (ex.first_result_mismatch.empty()) {
          ex.first_result_mismatch = describe(prog, id) + ": returned " + std::to_string(got) +
                                     ", expected the last update's value " + std::to_string(want);
        }
      }
    }
    waits.clear();
  };
  std::uint32_t epoch = 0;
  for (std::uint32_t id = 0; id < prog.order.size(); ++id) {
    op_at const& w = prog.order[id];
    if (w.epoch != epoch) {
      close_epoch(epoch);
      epoch = w.epoch;
    }
    op const& o = prog.at(id);
    auto const me = static_cast<std::size_t>(w.pe);
    auto const peer = static_cast<std::size_t>(o.pe);
    if (is_put(o.kind) || is_get(o.kind)) {
      std::size_t const from = is_get(o.kind) ? peer : me, to = is_get(o.kind) ? me : peer;
      tmp.assign(ex.data[from].begin() + static_cast<std::ptrdiff_t>(o.src),
                 ex.data[from].begin() + static_cast<std::ptrdiff_t>(o.src + o.bytes()));
      std::copy(tmp.begin(), tmp.end(), ex.data[to].begin() + static_cast<std::ptrdiff_t>(o.dst));
    }
    if (o.kind == op_kind::put_signal || o.kind == op_kind::put_signal_nbi || o.kind == op_kind::signal ||
        o.kind == op_kind::flag_set) {
      detail::apply_signal(ex.sig[peer][o.index], o);
    }
    if (o.kind == op_kind::wait) waits.push_back(id);
  }
  close_epoch(epoch);
  return ex;
}

/// Mismatches of one PE's buffers against the reference, and the first one described.
struct pe_report {
  std::uint64_t mismatches = 0;
  std::string first;
};

/// The last op (in the global order) that writes byte `off` of PE pe's arena, or -1.
inline std::int64_t last_writer(program const& prog, int pe, std::uint64_t off) {
  for (std::size_t i = prog.order.size(); i-- > 0;) {
    op const& o = prog.at(static_cast<std::uint32_t>(i));
    int const written = is_get(o.kind) ? prog.order[i].pe : o.pe;
    if ((is_put(o.kind) || is_get(o.kind)) && written == pe && off >= o.dst && off < o.dst + o.bytes())
      return static_cast<std::int64_t>(i);
  }
  return -1;
}
/// The last op that updates word `index` of `space` (8: c64, 4: c32, 0: signals) at pe, or -1.
inline std::int64_t last_updater(program const& prog, int pe, int space, std::uint32_t index) {
  for (std::size_t i = prog.order.size(); i-- > 0;) {
    op const& o = prog.at(static_cast<std::uint32_t>(i));
    if (o.pe != pe || o.index != index) continue;
    bool const sig = o.kind == op_kind::put_signal || o.kind == op_kind::put_signal_nbi || o.kind == op_kind::signal ||
                     o.kind == op_kind::flag_set;
    if ((space == 0 && sig) || (space != 0 && o.kind == op_kind::atomic && o.elem == space))
      return static_cast<std::int64_t>(i);
  }
  return -1;
}

inline pe_report compare_pe(program const& prog, expected const& ex, int pe, std::vector<std::uint8_t> const& data,
                            std::vector<std::uint64_t> const& c64, std::vector<std::uint32_t> const& c32,
                            std::vector<signal_t> const& sig) {
  pe_report r;
  auto const q = static_cast<std::size_t>(pe);
  auto who = [&](std::int64_t id) {
    return id < 0 ? std::string("no op writes it (initial value)")
                  : "last written by " + describe(prog, static_cast<std::uint32_t>(id));
  };
  auto note = [&](char const* what, std::uint64_t at, std::uint64_t want, std::uint64_t got, std::int64_t id) {
    ++r.mismatches;
    if (r.first.empty()) {
      std::ostringstream s;
      s << "seed " << prog.p.seed << ", PE " << pe << ", " << what << " " << at << ": expected " << want << ", got "
        << got << "; " << who(id);
      r.first = s.str();
    }
  };
  std::uint64_t const bytes = std::min<std::uint64_t>(data.size(), ex.data[q].size());
  if (data.size() != ex.data[q].size()) note("data arena size", 0, ex.data[q].size(), data.size(), -1);
  for (std::uint64_t k = 0; k < bytes; ++k) {
    if (data[k] != ex.data[q][k]) {
      if (r.first.empty())
        note("data byte at offset", k, ex.data[q][k], data[k], last_writer(prog, pe, k));
      else
        ++r.mismatches;
    }
  }
  for (std::uint32_t i = 0; i < prog.p.n64 && i < c64.size(); ++i)
    if (c64[i] != ex.c64[q][i]) note("c64 word", i, ex.c64[q][i], c64[i], last_updater(prog, pe, 8, i));
  for (std::uint32_t i = 0; i < prog.p.n32 && i < c32.size(); ++i)
    if (c32[i] != ex.c32[q][i]) note("c32 word", i, ex.c32[q][i], c32[i], last_updater(prog, pe, 4, i));
  for (std::uint32_t i = 0; i < prog.p.nsig && i < sig.size(); ++i)
    if (sig[i] != ex.sig[q][i]) note("signal word", i, ex.sig[q][i], sig[i], last_updater(prog, pe, 0, i));
  return r;
}

// ---- validity, checked independently of the generator (host tests) ------------------------------------

/// Every rule of the header that the program breaks, one line each (empty: valid).
inline std::vector<std::string> validate(program const& prog) {
  std::vector<std::string> bad;
  params const& p = prog.p;
  auto complain = [&](std::uint32_t id, std::string const& why) {
    if (bad.size() < 20) bad.push_back(describe(prog, id) + ": " + why);
  };
  struct region {
    std::uint64_t b, e;
    std::uint32_t id;
  };
  std::uint32_t epoch = ~0u;
  std::vector<std::vector<region>> writes, reads;
  // [pe][sig]: updates this epoch (ids)
  std::map<std::pair<int, std::uint32_t>, std::vector<std::uint32_t>> updates;
  std::vector<signal_t> sig_at_start;
  std::vector<std::vector<signal_t>> sigv(static_cast<std::size_t>(p.npes));
  for (int pe = 0; pe < p.npes; ++pe)
    for (std::uint32_t i = 0; i < p.nsig; ++i) sigv[static_cast<std::size_t>(pe)].push_back(initial_sig(p.seed, pe, i));
  std::vector<std::uint32_t> waits;
  auto check_epoch = [&]() {
    // Writes: pairwise disjoint unless an overwrite pair (same issuer lane, ordered by fence or
    // quiet of the earlier op's group kind between them).
    for (int pe = 0; pe < p.npes; ++pe) {
      auto const& ws = writes[static_cast<std::size_t>(pe)];
      for (std::size_t i = 0; i < ws.size(); ++i) {
        for (std::size_t j = i + 1; j < ws.size(); ++j) {
          if (!(ws[i].b < ws[j].e && ws[j].b < ws[i].e)) continue;
          op_at const& x = prog.order[ws[i].id];
          op_at const& y = prog.order[ws[j].id];
          bool ordered = false;
          if (x.pe == y.pe && x.lane == y.lane && x.index < y.index) {
            auto const& list = prog.code[static_cast<std::size_t>(x.pe)][static_cast<std::size_t>(x.lane)];
            grp const g = list[x.index].group;
            for (std::uint32_t k = x.index + 1; k < y.index; ++k) {
              if (list[k].kind == op_kind::quiet && list[k].group == g) ordered = true;
              if (list[k].kind == op_kind::fence && list[k].group == g && list[y.index].group == g) ordered = true;
            }
          }
          if (!ordered) complain(ws[j].id, "writes bytes op #" + std::to_string(ws[i].id) + " writes, unordered");
        }
        for (auto const& rd : reads[static_cast<std::size_t>(pe)])
          if (ws[i].b < rd.e && rd.b < ws[i].e)
            complain(rd.id, "reads bytes op #" + std::to_string(ws[i].id) + " writes");
      }
    }
    // Signal words: one set or same-sign adds; each wait satisfiable only by the last update.
    for (auto const& [key, ids] : updates) {
      signal_t& v = sigv[static_cast<std::size_t>(key.first)][key.second];
      signal_t const base = v;
      int sets = 0, ups = 0, downs = 0;
      std::vector<signal_t> deltas;
      for (auto id : ids) {
        op const& o = prog.at(id);
        bool const set = o.kind == op_kind::flag_set || static_cast<signal_op>(o.aux) == signal_op::set;
        if (set) {
          ++sets;
          v = o.value;
        } else {
          (o.value < (signal_t{1} << 63) ? ups : downs) += 1;
          v += o.value;
          deltas.push_back(o.value);
        }
      }
      if (sets > 1 || (sets == 1 && ups + downs > 0) || (ups > 0 && downs > 0))
        complain(ids.front(), "the signal word's updates this epoch do not determine its value");
      for (auto id : waits) {
        op const& w = prog.at(id);
        if (prog.order[id].pe != key.first || w.index != key.second) continue;
        auto const c = static_cast<cmp>(w.aux);
        if (!compare(c, v, static_cast<signal_t>(w.value))) complain(id, "the last update does not release the wait");
        if (compare(c, base, static_cast<signal_t>(w.value))) complain(id, "released before any update");
        for (signal_t d : deltas)
          if (compare(c, static_cast<signal_t>(v - d), static_cast<signal_t>(w.value)))
            complain(id, "released before the last update");
      }
    }
    for (auto id : waits) {
      op const& w = prog.at(id);
      if (updates.count({prog.order[id].pe, w.index}) == 0) complain(id, "waits on a word nobody updates");
    }
  };
  auto begin_epoch = [&](std::uint32_t e) {
    if (epoch != ~0u) check_epoch();
    epoch = e;
    writes.assign(static_cast<std::size_t>(p.npes), {});
    reads.assign(static_cast<std::size_t>(p.npes), {});
    updates.clear();
    waits.clear();
  };
  for (std::uint32_t id = 0; id < prog.order.size(); ++id) {
    op_at const& w = prog.order[id];
    if (w.epoch != epoch) begin_epoch(w.epoch);
    op const& o = prog.at(id);
    scope const s = prog.epochs[w.epoch];
    if (o.kind != op_kind::barrier && o.kind != op_kind::fence && o.kind != op_kind::quiet &&
        !team_of(s, p.npes, w.pe).contains(o.pe)) {
      complain(id, "reaches a PE outside its team of the epoch");
    }
    if (is_put(o.kind) || is_get(o.kind)) {
      if (o.bytes() > p.max_bytes) complain(id, "larger than max_bytes");
      if (o.src % o.elem != 0 || o.dst % o.elem != 0) complain(id, "misaligned for its element type");
      if (o.src + o.bytes() > p.data_bytes || o.dst + o.bytes() > p.data_bytes) complain(id, "outside the arena");
      int const from = is_get(o.kind) ? o.pe : w.pe, to = is_get(o.kind) ? w.pe : o.pe;
      if (o.bytes() > 0) writes[static_cast<std::size_t>(to)].push_back({o.dst, o.dst + o.bytes(), id});
      if ((o.flags & flag_forward) != 0) {
        // Must follow, in its lane and group kind, a wait on the word updated by the op that
        // wrote its source.
        bool covered = false;
        for (auto const& wr : writes[static_cast<std::size_t>(from)]) {
          if (!(wr.b <= o.src && o.src + o.bytes() <= wr.e)) continue;
          op const& writer = prog.at(wr.id);
          auto const& list = prog.code[static_cast<std::size_t>(w.pe)][static_cast<std::size_t>(w.lane)];
          for (std::uint32_t k = 0; k < w.index; ++k)
            if (list[k].kind == op_kind::wait && list[k].index == writer.index && list[k].group == o.group)
              covered = true;
        }
        if (!covered && o.bytes() > 0) complain(id, "forwards bytes without waiting for their signal");
      } else if (o.bytes() > 0) {
        reads[static_cast<std::size_t>(from)].push_back({o.src, o.src + o.bytes(), id});
      }
    }
    if (o.kind == op_kind::put_signal || o.kind == op_kind::put_signal_nbi || o.kind == op_kind::signal ||
        o.kind == op_kind::flag_set) {
      updates[{o.pe, o.index}].push_back(id);
    }
    if (o.kind == op_kind::wait) {
      waits.push_back(id);
      if (o.pe != w.pe) complain(id, "waits on another PE's word");
      // Nothing the lane issued is unquieted at the wait.
      auto const& list = prog.code[static_cast<std::size_t>(w.pe)][static_cast<std::size_t>(w.lane)];
      bool lane_pending = false, one_pending = false;
      for (std::uint32_t k = 0; k < w.index; ++k) {
        op const& x = list[k];
        bool& pend = x.group == grp::one ? one_pending : lane_pending;
        if (x.kind == op_kind::barrier)
          lane_pending = one_pending = false;
        else if (x.kind == op_kind::quiet)
          pend = false;
        else if (x.kind != op_kind::fence && x.kind != op_kind::wait)
          pend = true;
      }
      if (lane_pending || one_pending) complain(id, "waits with operations of its lane not quieted");
      // Every update it waits for comes earlier in the global order.
    }
  }
  if (epoch != ~0u) check_epoch();
  // Every lane of a PE has the same barriers in the same order.
  for (int pe = 0; pe < p.npes; ++pe) {
    std::vector<std::uint8_t> first;
    for (int lane = 0; lane < prog.lanes(pe); ++lane) {
      std::vector<std::uint8_t> mine;
      for (op const& o : prog.code[static_cast<std::size_t>(pe)][static_cast<std::size_t>(lane)])
        if (o.kind == op_kind::barrier) mine.push_back(o.aux);
      if (lane == 0) first = mine;
      if (mine != first)
        bad.push_back("PE " + std::to_string(pe) + " lane " + std::to_string(lane) + ": barriers differ");
    }
  }
  return bad;
}

// ---- executability: every schedule of the lanes completes -------------------------------------------

/// How check_executable schedules the lanes.
struct exec_options {
  unsigned random_orders = 4;  ///< random schedules besides round-robin (and the lazy variants)
  std::uint64_t seed = 0x5CED;
};

namespace detail {

/// One schedule of prog. `order`: 0 round-robin, else a random order seeded by it. `lazy`: a signal
/// update is in flight until its issuing lane quiets (its group kind) or reaches a barrier, and only
/// then lands (the latest the contract allows); otherwise it lands at once. Returns the problems.
inline std::vector<std::string> execute_once(program const& prog, std::uint64_t order, bool lazy) {
  std::vector<std::string> bad;
  params const& p = prog.p;
  int const n = p.npes;
  auto const N = static_cast<std::size_t>(n);
  std::vector<std::vector<signal_t>> sig(N);
  for (int pe = 0; pe < n; ++pe)
    for (std::uint32_t i = 0; i < p.nsig; ++i) sig[static_cast<std::size_t>(pe)].push_back(initial_sig(p.seed, pe, i));
  struct flight {
    int pe;
    grp g;
    op o;
  };
  std::vector<std::vector<std::uint32_t>> pc(N);
  std::vector<std::vector<std::vector<flight>>> inflight(N);  // [pe][lane]
  for (int pe = 0; pe < n; ++pe) {
    pc[static_cast<std::size_t>(pe)].assign(static_cast<std::size_t>(prog.lanes(pe)), 0);
    inflight[static_cast<std::size_t>(pe)].resize(static_cast<std::size_t>(prog.lanes(pe)));
  }
  // Team barriers: [pe][scope] barriers passed; arrived[pe]: the scope it waits in, or -1.
  std::vector<std::array<std::uint64_t, 3>> passed(N, {0, 0, 0});
  std::vector<int> arrived(N, -1);
  auto code_of = [&](int pe, int lane) -> std::vector<op> const& {
    return prog.code[static_cast<std::size_t>(pe)][static_cast<std::size_t>(lane)];
  };
  auto where = [&](int pe, int lane) {
    std::uint32_t const i = pc[static_cast<std::size_t>(pe)][static_cast<std::size_t>(lane)];
    std::ostringstream s;
    s << "PE " << pe << " lane " << lane << " op #" << i;
    if (i < code_of(pe, lane).size()) {
      op const& o = code_of(pe, lane)[i];
      s << " (" << kind_name(o.kind);
      if (o.kind == op_kind::barrier) {
        team_shape const t = team_of(static_cast<scope>(o.aux), n, pe);
        s << " on "
          << (o.aux == 0   ? "world"
              : o.aux == 1 ? "halves"
                           : "parity")
          << " team {start " << t.start << " stride " << t.stride << " size " << t.size << "}, number "
          << passed[static_cast<std::size_t>(pe)][o.aux];
      }
      if (o.kind == op_kind::wait)
        s << " sig[" << o.index << "] cmp " << int(o.aux) << " value " << o.value << ", word is "
          << sig[static_cast<std::size_t>(pe)][o.index];
      s << ")";
    } else {
      s << " (finished)";
    }
    return s.str();
  };
  auto satisfied = [&](int pe, op const& o) {
    return compare(static_cast<cmp>(o.aux), sig[static_cast<std::size_t>(pe)][o.index], static_cast<signal_t>(o.value));
  };
  // A signal update lands: a wait that a lane has reached and that held before must hold after.
  auto land = [&](op const& o) {
    auto const t = static_cast<std::size_t>(o.pe);
    std::vector<std::pair<int, bool>> before;
    for (int l = 0; l < prog.lanes(o.pe); ++l) {
      std::uint32_t const i = pc[t][static_cast<std::size_t>(l)];
      auto const& c = code_of(o.pe, l);
      if (i < c.size() && c[i].kind == op_kind::wait && c[i].index == o.index)
        before.push_back({l, satisfied(o.pe, c[i])});
    }
    apply_signal(sig[t][o.index], o);
    for (auto const& [l, held] : before) {
      op const& w = code_of(o.pe, l)[pc[t][static_cast<std::size_t>(l)]];
      if (held && !satisfied(o.pe, w) && bad.size() < 20)
        bad.push_back("window: " + where(o.pe, l) + " held, then a " + kind_name(o.kind) + " of value " +
                      std::to_string(o.value) + " made it false again (a slow waiter misses it)");
    }
  };
  auto drain = [&](int pe, int lane, bool all, grp g) {
    auto& f = inflight[static_cast<std::size_t>(pe)][static_cast<std::size_t>(lane)];
    std::vector<flight> keep;
    for (auto const& x : f) {
      if (all || x.g == g)
        land(x.o);
      else
        keep.push_back(x);
    }
    f = keep;
  };
  std::mt19937_64 rng(order * 0x9E3779B97F4A7C15ull + 17);
  // Runnable actions: (pe, lane) with lane >= 0 a lane step, lane == -1 the PE's barrier step.
  std::vector<std::pair<int, int>> act;
  std::size_t rr = 0;
  for (;;) {
    act.clear();
    bool done = true;
    for (int pe = 0; pe < n; ++pe) {
      auto const q = static_cast<std::size_t>(pe);
      bool all_at_barrier = true;
      int bscope = -1;
      for (int l = 0; l < prog.lanes(pe); ++l) {
        std::uint32_t const i = pc[q][static_cast<std::size_t>(l)];
        auto const& c = code_of(pe, l);
        if (i >= c.size()) {
          all_at_barrier = false;
          continue;
        }
        done = false;
        op const& o = c[i];
        if (o.kind == op_kind::barrier) {
          if (bscope >= 0 && bscope != o.aux && bad.size() < 20)
            bad.push_back("PE " + std::to_string(pe) + ": lanes reach barriers of different scopes");
          bscope = o.aux;
          continue;
        }
        all_at_barrier = false;
        if (o.kind != op_kind::wait || satisfied(pe, o)) act.push_back({pe, l});
      }
      if (all_at_barrier && bscope >= 0) {
        if (arrived[q] < 0) {
          act.push_back({pe, -1});  // arrive
        } else {
          // Completes when every member has arrived at this barrier of the team or passed it.
          auto const s = static_cast<scope>(arrived[q]);
          team_shape const t = team_of(s, n, pe);
          std::uint64_t const k = passed[q][static_cast<std::size_t>(arrived[q])];
          bool ok = true;
          for (int m = 0; m < t.size && ok; ++m) {
            auto const mq = static_cast<std::size_t>(t.start + t.stride * m);
            ok = passed[mq][static_cast<std::size_t>(arrived[q])] > k ||
                 (arrived[mq] == arrived[q] && passed[mq][static_cast<std::size_t>(arrived[q])] == k);
          }
          if (ok) act.push_back({pe, -1});
        }
      }
    }
    if (done) break;
    if (act.empty()) {
      std::string s = std::string("deadlock (") +
                      (order == 0       ? "round-robin"
                       : order % 2 == 1 ? "random order"
                                        : "slow waiters") +
                      (lazy ? ", lazy delivery" : "") + "):";
      for (int pe = 0; pe < n; ++pe)
        for (int l = 0; l < prog.lanes(pe); ++l) s += "\n  " + where(pe, l);
      bad.push_back(s);
      return bad;
    }
    std::pair<int, int> a;
    if (order == 0) {
      a = act[rr++ % act.size()];
    } else if (order % 2 == 1) {
      a = act[rng() % act.size()];
    } else {
      // Adversarial: lanes in a fixed random priority, a lane at a wait or a PE at its barrier only
      // when nothing else can run (slow waiters, late arrivals).
      auto rank = [&](std::pair<int, int> const& x) {
        std::uint64_t const h =
            hash64(order, static_cast<std::uint64_t>(x.first), static_cast<std::uint64_t>(x.second + 1));
        bool const slow =
            x.second < 0 ||
            code_of(x.first, x.second)[pc[static_cast<std::size_t>(x.first)][static_cast<std::size_t>(x.second)]]
                    .kind == op_kind::wait;
        return std::make_pair(slow, h);
      };
      a = *std::min_element(act.begin(), act.end(), [&](auto const& x, auto const& y) { return rank(x) < rank(y); });
    }
    auto const q = static_cast<std::size_t>(a.first);
    if (a.second < 0) {
      int const s = code_of(a.first, 0)[pc[q][0]].aux;
      if (arrived[q] < 0) {
        arrived[q] = s;
      } else {
        ++passed[q][static_cast<std::size_t>(s)];
        arrived[q] = -1;
        for (auto& i : pc[q]) ++i;
      }
      continue;
    }
    int const lane = a.second;
    op const& o = code_of(a.first, lane)[pc[q][static_cast<std::size_t>(lane)]];
    bool const sig_update = o.kind == op_kind::put_signal || o.kind == op_kind::put_signal_nbi ||
                            o.kind == op_kind::signal || o.kind == op_kind::flag_set;
    if (sig_update) {
      if (lazy)
        inflight[q][static_cast<std::size_t>(lane)].push_back({o.pe, o.group, o});
      else
        land(o);
    }
    if (o.kind == op_kind::quiet) drain(a.first, lane, false, o.group);
    ++pc[q][static_cast<std::size_t>(lane)];
    // A lane that reaches a barrier quiets both group kinds first.
    auto const& c = code_of(a.first, lane);
    if (pc[q][static_cast<std::size_t>(lane)] < c.size() &&
        c[pc[q][static_cast<std::size_t>(lane)]].kind == op_kind::barrier)
      drain(a.first, lane, true, grp::lane);
  }
  return bad;
}

}  // namespace detail

/// Whether prog runs to completion in every schedule: simulates the lanes (waits on the signal
/// words, CTA-wide barrier ops, team barriers counted per team) in round-robin and random orders,
/// with signals landing at once and as late as allowed (at the issuer's quiet or barrier; one issued
/// after its lane's last quiet and barrier never lands). Odd random orders are uniform, even ones run
/// lanes in a fixed random priority with waiting lanes and barrier arrivals last. Reports
/// deadlocks (every lane's position and what it waits for) and waits whose condition a later update
/// makes false again while the waiter has reached it. Empty: executable.
inline std::vector<std::string> check_executable(program const& prog, exec_options const& opt = {}) {
  std::vector<std::string> bad;
  for (std::uint64_t order = 0; order <= opt.random_orders && bad.empty(); ++order) {
    std::uint64_t const o = order == 0 ? 0 : opt.seed + order;
    for (bool lazy : {false, true}) {
      auto r = detail::execute_once(prog, o, lazy);
      bad.insert(bad.end(), r.begin(), r.end());
      if (!bad.empty()) break;
    }
  }
  return bad;
}

}  // namespace gpucomm::test::soak
