// Environment counts are read strictly (host/detail/env_count.hpp): decimal digits only, in range.
#include <gpucomm/host/detail/env_count.hpp>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

namespace {
std::string read_error(char const* value, unsigned long long low, unsigned long long high) {
  ::setenv("GPUCOMM_TEST_COUNT", value, 1);
  try {
    gpucomm::detail::env_count("GPUCOMM_TEST_COUNT", low, high, "test", "give a count");
  } catch (gpucomm::error const& e) {
    ::unsetenv("GPUCOMM_TEST_COUNT");
    return e.what();
  }
  ::unsetenv("GPUCOMM_TEST_COUNT");
  return "(no error)";
}
std::optional<unsigned long long> read(char const* value, unsigned long long low, unsigned long long high) {
  ::setenv("GPUCOMM_TEST_COUNT", value, 1);
  auto const v = gpucomm::detail::env_count("GPUCOMM_TEST_COUNT", low, high, "test", "give a count");
  ::unsetenv("GPUCOMM_TEST_COUNT");
  return v;
}
}  // namespace

TEST_CASE("env_count takes decimal counts in range and nothing else", "[env]") {
  ::unsetenv("GPUCOMM_TEST_COUNT");
  CHECK_FALSE(gpucomm::detail::env_count("GPUCOMM_TEST_COUNT", 1, 10, "test", "h").has_value());
  CHECK_FALSE(read("", 1, 10).has_value());  // empty counts as unset
  CHECK(read("7", 1, 10) == 7ull);
  CHECK(read("010", 1, 10) == 10ull);  // decimal, not octal
  CHECK(read("1", 1, 1) == 1ull);
  CHECK(read("18446744073709551615", 0, ~0ull) == ~0ull);
  for (char const* bad : {"-1", "+5", " 5", "5 ", "0x10", "4G", "abc", "1.5", "0", "11", "18446744073709551616",
                          "99999999999999999999999"}) {
    INFO(bad);
    CHECK(read_error(bad, 1, 10) == std::string("gpucomm: test: GPUCOMM_TEST_COUNT=") + bad +
                                        " is not a decimal count from 1 to 10. give a count");
  }
  CHECK_THAT(read_error("7", 8, 9), Catch::Contains("from 8 to 9"));  // a digit above a one-digit bound
}
