#!/usr/bin/env python3
"""Plots of one results file: gpucomm next to each peer (NVSHMEM, NCCL) and the raw CUDA references.

  plot.py <dir>/<stem>.json --out <dir>/<stem>-plots     # a run, as scripts/bench.sh writes it
  plot.py benchmarks/results/<kind>/latest.json --out /tmp/<kind>-plots   # a stored run
Writes one PNG per case (and per variant/scope where the case has them). Needs matplotlib.
"""
import argparse
import os
import textwrap
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from report import load_results  # noqa: E402  (beside this file)

COLORS = {"gpucomm": "tab:blue", "nvshmem": "tab:green", "nccl": "tab:orange", "cuda": "tab:gray"}
# When a plot has several series per library (CTA counts, PE counts), colour tells the series apart
# and the line style tells the library: gpucomm solid, peers dashed.
LIB_STYLE = {"gpucomm": "-", "nvshmem": "--", "nccl": "--", "cuda": ":"}
LIB_MARKER = {"gpucomm": "o", "nvshmem": "s", "nccl": "^", "cuda": "x"}
PALETTE = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive"]
REF_COLOR = "dimgray"


def size_label(b):
    for unit, n in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= n:
            return f"{b / n:g}{unit}"
    return f"{b}"


def fmt_bytes(b):
    for unit, n in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= n:
            return f"{b / n:g} {unit}"
    return f"{b} B"


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


def reference_lines(ax, refs):
    """Horizontal reference lines, labelled at the left edge whatever the x scale."""
    for value, label in refs:
        ax.axhline(value, color=REF_COLOR, linewidth=1.0, linestyle=":")
        ax.text(0.01, value, " " + label, color=REF_COLOR, fontsize=8, va="bottom", transform=ax.get_yaxis_transform())


def draw_series(ax, rows, series_key, min_size=0):
    series = defaultdict(list)
    for r in rows:
        if r["size"] >= min_size:
            series[series_key(r)].append(r)
    keys = sorted(series, key=lambda k: (k[0] != "gpucomm", k))
    subs = sorted({k[1:] for k in keys})
    for k in keys:
        pts = sorted(series[k], key=lambda r: r["size"])
        lib = k[0]
        if len(subs) > 1:
            color, style = PALETTE[subs.index(k[1:]) % len(PALETTE)], LIB_STYLE.get(lib, "-.")
        else:
            color, style = COLORS.get(lib, "black"), "-"
        label = " ".join(str(p).strip() for p in k if p != "")
        ax.plot([p["size"] for p in pts], [p["value"] for p in pts], linestyle=style, marker=LIB_MARKER.get(lib, "o"),
                markersize=3, linewidth=1.3, color=color, label=label)
    return [r["size"] for k in keys for r in series[k]]


def lines_by_size(rows, out, name, title, ylabel, series_key, refs=(), logy=False, zoom_from=None):
    """Value against size, one line per series. logy: a log y axis (latencies that span decades).
    zoom_from: a second, linear panel of the sizes >= zoom_from (bandwidth plateaus), next to a
    log-log panel of every size."""
    if not rows:
        return
    panels = 2 if zoom_from and any(r["size"] >= zoom_from for r in rows) else 1
    fig, axes = plt.subplots(1, panels, figsize=(7.5 * panels, 5.2), squeeze=False)
    axes = axes[0]
    for i, ax in enumerate(axes):
        zoom = panels == 2 and i == 1
        sizes = draw_series(ax, rows, series_key, min_size=zoom_from if zoom else 0)
        size_axis(ax, sizes)
        if (logy or panels == 2) and not zoom:
            ax.set_yscale("log")
        reference_lines(ax, refs)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.3)
        if panels == 2:
            ax.set_title(f"sizes >= {fmt_bytes(zoom_from)}, linear" if zoom else "every size, log-log", fontsize=10)
    axes[-1].legend(fontsize=8, ncol=2)
    fig.suptitle(title)
    save(fig, out, name)


