// IBGDAPost's NIC choice: the option and GPUCOMM_NIC combine without ever picking the model when
// hardware was asked for, and the InfiniBand device closest to a GPU is found in a PCI tree (a
// fake sysfs built in a temporary folder).
#include <gpucomm/host/world.hpp>
#include <gpucomm/transport/nic/select.hpp>

#include <catch2/catch.hpp>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

using gpucomm::nic_choice;
using gpucomm::detail::closest_nic;
using gpucomm::detail::resolve_nic_choice;

namespace {

std::string error_of(nic_choice option, char const* env) {
  try {
    resolve_nic_choice(option, env, 0);
  } catch (gpucomm::error const& e) {
    return e.what();
  }
  return "(no error)";
}

void make_dirs(std::string const& path) {
  for (std::size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') ::mkdir(path.substr(0, i).c_str(), 0755);
  }
}

}  // namespace

TEST_CASE("NIC choice: option and GPUCOMM_NIC", "[nic]") {
  CHECK(resolve_nic_choice(nic_choice::automatic, nullptr, 0) == nic_choice::hardware);
  CHECK(resolve_nic_choice(nic_choice::automatic, "", 0) == nic_choice::hardware);
  CHECK(resolve_nic_choice(nic_choice::automatic, "model", 0) == nic_choice::model);
  CHECK(resolve_nic_choice(nic_choice::automatic, "MODEL", 0) == nic_choice::model);
  CHECK(resolve_nic_choice(nic_choice::automatic, "hardware", 0) == nic_choice::hardware);
  CHECK(resolve_nic_choice(nic_choice::automatic, "auto", 0) == nic_choice::hardware);
  CHECK(resolve_nic_choice(nic_choice::model, nullptr, 0) == nic_choice::model);
  CHECK(resolve_nic_choice(nic_choice::model, "model", 0) == nic_choice::model);
  CHECK(resolve_nic_choice(nic_choice::model, "auto", 0) == nic_choice::model);
  CHECK(resolve_nic_choice(nic_choice::hardware, nullptr, 0) == nic_choice::hardware);
  // A hardware request is never turned into the model, and a conflict is an error, not a pick.
  CHECK_THAT(error_of(nic_choice::hardware, "model"), Catch::Contains("GPUCOMM_NIC=model") && Catch::Contains("agree"));
  CHECK_THAT(error_of(nic_choice::model, "hardware"), Catch::Contains("GPUCOMM_NIC=hardware"));
  CHECK_THAT(error_of(nic_choice::automatic, "mlx5_0"),
             Catch::Contains("GPUCOMM_NIC=mlx5_0 is not a NIC choice") && Catch::Contains("hardware, model or auto"));
}

TEST_CASE("NIC choice: the InfiniBand device closest to the GPU in the PCI tree", "[nic]") {
  char tmpl[] = "/tmp/gpucomm-sysfs-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  std::string const root = tmpl;
  // Two PCI switches under one root port; the GPU sits under the second, as do mlx5_1 and mlx5_2
  // (mlx5_2 one level further down); mlx5_0 under the first.
  std::string const dev = root + "/devices/pci0000:00/0000:00:01.0";
  std::string const sw0 = dev + "/0000:01:00.0", sw1 = dev + "/0000:02:00.0";
  std::string const gpu = sw1 + "/0000:1b:00.0";
  std::string const nic0 = sw0 + "/0000:0a:00.0", nic1 = sw1 + "/0000:1c:00.0",
                    nic2 = sw1 + "/0000:1d:00.0/0000:1e:00.0";
  for (auto const& d : {gpu, nic0, nic1, nic2, root + "/bus/pci/devices"}) make_dirs(d);
  REQUIRE(::symlink(gpu.c_str(), (root + "/bus/pci/devices/0000:1b:00.0").c_str()) == 0);
  SECTION("no InfiniBand class at all") { CHECK(closest_nic("0000:1B:00.0", root).empty()); }
  SECTION("the NIC under the GPU's switch wins; ties go to the first name") {
    int n = 0;
    for (auto const& [name, path] : {std::pair{"mlx5_0", nic0}, std::pair{"mlx5_1", nic1}, std::pair{"mlx5_2", nic2}}) {
      make_dirs(root + "/class/infiniband/" + name);
      REQUIRE(::symlink(path.c_str(), (root + "/class/infiniband/" + name + "/device").c_str()) == 0);
      ++n;
    }
    CHECK(n == 3);
    CHECK(closest_nic("0000:1B:00.0", root) == "mlx5_1");  // bus ids compare case-insensitively
    CHECK(closest_nic("0000:99:00.0", root) == "mlx5_0");  // unknown GPU: the first device
  }
  std::string const cleanup = "rm -rf '" + root + "'";
  CHECK(std::system(cleanup.c_str()) == 0);
}
