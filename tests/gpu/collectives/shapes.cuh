#pragma once
// The team shapes and counts every collective runs on: the world, a strided team (every other
// PE), a one-PE team (the last PE), and, with two PEs or more, the odd PEs (a team not starting at
// 0); counts 0, 1, odd, and several rounds' worth (workspaces of 256-byte blocks, so 100 ints take
// two rounds and the large count dozens).
#include "common.cuh"

namespace gpucomm::test::coll {

/// The team shapes, split on construction and destroyed with it (collective over the world).
struct team_set {
  std::vector<team> teams;
  std::vector<team> made;

  team_set() {
    auto& w = gpucomm::test::the_world();
    int const npes = w.npes();
    teams.push_back(w.team_world());
    made.push_back(w.team_split(w.team_world(), 0, 2, (npes + 1) / 2));
    made.push_back(w.team_split(w.team_world(), npes - 1, 1, 1));
    if (npes >= 2) made.push_back(w.team_split(w.team_world(), 1, 2, npes / 2));
    teams.insert(teams.end(), made.begin(), made.end());
  }
  team_set(team_set const&) = delete;
  team_set& operator=(team_set const&) = delete;
  ~team_set() {
    auto& w = gpucomm::test::the_world();
    for (auto it = made.rbegin(); it != made.rend(); ++it) w.team_destroy(*it);
  }
};

/// The reductions, each collective and form (packet rounds where the transport reaches every peer
/// with load/store).
inline std::vector<kind> const reductions = [] {
  std::vector<kind> k{kind::reduce,
                      kind::reduce_scatter,
                      kind::reduce_scatter_in_place,
                      kind::allreduce_one_shot,
                      kind::allreduce_two_shot,
                      kind::allreduce_automatic,
                      kind::allreduce_in_place};
  if constexpr (load_store_everywhere) {
    k.push_back(kind::allreduce_packets);
    k.push_back(kind::allreduce_packets_in_place);
  }
  return k;
}();

/// How many (group kind, element type) pairs the shape tests rotate through: all of them on
/// NVLinkStore, fewer on the other transports, whose builds are several times longer (the
/// collectives' code is the same; what varies by transport is put_signal and signal).
/// (route: 2, the fewest that still varies the group kind; its builds are the longest of all.)
constexpr int rotation = full_sample ? 5 : is_route<transport_under_test> ? 2 : 3;

inline std::vector<std::size_t> test_counts() {
  return {0, 1, 37, 1000 / static_cast<std::size_t>(model_slowdown) + 3};
}

}  // namespace gpucomm::test::coll
