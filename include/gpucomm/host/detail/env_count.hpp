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
std::optional<unsigned long long> env_count(char const* name, unsigned long long low, unsigned long long high,
                                            char const* call, char const* hint, int pe = -1);

/// Which of `words` environment variable `name` holds (its index); nothing when it is unset. Any
/// other value, empty included, is a gpucomm::error naming the variable and the words.
std::optional<std::size_t> env_word(char const* name, std::initializer_list<char const*> words, char const* call,
                                    int pe, char const* hint);

}  // namespace gpucomm::detail

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "env_count.inl"
#endif
