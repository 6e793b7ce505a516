#pragma once
// P2PCopy: its device side (the policy a kernel names, and the staging its groups take) and its
// host half (what world::comm needs). Kernels-only translation units may include
// p2p_copy/device.cuh alone.

#include "p2p_copy/device.cuh"
#include "p2p_copy/host.hpp"
