#pragma once
// Expert-parallel (MoE) dispatch and combine: the shape every member agrees on, the workspace
// layout and sizes it implies, and the small trivially copyable view kernels take.
//
//   gpucomm::moe_shape const s{.experts_per_rank = 8, .hidden = 7168, .top_k = 8,
//                              .max_tokens = 128, .max_recv_rows = 1024};
//   std::size_t const bytes = gpucomm::moe_workspace_bytes(members, s);   // symmetric, per PE
//   std::string const why = gpucomm::moe_shape_problem(members, s);       // "" when usable
//
// The plan (host/moe.cuh) is made collectively on the host once from a team and a moe_shape; the
// device calls (collectives/moe.cuh) take its moe_view by value. Everything here is constexpr and
// host/device, so sizes and offsets are unit-tested without a GPU.
//
// Workspace, in bytes per member PE, for P members, hidden H, k = top_k, Tm = max_tokens and C the
// plan's CTAs (each region starts at a multiple of 128 bytes):
//   control   C x 16  (the calls each CTA has made) + 64 (the error words the world reports)
//   flags     2 x C x P x 8                      (dispatch and combine: one word per (CTA, source))
//   counts    2 x P x 4 x round4(E + 1)          (received count rows; this member's, staged)
//   tokens    8 + Tm x 8                          (the token count and each token's rank mask)
//   dispatch  P x Tm x (96 + 2H)                  (one message per (source, token): header, row)
//   combine   P x Tm x 2H                          (partial sums coming back, per (rank, token))
//   staging   Tm x (k x 96 + payload)              (headers and the row, cast, as they go out)
// payload: 2H bytes for bf16, round16(H + 4 x H / 128) for fp8 e4m3 with its per-128 scales. The
// two Tm x P x 2H terms dominate: about 4 x P x Tm x H bytes (P = 8, Tm = 128, H = 7168: 29 MiB).
// The expert-major outputs (rows, scales, counts, sources) are the caller's own buffers, sized by
// max_recv_rows (moe_recv_bytes).

#include <cstddef>
#include <cstdint>
#include <string>

#include "../config.hpp"
#include "../sym_ptr.hpp"
#include "../team.hpp"

namespace gpucomm {

/// What a dispatched row carries: bf16 as given, or fp8 e4m3 with a float scale per 128 elements.
enum class moe_token_dtype : int { bf16, fp8_e4m3 };
/// The element type of the top-k expert ids.
enum class moe_index_dtype : int { int32, int64 };

/// The shape of one MoE layer's dispatch and combine, the same at every member.
struct moe_shape {
  int experts_per_rank = 0;  ///< local experts of each member; expert x lives at team rank x / experts_per_rank
  int hidden = 0;            ///< elements per token (a multiple of 128)
  int top_k = 0;             ///< experts per token, 1 to moe_max_top_k
  moe_token_dtype token_dtype = moe_token_dtype::bf16;
  moe_index_dtype index_dtype = moe_index_dtype::int32;
  int max_tokens = 0;     ///< bound on the tokens a member dispatches in one call
  int max_recv_rows = 0;  ///< bound on the (token, expert) rows a member receives in one call

