#pragma once
// For the programs that check what a program not linked with an optional CMake target is told
// (engine/not_linked_test.cpp, nic_model/setup_absent.cpp): the gpucomm::error must name the target.

#include <gpucomm/error.hpp>

#include <cstdio>
#include <functional>
#include <initializer_list>
#include <string>

namespace gpucomm::test {

/// Whether f throws a gpucomm::error whose message holds every one of `words`; prints PASS or
/// FAIL with `case_name` and the message.
inline bool throws_naming(char const* case_name, std::initializer_list<std::string> words,
                          std::function<void()> const& f) {
  try {
    f();
  } catch (gpucomm::error const& e) {
    std::string const what = e.what();
    bool ok = true;
    for (std::string const& w : words) ok = ok && what.find(w) != std::string::npos;
    std::printf("%s: %s: %s\n", ok ? "PASS" : "FAIL", case_name, e.what());
    return ok;
  }
  std::printf("FAIL: %s: no error\n", case_name);
  return false;
}

}  // namespace gpucomm::test
