#pragma once
// IBGDAPost: its device side (the policy a kernel names), its options and its host half (what
// world::comm needs). Kernels-only translation units may include ibgda_post/device.cuh alone.

#include "ibgda_post/device.cuh"
#include "ibgda_post/host.cuh"
#include "ibgda_post/options.hpp"
