// Host-testable logic of MoE dispatch and combine: the workspace layout and its formula, the
// outputs' sizes, the CTA choice, the shape checks, and the tests' own reference (bf16 rounding,
// e4m3 spacing, row order, combine's order).
#include <gpucomm/collectives/moe_shape.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "../gpu/collectives/moe_reference.hpp"

using gpucomm::moe_shape;
using gpucomm::moe_token_dtype;
namespace ref = gpucomm::test::moe;

namespace {

moe_shape shape_of(int experts, int hidden, int k, moe_token_dtype dtype, int tokens, int rows) {
  return {.experts_per_rank = experts,
          .hidden = hidden,
          .top_k = k,
          .token_dtype = dtype,
          .max_tokens = tokens,
          .max_recv_rows = rows};
}

}  // namespace

TEST_CASE("moe workspace: regions disjoint, 128-byte aligned, sized as the header's formula", "[moe]") {
  for (int members : {1, 2, 3, 8, 64}) {
    for (auto dtype : {moe_token_dtype::bf16, moe_token_dtype::fp8_e4m3}) {
      for (int ctas : {1, 5, 32}) {
        moe_shape const s = shape_of(3, 384, 5, dtype, 37, 100);
        gpucomm::moe_layout const l = gpucomm::moe_workspace_layout(members, s, ctas);
        std::size_t const p = static_cast<std::size_t>(members), tm = 37, h = 384;
        std::size_t const payload = dtype == moe_token_dtype::bf16 ? 2 * h : (h + 4 * 3 + 15) / 16 * 16;
        CHECK(gpucomm::moe_payload_bytes(s) == payload);
        CHECK(l.message_bytes == 96 + 2 * h);
        CHECK(l.staging_bytes == 5 * 96 + payload);
        struct region {
          std::size_t at, bytes;
        };
        std::vector<region> const regions = {{l.control, static_cast<std::size_t>(ctas) * 16},
                                             {l.errors, 64},
                                             {l.flags, 2 * static_cast<std::size_t>(ctas) * p * 8},
                                             {l.counts, p * 4 * 4},  // round4(3 + 1) words a row
                                             {l.my_counts, p * 4 * 4},
                                             {l.tokens, 8 + tm * 8},
                                             {l.dispatch, p * tm * (96 + 2 * h)},
                                             {l.combine, p * tm * 2 * h},
                                             {l.staging, tm * (5 * 96 + payload)}};
        std::size_t end = 0;
        for (region const& r : regions) {
          INFO("members " << members << " ctas " << ctas << " region at " << r.at);
          CHECK(r.at % 128 == 0);
          CHECK(r.at >= end);
          CHECK(r.at - end < 128);  // packed, but for alignment
          end = r.at + r.bytes;
        }
        CHECK(l.bytes == (end + 127) / 128 * 128);
        CHECK(gpucomm::moe_workspace_bytes(members, s, ctas) == l.bytes);
      }
    }
  }
}

