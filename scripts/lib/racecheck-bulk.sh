#!/usr/bin/env bash
# racecheck over P2PCopy's [sanitize] tests, with the one kind of report racecheck (CUDA 13.0)
# makes on correct bulk-copy code told apart from every other:
#   scripts/lib/racecheck-bulk.sh TEST_BINARY [CATCH2_FILTER]
#
# The known kind: a write-write hazard between two bulk loads into shared memory that complete on
# an mbarrier (cp.async.bulk ... mbarrier::complete_tx; UBLKCP.S.G in SASS), where the mbarrier was
# invalidated and initialised again between the two loads. P2PCopy's pipeline does that from one
# call to the next (a staging's mbarriers live only for one call). Two probes in the same binary
# (tests/gpu/p2p_copy/racecheck_probe.cu) show it: one thread, two waited-for loads into one
# buffer; racecheck reports the hazard when the mbarrier is re-initialised between them, and
# nothing when the second load uses another mbarrier.
#
# Passes when the tests pass, the control probe is clean, and every hazard reported on the tests
# is of the known kind while the re-initialising probe still reproduces it. Any other hazard (a
# thread's own access against a bulk copy, a bulk store, a plain shared-memory race) fails, as
# does a known-kind hazard once the probe no longer reproduces it (then racecheck has changed and
# the report may be real).
set -uo pipefail
binary=$1
filter=${2:-[sanitize]}
work=$(mktemp -d "${TMPDIR:-/tmp}/racecheck-bulk.XXXXXX")
racecheck=(compute-sanitizer --tool racecheck)

# hazards LOG: "TOTAL KNOWN DISPLAYED" for the log's hazard reports (racecheck_hazards.py: a report
# is of the known kind when every access in it is a write by a bulk load from global into shared
# memory, told by the instruction at the reported offset of the kernel's SASS, or by the frame
# racecheck names: gpucomm's bulk_ptx::load, or libcu++'s cp_async_bulk overload for that copy).
hazards() { python3 "$(dirname "$0")/racecheck_hazards.py" "$1" "$binary"; }

"${racecheck[@]}" "$binary" "[racecheck-probe-reinit]" >"$work/probe-reinit.log" 2>&1
read -r probe_total probe_known _ < <(hazards "$work/probe-reinit.log")
"${racecheck[@]}" "$binary" "[racecheck-probe-control]" >"$work/probe-control.log" 2>&1
control_rc=$?
read -r control_total _ _ < <(hazards "$work/probe-control.log")
"${racecheck[@]}" "$binary" "$filter" >"$work/tests.log" 2>&1
read -r total known displayed < <(hazards "$work/tests.log")

cat "$work/tests.log"
echo "--- probe, one mbarrier re-initialised between two loads:"
grep -E "Race reported|and (Read|Write) access|RACECHECK SUMMARY|test cases" "$work/probe-reinit.log"
echo "--- probe, two mbarriers:"
grep -E "Race reported|and (Read|Write) access|RACECHECK SUMMARY|test cases" "$work/probe-control.log"

status=0
tests_passed=0
grep -q "All tests passed" "$work/tests.log" && tests_passed=1
[ "$tests_passed" = 1 ] || { echo "the tests under racecheck did not pass"; status=1; }
if ! grep -q "All tests passed" "$work/probe-control.log" || [ "$control_rc" != 0 ] || [ "$control_total" != 0 ]; then
  echo "the control probe did not pass clean ($control_total hazard reports)"; status=1
fi
if [ "$displayed" != "$total" ]; then
  echo "racecheck displayed $displayed hazard(s) but $total report(s) were read from its log: the format changed"; status=1
fi
if [ "$total" -gt "$known" ]; then
  echo "$((total - known)) hazard report(s) not of the known kind: real until shown otherwise"; status=1
fi
if [ "$known" -gt 0 ] && [ "$probe_known" = 0 ]; then
  echo "$known report(s) of the known kind, but the probe no longer reproduces it: racecheck changed, look again"
  status=1
fi
echo "RACECHECK SUMMARY (classified): $total hazard report(s) on the tests, $known of the known kind" \
  "(bulk loads across an mbarrier re-initialisation; the probe reproduces it: $probe_known of $probe_total)," \
  "$((total - known)) other; control probe: $control_total"
rm -rf "$work"
exit $status
