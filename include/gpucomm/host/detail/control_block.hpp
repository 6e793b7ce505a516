#pragma once
// The control block: gpucomm's own symmetric memory at offset 0 of every PE's heap slot.
// Layout (64-bit words): [0] barrier epoch, local to the PE (how many barriers it has entered);
// [8 + i] barrier flag of PE i (the last epoch PE i announced to this PE). Words 1..7 keep the
// epoch on its own 64-byte line, away from the flags peers write.

#include <cstddef>
#include <cstdint>

namespace gpucomm::detail {

struct control_block_layout {
  static constexpr std::size_t epoch_word = 0;
  static constexpr std::size_t flags_word = 8;

  static constexpr std::size_t bytes(int npes) { return (flags_word + static_cast<std::size_t>(npes)) * 8; }
};

/// Pointers into one PE's control block, in that PE's address space.
struct control_block_view {
  std::uint64_t* barrier_epoch = nullptr;
  std::uint64_t* barrier_flags = nullptr;  // barrier_flags[i]: written by PE i
};

inline control_block_view control_block_at(void* block_base) {
  auto* words = static_cast<std::uint64_t*>(block_base);
  return {words + control_block_layout::epoch_word, words + control_block_layout::flags_word};
}

}  // namespace gpucomm::detail
