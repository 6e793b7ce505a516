#pragma once
// PCI closeness from sysfs: how many leading components two devices' canonical sysfs paths share
// (the longer the shared path, the fewer PCI switches between them). Used to pick the NIC closest
// to a GPU, by the set-up (setup.hpp) and by the transports (transport/nic/select.hpp).
// Host-only, no rdma-core, no CUDA: tests point it at a fake sysfs tree.

#include <limits.h>
#include <stdlib.h>

#include <cctype>
#include <cstddef>
#include <string>

namespace gpucomm::verbs_gpu::host::pci {

/// Canonical path of `p`, or "" if it does not exist.
inline std::string real_path(std::string const& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) != nullptr ? std::string(buf) : std::string();
}

/// How many leading path components a and b share.
inline std::size_t common_components(std::string const& a, std::string const& b) {
  std::size_t n = 0, i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) {
    ++i;
    bool const end_a = i == a.size() || a[i] == '/';
    bool const end_b = i == b.size() || b[i] == '/';
    if (end_a && end_b) ++n;
  }
  return n;
}

/// A PCI bus id as sysfs names it (lower case hex: cudaDeviceGetPCIBusId gives upper case).
inline std::string sysfs_bus_id(std::string id) {
  for (auto& ch : id) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return id;
}

}  // namespace gpucomm::verbs_gpu::host::pci