  friend constexpr bool operator==(moe_shape const&, moe_shape const&) noexcept = default;
};

inline constexpr int moe_max_top_k = 8;       ///< slots a message header holds
inline constexpr int moe_max_members = 64;    ///< a token's ranks are a 64-bit mask
inline constexpr int moe_max_experts = 4096;  ///< counters per CTA in shared memory
inline constexpr int moe_scale_block = 128;   ///< fp8 elements per float scale

/// Where a received row came from: the team rank, its token there, and the top-k slot.
struct moe_source {
  std::int32_t rank;
  std::int32_t token;
  std::int32_t slot;
};
static_assert(sizeof(moe_source) == 12);

/// A message's header, as it lies in front of the row at the receiver: the token at the source,
/// which slots route to the receiver (bit j: slot j), and per slot the local expert, the row's
/// index among the source's rows for that expert (in token, then slot, order), and the weight.
struct alignas(16) moe_header {
  std::uint32_t token;
  std::uint32_t slots;
  std::uint32_t unused[2];
  std::uint16_t expert[moe_max_top_k];
  std::uint32_t position[moe_max_top_k];
  float weight[moe_max_top_k];
};
static_assert(sizeof(moe_header) == 96, "a header is six 16-byte vectors");

/// Total experts of the team.
GPUCOMM_HD constexpr int moe_experts(int members, moe_shape const& s) { return members * s.experts_per_rank; }

/// Bytes of a dispatched row: 2H for bf16; H fp8 bytes then H / 128 float scales, rounded to 16.
GPUCOMM_HD constexpr std::size_t moe_payload_bytes(moe_shape const& s) {
  auto const h = static_cast<std::size_t>(s.hidden);
  if (s.token_dtype == moe_token_dtype::bf16) return 2 * h;
  return (h + 4 * (h / moe_scale_block) + 15) / 16 * 16;
}
/// Bytes of a combined (bf16) row.
GPUCOMM_HD constexpr std::size_t moe_row_bytes(moe_shape const& s) { return 2 * static_cast<std::size_t>(s.hidden); }

/// 32-bit counters per count row: the message count, then one per local expert, whole 16 bytes.
GPUCOMM_HD constexpr std::size_t moe_count_row_words(moe_shape const& s) {
  return (static_cast<std::size_t>(s.experts_per_rank) + 1 + 3) / 4 * 4;
}

/// The workspace's regions at every member (byte offsets from its start; the formula above).
struct moe_layout {
  std::size_t control = 0;    ///< C x 2 words: calls made by CTA k (dispatch, combine)
  std::size_t errors = 0;     ///< moe_error_words words (the world reports them)
  std::size_t flags = 0;      ///< dispatch flags [k][source], then combine flags [k][source]
  std::size_t counts = 0;     ///< received count rows [source]
  std::size_t my_counts = 0;  ///< this member's count rows [destination], staged for puts
  std::size_t tokens = 0;     ///< word 0: tokens of the last dispatch; then a rank mask per token
  std::size_t dispatch = 0;   ///< messages [source][message]
  std::size_t combine = 0;    ///< partial rows [rank][token]
  std::size_t staging = 0;    ///< per token: top_k headers, then the payload
  std::size_t bytes = 0;      ///< the whole workspace
  std::size_t message_bytes = 0;
  std::size_t staging_bytes = 0;  ///< per token
};

/// Error words, each counted on the device and reported by world::synchronize.
inline constexpr std::size_t moe_error_words = 8;
inline constexpr std::size_t moe_error_rows_dropped = 0;    ///< rows past max_recv_rows, summed
inline constexpr std::size_t moe_error_largest_recv = 1;    ///< the most rows any call would have received
inline constexpr std::size_t moe_error_tokens_over = 2;     ///< calls given more tokens than max_tokens
inline constexpr std::size_t moe_error_largest_tokens = 3;  ///< the most tokens such a call was given
inline constexpr std::size_t moe_error_bad_ids = 4;         ///< expert ids outside [-1, experts), ignored
inline constexpr std::size_t moe_error_out_of_order = 5;    ///< calls out of dispatch/combine order

GPUCOMM_HD constexpr std::size_t moe_align128(std::size_t n) { return (n + 127) / 128 * 128; }

/// The layout for `members` members, shape s and `ctas` CTAs per call.
GPUCOMM_HD constexpr moe_layout moe_workspace_layout(int members, moe_shape const& s, int ctas) {
  auto const p = static_cast<std::size_t>(members);
  auto const c = static_cast<std::size_t>(ctas);
  auto const tm = static_cast<std::size_t>(s.max_tokens);
  moe_layout l;
  l.message_bytes = sizeof(moe_header) + moe_row_bytes(s);
  l.staging_bytes = static_cast<std::size_t>(s.top_k) * sizeof(moe_header) + moe_payload_bytes(s);
  std::size_t at = 0;
  auto take = [&](std::size_t bytes) {
    std::size_t const here = at;
    at = moe_align128(at + bytes);
    return here;
  };
  l.control = take(c * 16);
  l.errors = take(moe_error_words * 8);
  l.flags = take(2 * c * p * 8);
  l.counts = take(p * moe_count_row_words(s) * 4);
  l.my_counts = take(p * moe_count_row_words(s) * 4);
  l.tokens = take(8 + tm * 8);
  l.dispatch = take(p * tm * l.message_bytes);
  l.combine = take(p * tm * moe_row_bytes(s));
  l.staging = take(tm * l.staging_bytes);
  l.bytes = at;
  return l;
}

/// Symmetric bytes per PE the plan's workspace needs (the formula above).
GPUCOMM_HD constexpr std::size_t moe_workspace_bytes(int members, moe_shape const& s, int ctas) {
  return moe_workspace_layout(members, s, ctas).bytes;
}

/// Bytes of the caller's expert-major outputs at one member: rows (max_recv_rows of hidden bf16,
/// or of hidden fp8 bytes), scales (fp8: max_recv_rows x hidden / 128 floats), counts
/// (experts_per_rank ints) and sources (max_recv_rows moe_source).
struct moe_recv_bytes {
  std::size_t rows = 0;
  std::size_t scales = 0;
  std::size_t counts = 0;
  std::size_t sources = 0;
};
GPUCOMM_HD constexpr moe_recv_bytes moe_recv_sizes(moe_shape const& s) {
  auto const r = static_cast<std::size_t>(s.max_recv_rows);
  auto const h = static_cast<std::size_t>(s.hidden);
  bool const fp8 = s.token_dtype == moe_token_dtype::fp8_e4m3;
  return {r * h * (fp8 ? 1 : 2), fp8 ? r * (h / moe_scale_block) * 4 : 0,
          static_cast<std::size_t>(s.experts_per_rank) * 4, r * sizeof(moe_source)};
}

/// Bytes of received rows per CTA that moe_ctas aims at.
inline constexpr std::size_t moe_row_bytes_per_cta = std::size_t{512} << 10;

/// CTAs per call: one per 16 tokens of the bound, or, where more, one per moe_row_bytes_per_cta of
/// the rows a member may receive (max_recv_rows: dispatch copies each into place and combine reads
/// each once, local memory traffic that a few SMs alone would make the call's longest part); at
/// least 1, at most `cap` (the co-residency cap, or the caller's CTA budget) and 32.
GPUCOMM_HD constexpr int moe_ctas(moe_shape const& s, int cap) {
  std::size_t const by_rows = (moe_recv_sizes(s).rows + moe_row_bytes_per_cta - 1) / moe_row_bytes_per_cta;
  std::size_t const by_tokens = (static_cast<std::size_t>(s.max_tokens < 0 ? 0 : s.max_tokens) + 15) / 16;
  std::size_t const more = by_rows > by_tokens ? by_rows : by_tokens;
  int const want = more < 1 ? 1 : more > 32 ? 32 : static_cast<int>(more);
  return cap < 1 ? 1 : want < cap ? want : cap;
}

/// Shared memory a CTA of a dispatch or combine takes from its caller, in bytes: two counters per
/// expert and three per member, and 64 more.
GPUCOMM_HD constexpr std::size_t moe_block_scratch_bytes(int members, moe_shape const& s) {
  return (2 * static_cast<std::size_t>(moe_experts(members, s)) + 3 * static_cast<std::size_t>(members) + 16) * 4;
}

/// What makes shape s unusable on `members` members, or "" (host only: the plan throws it).
inline std::string moe_shape_problem(int members, moe_shape const& s) {
  auto const n = [](long long v) { return std::to_string(v); };
  if (members < 1 || members > moe_max_members)
    return "a team of " + n(members) + " members (MoE plans take 1 to " + n(moe_max_members) + ")";
  if (s.experts_per_rank < 1) return "experts_per_rank " + n(s.experts_per_rank) + " (at least 1)";
  if (moe_experts(members, s) > moe_max_experts)
    return n(moe_experts(members, s)) + " experts in all (at most " + n(moe_max_experts) + ")";
  if (s.hidden < moe_scale_block || s.hidden % moe_scale_block != 0)
    return "hidden " + n(s.hidden) + " (a positive multiple of " + n(moe_scale_block) + ")";
  if (s.top_k < 1 || s.top_k > moe_max_top_k) return "top_k " + n(s.top_k) + " (1 to " + n(moe_max_top_k) + ")";
  if (s.max_tokens < 1) return "max_tokens " + n(s.max_tokens) + " (at least 1)";
  if (s.max_recv_rows < 1) return "max_recv_rows " + n(s.max_recv_rows) + " (at least 1)";
  if (static_cast<long long>(s.max_tokens) * members * s.top_k > 0x7fffffffLL)
    return "max_tokens x members x top_k above 2^31 (row indices are 32-bit)";
  if (s.token_dtype != moe_token_dtype::bf16 && s.token_dtype != moe_token_dtype::fp8_e4m3)
    return "a token dtype other than bf16 and fp8_e4m3";
  if (s.index_dtype != moe_index_dtype::int32 && s.index_dtype != moe_index_dtype::int64)
    return "an index dtype other than int32 and int64";
  return {};
}

/// What a dispatch or combine kernel takes: the plan at one member, by value.
struct moe_view {
  team members;
  moe_shape shape;
  int ctas = 1;         ///< CTAs every call runs with, at every member
  int part_index = -1;  ///< which CTA this view is for (part(k)); -1: the whole view
  sym_ptr<std::byte> base;

  GPUCOMM_HD constexpr moe_view part(int k) const noexcept {
    moe_view v = *this;
    v.part_index = k;
    return v;
  }
  GPUCOMM_HD constexpr moe_layout layout() const noexcept { return moe_workspace_layout(members.size, shape, ctas); }
  GPUCOMM_HD constexpr bool valid() const noexcept { return members.valid() && ctas > 0 && base; }
};

}  // namespace gpucomm
