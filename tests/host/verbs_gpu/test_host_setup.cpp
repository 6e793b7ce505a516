// verbs_gpu host setup without a NIC: the PRM command field encoder, and the clear error a
// machine without an RDMA device gets from the set-up on rdma-core (setup_model_test.cpp runs the
// set-up against the firmware model).
#include <catch2/catch.hpp>

#if __has_include(<infiniband/mlx5dv.h>) && defined(GPUCOMM_HAVE_RDMA_CORE)
#include <gpucomm/verbs_gpu/host/rdma_core_backend.hpp>
#include <gpucomm/verbs_gpu/host/setup.hpp>

#include <cstring>

namespace prm = gpucomm::verbs_gpu::host::prm;

TEST_CASE("verbs_gpu PRM command fields land where DEVX_SET puts them", "[verbs][host]") {
  std::uint32_t buf[prm::create_qp_in_bytes / 4] = {};
  prm::set(buf, prm::in_opcode, prm::op_create_qp);
  CHECK(be32toh(buf[0]) == 0x05000000u);
  // qpc.pd: bits 0xc0 + 0x28 .. + 24, the low 24 bits of big-endian word 7.
  prm::set(buf, prm::qpc_pd, 0xabcdef);
  CHECK(be32toh(buf[7]) == 0x00abcdefu);
  // qpc.log_sq_size: 4 bits at 0xc0 + 0x51, i.e. bits [14:11] of word 8 (counting from bit 31).
  prm::set(buf, prm::qpc_log_sq_size, 0xf);
  CHECK(be32toh(buf[8]) == (0xfu << (32 - 0x11 - 4)));
  CHECK(prm::get(buf, prm::qpc_log_sq_size) == 0xf);
  // A 64-bit field: qpc.dbr_addr at bit 0xc0 + 0x500 = 0x5c0, words 46 and 47.
  prm::set(buf, prm::qpc_dbr_addr, 0x0123456789abcdefull);
  CHECK(be32toh(buf[46]) == 0x01234567u);
  CHECK(be32toh(buf[47]) == 0x89abcdefu);
  // Neighbours untouched, values masked to the field width.
  prm::set(buf, prm::qpc_rwe, 7);
  CHECK(prm::get(buf, prm::qpc_rwe) == 1);
  CHECK(prm::get(buf, prm::qpc_rre) == 0);
  CHECK(prm::get(buf, prm::qpc_rae) == 0);
  CHECK(prm::get(buf, prm::qpc_atomic_mode) == 0);
  // Every field read back after writing all-ones into a zeroed buffer has exactly its width.
  for (auto f : {prm::cqc_cc, prm::cqc_oi, prm::cqc_log_cq_size, prm::cqc_uar_page, prm::cqc_c_eqn, prm::qpc_mtu,
                 prm::qpc_remote_qpn, prm::ads_rlid, prm::qpc_retry_count, prm::qpc_rnr_retry, prm::qpc_next_send_psn,
                 prm::qpc_cqn_snd, prm::qpc_min_rnr_nak, prm::qpc_rq_type}) {
    std::uint32_t b[prm::create_qp_in_bytes / 4] = {};
    prm::set(b, f, ~0ull);
    CHECK(prm::get(b, f) == (f.width == 32 ? 0xffffffffu : (1u << f.width) - 1));
    unsigned ones = 0;
    for (auto w : b) ones += static_cast<unsigned>(__builtin_popcount(w));
    CHECK(ones == f.width);
  }
}

TEST_CASE("verbs_gpu host setup without an RDMA device fails with a clear message", "[verbs][host]") {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list) ibv_free_device_list(list);
  if (n > 0) {
    WARN("an RDMA device is present; the no-device error path is not exercised here");
    return;
  }
  try {
    gpucomm::verbs_gpu::host::rdma_core_backend be;
    gpucomm::verbs_gpu::host::device d(be);
    FAIL("opening a device succeeded without an RDMA device");
  } catch (gpucomm::verbs_gpu::host::setup_error const& e) {
    std::string const msg = e.what();
    CHECK(msg.find("no RDMA device") != std::string::npos);
    CHECK(msg.find("mlx5") != std::string::npos);
  }
}
#endif
