// The benchmark harness's --only filter: which points it lets through, and which clauses it refuses.
#include "../../benchmarks/harness/filter.hpp"

#include <catch2/catch.hpp>

#include <map>
#include <string>

namespace {

using point = std::map<std::string, std::string>;

bool passes(bench::point_filter const& f, point const& p) {
  return f.accepts([&](std::string const& axis) { return p.at(axis); });
}

point at(std::string scope, std::string ctas, std::string size, std::string variant = "uni") {
  return {{"variant", variant}, {"scope", scope}, {"transport", "NVLinkStore"}, {"ctas", ctas}, {"threads", "1024"},
          {"npes", "2"},        {"size", size}};
}

}  // namespace

TEST_CASE("an empty filter lets every point through", "[bench]") {
  bench::point_filter f;
  CHECK(f.empty());
  CHECK(passes(f, at("block", "4", "65536")));
  CHECK(passes(f, at("thread", "132", "8", "bidir")));
}

TEST_CASE("a filter needs every named axis to take one of its values", "[bench]") {
  bench::point_filter f;
  f.add("scope=block");
  f.add("ctas=4,132");
  f.add("size=65536..2097152");
  CHECK(!f.empty());
  CHECK(passes(f, at("block", "4", "65536")));
  CHECK(passes(f, at("block", "132", "2097152")));
  CHECK(passes(f, at("block", "132", "1048576", "bidir")));
  CHECK(!passes(f, at("warp", "4", "65536")));     // scope
  CHECK(!passes(f, at("block", "16", "65536")));   // ctas
  CHECK(!passes(f, at("block", "4", "65535")));    // below the range
  CHECK(!passes(f, at("block", "4", "2097153")));  // above it
  CHECK(!passes(f, at("block", "41", "65536")));   // 4 is a whole value, not a prefix
}

TEST_CASE("a numeric axis compares as a number", "[bench]") {
  bench::point_filter f;
  f.add("ctas=04");
  CHECK(passes(f, at("block", "4", "8")));
  CHECK(!passes(f, at("block", "40", "8")));
}

TEST_CASE("a numeric axis takes single numbers and ranges in one list", "[bench]") {
  bench::point_filter f;
  f.add("size=8,1024..4096");
  CHECK(passes(f, at("block", "1", "8")));
  CHECK(passes(f, at("block", "1", "1024")));
  CHECK(passes(f, at("block", "1", "4096")));
  CHECK(!passes(f, at("block", "1", "16")));
  CHECK(!passes(f, at("block", "1", "8192")));
}

TEST_CASE("a filter refuses clauses it cannot apply, saying why", "[bench]") {
  bench::point_filter f;
  CHECK_THROWS_WITH(f.add("scope"), Catch::Contains("expected AXIS=VALUE"));
  CHECK_THROWS_WITH(f.add("=block"), Catch::Contains("expected AXIS=VALUE"));
  CHECK_THROWS_WITH(f.add("scope="), Catch::Contains("expected AXIS=VALUE"));
  CHECK_THROWS_WITH(f.add("grid=4"), Catch::Contains("unknown axis 'grid'") && Catch::Contains("ctas"));
  CHECK_THROWS_WITH(f.add("ctas=four"), Catch::Contains("not a number"));
  CHECK_THROWS_WITH(f.add("ctas=4,,8"), Catch::Contains("empty value"));
  CHECK_THROWS_WITH(f.add("size=9..8"), Catch::Contains("LO <= HI"));
  CHECK_THROWS_WITH(f.add("size=1..x"), Catch::Contains("LO..HI"));
  CHECK_THROWS_WITH(f.add("scope=a..b"), Catch::Contains("numeric axis"));
  CHECK(f.empty());  // nothing refused was kept
  f.add("size=8");
  CHECK_THROWS_WITH(f.add("size=16"), Catch::Contains("named twice"));
  CHECK(passes(f, at("block", "1", "8")));  // the first clause stays as it was
  CHECK(!passes(f, at("block", "1", "16")));
}
