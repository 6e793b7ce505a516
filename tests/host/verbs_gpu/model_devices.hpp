#pragma once
// Model devices the firmware-model and set-up tests share: an InfiniBand device with a LID and a
// PCI address, and a RoCE device with an IPv4 address (Linux's default GID table).

#include <gpucomm/testing/nic_model/firmware.hpp>

#include <cstdint>
#include <string>
#include <utility>

namespace gpucomm_test {

inline gpucomm::verbs_gpu::model::firmware_config ib_device(std::string name, std::uint16_t lid) {
  gpucomm::verbs_gpu::model::firmware_config c;
  c.name = std::move(name);
  c.pci_bus_id = "0000:" + std::to_string(16 + lid) + ":00.0";
  c.ports = {gpucomm::verbs_gpu::model::port_config::infiniband(lid, 0x0002c90300000000ull + lid)};
  return c;
}

inline gpucomm::verbs_gpu::model::firmware_config roce_device(std::string name, std::uint32_t ip) {
  gpucomm::verbs_gpu::model::firmware_config c;
  c.name = std::move(name);
  c.ports = {gpucomm::verbs_gpu::model::port_config::roce(ip, 0x020000fffe000000ull + ip)};
  return c;
}

}  // namespace gpucomm_test