def bars(rows, out, name, title, ylabel, group_key, refs=(), choose=None):
    """One bar per (group, library); `choose` picks the row of a bar among several (default: the lowest)."""
    if not rows:
        return
    groups = sorted({group_key(r) for r in rows})
    libs = sorted({r["library"] for r in rows}, key=lambda l: (l != "gpucomm", l))
    fig, ax = plt.subplots(figsize=(max(6, len(groups) * 1.2), 4.5))
    width = 0.8 / max(1, len(libs))
    for j, lib in enumerate(libs):
        vals = []
        for g in groups:
            m = [r for r in rows if r["library"] == lib and group_key(r) == g]
            vals.append((choose or (lambda rs: min(rs, key=lambda r: r["value"])))(m)["value"] if m else 0)
        xs = [i + j * width for i in range(len(groups))]
        ax.bar(xs, vals, width, label=lib, color=COLORS.get(lib, "black"))
        for x, v in zip(xs, vals):
            if v:
                ax.text(x, v, f"{v:.3g}", ha="center", va="bottom", fontsize=7)
    reference_lines(ax, refs)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(groups))])
    ax.set_xticklabels([" ".join(str(p) for p in g) for g in groups], rotation=20)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    save(fig, out, name)


COLL_CASES = ("allreduce", "allgather", "alltoall", "reduce_scatter", "alltoallv")


def collective(rows, out, case):
    """A device collective, nccl-tests semantics: time per call (log-log) and busbw against the size, one line
    per (library, PEs, element type); colour is the PE count and type, solid gpucomm, dashed NCCL."""
    lat = [r for r in rows if r.get("metric") == "latency"]
    bus = [r for r in rows if r.get("metric") == "busbw"]
    if not lat and not bus:
        return
    smoke = any(str(r.get("note", "")).startswith("smoke") for r in rows)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(15, 5.2))
    key = lambda r: (r["library"], f"{r['npes']} PEs", r.get("variant", ""))
    for ax, sel, ylabel, logy in ((a1, lat, "us per call", True), (a2, bus, "busbw GB/s", False)):
        if not sel:
            continue
        sizes = draw_series(ax, sel, key)
        size_axis(ax, sizes)
        ax.set_xlabel("size (bytes, nccl-tests' convention)")
        if logy:
            ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.3)
    a1.set_title("time per call (CUDA graph of K calls, median)", fontsize=10)
    a2.set_title("bus bandwidth", fontsize=10)
    a2.legend(fontsize=8, ncol=2)
    fig.suptitle(f"{case}: gpucomm" + (" and NCCL" if any(r["library"] == "nccl" for r in rows) else "") +
                 (" (smoke: PEs share a GPU, not link figures)" if smoke else ""))
    save(fig, out, f"coll_{case}")


VERBS_SCOPES = ["thread", "warp", "block", "gpu"]


