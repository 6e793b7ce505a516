#pragma once
// P2PCopy, host half: the same as NVLinkStore's (nvlink_store/host.hpp), since both reach a peer
// through its mapped heap: it hands out the heap stride, refusing a PE that cannot load and store
// some other PE's heap. The device side is p2p_copy/device.cuh.

#include "../nvlink_store/host.hpp"
