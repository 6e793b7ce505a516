#pragma once
// Byte-order helpers for mlx5 wire structures. Every multi-byte WQE and CQE field is big-endian;
// hosts and NVIDIA GPUs are little-endian. Plain shifts, so the same code runs on host and device
// (nvcc turns each swap into PRMT instructions, g++ into BSWAP).

#include <cstdint>

#include "../../config.hpp"

#if !defined(__CUDA_ARCH__)
#include <bit>
static_assert(std::endian::native == std::endian::little,
              "gpucomm::verbs_gpu assumes a little-endian host (x86-64, aarch64 in LE mode)");
#endif

namespace gpucomm::verbs_gpu {

/// Reverses the bytes of a 16-bit value.
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint16_t byte_swap16(std::uint16_t v) noexcept {
  return static_cast<std::uint16_t>((v >> 8) | (v << 8));
}

/// Reverses the bytes of a 32-bit value.
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint32_t byte_swap32(std::uint32_t v) noexcept {
  return (v >> 24) | ((v >> 8) & 0x0000ff00u) | ((v << 8) & 0x00ff0000u) | (v << 24);
}

/// Reverses the bytes of a 64-bit value.
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint64_t byte_swap64(std::uint64_t v) noexcept {
  return (static_cast<std::uint64_t>(byte_swap32(static_cast<std::uint32_t>(v))) << 32) |
         byte_swap32(static_cast<std::uint32_t>(v >> 32));
}

/// Host (little-endian) to big-endian and back; the same operation in both directions.
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint16_t to_be16(std::uint16_t v) noexcept { return byte_swap16(v); }
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint32_t to_be32(std::uint32_t v) noexcept { return byte_swap32(v); }
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint64_t to_be64(std::uint64_t v) noexcept { return byte_swap64(v); }
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint16_t from_be16(std::uint16_t v) noexcept { return byte_swap16(v); }
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint32_t from_be32(std::uint32_t v) noexcept { return byte_swap32(v); }
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint64_t from_be64(std::uint64_t v) noexcept { return byte_swap64(v); }

static_assert(to_be16(0x1234u) == 0x3412u);
static_assert(to_be32(0x12345678u) == 0x78563412u);
static_assert(to_be64(0x0102030405060708ull) == 0x0807060504030201ull);

}  // namespace gpucomm::verbs_gpu
