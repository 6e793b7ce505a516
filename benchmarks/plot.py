#!/usr/bin/env python3
"""Plots of one results file: gpucomm next to each peer (NVSHMEM, NCCL) and the raw CUDA references.

  plot.py benchmarks/results/<stem>.json --out benchmarks/results/<stem>-plots
Writes one PNG per case (and per variant/scope where the case has them). Needs matplotlib.
"""
import argparse
import json
import os
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"gpucomm": "tab:blue", "nvshmem": "tab:green", "nccl": "tab:orange", "cuda": "tab:gray"}
STYLES = ["-", "--", "-.", ":", (0, (3, 1, 1, 1)), (0, (5, 2))]
MARKERS = ["o", "s", "^", "v", "D", "x"]


def size_label(b):
    for unit, n in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= n:
            return f"{b / n:g}{unit}"
    return f"{b}"


def size_axis(ax, sizes):
    ax.set_xscale("log", base=2)
    ticks = sorted(set(sizes))
    if len(ticks) > 12:
        step = (len(ticks) + 11) // 12
        ticks = ticks[::step]
    ax.set_xticks(ticks)
    ax.set_xticklabels([size_label(t) for t in ticks], rotation=45)
    ax.set_xlabel("bytes per iteration")


def save(fig, out, name):
    fig.tight_layout()
    path = os.path.join(out, name + ".png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print("wrote", path)


def lines_by_size(rows, out, name, title, ylabel, series_key, refs=()):
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(9, 5))
    series = defaultdict(list)
    for r in rows:
        series[series_key(r)].append(r)
    keys = sorted(series, key=lambda k: (k[0] != "gpucomm", k))
    extra = sorted({k[1:] for k in keys})
    for k in keys:
        pts = sorted(series[k], key=lambda r: r["size"])
        i = extra.index(k[1:]) % len(STYLES)
        label = " ".join(str(p) for p in k if p != "")
        ax.plot([p["size"] for p in pts], [p["value"] for p in pts], linestyle=STYLES[i], marker=MARKERS[i],
                markersize=3, color=COLORS.get(k[0], "black"), label=label)
    for value, label in refs:
        ax.axhline(value, color="tab:red", linewidth=0.8, linestyle=":")
        ax.text(ax.get_xlim()[0], value, " " + label, color="tab:red", fontsize=7, va="bottom")
    size_axis(ax, [r["size"] for r in rows])
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    save(fig, out, name)


def bars(rows, out, name, title, ylabel, group_key, refs=()):
    if not rows:
        return
    groups = sorted({group_key(r) for r in rows})
    libs = sorted({r["library"] for r in rows}, key=lambda l: (l != "gpucomm", l))
    fig, ax = plt.subplots(figsize=(max(6, len(groups) * 1.2), 4.5))
    width = 0.8 / max(1, len(libs))
    for j, lib in enumerate(libs):
        vals = []
        for g in groups:
            m = [r["value"] for r in rows if r["library"] == lib and group_key(r) == g]
            vals.append(min(m) if m else 0)
        xs = [i + j * width for i in range(len(groups))]
        ax.bar(xs, vals, width, label=lib, color=COLORS.get(lib, "black"))
        for x, v in zip(xs, vals):
            if v:
                ax.text(x, v, f"{v:.2f}", ha="center", va="bottom", fontsize=7)
    for value, label in refs:
        ax.axhline(value, color="tab:red", linewidth=0.8, linestyle=":")
        ax.text(-0.4, value, label, color="tab:red", fontsize=7, va="bottom")
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(groups))])
    ax.set_xticklabels([" ".join(str(p) for p in g) for g in groups], rotation=20)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    save(fig, out, name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    with open(a.results) as f:
        doc = json.load(f)
    rows = [r for r in doc.get("rows", []) if r.get("status") == "ok"]
    os.makedirs(a.out, exist_ok=True)

    def sel(**kw):
        return [r for r in rows if all(r.get(k) == v for k, v in kw.items())]

    ce = [r["value"] for r in sel(case="ce_copy", variant="uni")]
    ce_ref = [(max(ce), f"copy engine {max(ce):.0f} GB/s")] if ce else []
    for case in ("put_bw", "get_bw"):
        for variant in ("uni", "bidir"):
            for scope in ("thread", "warp", "block"):
                lines_by_size(sel(case=case, variant=variant, scope=scope), a.out, f"{case}_{variant}_{scope}",
                              f"{case} {variant}, {scope} scope (grid barrier per iteration)", "GB/s",
                              lambda r: (r["library"], f"{r['ctas']:>3} CTA"), ce_ref if variant == "uni" else ())
    sm = sel(case="sm_store")
    if sm:
        bars(sm, a.out, "sm_store", "raw SM stores into peer memory (1 GiB or largest)", "GB/s",
             lambda r: (r["variant"], r["ctas"]))
    for case, unit in (("put_latency", "us"), ("put_signal_pingpong", "us one way")):
        for scope in ("thread", "warp", "block"):
            refs = []
            fp = [r["value"] for r in sel(case="flag_pingpong")]
            if case == "put_signal_pingpong" and fp:
                refs = [(min(fp), f"flag ping-pong {min(fp):.2f} us")]
            lines_by_size(sel(case=case, scope=scope), a.out, f"{case}_{scope}", f"{case}, {scope} scope", unit,
                          lambda r: (r["library"],), refs)
    lines_by_size(sel(case="p_latency"), a.out, "p_latency", "p + quiet (1 CTA, 512 threads)", "us",
                  lambda r: (r["library"],))
    bars(sel(case="atomic_latency"), a.out, "atomic_latency", "atomic latency (uint64, 1 thread)", "us",
         lambda r: (r["variant"],))
    lines_by_size(sel(case="atomic_rate"), a.out, "atomic_rate", "non-fetching atomic rate (add)", "Mops/s",
                  lambda r: (r["library"], f"{r['ctas']:>3} CTA"))
    bars(sel(case="barrier"), a.out, "barrier", "barrier latency", "us", lambda r: (f"{r['npes']} PEs", r["scope"]))
    lines_by_size(sel(case="all_reduce"), a.out, "all_reduce", "all_reduce (float sum) in a CUDA graph", "us per call",
                  lambda r: (r["library"], f"{r['npes']} PEs"))
    lines_by_size(sel(case="ce_copy"), a.out, "ce_copy", "copy engine (cudaMemcpyPeerAsync)", "GB/s",
                  lambda r: (r["library"], r["variant"]))


if __name__ == "__main__":
    main()
