#pragma once
// What every part of verbs_gpu's host set-up shares: setup_error, the one exception it throws, and
// the helpers that word its messages (the call, its error, the backend's diagnostic, the firmware's
// status and syndrome) and size its objects.

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "../backend.hpp"
#include "../prm_cmd.hpp"

namespace gpucomm::verbs_gpu::host {

/// A setup step failed; what() names the call, the error and what to do.
class setup_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
[[noreturn]] inline void fail(std::string const& what, std::string const& hint = {}) {
  throw setup_error("gpucomm::verbs_gpu: " + what + (hint.empty() ? "" : " -- " + hint));
}
inline std::string errno_text(int e) { return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")"; }
inline std::string hex(std::uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}
/// The backend's own words on its last failure, as " [...]", or nothing.
inline std::string said(backend const& be) {
  std::string const d = be.diagnostic();
  return d.empty() ? std::string() : " [" + std::string(be.name()) + ": " + d + "]";
}
/// log2 of v rounded up to a power of two.
inline unsigned log2_ceil(std::uint64_t v) {
  unsigned l = 0;
  while ((std::uint64_t{1} << l) < v) ++l;
  return l;
}
inline std::size_t round_up(std::size_t v, std::size_t to) { return (v + to - 1) / to * to; }

/// The firmware's status names (the kernel's MLX5_CMD_STAT_*, refs section 9).
inline char const* status_name(std::uint32_t s) {
  switch (s) {
    case 0x0:
      return "OK";
    case 0x1:
      return "internal error";
    case 0x2:
      return "bad operation";
    case 0x3:
      return "bad parameter";
    case 0x4:
      return "bad system state";
    case 0x5:
      return "bad resource";
    case 0x6:
      return "resource busy";
    case 0x7:
      return "not ready";
    case 0x8:
      return "limits exceeded";
    case 0x9:
      return "bad resource state";
    case 0xa:
      return "bad index";
    case 0xf:
      return "no resources";
    case 0x10:
      return "bad QP state";
    case 0x30:
      return "bad packet";
    case 0x40:
      return "bad size of outstanding CQEs";
    case 0x50:
      return "bad input length";
    case 0x51:
      return "bad output length";
    default:
      return "unknown status";
  }
}

/// Throws unless a firmware command succeeded: `rc` is what the backend returned, `out` the
/// command's output (status, syndrome).
inline void check_cmd(backend const& be, int rc, void const* out, std::string const& what) {
  std::uint32_t const status = prm::get(out, prm::out_status);
  if (rc == 0 && status == 0) return;
  std::string const verdict = " (firmware status " + hex(status) + " " + status_name(status) + ", syndrome " +
                              hex(prm::get(out, prm::out_syndrome)) + ")";
  if (rc == EREMOTEIO || (rc == 0 && status != 0)) {
    fail(what + " was rejected by the firmware" + verdict + said(be),
         "the kernel does not log failed DEVX commands, so this status and syndrome are the only record: the "
         "syndrome names the failed check (NVIDIA's firmware tools decode it); check the field named above "
         "against the PRM");
  }
  fail(what + " was refused before the firmware saw it: " + errno_text(rc) + said(be),
       "EPERM: DEVX objects may need CAP_NET_RAW; EINVAL/EOPNOTSUPP: the kernel's DEVX layer refused the "
       "command or the rdma-core in use lacks the call");
}
}  // namespace detail

}  // namespace gpucomm::verbs_gpu::host
