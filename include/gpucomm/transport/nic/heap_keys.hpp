#pragma once
// The NIC's keys of the symmetric heap, as IBGDAPost's kernels look them up.
//
// Every block of the heap (one allocation: its own physical memory, mapped at the same offset in
// every PE's slot) is a memory region of its own on every PE's NIC. A NIC can register only memory
// that is mapped: peer memory pins the pages behind the range, and a dma-buf is exported from a
// mapped range; a PE's slot is a reserved range mapped block by block, with holes between blocks.
// So each PE has a (base, length, rkey) per block, and a put must find the rkey of the block that
// holds its target.
//
// Blocks start and end on heap pages (the heap's granularity, or its largest power-of-two divisor
// when the granularity is not one), so a table with a row per page finds a key with one load, at
// an index computed from the offset alone. The layout keeps NVSHMEM's idea (its IBGDA keys are
// indexed by heap offset over its chunk size, then by PE); the table here is gpucomm's own:
//
//   row of page i:  [0]        this PE's lkey of the block holding page i
//                   [1 + pe]   PE pe's rkey of that block
//
// every key in wire (big-endian) order, `none` where no block holds the page. mlx5 names a memory
// key by (index << 8) | variant, and gpucomm's set-up refuses a region whose key is 0 (host
// side), so 0 is free to mean "no block": a put there uses key 0, which no region has, and the NIC
// answers with a remote access error that world::synchronize() reports.
//
// A PE's table has pages x (npes + 1) words: a 1 GiB heap on 2 MiB pages is 2 KiB per PE in the
// world. The host writes a block's rows when it is allocated, before any kernel can name it, and
// clears them when it is freed, after the kernels have finished; rows of other blocks never change
// meanwhile, so kernels still running are unaffected.

#include <cstddef>
#include <cstdint>

#include "../../config.hpp"

namespace gpucomm::detail {

struct heap_keys {
  static constexpr std::uint32_t none = 0;

  std::uint32_t const* rows = nullptr;  ///< [page * row_words + ...], in GPU memory
  std::uint64_t pages = 0;              ///< rows in the table: a PE's slot, in pages
  std::uint32_t log_page = 0;           ///< log2 of a page's bytes
  std::uint32_t row_words = 0;          ///< npes + 1

  /// log2 of the page for a heap of granularity `g` (> 0): the largest power of two dividing it.
  GPUCOMM_HD static constexpr std::uint32_t log_page_for(std::uint64_t g) {
    std::uint32_t log = 0;
    while (((g >> log) & 1u) == 0) ++log;
    return log;
  }

  /// The page holding heap offset `offset`.
  GPUCOMM_HD constexpr std::uint64_t page_of(std::uint64_t offset) const { return offset >> log_page; }
  /// Index of the lkey of the page holding `offset` (in_table(offset) first).
  GPUCOMM_HD constexpr std::uint64_t lkey_index(std::uint64_t offset) const { return page_of(offset) * row_words; }
  /// Index of PE pe's rkey of the page holding `offset`.
  GPUCOMM_HD constexpr std::uint64_t rkey_index(std::uint64_t offset, int pe) const {
    return lkey_index(offset) + 1 + static_cast<std::uint64_t>(pe);
  }
  /// Whether `offset` lies in a PE's slot (an offset below the slot wraps to a huge one).
  GPUCOMM_HD constexpr bool in_table(std::uint64_t offset) const { return page_of(offset) < pages; }

  /// This PE's lkey (wire order) of the block holding heap offset `offset`; `none` outside a block.
  GPUCOMM_HD std::uint32_t lkey_wire(std::uint64_t offset) const {
    return in_table(offset) ? rows[lkey_index(offset)] : none;
  }
  /// PE pe's rkey (wire order) of the block holding heap offset `offset`; `none` outside a block.
  GPUCOMM_HD std::uint32_t rkey_wire(std::uint64_t offset, int pe) const {
    return in_table(offset) ? rows[rkey_index(offset, pe)] : none;
  }
  /// Host side: writes the rows of a block of `bytes` at `offset` into `out` (its first row at
  /// out[0]): `lkey_wire` and every PE's `rkeys_wire[pe]`, or `none` everywhere to clear them.
  static void fill_block(std::uint32_t* out, std::uint64_t block_pages, std::uint32_t lkey_wire,
                         std::uint32_t const* rkeys_wire, std::uint32_t row_words) {
    for (std::uint64_t p = 0; p < block_pages; ++p) {
      std::uint32_t* row = out + p * row_words;
      row[0] = lkey_wire;
      for (std::uint32_t pe = 0; pe + 1 < row_words; ++pe) row[1 + pe] = rkeys_wire ? rkeys_wire[pe] : none;
    }
  }
};

}  // namespace gpucomm::detail
