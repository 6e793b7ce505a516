// Plain aggregates through Boost.PFR (aggregate.cuh), on the host: field counts and types (one-field
// and nested aggregates, CUDA's vector types), with_fields, which operations an aggregate takes,
// and field-wise folds: one operation, per_field, nested per_field, 16-bit float fields accumulated
// in float.
#include <gpucomm/aggregate.cuh>
#include <gpucomm/collectives.cuh>

#include <catch2/catch.hpp>

#include <cstdint>
#include <type_traits>

namespace reduction = gpucomm::reduction;
namespace detail = gpucomm::detail;
using gpucomm::reduction_takes;

namespace {
struct one {
  float value;
};
struct stats {
  float sum;
  int count;
  double sq;
};
struct halves {
  __half h;
  __nv_bfloat16 b;
};
struct nested {
  halves hb;
  std::uint32_t u;
};
struct wraps_one {
  stats inner;
};
struct with_pointer {
  int n;
  int* p;
};
struct has_constructor {
  has_constructor() : v(0) {}
  int v;
};

template <class T, class Op>
T fold(T a, T b, T c) {
  using R = gpucomm::element_reduction<T>;
  auto acc = R::to_accumulator(a);
  acc = R::template combine<Op>(acc, R::to_accumulator(b));
  acc = R::template combine<Op>(acc, R::to_accumulator(c));
  return R::from_accumulator(acc);
}
}  // namespace

TEST_CASE("aggregate fields: counts, types, references", "[aggregate]") {
  STATIC_REQUIRE(detail::field_count<one> == 1);
  STATIC_REQUIRE(detail::field_count<stats> == 3);
  STATIC_REQUIRE(detail::field_count<nested> == 2);
  STATIC_REQUIRE(detail::field_count<wraps_one> == 1);
  STATIC_REQUIRE(detail::field_count<float4> == 4);
  STATIC_REQUIRE(std::is_same_v<detail::field_t<0, one>, float>);
  STATIC_REQUIRE(std::is_same_v<detail::field_t<2, stats>, double>);
  STATIC_REQUIRE(std::is_same_v<detail::field_t<0, nested>, halves>);
  STATIC_REQUIRE(std::is_same_v<detail::field_t<0, wraps_one>, stats>);
  STATIC_REQUIRE(!detail::plain_aggregate<has_constructor>);
  STATIC_REQUIRE(!detail::plain_aggregate<__half>);
  stats s{1.5f, 2, 3.25};
  detail::with_fields(s, [](float& a, int& b, double& c) { a += 1, b += 1, c += 1; });
  CHECK(s.sum == 2.5f);
  CHECK(s.count == 3);
  CHECK(s.sq == 4.25);
  stats const& cs = s;
  CHECK(detail::with_fields(cs, [](auto const&... f) { return sizeof...(f); }) == 3);
  one o{7.f};
  CHECK(detail::with_fields(o, [](float const& f) { return &f; }) == &o.value);
}

TEST_CASE("which reductions an aggregate takes", "[aggregate]") {
  using spread = reduction::per_field<reduction::sum, reduction::max, reduction::min>;
  STATIC_REQUIRE(reduction_takes<reduction::sum, stats>);
  STATIC_REQUIRE(reduction_takes<reduction::min, nested>);
  STATIC_REQUIRE(reduction_takes<spread, stats>);
  STATIC_REQUIRE(!reduction_takes<reduction::bit_or, stats>);  // float and double fields
  STATIC_REQUIRE(!reduction_takes<reduction::per_field<reduction::sum, reduction::max>, stats>);  // length
  STATIC_REQUIRE(!reduction_takes<reduction::sum, with_pointer>);
  STATIC_REQUIRE(!reduction_takes<reduction::sum, has_constructor>);
  STATIC_REQUIRE(
      reduction_takes<reduction::per_field<reduction::per_field<reduction::sum, reduction::max>, reduction::bit_xor>,
                      nested>);
  STATIC_REQUIRE(!reduction_takes<reduction::per_field<reduction::bit_and, reduction::bit_xor>, nested>);
  STATIC_REQUIRE(gpucomm::is_reduction_op<spread>);
  STATIC_REQUIRE(!gpucomm::is_reduction_op<reduction::per_field<>>);
  STATIC_REQUIRE(
      std::is_same_v<gpucomm::accumulator_t<nested>, cuda::std::tuple<cuda::std::tuple<float, float>, std::uint32_t>>);
}

TEST_CASE("aggregate folds: field by field, in order, 16-bit fields in float", "[aggregate]") {
  stats const a{1.5f, 7, -2.0}, b{2.25f, -3, 4.0}, c{-1.0f, 5, 0.5};
  stats const sum = fold<stats, reduction::sum>(a, b, c);
  CHECK(sum.sum == 2.75f);
  CHECK(sum.count == 9);
  CHECK(sum.sq == 2.5);
  stats const spread = fold<stats, reduction::per_field<reduction::sum, reduction::max, reduction::min>>(a, b, c);
  CHECK(spread.sum == 2.75f);
  CHECK(spread.count == 7);
  CHECK(spread.sq == -2.0);
  // 2048 + 1 + 1 in __half steps would stay 2048 (spacing 2); accumulated in float it is 2050.
  nested const x{{__float2half(2048.f), __float2bfloat16(256.f)}, 0b1100u};
  nested const y{{__float2half(1.f), __float2bfloat16(1.f)}, 0b1010u};
  using ops = reduction::per_field<reduction::per_field<reduction::sum, reduction::sum>, reduction::bit_xor>;
  nested const r = fold<nested, ops>(x, y, y);
  CHECK(__half2float(r.hb.h) == 2050.f);
  CHECK(__bfloat162float(r.hb.b) == 258.f);
  CHECK(r.u == 0b1100u);
  nested const m = fold<nested, reduction::max>(x, y, y);
  CHECK(__half2float(m.hb.h) == 2048.f);
  CHECK(m.u == 0b1100u);
}
