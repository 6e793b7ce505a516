#!/usr/bin/env bash
# one-per-process.sh BIN SPEC [LAUNCHER...]: runs each Catch2 test case of BIN that SPEC selects
# alone, in fresh processes (started by LAUNCHER, e.g. "mpirun -np 2", when one is given). For
# cases that leave their CUDA context lost, so that nothing else can run after them in the same
# process (tests/gpu/ops/failure.cu). Fails when a case fails or when SPEC selects none.
# A fault under MPS makes its server refuse new clients until every client of the faulting GPU
# has exited; a case that could not connect (cudaErrorMpsServerNotReady) is run again, up to
# 5 times, a few seconds later.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BIN SPEC [LAUNCHER...]" >&2; exit 2; }
bin=$1 spec=$2
shift 2
mapfile -t names < <("$bin" --list-test-names-only "$spec" | sed -e 's/^ *//' -e '/^$/d')
if [ ${#names[@]} -eq 0 ]; then
  echo "no test case of $bin matches $spec"
  exit 1
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
for name in "${names[@]}"; do
  for attempt in 1 2 3 4 5; do
    echo "== $name (attempt $attempt)"
    "$@" "$bin" "$name" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    grep -q "MpsServerNotReady" "$log" || break
    sleep 3
  done
  if [ "$rc" -ne 0 ]; then
    echo "FAILED (exit $rc): $name"
    status=1
  fi
done
echo "$([ $status -eq 0 ] && echo "OK" || echo "WRONG"): ${#names[@]} case(s), each in its own process(es)"
exit $status
