#!/usr/bin/env bash
# Two "hosts" made of network namespaces joined by a veth pair: each rank of the engine tests runs
# in its own namespace, with its own network stack and address (10.77.0.1 and 10.77.0.2), UCX
# restricted to its end of the veth (UCX_TLS=tcp,self, UCX_NET_DEVICES=<veth>), bootstrapped by the
# test's own TCP allgather (tcp_bootstrap.hpp) since no mpirun spans the two. Runs the ops, order
# and peer_killed scenarios, then checks that the veth's byte counters grew by more than the ops
# scenario moves, so the traffic really crossed between the namespaces.
#
#   tests/engine/netns.sh BUILD/tests/engine/gpucomm_engine_tests
# Needs root (ip netns, veth). Where namespaces cannot be made it exits 77, which ctest reports as
# skipped, not passed.
set -uo pipefail
bin=$1
skip() {
  echo "SKIPPED: $*"
  exit 77
}
[ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
command -v ip > /dev/null || skip "no ip command (iproute2)"

id=$$
ns_a=gpucomm_a_$id ns_b=gpucomm_b_$id
veth_a=gca$id veth_b=gcb$id
cleanup() {
  ip netns del "$ns_a" 2> /dev/null
  ip netns del "$ns_b" 2> /dev/null
}
trap cleanup EXIT
ip netns add "$ns_a" 2> /dev/null || skip "ip netns add failed: no network namespaces here"
ip netns add "$ns_b" || exit 1
ip netns exec "$ns_a" true 2> /dev/null || skip "ip netns exec failed: cannot enter a network namespace here"
ip link add "$veth_a" type veth peer name "$veth_b" 2> /dev/null || skip "ip link add type veth failed: no veth here"
set -e
ip link set "$veth_a" netns "$ns_a"
ip link set "$veth_b" netns "$ns_b"
ip -n "$ns_a" addr add 10.77.0.1/24 dev "$veth_a"
ip -n "$ns_b" addr add 10.77.0.2/24 dev "$veth_b"
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set "$veth_a" up
ip -n "$ns_b" link set "$veth_b" up
set +e

bytes() { ip netns exec "$ns_a" cat "/sys/class/net/$veth_a/statistics/$1_bytes"; }
tx0=$(bytes tx) rx0=$(bytes rx)
status=0
port=$((20000 + id % 20000))
for scenario in ops order peer_killed; do
  port=$((port + 1))
  common=(GPUCOMM_TEST_BOOTSTRAP=10.77.0.1:$port GPUCOMM_TEST_SIZE=2 UCX_TLS=tcp,self UCX_WARN_UNUSED_ENV_VARS=n)
  timeout 90 ip netns exec "$ns_a" env "${common[@]}" GPUCOMM_TEST_RANK=0 UCX_NET_DEVICES="$veth_a" \
    "$bin" "$scenario" &
  pid_a=$!
  timeout 90 ip netns exec "$ns_b" env "${common[@]}" GPUCOMM_TEST_RANK=1 UCX_NET_DEVICES="$veth_b" \
    "$bin" "$scenario" &
  pid_b=$!
  wait "$pid_a"
  rc_a=$?
  wait "$pid_b"
  rc_b=$?
  if [ "$scenario" = peer_killed ]; then
    # Rank 1 kills itself (137: SIGKILL, through timeout's status); rank 0 must pass.
    [ "$rc_a" -eq 0 ] && [ "$rc_b" -eq 137 ] || {
      echo "FAIL: $scenario: rank 0 exited $rc_a (want 0), rank 1 $rc_b (want 137)"
      status=1
    }
  elif [ "$rc_a" -ne 0 ] || [ "$rc_b" -ne 0 ]; then
    echo "FAIL: $scenario: ranks exited $rc_a and $rc_b"
    status=1
  fi
done

tx=$(($(bytes tx) - tx0)) rx=$(($(bytes rx) - rx0))
# The ops scenario alone moves 2 x (5.1 MiB of puts + 4 MiB of gets) each way.
want=$((16 << 20))
echo "veth $veth_a (namespace $ns_a): sent $tx bytes, received $rx bytes across the namespaces"
if [ "$tx" -lt "$want" ] || [ "$rx" -lt "$want" ]; then
  echo "FAIL: less than $want bytes crossed the veth each way: the traffic did not leave the namespaces"
  status=1
fi
[ "$status" -eq 0 ] && echo "PASS: engine tests across two network namespaces"
exit "$status"
