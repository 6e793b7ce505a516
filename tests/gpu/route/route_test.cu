// route<NVLinkStore, IBGDAPost>'s own tests (the op suite in ../ops runs on it with the forced
// split of harness.cuh): each peer's leg follows what load/store can reach, and every PE's memory
// has one atomicity domain, the NIC as soon as any PE reaches it only through the NIC.
#include "../ops/common.cuh"

using gpucomm::test::transport_under_test;

TEST_CASE("route: legs follow load/store reach, one atomicity domain per target PE", "[gpu][route]") {
  auto& w = gpucomm::test::the_world();
  auto& host = w.transport_host<transport_under_test>();
  int const npes = w.npes();
  int split = 0;
  for (int from = 0; from < npes; ++from) {
    for (int to = 0; to < npes; ++to) {
      bool const direct = w.can_load_store(from, to);
      INFO("PE " << from << " -> PE " << to);
      CHECK(host.leg_of(from, to) == (direct ? 0 : 1));
      CHECK(direct == (gpucomm::test::same_half(npes, from, to) || from == to));
      split += !direct;
    }
  }
  for (int to = 0; to < npes; ++to) {
    bool any_far = false;
    for (int from = 0; from < npes; ++from) any_far |= !w.can_load_store(from, to);
    INFO("PE " << to);
    CHECK(host.domain_of(to) == (any_far ? 1 : 0));
  }
  if (npes >= 2) CHECK(split > 0);  // the forced split took effect
}
