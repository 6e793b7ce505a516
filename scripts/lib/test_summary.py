#!/usr/bin/env python3
"""The record of one run of scripts/test.sh (what CI runs): how long each step took, ctest's counts,
the machine, the toolkit and the commit, as JSON (schema gpucomm.test-summary/1). scripts/test.sh
calls it when it ends, also when a step failed; scripts/render_results.py record-ci stores a record
as the CI machine kind's (benchmarks/results/debian12-2core/ci.json).

  test_summary.py --out PATH --status RC --seconds S --steps "name=seconds ..." [--ctest-log LOG]
                  [--nvcc "its --version release line"]
"""

import argparse
import datetime
import json
import os
import re
import sys

from compile_cost import machine, tree_commit

SCHEMA = "gpucomm.test-summary/1"
# ctest's closing line: "100% tests passed, 0 tests failed out of 58".
CTEST_TOTALS = re.compile(r"(\d+)% tests passed, (\d+) tests failed out of (\d+)")


def ctest_counts(log):
    """{"total", "failed"} from ctest's closing line in LOG, or None when it has none."""
    try:
        with open(log, errors="replace") as f:
            found = CTEST_TOTALS.findall(f.read())
    except OSError:
        return None
    if not found:
        return None
    _, failed, total = found[-1]
    return {"total": int(total), "failed": int(failed)}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--status", type=int, required=True, help="test.sh's exit status")
    ap.add_argument("--seconds", type=int, required=True, help="test.sh's wall time")
    ap.add_argument("--steps", default="", help="'name=seconds' for each step finished, in order")
    ap.add_argument("--ctest-log")
    ap.add_argument("--nvcc", help="nvcc --version's release line, as compile-cost.sh passes it")
    a = ap.parse_args(argv)
    steps = []
    for item in a.steps.split():
        name, _, seconds = item.partition("=")
        steps.append({"name": name, "seconds": int(seconds)})
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    doc = {
        "schema": SCHEMA,
        "command": "bash scripts/test.sh",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": tree_commit(root, paths=()),
        "ci": os.environ.get("CI") == "true",
        "machine": machine(),
        "nvcc": a.nvcc or None,
        "status": "passed" if a.status == 0 else "failed",
        "exit_code": a.status,
        "seconds": a.seconds,
        "steps": steps,
        "ctest": ctest_counts(a.ctest_log) if a.ctest_log else None,
    }
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