TEST_CASE("moe outputs, scratch and CTAs", "[moe]") {
  moe_shape const b = shape_of(8, 7168, 8, moe_token_dtype::bf16, 128, 1000);
  moe_shape const f = shape_of(8, 7168, 8, moe_token_dtype::fp8_e4m3, 4096, 1000);
  CHECK(gpucomm::moe_recv_sizes(b).rows == 1000u * 7168 * 2);
  CHECK(gpucomm::moe_recv_sizes(b).scales == 0u);
  CHECK(gpucomm::moe_recv_sizes(f).rows == 1000u * 7168);
  CHECK(gpucomm::moe_recv_sizes(f).scales == 1000u * 56 * 4);
  CHECK(gpucomm::moe_recv_sizes(f).counts == 8u * 4);
  CHECK(gpucomm::moe_recv_sizes(f).sources == 1000u * 12);
  CHECK(gpucomm::moe_block_scratch_bytes(8, b) == (2u * 64 + 3 * 8 + 16) * 4);
  CHECK(gpucomm::moe_block_scratch_bytes(64, shape_of(64, 128, 1, moe_token_dtype::bf16, 1, 1)) < 48u * 1024);
  // One per 16 tokens of the bound, or one per 512 KiB of received rows where more.
  CHECK(gpucomm::moe_ctas(shape_of(8, 7168, 8, moe_token_dtype::bf16, 128, 100), 100) == 8);
  CHECK(gpucomm::moe_ctas(b, 100) == 28);  // 1000 rows of 14 KiB
  CHECK(gpucomm::moe_ctas(shape_of(8, 7168, 8, moe_token_dtype::fp8_e4m3, 128, 1000), 100) == 14);
  CHECK(gpucomm::moe_ctas(f, 100) == 32);  // at most 32
  CHECK(gpucomm::moe_ctas(f, 5) == 5);     // the cap (co-residency, or the caller's budget)
  CHECK(gpucomm::moe_ctas(shape_of(1, 128, 1, moe_token_dtype::bf16, 1, 1), 100) == 1);
  CHECK(gpucomm::moe_ctas(b, 0) == 1);
  // Decode shape on 8 members: 8 x 128 x (96 + 4 x 7168) bytes and change, about 29 MiB.
  std::size_t const bytes = gpucomm::moe_workspace_bytes(8, b, 8);
  CHECK(bytes > 8u * 128 * 4 * 7168);
  CHECK(bytes < 8u * 128 * 4 * 7168 + (std::size_t{2} << 20));
}

TEST_CASE("moe shape problems name the field", "[moe]") {
  moe_shape const ok = shape_of(2, 256, 2, moe_token_dtype::bf16, 4, 8);
  CHECK(gpucomm::moe_shape_problem(4, ok).empty());
  auto says = [](int members, moe_shape const& s, std::string const& word) {
    std::string const why = gpucomm::moe_shape_problem(members, s);
    INFO(why);
    CHECK(why.find(word) != std::string::npos);
  };
  says(0, ok, "members");
  says(65, ok, "members");
  says(4, shape_of(0, 256, 2, moe_token_dtype::bf16, 4, 8), "experts_per_rank");
  says(64, shape_of(65, 256, 2, moe_token_dtype::bf16, 4, 8), "experts in all");
  says(4, shape_of(2, 200, 2, moe_token_dtype::bf16, 4, 8), "hidden");
  says(4, shape_of(2, 256, 9, moe_token_dtype::bf16, 4, 8), "top_k");
  says(4, shape_of(2, 256, 0, moe_token_dtype::bf16, 4, 8), "top_k");
  says(4, shape_of(2, 256, 2, moe_token_dtype::bf16, 0, 8), "max_tokens");
  says(4, shape_of(2, 256, 2, moe_token_dtype::bf16, 4, 0), "max_recv_rows");
  says(64, shape_of(2, 256, 8, moe_token_dtype::bf16, 1 << 23, 8), "2^31");
  moe_shape bad = ok;
  bad.token_dtype = static_cast<moe_token_dtype>(7);
  says(4, bad, "token dtype");
}

TEST_CASE("moe reference: bf16 rounds to nearest even, e4m3 spacing", "[moe]") {
  CHECK(ref::bf16_bits(1.0f) == 0x3f80);
  CHECK(ref::bf16_bits(-2.5f) == 0xc020);
  CHECK(ref::bf16_bits(std::bit_cast<float>(0x3f808000u)) == 0x3f80);  // tie, to even (down)
  CHECK(ref::bf16_bits(std::bit_cast<float>(0x3f818000u)) == 0x3f82);  // tie, to even (up)
  CHECK(ref::bf16_bits(std::bit_cast<float>(0x3f808001u)) == 0x3f81);  // above the tie
  CHECK(ref::bf16_bits(std::bit_cast<float>(0x7f7fffffu)) == 0x7f80);  // rounds to infinity
  CHECK(ref::bf16_float(0x4049) == 3.140625f);
  CHECK(ref::e4m3_half_ulp(1.0f) == 0.0625f);  // 1 + 1/8 is the next value
  CHECK(ref::e4m3_half_ulp(448.0f) == 16.0f);  // 448 - 416 = 32
  CHECK(ref::e4m3_half_ulp(-3.0f) == 0.125f);
  CHECK(ref::e4m3_half_ulp(0.001f) == 0x1p-10f);  // subnormal spacing 2^-9
  CHECK(ref::e4m3_float(0x38) == 1.0f);
  CHECK(ref::e4m3_float(0x7e) == 448.0f);
  CHECK(ref::e4m3_float(0xfe) == -448.0f);
  CHECK(ref::e4m3_float(0x01) == 0x1p-9f);
  CHECK(ref::e4m3_float(0x08) == 0x1p-6f);
  CHECK(ref::e4m3_float(0x3c) == 1.5f);
  CHECK(std::isnan(ref::e4m3_float(0x7f)));
}

