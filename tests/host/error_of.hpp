#pragma once
// What a call throws as gpucomm::error, as text ("(no error)" when it throws nothing): host tests
// check error messages with it.
#include <gpucomm/error.hpp>

#include <string>

namespace gpucomm::test {

template <class F>
std::string error_of(F const& f) {
  try {
    f();
  } catch (gpucomm::error const& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace gpucomm::test
