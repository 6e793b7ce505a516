#pragma once
// The control block: gpucomm's own symmetric memory at offset 0 of every PE's heap slot, the same
// layout at every PE, read by device code through comm and written at set-up by the world.
// Layout (64-bit words):
//   header, 8 words, written once by the host when the world is built, read by device code for
//   reports and wait timeouts:
//     [0] this PE   [1] npes   [2] max_teams   [3..5] this PE's shared-GPU team: start, stride, size
//     [6] how long a device-side wait may take: ns, encoded (detail/bounded_wait.cuh) from
//         world_options::wait_timeout
//   then max_teams team slots of slot_words(npes) words each, slot s at 8 + s * slot_words:
//     [0]      epoch: how many barriers this PE has entered on the team in slot s (local)
//     [1..7]   unused: keeps the epoch on its own 64-byte line, away from the flags peers write
//     [8 + r]  arrival flag of team rank r: the last epoch rank r announced to this PE
// Slot 0 is the world team, 1 the node team, 2 the shared-GPU team; user teams take the others.
// comm holds the address of slot 0 (`team_states`), so the world team's epoch and flags sit at
// words 0 and 8 from it.

#include <cstddef>
#include <cstdint>

#include "../config.hpp"

namespace gpucomm::detail {

struct control_block_layout {
  static constexpr std::size_t header_words = 8;
  static constexpr std::size_t header_pe = 0;
  static constexpr std::size_t header_npes = 1;
  static constexpr std::size_t header_max_teams = 2;
  static constexpr std::size_t header_gpu_team = 3;  // start, stride, size
  static constexpr std::size_t header_wait_timeout = 6;

  static constexpr int world_slot = 0;
  static constexpr int node_slot = 1;
  static constexpr int shared_gpu_slot = 2;
  static constexpr int predefined_slots = 3;

  static constexpr std::size_t epoch_word = 0;
  static constexpr std::size_t flags_word = 8;

  /// Words per team slot: the epoch line, then one flag per PE rounded up to whole lines.
  GPUCOMM_HD static constexpr std::size_t slot_words(int npes) {
    return flags_word + ((static_cast<std::size_t>(npes) + 7) & ~std::size_t{7});
  }
  /// Bytes of the whole block.
  GPUCOMM_HD static constexpr std::size_t bytes(int npes, int max_teams) {
    return (header_words + static_cast<std::size_t>(max_teams) * slot_words(npes)) * 8;
  }
};

/// One team's barrier words at one PE.
struct team_words {
  std::uint64_t* epoch = nullptr;
  std::uint64_t* flags = nullptr;  ///< flags[r]: written by team rank r
};

/// Team slot `slot`'s words, given the address of slot 0.
GPUCOMM_HD GPUCOMM_FORCEINLINE team_words team_words_at(std::uint64_t* slot0, int npes, int slot) {
  std::uint64_t* const words = slot0 + static_cast<std::size_t>(slot) * control_block_layout::slot_words(npes);
  return {words + control_block_layout::epoch_word, words + control_block_layout::flags_word};
}

/// The header, given the address of slot 0.
GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint64_t const* control_header(std::uint64_t const* slot0) {
  return slot0 - control_block_layout::header_words;
}

}  // namespace gpucomm::detail