TEST_CASE("moe reference: rows expert-major, then source, token, slot; counts within the bound", "[moe]") {
  // 2 members, 2 experts each (experts 0, 1 at rank 0; 2, 3 at rank 1), k = 2.
  ref::moe_inputs in;
  in.members = 2;
  in.experts_per_rank = 2;
  in.top_k = 2;
  in.tokens = {2, 1};
  in.ids = {{3, 0, 1, 2}, {0, -1}};
  in.weights = {{.1f, .2f, .3f, .4f}, {.5f, .6f}};
  std::vector<ref::moe_row> const at0 = ref::expected_rows(in, 0);
  std::vector<ref::moe_row> const want0 = {{0, 0, 1, 0, .2f}, {1, 0, 0, 0, .5f}, {0, 1, 0, 1, .3f}};
  CHECK(at0 == want0);
  std::vector<ref::moe_row> const at1 = ref::expected_rows(in, 1);
  std::vector<ref::moe_row> const want1 = {{0, 1, 1, 0, .4f}, {0, 0, 0, 1, .1f}};
  CHECK(at1 == want1);
  CHECK(ref::expected_counts(in, 0, 100) == std::vector<int>{2, 1});
  CHECK(ref::expected_counts(in, 0, 2) == std::vector<int>{2, 0});
  CHECK(ref::expected_counts(in, 1, 1) == std::vector<int>{1, 0});

  // Combine of member 0's token 0 (slot 0 -> expert 3 at rank 1, slot 1 -> expert 0 at rank 0):
  // rank 0's partial, then rank 1's.
  std::vector<std::vector<ref::moe_row>> const rows_at = {at0, at1};
  auto const uses = ref::token_uses(in, rows_at, 0);
  REQUIRE(uses.size() == 2);
  REQUIRE(uses[0].size() == 2);
  CHECK(uses[0][0].rank == 0);
  CHECK(uses[0][0].row == 0u);
  CHECK(uses[0][1].rank == 1);
  CHECK(uses[0][1].row == 1u);
  auto const y = [](int r, std::size_t row, int) { return ref::bf16_bits(r == 0 ? 3.0f : 10.0f + float(row)); };
  auto const w = [&](int r, std::size_t row) { return rows_at[static_cast<std::size_t>(r)][row].weight; };
  auto const all = [](int, std::size_t) { return true; };
  float const p0 = ref::bf16_float(ref::bf16_bits(std::fmaf(.2f, 3.0f, 0.f)));
  float const p1 = ref::bf16_float(ref::bf16_bits(std::fmaf(.1f, 11.0f, 0.f)));
  CHECK(ref::combined(uses[0], 0, y, all, w) == ref::bf16_bits(0.f + p0 + p1));
  auto const none_at_1 = [](int r, std::size_t) { return r == 0; };
  CHECK(ref::combined(uses[0], 0, y, none_at_1, w) == ref::bf16_bits(p0));
  // Token 1: slots 0 and 1 both at rank 0 (experts 1) and rank 1 (expert 2): fmaf chains per rank.
  REQUIRE(uses[1].size() == 2);
  CHECK(uses[1][0].rank == 0);
  CHECK(uses[1][1].rank == 1);
}
