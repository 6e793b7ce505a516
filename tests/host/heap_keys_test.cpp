// IBGDAPost's key table of the symmetric heap (transport/nic/heap_keys.hpp): the rows a block's
// registration writes give its keys for every offset inside it and for no offset outside, checked
// against a plain list of blocks searched one by one.
#include <gpucomm/transport/nic/heap_keys.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

using gpucomm::detail::heap_keys;

namespace {

constexpr std::uint64_t mib = std::uint64_t{1} << 20;

/// The reference: a block and its keys, found by a linear search.
struct block {
  std::uint64_t offset, bytes;
  std::uint32_t lkey;
  std::vector<std::uint32_t> rkeys;
};

block const* holding(std::vector<block> const& blocks, std::uint64_t offset) {
  for (auto const& b : blocks)
    if (offset >= b.offset && offset - b.offset < b.bytes) return &b;
  return nullptr;
}

/// A table for a slot of `slot_bytes` on pages of `granularity`, for `npes` PEs.
struct table {
  heap_keys keys;
  std::vector<std::uint32_t> rows;
  table(std::uint64_t slot_bytes, std::uint64_t granularity, int npes) {
    keys.log_page = heap_keys::log_page_for(granularity);
    keys.pages = slot_bytes >> keys.log_page;
    keys.row_words = static_cast<std::uint32_t>(npes) + 1;
    rows.assign(keys.pages * keys.row_words, heap_keys::none);
    keys.rows = rows.data();
  }
  void write(block const& b) {
    heap_keys::fill_block(rows.data() + keys.page_of(b.offset) * keys.row_words, b.bytes >> keys.log_page, b.lkey,
                          b.rkeys.data(), keys.row_words);
  }
  void clear(block const& b) {
    heap_keys::fill_block(rows.data() + keys.page_of(b.offset) * keys.row_words, b.bytes >> keys.log_page,
                          heap_keys::none, nullptr, keys.row_words);
  }
};

void check_against(table const& t, std::vector<block> const& blocks, int npes, std::uint64_t offset) {
  block const* b = holding(blocks, offset);
  INFO("offset " << offset);
  CHECK(t.keys.lkey_wire(offset) == (b ? b->lkey : heap_keys::none));
  for (int pe = 0; pe < npes; ++pe) CHECK(t.keys.rkey_wire(offset, pe) == (b ? b->rkeys[pe] : heap_keys::none));
}

}  // namespace

TEST_CASE("heap keys: the page is the granularity's largest power-of-two divisor", "[heap_keys]") {
  CHECK(heap_keys::log_page_for(2 * mib) == 21);
  CHECK(heap_keys::log_page_for(64 * 1024) == 16);
  CHECK(heap_keys::log_page_for(6 * mib) == 21);  // 3 x 2 MiB: blocks are multiples of 2 MiB too
  CHECK(heap_keys::log_page_for(1) == 0);
  static_assert(heap_keys::log_page_for(std::uint64_t{1} << 40) == 40);
}

TEST_CASE("heap keys: every offset finds the keys of its block, and none outside blocks", "[heap_keys]") {
  int const npes = 3;
  table t(64 * mib, 2 * mib, npes);
  REQUIRE(t.keys.pages == 32);
  // The control block, a 2-page block, a 1-page block after a hole, and the slot's last page.
  std::vector<block> blocks = {{0, 2 * mib, 0x11000000u, {0x21000000u, 0x31000000u, 0x41000000u}},
                               {2 * mib, 4 * mib, 0x12000000u, {0x22000000u, 0x32000000u, 0x42000000u}},
                               {10 * mib, 2 * mib, 0x13000000u, {0x23000000u, 0x33000000u, 0x43000000u}},
                               {62 * mib, 2 * mib, 0x14000000u, {0x24000000u, 0x34000000u, 0x44000000u}}};
  for (auto const& b : blocks) t.write(b);

  // Every block's first and last byte, the bytes around every boundary, and random offsets.
  std::vector<std::uint64_t> offsets;
  for (auto const& b : blocks) {
    for (std::uint64_t o : {b.offset, b.offset + 1, b.offset + b.bytes - 1, b.offset + b.bytes}) offsets.push_back(o);
    if (b.offset > 0) offsets.push_back(b.offset - 1);
  }
  std::mt19937_64 rng(17);
  for (int i = 0; i < 2000; ++i) offsets.push_back(rng() % (64 * mib));
  for (std::uint64_t o : offsets) check_against(t, blocks, npes, o);

  // Past the slot, and below it (a pointer before the slot wraps to a huge offset): no key, and no
  // read outside the table.
  for (std::uint64_t o : {64 * mib, 64 * mib + 5, ~std::uint64_t{0}, ~std::uint64_t{0} - 2 * mib}) {
    CHECK_FALSE(t.keys.in_table(o));
    CHECK(t.keys.lkey_wire(o) == heap_keys::none);
    CHECK(t.keys.rkey_wire(o, npes - 1) == heap_keys::none);
  }

  // Freeing the 2-page block clears its rows only; a new block there gets its own keys.
  t.clear(blocks[1]);
  blocks.erase(blocks.begin() + 1);
  for (std::uint64_t o : offsets) check_against(t, blocks, npes, o);
  blocks.push_back({4 * mib, 2 * mib, 0x15000000u, {0x25000000u, 0x35000000u, 0x45000000u}});
  t.write(blocks.back());
  for (std::uint64_t o : offsets) check_against(t, blocks, npes, o);
}

TEST_CASE("heap keys: the indices follow the documented row layout", "[heap_keys]") {
  heap_keys k;
  k.log_page = 21;
  k.pages = 8;
  k.row_words = 5;  // 4 PEs
  // Row of page i at i * (npes + 1): [0] this PE's lkey, [1 + pe] PE pe's rkey.
  CHECK(k.lkey_index(0) == 0);
  CHECK(k.lkey_index(2 * mib - 1) == 0);
  CHECK(k.lkey_index(2 * mib) == 5);
  CHECK(k.rkey_index(3 * 2 * mib + 7, 0) == 16);
  CHECK(k.rkey_index(3 * 2 * mib + 7, 3) == 19);
  CHECK(k.in_table(8 * 2 * mib - 1));
  CHECK_FALSE(k.in_table(8 * 2 * mib));
}
