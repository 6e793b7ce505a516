#!/usr/bin/env bash
# The CUDA MPS control daemon for GPU tests whose processes share a GPU (without it their kernels
# would time-slice): the setup and cleanup of ctest's MPS fixtures (tests/gpu/CMakeLists.txt), and
# what scripts/lib/gpu-test.sh calls after a test it had to kill.
#   mps.sh start DIR    use a daemon that is already reachable (left running), or start one of our
#                       own with its pipe and log directories under DIR; DIR/mode then says which:
#                       existing, own, or missing (nvidia-cuda-mps-control not found: the tests that
#                       need it are skipped). Fails when our own does not start.
#   mps.sh stop DIR     quit our own daemon (never one found running)
#   mps.sh restart DIR  quit and start our own afresh: a test killed at its time limit can leave its
#                       kernels in the server, and their faults then take down the next test's
#                       clients (2026-11-27: route<> at 4gpu-8pe cut mid-kernel; the failure cases
#                       after it died of "fatal GPU error" on every GPU about 10 s later)
# The daemon is started with every GPU visible: a client's CUDA_VISIBLE_DEVICES selects among the
# daemon's. The GPU's compute mode is never changed.
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: $0 start|stop|restart DIR" >&2; exit 2; }
# shellcheck source=scripts/lib/common.sh
source "$(dirname "$0")/common.sh"
action=$1 dir=$2
mkdir -p "$dir"
own_vars=(CUDA_MPS_PIPE_DIRECTORY="$dir/pipe" CUDA_MPS_LOG_DIRECTORY="$dir/log")

start_own() {
  mkdir -p "$dir/pipe" "$dir/log"
  mps_vars=("${own_vars[@]}")
  if env -u CUDA_VISIBLE_DEVICES "${mps_vars[@]}" nvidia-cuda-mps-control -d >> "$dir/start.log" 2>&1; then
    echo own > "$dir/mode"
    if mps_probe 10; then echo "MPS: a daemon of our own started (pipe directory $dir/pipe)"; return 0; fi
  fi
  echo "MPS: the daemon did not start (see $dir/start.log and $dir/log/control.log)" >&2
  return 1
}
stop_own() {
  [ "$(cat "$dir/mode" 2>/dev/null)" = own ] || return 0
  echo stopped > "$dir/mode"
  if echo quit | timeout 60 env "${own_vars[@]}" nvidia-cuda-mps-control >> "$dir/start.log" 2>&1; then
    echo "MPS: our daemon stopped"
  else
    echo "MPS: the daemon did not take quit (pipe directory $dir/pipe)" >&2
    return 1
  fi
}

case $action in
  start)
    rm -f "$dir/mode"
    if ! command -v nvidia-cuda-mps-control > /dev/null 2>&1; then
      echo missing > "$dir/mode"
      echo "MPS: nvidia-cuda-mps-control not found: the tests whose processes share a GPU are skipped"
      exit 0
    fi
    mps_vars=()
    if mps_probe 1; then
      echo existing > "$dir/mode"
      echo "MPS: a daemon was already running (${CUDA_MPS_PIPE_DIRECTORY:-default pipe directory}); the tests use it, and it is left running"
      exit 0
    fi
    start_own ;;
  stop) stop_own ;;
  restart)
    [ "$(cat "$dir/mode" 2>/dev/null)" = own ] || exit 0
    echo "MPS: restarting our daemon"
    stop_own
    start_own ;;
  *) echo "usage: $0 start|stop|restart DIR" >&2; exit 2 ;;
esac
