#pragma once
// Library-wide macros, version and compiler checks. Included by every gpucomm header.

#if __cplusplus < 202002L
#error "gpucomm needs C++20: compile with -std=c++20 (nvcc: -std=c++20)"
#endif

#define GPUCOMM_VERSION_MAJOR 0
#define GPUCOMM_VERSION_MINOR 1
#define GPUCOMM_VERSION_PATCH 0

#if defined(__CUDACC__)
#define GPUCOMM_HD __host__ __device__
#define GPUCOMM_DEVICE __device__
#define GPUCOMM_FORCEINLINE __forceinline__
#define GPUCOMM_NOINLINE __noinline__
#else
#define GPUCOMM_HD
#define GPUCOMM_DEVICE
#define GPUCOMM_FORCEINLINE inline
#define GPUCOMM_NOINLINE __attribute__((noinline))
#endif
// GPUCOMM_NOINLINE marks the slow half of an operation (a wait loop, an error report): one copy per
// translation unit instead of one per call site keeps the hot paths short and the compile time low.

// GPUCOMM_DEBUG is a compile-time switch (a macro of each translation unit, not an environment
// variable): 1, the default unless NDEBUG is defined, bounds every device-side wait and checks PE
// indices and arguments on the device; 0 (release) trusts the arguments and bounds waits only when
// the program asks for it (world_options::wait_timeout, GPUCOMM_WAIT_TIMEOUT_MS: the timeout rule
// of detail/bounded_wait.cuh).
#if !defined(GPUCOMM_DEBUG)
#if defined(NDEBUG)
#define GPUCOMM_DEBUG 0
#else
#define GPUCOMM_DEBUG 1
#endif
#endif

namespace gpucomm {
inline constexpr int version_major = GPUCOMM_VERSION_MAJOR;
inline constexpr int version_minor = GPUCOMM_VERSION_MINOR;
inline constexpr int version_patch = GPUCOMM_VERSION_PATCH;
}  // namespace gpucomm
