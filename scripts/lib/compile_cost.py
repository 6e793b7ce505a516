#!/usr/bin/env python3
"""The summary of scripts/compile-cost.sh --headers: reads its measurements (one line per compile:
revision index, case, run, status, seconds, peak KiB; tab-separated), prints a markdown table of the
medians and the ratios issue 54 sets as targets, and writes the same as JSON (--json).

  compile_cost.py --raw FILE --nvcc NVCC --runs N --rev REV=COMMIT ... [--json PATH] [--flags TEXT]
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

SCHEMA = "gpucomm.compile-cost/1"
# Case id -> what it compiles. Toolkit cases do not depend on gpucomm's revision: measured once.
CASES = {
    "umbrella": "`<gpucomm/gpucomm.cuh>`",
    "comm_nvlink": "`<gpucomm/comm.cuh>` + `<gpucomm/transport/nvlink_store.cuh>`",
    "cub_atomic": "`<cub/cub.cuh>` + `<cuda/atomic>`",
    "atomic_cg": "`<cuda/atomic>` + `<cooperative_groups.h>`",
    "twenty_kernels.1": "`benchmarks/compile/twenty_kernels.cu`, NVLinkStore",
    "twenty_kernels.2": "`benchmarks/compile/twenty_kernels.cu`, IBGDAPost",
    "twenty_kernels.3": "`benchmarks/compile/twenty_kernels.cu`, route<NVLinkStore, IBGDAPost>",
}
TOOLKIT_CASES = ("cub_atomic", "atomic_cg")
# (name, numerator, denominator, target): the umbrella at most what CUB costs, the core and one
# transport at most 1.5x what libcu++'s atomics and cooperative groups cost.
RATIOS = [
    ("umbrella / (cub + atomic)", "umbrella", "cub_atomic", 1.0),
    ("(comm + nvlink_store) / (atomic + cg)", "comm_nvlink", "atomic_cg", 1.5),
]
# Between revisions: the 20-kernel program no slower per transport (no instantiation cost moved
# into the user's files).
BEFORE_AFTER_TARGET = {"twenty_kernels.1": 1.0, "twenty_kernels.2": 1.0, "twenty_kernels.3": 1.0}


def machine():
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"nproc": len(os.sched_getaffinity(0)), "model_name": model}


def tree_commit(path, paths=("include", "testing", "benchmarks/compile")):
    """HEAD of the checkout holding PATH, with "+dirty" when it differs there (paths: where to look;
    default the headers and the compile benchmark, () the whole tree)."""
    try:
        head = subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        clean = subprocess.run(["git", "-C", path, "diff", "--quiet", "HEAD", "--", *paths]).returncode == 0
        return head if clean else head + "+dirty"
    except (OSError, subprocess.CalledProcessError):
        return None


def load(raw):
    """{(rev index or None, case): {"status", "samples": [(seconds, MiB)]}} from the raw lines."""
    cases = {}
    with open(raw) as f:
        for line in f:
            rev, case, _, status, seconds, kib = line.rstrip("\n").split("\t")
            entry = cases.setdefault((None if rev == "-" else int(rev), case), {"status": "ok", "samples": []})
            if status != "ok":
                entry["status"] = status
            else:
                entry["samples"].append((float(seconds), int(kib) / 1024))
    return cases


def medians(entry):
    if entry["status"] != "ok" or not entry["samples"]:
        return None, None
    return (statistics.median(s for s, _ in entry["samples"]), statistics.median(m for _, m in entry["samples"]))


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def fmt(x, digits=2):
    return "n/a" if x is None else f"{x:.{digits}f}"


def summarize(args):
    revs = [r.split("=", 1) for r in args.rev]
    raw = load(args.raw)
    cases = []
    for (rev, case), entry in sorted(raw.items(), key=lambda kv: (kv[0][0] if kv[0][0] is not None else -1,
                                                                 list(CASES).index(kv[0][1]))):
        seconds, mib = medians(entry)
        cases.append({
            "case": case, "label": CASES[case].replace("`", ""),
            "rev": None if rev is None else revs[rev][0], "commit": None if rev is None else revs[rev][1],
            "status": entry["status"], "seconds": seconds, "peak_mib": mib,
            "samples": [{"seconds": s, "peak_mib": m} for s, m in entry["samples"]],
        })

    def find(rev, case):
        key = None if case in TOOLKIT_CASES else rev
        for c in cases:
            if c["case"] == case and c["rev"] == (None if key is None else revs[key][0]):
                return c
        return None

    ratios = []
    for i, (rev, commit) in enumerate(revs):
        for name, num, den, target in RATIOS:
            a, b = find(i, num), find(i, den)
            ratios.append({
                "name": name, "rev": rev, "commit": commit, "target": target,
                "time": ratio(a and a["seconds"], b and b["seconds"]),
                "memory": ratio(a and a["peak_mib"], b and b["peak_mib"]),
            })
    before_after = []
    for i, (rev, commit) in enumerate(revs[1:], start=1):
        for case in CASES:
            if case in TOOLKIT_CASES:
                continue
            a, b = find(i, case), find(0, case)
            before_after.append({
                "case": case, "rev": rev, "commit": commit, "base_rev": revs[0][0], "base_commit": revs[0][1],
                "time": ratio(a and a["seconds"], b and b["seconds"]),
                "memory": ratio(a and a["peak_mib"], b and b["peak_mib"]),
                "target": BEFORE_AFTER_TARGET.get(case),
            })
    return {
        "schema": SCHEMA,
        "commit": tree_commit(os.getcwd()),
        "nvcc": args.nvcc,
        "machine": machine(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "runs": args.runs,
        "flags": args.flags,
        "revisions": [{"rev": r, "commit": c} for r, c in revs],
        "cases": cases,
        "ratios": ratios,
        "before_after": before_after,
    }


def markdown(result):
    out = [f"nvcc -c of each file alone, one at a time, medians of {result['runs']} run(s); "
           f"{result['machine']['nproc']} x {result['machine']['model_name']}; {result['nvcc']}; "
           f"flags: {result['flags']}", "",
           "| case | revision | seconds | peak MiB |", "| --- | --- | ---: | ---: |"]
    for c in result["cases"]:
        rev = "toolkit" if c["rev"] is None else f"{c['rev']} ({(c['commit'] or '')[:12]})"
        seconds = fmt(c["seconds"], 1) if c["status"] == "ok" else c["status"]
        out.append(f"| {CASES[c['case']]} | {rev} | {seconds} | {fmt(c['peak_mib'], 0)} |")
    out += ["", "| ratio | revision | time | memory | target |", "| --- | --- | ---: | ---: | ---: |"]
    for r in result["ratios"]:
        out.append(f"| {r['name']} | {r['rev']} | {fmt(r['time'])} | {fmt(r['memory'])} | <= {r['target']} |")
    if result["before_after"]:
        out += ["", "| case | revision / base | time | memory | target |", "| --- | --- | ---: | ---: | ---: |"]
        for r in result["before_after"]:
            target = "" if r["target"] is None else f"<= {r['target']}"
            out.append(f"| {CASES[r['case']]} | {r['rev']} / {r['base_rev']} | {fmt(r['time'])} | "
                       f"{fmt(r['memory'])} | {target} |")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--raw", required=True)
    parser.add_argument("--nvcc", required=True, help="nvcc's version line")
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--rev", action="append", required=True, help="REV=COMMIT, in the order measured")
    parser.add_argument("--flags", default="")
    parser.add_argument("--json")
    args = parser.parse_args()
    result = summarize(args)
    print(markdown(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
