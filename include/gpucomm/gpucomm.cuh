#pragma once
// Umbrella header: the core, teams, scratch, the transport contract, every transport (NVLinkStore,
// P2PCopy, IBGDAPost, ProxyQueue, route<...>), device sides and host halves, and the collectives.

#include "collectives.cuh"
#include "comm.cuh"
#include "config.hpp"
#include "error.hpp"
#include "group.cuh"
#include "host/bootstrap.hpp"
#include "host/team_workspace.hpp"
#include "host/world.hpp"
#include "ops.hpp"
#include "scratch.hpp"
#include "sym_ptr.hpp"
#include "team.hpp"
#include "transport/ibgda_post.cuh"
#include "transport/nvlink_store.cuh"
#include "transport/p2p_copy.cuh"
#include "transport/proxy_queue.cuh"
#include "contract.cuh"
#include "transport/route.cuh"
#include "transport_concept.hpp"
