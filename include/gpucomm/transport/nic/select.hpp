#pragma once
// Which NIC IBGDAPost (and ProxyQueue's NIC backend) drives: the user's choice (ibgda_options::nic, GPUCOMM_NIC) and,
// for real hardware, the InfiniBand device closest to each GPU in the PCI tree. Host-only, no rdma-core: the tree is
// read from sysfs, so the choice is unit-tested on machines without a NIC.

#include <dirent.h>

#include <cctype>
#include <cstddef>
#include <string>
#include <vector>

#include "../../error.hpp"
#include "choice.hpp"
#include "../../verbs_gpu/host/pci_path.hpp"

namespace gpucomm::detail {

namespace pci = verbs_gpu::host::pci;

/// The NIC to use, from the option and the environment variable's value (`env`, may be null).
/// An explicit option and a different explicit variable conflict: that is an error rather than a
/// silent pick, so a job that asked for hardware never runs on the model by accident.
inline nic_choice resolve_nic_choice(nic_choice option, char const* env, int pe, std::string const& who = "IBGDAPost",
                                     std::string const& option_name = "ibgda_options::nic") {
  nic_choice from_env = nic_choice::automatic;
  if (env != nullptr && *env != '\0') {
    std::string v(env);
    for (auto& ch : v) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (v == "model")
      from_env = nic_choice::model;
    else if (v == "hardware" || v == "hw")
      from_env = nic_choice::hardware;
    else if (v != "auto" && v != "automatic")
      throw error(who + " (GPUCOMM_NIC)", pe, "GPUCOMM_NIC=" + std::string(env) + " is not a NIC choice",
                  "set GPUCOMM_NIC to hardware, model or auto");
  }
  if (option == nic_choice::automatic) return from_env == nic_choice::automatic ? nic_choice::hardware : from_env;
  if (from_env != nic_choice::automatic && from_env != option) {
    throw error(who + " (" + option_name + ")", pe,
                option_name + " asks for the " + (option == nic_choice::model ? "NIC model" : "hardware NIC") +
                    " but GPUCOMM_NIC=" + env + " asks for the other",
                "make them agree, or leave " + option_name + " at automatic and let GPUCOMM_NIC decide");
  }
  return option;
}

/// The name of the InfiniBand device (e.g. "mlx5_0") that shares the longest PCI path with the
/// GPU of PCI bus id `gpu_bus_id` (as cudaDeviceGetPCIBusId gives it), reading the tree under
/// `sysfs`; "" if there is none. Ties go to the first name in order.
inline std::string closest_nic(std::string gpu_bus_id, std::string const& sysfs = "/sys") {
  std::string const gpu = pci::real_path(sysfs + "/bus/pci/devices/" + pci::sysfs_bus_id(gpu_bus_id));
  std::vector<std::string> names;
  if (DIR* dir = ::opendir((sysfs + "/class/infiniband").c_str())) {
    while (dirent* e = ::readdir(dir)) {
      if (e->d_name[0] != '.') names.emplace_back(e->d_name);
    }
    ::closedir(dir);
  }
  std::string best;
  std::size_t best_score = 0;
  for (auto const& name : names) {
    std::string const nic = pci::real_path(sysfs + "/class/infiniband/" + name + "/device");
    if (nic.empty()) continue;
    std::size_t const score = gpu.empty() ? 0 : pci::common_components(gpu, nic);
    if (best.empty() || score > best_score || (score == best_score && name < best)) {
      best = name;
      best_score = score;
    }
  }
  return best;
}

}  // namespace gpucomm::detail
