#pragma once
// P2PCopy: its device side (the policy a kernel names, and the staging its groups take) and its
// host half (what world::comm needs). The host half does not include the world (host/world.hpp): a
// kernel's translation unit pays for little more than the device side.

#include "p2p_copy/device.cuh"
#include "p2p_copy/host.hpp"
