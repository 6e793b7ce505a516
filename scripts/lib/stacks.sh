# shellcheck shell=bash
# Where a hung test waits: sourced by scripts/lib/gpu-test.sh, which calls stacks_of 20 s before it
# kills a test at its time limit.

# stack_tool: the command that prints a process's call stacks, given its PID last
# (GPUCOMM_STACK_TOOL, else eu-stack, gdb or cuda-gdb, whichever is installed first).
stack_tool() {
  if [ -n "${GPUCOMM_STACK_TOOL:-}" ]; then echo "$GPUCOMM_STACK_TOOL"
  elif command -v eu-stack > /dev/null; then echo "eu-stack -p"
  elif command -v gdb > /dev/null; then echo "gdb -batch -ex 'thread apply all bt' -p"
  # cuda-gdb takes a lock file that would let only one of the parallel sessions attach; the
  # versions that refuse the option to skip it (CUDA 13's) attach without it.
  elif command -v cuda-gdb > /dev/null; then
    if cuda-gdb --cuda-use-lockfile=0 --version > /dev/null 2>&1; then
      echo "cuda-gdb --cuda-use-lockfile=0 -batch -ex 'thread apply all bt' -p"
    else
      echo "cuda-gdb -batch -ex 'thread apply all bt' -p"
    fi
  fi
}

descendants() {
  local c
  for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do echo "$c"; descendants "$c"; done
}

# stacks_of PID PREFIX: where each of PID's descendants whose executable lies under PREFIX (the
# test binaries' folder) waits. First every thread's state and kernel wait channel from /proc (at
# once, and it works where no debugger can attach); then every thread's call stack (stack_tool),
# all processes at once with 15 s each, so that the 20 s before the kill reach them all: one after
# another, a debugger that cannot attach (cuda-gdb under MPS: "Late attach is not supported") spent
# the whole window on the first process. eu-stack and gdb attach as host debuggers only (ptrace,
# without CUDA's debugger backend, which is what refuses under MPS); eu-stack has read every
# thread of 8 processes sharing 4 GPUs under MPS.
stacks_of() {
  local p exe tool t dir
  local -a procs=() debuggers=()
  tool=$(stack_tool)
  for p in $(descendants "$1"); do
    exe=$(readlink "/proc/$p/exe" 2>/dev/null) || continue
    [[ $exe == "$2/"* ]] && procs+=("$p")
  done
  [ ${#procs[@]} -gt 0 ] || return 0
  for p in "${procs[@]}"; do
    echo "== threads of process $p ($(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-200))"
    for t in /proc/"$p"/task/*; do
      echo "thread ${t##*/} $(cat "$t/comm" 2>/dev/null): state $(awk '{print $3}' "$t/stat" 2>/dev/null), waits in $(cat "$t/wchan" 2>/dev/null)"
    done
  done
  [ -n "$tool" ] || return 0
  dir=$(mktemp -d)
  for p in "${procs[@]}"; do
    eval "timeout 15 $tool $p" > "$dir/$p" 2>&1 &
    debuggers+=($!)
  done
  wait "${debuggers[@]}"
  for p in "${procs[@]}"; do
    echo "== stacks of process $p (${tool%% *})"
    grep -E '^(Thread|TID|#)' "$dir/$p" | head -n 400
    grep -q '^#' "$dir/$p" || { echo "(no stack; the tool said:)"; grep -v '^$' "$dir/$p" | tail -n 5; }
  done
  rm -rf "$dir"
}

# start_watchdog PID LIMIT PREFIX FILE: LIMIT - 20 s from now, if PID still runs, the stacks of its
# processes under PREFIX go to FILE (stacks_of); a limit of 40 s or less has none. The watchdog
# writes nowhere else, so a sleep of it that outlives a test never holds the test's output open.
# stop_watchdog: stop it (the test ended).
start_watchdog() {
  watchdog_pid=""
  [ "$2" -gt 40 ] || return 0
  (
    trap - EXIT  # not the caller's clean-up
    exec > /dev/null 2>&1
    trap 'kill "$s" 2>/dev/null; exit 0' TERM
    sleep $(($2 - 20)) &
    s=$!
    wait "$s" && kill -0 "$1" && stacks_of "$1" "$3" >> "$4" 2>&1
  ) &
  watchdog_pid=$!
}
stop_watchdog() {
  [ -n "${watchdog_pid:-}" ] || return 0
  kill "$watchdog_pid" 2>/dev/null
  wait "$watchdog_pid" 2>/dev/null
  watchdog_pid=""
}
