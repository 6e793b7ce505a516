#pragma once
// The MoE tests' host reference, written from the contract in collectives/moe.cuh and not from
// its code (no histograms, no prefix sums): which rows each member receives and in what order,
// what combine gives back, and the rounding of bf16 and fp8 e4m3. Unit-tested on the host
// (tests/host/moe_test.cpp) and used by the GPU test (moe_test.cu) and the example.
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpucomm::test::moe {

/// bf16 bits of f, rounded to nearest, ties to even (NaN stays a quiet NaN).
constexpr std::uint16_t bf16_bits(float f) {
  std::uint32_t const u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
constexpr float bf16_float(std::uint16_t b) { return std::bit_cast<float>(std::uint32_t{b} << 16); }

/// Half the spacing of e4m3 values around |v| (v within e4m3's range, 448): 3 mantissa bits,
/// subnormals below 2^-6 spaced 2^-9.
inline float e4m3_half_ulp(float v) {
  float const a = std::fabs(v);
  if (a < 0x1p-6f) return 0x1p-10f;
  return std::ldexp(1.0f, std::ilogb(a) - 4);
}

/// The value of e4m3 bits b: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is
/// subnormal (m / 8 x 2^-6); 0x7f and 0xff are NaN (e4m3 has no infinities).
inline float e4m3_float(std::uint8_t b) {
  int const e = (b >> 3) & 15, m = b & 7;
  float const sign = (b & 0x80) ? -1.f : 1.f;
  if (e == 15 && m == 7) return std::nanf("");
  if (e == 0) return sign * std::ldexp(static_cast<float>(m) / 8.f, -6);
  return sign * std::ldexp(1.f + static_cast<float>(m) / 8.f, e - 7);
}

/// Every member's inputs: T[s] tokens, ids[s][t * k + j] (-1: no expert), weights likewise.
struct moe_inputs {
  int members = 0, experts_per_rank = 0, top_k = 0;
  std::vector<int> tokens;                  ///< T per member
  std::vector<std::vector<long long>> ids;  ///< per member
  std::vector<std::vector<float>> weights;  ///< per member
};

/// A received row as the contract orders them.
struct moe_row {
  int rank, token, slot, expert;  ///< source rank, token and slot; local expert at the receiver
  float weight;
  friend bool operator==(moe_row const&, moe_row const&) = default;
};

/// Every row member r receives, unbounded, in order: local expert, then source rank, token, slot.
inline std::vector<moe_row> expected_rows(moe_inputs const& in, int r) {
  std::vector<moe_row> rows;
  int const k = in.top_k;
  for (int e = 0; e < in.experts_per_rank; ++e) {
    long long const expert = static_cast<long long>(r) * in.experts_per_rank + e;
    for (int s = 0; s < in.members; ++s)
      for (int t = 0; t < in.tokens[static_cast<std::size_t>(s)]; ++t)
        for (int j = 0; j < k; ++j) {
          std::size_t const i = static_cast<std::size_t>(t) * static_cast<std::size_t>(k) + static_cast<std::size_t>(j);
          if (in.ids[static_cast<std::size_t>(s)][i] == expert)
            rows.push_back({s, t, j, e, in.weights[static_cast<std::size_t>(s)][i]});
        }
  }
  return rows;
}

/// Rows of each local expert member r keeps with a bound of `bound` rows (the first `bound`).
inline std::vector<int> expected_counts(moe_inputs const& in, int r, std::size_t bound) {
  std::vector<int> counts(static_cast<std::size_t>(in.experts_per_rank), 0);
  std::vector<moe_row> const rows = expected_rows(in, r);
  for (std::size_t i = 0; i < rows.size() && i < bound; ++i) ++counts[static_cast<std::size_t>(rows[i].expert)];
  return counts;
}

/// Where token t of member s went: (rank, row index at that rank, slot), in rank, then slot, order.
struct moe_use {
  int rank;
  std::size_t row;
  int slot;
};
inline std::vector<std::vector<moe_use>> token_uses(moe_inputs const& in,
                                                    std::vector<std::vector<moe_row>> const& rows_at, int s) {
  std::vector<std::vector<moe_use>> uses(static_cast<std::size_t>(in.tokens[static_cast<std::size_t>(s)]));
  for (int r = 0; r < in.members; ++r) {
    std::vector<moe_row> const& rows = rows_at[static_cast<std::size_t>(r)];
    std::vector<std::vector<moe_use>> here(uses.size());
    for (std::size_t i = 0; i < rows.size(); ++i)
      if (rows[i].rank == s) here[static_cast<std::size_t>(rows[i].token)].push_back({r, i, rows[i].slot});
    for (std::size_t t = 0; t < uses.size(); ++t) {
      for (int j = 0; j < in.top_k; ++j)  // slot order within the rank
        for (moe_use const& u : here[t])
          if (u.slot == j) uses[t].push_back(u);
    }
  }
  return uses;
}

/// Combine's element h of a token whose uses are `uses` (token_uses): at each rank holding some of
/// its slots, bf16(fmaf chain over those slots in slot order, of weight x output), then the sum of
/// those partial rows in rank order (float), as bf16 bits. y(r, row, h): the expert output at rank
/// r's row, bf16 bits; kept(r, row): whether that row was within its member's bound (a dropped row
/// adds nothing); weight(r, row): its weight.
template <class Output, class Kept, class Weight>
std::uint16_t combined(std::vector<moe_use> const& uses, int h, Output&& y, Kept&& kept, Weight&& weight) {
  float sum = 0.f;
  for (std::size_t i = 0; i < uses.size();) {
    int const r = uses[i].rank;
    float partial = 0.f;
    for (; i < uses.size() && uses[i].rank == r; ++i)
      if (kept(r, uses[i].row)) partial = std::fmaf(weight(r, uses[i].row), bf16_float(y(r, uses[i].row, h)), partial);
    sum = sum + bf16_float(bf16_bits(partial));
  }
  return bf16_bits(sum);
}

}  // namespace gpucomm::test::moe
