#pragma once
// Connecting QPs of the software NIC model (verbs_gpu/model) between every pair of PEs of a world,
// for the transports that drive it (IBGDAPost, ProxyQueue's NIC backend). Host only.
//
// Each local PE brings `k` QPs to every PE (itself included: loopback), made on the process's
// nic, and its symmetric heap slot registered with it. A single-process world connects its own QPs
// pairwise on its one nic; with one process per GPU each process's nic listens on an address of
// its own (named after the world's session, the transport and the PE) and its QPs connect to the
// peers' nics through the model's fabric, so every operation on a PE's memory is executed by that
// PE's nic (one atomicity domain per nic).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "../../host/world.hpp"
#include "../../verbs_gpu/model/nic_model.hpp"

namespace gpucomm::detail {

/// How the NIC reaches one PE's heap slot: where it starts in that PE's address space (what the
/// registration names) and the region's rkey (host order).
struct nic_heap {
  std::uint64_t base = 0;
  std::uint32_t rkey = 0;
  std::uint32_t reserved = 0;
};
static_assert(sizeof(nic_heap) == 16);

/// One local PE's side of the mesh.
struct mesh_member {
  int pe = 0;
  nic_heap heap;                    ///< its registered slot
  std::vector<std::uint32_t> qpns;  ///< [to * k + j]: its j-th QP to PE `to`
};

/// The fabric address of PE `pe`'s nic for the transport called `who`.
inline std::string model_address(world const& w, char const* who, int pe) {
  char name[128];
  std::snprintf(name, sizeof(name), "gpucomm-%s-%016llx-%d", who, static_cast<unsigned long long>(w.session_id()), pe);
  return name;
}

/// Connects the QPs of `members` (this process's PEs, in local_pes() order) to their peers' and
/// returns every PE's heap as the NIC reaches it ([pe]). Collective over the world's processes.
/// `who` names the transport in the fabric addresses (two transports' nics never meet).
inline std::vector<nic_heap> connect_model_mesh(world& w, verbs_gpu::model::nic& nic, char const* who,
                                                std::vector<mesh_member> const& members, int k) {
  int const npes = w.npes();
  std::size_t const per_pe = static_cast<std::size_t>(npes) * static_cast<std::size_t>(k);
  bool const multi = w.one_process_per_gpu();
  if (multi) nic.listen(model_address(w, who, members.front().pe));
  std::vector<nic_heap> heaps(static_cast<std::size_t>(npes));
  std::vector<std::uint32_t> qpns(static_cast<std::size_t>(npes) * per_pe);  // [pe][to * k + j]
  if (!multi) {
    for (auto const& m : members) {
      heaps[static_cast<std::size_t>(m.pe)] = m.heap;
      for (std::size_t i = 0; i < per_pe; ++i) qpns[static_cast<std::size_t>(m.pe) * per_pe + i] = m.qpns[i];
    }
  } else {
    mesh_member const& m = members.front();
    w.bootstrap().allgather(&m.heap, heaps.data(), sizeof(nic_heap));
    w.bootstrap().allgather(m.qpns.data(), qpns.data(), per_pe * sizeof(std::uint32_t));
  }
  auto qpn_of = [&](int from, int to, int j) {
    return qpns[static_cast<std::size_t>(from) * per_pe + static_cast<std::size_t>(to) * k + j];
  };
  for (auto const& m : members) {
    for (int to = 0; to < npes; ++to) {
      for (int j = 0; j < k; ++j) {
        std::uint32_t const mine = qpn_of(m.pe, to, j);
        if (!multi) {
          if (m.pe <= to) nic.connect(mine, qpn_of(to, m.pe, j));
        } else if (to == m.pe) {
          nic.connect(mine, mine);  // loopback
        } else {
          nic.connect_remote(mine, model_address(w, who, to), qpn_of(to, m.pe, j));
        }
      }
    }
  }
  return heaps;
}

}  // namespace gpucomm::detail
