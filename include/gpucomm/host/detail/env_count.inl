#pragma once
// The bodies of env_count.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::detail {

inline std::optional<unsigned long long> env_count(char const* name, unsigned long long low, unsigned long long high,
                                                   char const* call, char const* hint, int pe) {
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
