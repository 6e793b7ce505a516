#pragma once
// NVLinkStore: its device side (the policy a kernel names) and its host half (what world::comm
// needs). The host half does not include the world (host/world.hpp): a kernel's translation unit
// pays for little more than the device side.

#include "nvlink_store/device.cuh"
#include "nvlink_store/host.hpp"
