#!/usr/bin/env python3
"""Summarise a copy-loop comparison: each variant's put_bw against NVSHMEM's in the same run.

    python3 summarize.py run2.jsonl > run2.md

Rows carry "copy loop X: <what>; round R" in their note (X = N for NVSHMEM). Per point, a variant
is "below" when its best repetition round is under NVSHMEM's worst, "above" when its worst is over
NVSHMEM's best; the ratio is of the medians over rounds.
"""
import collections
import json
import math
import re
import statistics
import sys


def load(path):
    values, labels = collections.defaultdict(list), {}
    for line in open(path):
        r = json.loads(line)
        m = re.search(r"copy loop (\w+): ([^;]+); round", r["note"])
        if r["status"] != "ok" or not m:
            continue
        labels[m.group(1)] = m.group(2)
        values[(r["scope"], r["variant"], r["ctas"], r["size"], m.group(1))].append(r["value"])
    return values, labels


def main(path):
    values, labels = load(path)
    variants = sorted(v for v in labels if v != "N")
    points = sorted({k[:4] for k in values if (k[:4] + ("N",)) in values})
    print(f"# put_bw by copy loop, against NVSHMEM ({path})\n")
    print("| loop | what |\n|---|---|")
    for v in variants + ["N"]:
        print(f"| {v} | {labels[v]} |")
    print("\nPer scope: points below NVSHMEM (outside the rounds' spread), geometric mean of the ratio to "
          "NVSHMEM, worst ratio.\n")
    print("| scope | points | " + " | ".join(variants) + " |")
    print("|---|---|" + "---|" * len(variants))
    for scope in ("thread", "warp", "block"):
        ps = [p for p in points if p[0] == scope]
        if not ps:
            continue
        cells = []
        for v in variants:
            below, logs, worst = 0, [], math.inf
            for p in ps:
                g, n = values.get(p + (v,)), values[p + ("N",)]
                if not g:
                    continue
                ratio = statistics.median(g) / statistics.median(n)
                below += max(g) < min(n)
                logs.append(math.log(ratio))
                worst = min(worst, ratio)
            cells.append(f"{below} below, {math.exp(sum(logs) / len(logs)):.3f}, worst {worst:.3f}" if logs else "")
        print(f"| {scope} | {len(ps)} | " + " | ".join(cells) + " |")
    print("\nBlock scope, point by point: NVSHMEM's median GB/s, and each loop's median as % of it "
          "(`-` below NVSHMEM outside the spread, `+` above it).\n")
    print("| dir | CTAs | size | NVSHMEM | " + " | ".join(variants) + " |")
    print("|---|---|---|---|" + "---|" * len(variants))
    for p in (p for p in points if p[0] == "block"):
        n = values[p + ("N",)]
        cells = []
        for v in variants:
            g = values.get(p + (v,))
            if not g:
                cells.append("")
                continue
            mark = "-" if max(g) < min(n) else "+" if min(g) > max(n) else ""
            cells.append(f"{100 * (statistics.median(g) / statistics.median(n) - 1):+.1f}{mark}")
        print(f"| {p[1]} | {p[2]} | {p[3]} | {statistics.median(n):.1f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