def verbs(rate, latency, out):
    """verbs_gpu: WQEs/s by scope (log scale, with the 400 M target) and post-to-doorbell latency."""
    if not rate and not latency:
        return
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 5), gridspec_kw={"width_ratios": [3, 1]})
    rate = sorted(rate, key=lambda r: (VERBS_SCOPES.index(r["scope"]) if r["scope"] in VERBS_SCOPES else 9,
                                       r["variant"]))
    vals = [r["value"] / 1e6 for r in rate]
    a1.bar(range(len(rate)), vals, color=[PALETTE[VERBS_SCOPES.index(r["scope"]) % len(PALETTE)]
                                          if r["scope"] in VERBS_SCOPES else "black" for r in rate])
    for i, v in enumerate(vals):
        a1.text(i, v, f"{v:.3g}", ha="center", va="bottom", fontsize=8)
    a1.set_xticks(range(len(rate)))
    a1.set_xticklabels([r["scope"] + "\n" + textwrap.fill(r["variant"], 18) for r in rate], fontsize=8)
    a1.set_yscale("log")
    a1.set_ylabel("M WQEs/s")
    a1.set_title("posting rate", fontsize=10)
    reference_lines(a1, [(400, "target 400 M/s (whole GPU)")])
    a1.grid(True, axis="y", alpha=0.3)
    if latency:
        r = latency[0]
        bars_v = [r["value"]] + ([r["max"]] if r.get("max") else [])
        a2.bar(range(len(bars_v)), bars_v, color=["tab:blue", "tab:cyan"][: len(bars_v)])
        for i, v in enumerate(bars_v):
            a2.text(i, v, f"{v:.3g}", ha="center", va="bottom", fontsize=8)
        a2.set_xticks(range(len(bars_v)))
        a2.set_xticklabels(["median", "p99"][: len(bars_v)])
        reference_lines(a2, [(1.0, "target 1 us")])
        a2.set_ylim(0, max(bars_v + [1.0]) * 1.25)
    a2.set_ylabel("us")
    a2.set_title("post to doorbell, 1 thread, 1 WQE", fontsize=10)
    a2.grid(True, axis="y", alpha=0.3)
    fig.suptitle("verbs_gpu posting on one GPU, against the software NIC model (drain-only), not a real NIC")
    save(fig, out, "verbs_posting")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    doc = load_results(a.results)
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
                              lambda r: (r["library"], f"{r['ctas']:>3} CTA"), ce_ref if variant == "uni" else (),
                              zoom_from=1 << 20)
    sm = sel(case="sm_store")
    if sm:
        bars(sm, a.out, "sm_store", "raw SM stores into peer memory (largest size)", "GB/s",
             lambda r: (r["variant"], r["ctas"]), choose=lambda rs: max(rs, key=lambda r: r["size"]))
    for case, unit in (("put_latency", "us"), ("put_signal_pingpong", "us one way")):
        for scope in ("thread", "warp", "block"):
            refs = []
            fp = [r["value"] for r in sel(case="flag_pingpong")]
            if case == "put_signal_pingpong" and fp:
                refs = [(min(fp), f"flag ping-pong {min(fp):.2f} us")]
            lines_by_size(sel(case=case, scope=scope), a.out, f"{case}_{scope}", f"{case}, {scope} scope", unit,
                          lambda r: (r["library"],), refs, logy=True)
    lines_by_size(sel(case="p_latency"), a.out, "p_latency", "p + quiet (1 CTA, 512 threads)", "us",
                  lambda r: (r["library"],), logy=True)
    bars(sel(case="atomic_latency"), a.out, "atomic_latency", "atomic latency (uint64, 1 thread)", "us",
         lambda r: (r["variant"],))
    lines_by_size(sel(case="atomic_rate"), a.out, "atomic_rate", "non-fetching atomic rate (add)", "Mops/s",
                  lambda r: (r["library"], f"{r['ctas']:>3} CTA"), logy=True)
    bars(sel(case="barrier"), a.out, "barrier", "barrier latency", "us", lambda r: (f"{r['npes']} PEs", r["scope"]))
    lines_by_size(sel(case="all_reduce"), a.out, "all_reduce", "all_reduce (float sum) in a CUDA graph", "us per call",
                  lambda r: (r["library"], f"{r['npes']} PEs"), logy=True)
    lines_by_size(sel(case="ce_copy"), a.out, "ce_copy", "copy engine (cudaMemcpyPeerAsync)", "GB/s",
                  lambda r: (r["library"], r["variant"]), zoom_from=1 << 20)
    # P2PCopy next to NVLinkStore (block scope; P2PCopy issues from one thread per CTA): the default
    # staging, the largest measured one, and a source in shared memory (no staging).
    p2p = [r for r in sel(case="p2pcopy_put_bw", scope="block")
           if r["variant"] in ("global", "global 8x16KiB/1", "shared") and r["ctas"] in (1, 4, 8)]
    nvl = [r for r in sel(case="put_bw", library="gpucomm", variant="uni", scope="block") if r["ctas"] in (1, 4, 8)]
    if p2p:
        lines_by_size(p2p + nvl, a.out, "p2pcopy_put_bw", "P2PCopy put_bw next to NVLinkStore's (block scope)", "GB/s",
                      lambda r: (r["library"], r["transport"], r["variant"] if r["case"] == "p2pcopy_put_bw" else "",
                                 f"{r['ctas']:>3} CTA"), zoom_from=1 << 20)
    # ProxyQueue next to NVLinkStore (latencies) and the copy engine (bulk puts), block scope.
    for case, unit in (("put_signal_pingpong", "us one way"), ("put_latency", "us")):
        pq = sel(case="proxyqueue_" + case, scope="block")
        if pq:
            lines_by_size(pq + sel(case=case, library="gpucomm", scope="block"), a.out, f"proxyqueue_{case}",
                          f"ProxyQueue {case} next to NVLinkStore's (block scope)", unit,
                          lambda r: (r["library"], r["transport"]), logy=True)
    lines_by_size(sel(case="proxyqueue_put_bw", scope="block"), a.out, "proxyqueue_put_bw",
                  "ProxyQueue put_bw (block scope: the leader posts one command per put)", "GB/s",
                  lambda r: (r["library"], f"{r['ctas']:>3} CTA"), ce_ref, zoom_from=1 << 20)
    for case in COLL_CASES:
        collective(sel(case=case), a.out, case)
    verbs(sel(case="verbs_posting_rate"), sel(case="verbs_post_to_doorbell_latency"), a.out)


if __name__ == "__main__":
    main()
