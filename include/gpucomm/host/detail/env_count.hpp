#pragma once
// Counts read from environment variables, strictly: decimal digits only, within [low, high]. No
// sign, no spaces, no base prefix, no suffix: "-1" would wrap through strtoull, "010" would be
// octal through base 0, and " 5" or "5k" would be half-read. Anything else is a gpucomm::error
// naming the variable, its value and the accepted range. Words (a mode's name) likewise: one of a
// list, spelled exactly.

#include <cstddef>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "../../error.hpp"

namespace gpucomm::detail {

/// The value of environment variable `name` as a count in [low, high]; nothing when it is unset or
/// empty. `call` names the caller in the error, `pe` the PE (-1: none); `hint` says what to give
/// instead.
inline std::optional<unsigned long long> env_count(char const* name, unsigned long long low, unsigned long long high,
                                                   char const* call, char const* hint, int pe = -1) {
  char const* const text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  unsigned long long value = 0;
  bool ok = true;
  for (char const* c = text; *c != '\0' && ok; ++c) {
    unsigned const digit = static_cast<unsigned>(*c - '0');
    ok = digit <= 9 && value <= (std::numeric_limits<unsigned long long>::max() - digit) / 10;  // no wrap
    value = value * 10 + digit;
  }
  if (!ok || value < low || value > high) {
    throw error(call, pe,
                std::string(name) + "=" + text + " is not a decimal count from " + std::to_string(low) + " to " +
                    std::to_string(high),
                hint);
  }
  return value;
}

/// Which of `words` environment variable `name` holds (its index); nothing when it is unset. Any
/// other value, empty included, is a gpucomm::error naming the variable and the words.
inline std::optional<std::size_t> env_word(char const* name, std::initializer_list<char const*> words, char const* call,
                                           int pe, char const* hint) {
  char const* const text = std::getenv(name);
  if (text == nullptr) return std::nullopt;
  std::string listed;
  std::size_t index = 0;
  for (char const* w : words) {
    if (std::string_view(text) == w) return index;
    listed += (index == 0 ? "" : index + 1 == words.size() ? " or " : ", ") + std::string(w);
    ++index;
  }
  throw error(call, pe, std::string(name) + "=" + text + " is not one of " + listed, hint);
}

}  // namespace gpucomm::detail
