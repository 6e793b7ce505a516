#pragma once
// Host-side errors. Every failure gpucomm reports on the host is a gpucomm::error that says which
// call failed, on which PE, why, and what to do about it. Nothing is leaked when one is thrown:
// every resource is owned by an RAII object before the next call that can fail.

#include <cuda_runtime_api.h>

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "config.hpp"

namespace gpucomm {

/// Thrown by every host-side gpucomm call that fails.
class error : public std::runtime_error {
 public:
  /// `call`: the failing call ("world::alloc", "cuMemCreate"); `pe`: the PE it failed on, or -1
  /// when it is not about one PE; `what`: what went wrong; `hint`: what the user should do.
  error(std::string call, int pe, std::string const& what, std::string hint = {})
      : std::runtime_error(format(call, pe, what, hint)), call_(std::move(call)), pe_(pe) {}

  /// The failing call, as named in the message.
  std::string const& call() const noexcept { return call_; }
  /// The PE the failure happened on, or -1.
  int pe() const noexcept { return pe_; }

 private:
  static std::string format(std::string const& call, int pe, std::string const& what, std::string const& hint) {
    std::ostringstream os;
    os << "gpucomm: " << call;
    if (pe >= 0) os << " on PE " << pe;
    os << ": " << what;
    if (!hint.empty()) os << ". " << hint;
    return os.str();
  }

  std::string call_;
  int pe_;
};

namespace detail {

inline void check_cuda(cudaError_t rc, char const* call, int pe) {
  if (rc == cudaSuccess) return;
  throw error(call, pe, std::string(cudaGetErrorName(rc)) + " (" + cudaGetErrorString(rc) + ")",
              "check that the GPU is visible to this process and that its driver matches CUDA 13");
}

}  // namespace detail
}  // namespace gpucomm

/// Check a CUDA runtime call; throws gpucomm::error naming the call and the PE.
#define GPUCOMM_CUDA_CHECK(expr, pe) ::gpucomm::detail::check_cuda((expr), #expr, (pe))
