#pragma once
// Reading and writing mlx5 firmware command fields by the layouts generated from the kernel's
// mlx5_ifc.h (mlx5_ifc_layout.hpp). A command is an array of big-endian 32-bit words; bit k of a
// structure is bit (7 - k % 8) of byte k / 8, so fields are read bit by bit from bytes and the
// host's byte order never enters. Slow next to MLX5_GET, and it does not matter: the firmware model
// reads a few hundred bits per command.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>

#include "mlx5_ifc_layout.hpp"

namespace gpucomm::verbs_gpu::model::detail::ifc {

/// The member at `path` of `s`, looked up at compile time: a misspelt path does not compile.
consteval field at(structure const& s, std::string_view path) {
  for (field const& f : s.fields)
    if (f.path == path) return f;
  throw "the generated layout has no such member in this structure (scripts/gen_mlx5_ifc_layout.py lists them)";
}

/// The member at `path` of `s`, looked up at run time; std::out_of_range when there is none.
inline field member(structure const& s, std::string_view path) {
  for (field const& f : s.fields)
    if (f.path == path) return f;
  throw std::out_of_range("mlx5_ifc layout " + std::string(s.name) + " has no member " + std::string(path));
}

/// The size of `s` in bytes (without a trailing flexible array).
constexpr std::size_t bytes(structure const& s) noexcept { return s.bits / 8; }

inline bool bit_of(void const* buf, std::uint32_t bit) noexcept {
  return (static_cast<unsigned char const*>(buf)[bit / 8] >> (7 - bit % 8)) & 1u;
}

/// A field of at most 64 bits.
inline std::uint64_t get(void const* buf, field f) noexcept {
  std::uint64_t v = 0;
  for (std::uint32_t i = 0; i < f.width && i < 64; ++i) v = (v << 1) | (bit_of(buf, f.bit + i) ? 1u : 0u);
  return v;
}

/// Whether `value` fits in `f` without losing bits.
constexpr bool fits(field f, std::uint64_t value) noexcept { return f.width >= 64 || (value >> f.width) == 0; }

/// Sets a field of at most 64 bits (the low `width` bits of value).
inline void set(void* buf, field f, std::uint64_t value) noexcept {
  auto* p = static_cast<unsigned char*>(buf);
  for (std::uint32_t i = 0; i < f.width && i < 64; ++i) {
    std::uint32_t const bit = f.bit + f.width - 1 - i;
    auto const mask = static_cast<unsigned char>(1u << (7 - bit % 8));
    if ((value >> i) & 1u)
      p[bit / 8] |= mask;
    else
      p[bit / 8] &= static_cast<unsigned char>(~mask);
  }
}

/// A byte-aligned field (GIDs, MACs) as bytes, most significant first.
inline void get_bytes(void const* buf, field f, void* dst) noexcept {
  std::memcpy(dst, static_cast<unsigned char const*>(buf) + f.bit / 8, f.width / 8);
}
inline void set_bytes(void* buf, field f, void const* src) noexcept {
  std::memcpy(static_cast<unsigned char*>(buf) + f.bit / 8, src, f.width / 8);
}

/// The first set bit of [f.bit, f.bit + f.width), as an offset from f.bit; -1 when all are clear.
inline long first_set(void const* buf, field f) noexcept {
  for (std::uint32_t i = 0; i < f.width; ++i)
    if (bit_of(buf, f.bit + i)) return static_cast<long>(i);
  return -1;
}

}  // namespace gpucomm::verbs_gpu::model::detail::ifc
