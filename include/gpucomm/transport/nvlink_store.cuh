#pragma once
// NVLinkStore: its device side (the policy a kernel names) and its host half (what world::comm
// needs). Kernels-only translation units may include nvlink_store/device.cuh alone.

#include "nvlink_store/device.cuh"
#include "nvlink_store/host.hpp"
