#!/usr/bin/env python3
"""Merge the rows of one benchmark run into <out>.json and <out>.md.

Standard library only (the GPU machine may lack anything else). Called by scripts/bench.sh:
  report.py --rows rows.jsonl --status status.jsonl --machine machine.json --topo topo.txt
            --driver driver.txt --command "scripts/bench.sh ..." --commit C --gpus N --quick 0|1
            --seconds S --out <dir>/<stem>
            [--ncu ncu.csv --ncu-launches launches.jsonl]   # ncu --csv --page raw of copy_profile
  report.py verbs-rows --json verbs.json --rc RC [--note TEXT]   # bench_verbs_posting's JSON as rows
  report.py markdown RESULTS.json   # rewrite RESULTS.md from RESULTS.json (a run, or a stored latest.json)
<out>.json is a run (schema gpucomm.bench-run/1, rows as objects). scripts/render_results.py
record --bench stores one as benchmarks/results/<kind>/latest.json (schema gpucomm.bench-results/1:
the same document with its rows as a table, stored_rows() below) and renders the docs from it.
"""
import argparse
import csv
import datetime
import json
import os
import sys
from collections import defaultdict

LIBS = ["gpucomm", "nvshmem", "nccl", "cuda"]
VERBS_CASES = ("verbs_posting_rate", "verbs_post_to_doorbell_latency")
VERBS_SCOPES = ["thread", "warp", "block", "gpu"]
LIMIT_CASES = ("pingpong_limits", "quiet_limits", "barrier_limits", "copy_limits")
# The device collectives (nccl-tests semantics): three rows per point, metric latency (us), algbw
# and busbw (GB/s); gpucomm and NCCL in the same run (NCCL has no alltoallv).
COLL_CASES = ("allreduce", "allgather", "alltoall", "reduce_scatter", "alltoallv")
COLL_METRICS = ("latency", "algbw", "busbw")
# The PyTorch example's MoE dispatch + combine (examples/torch/bench_moe.py): per shape ("decode",
# "prefill") and mode ("graph", "eager"), a latency row (us per pair) and a bandwidth row (GB/s =
# 2 x size / time), size = the bytes dispatched per GPU; gpucomm's rows and torch + NCCL's ("nccl").
MOE_CASE = "moe"
MOE_SHAPES = ("decode", "prefill")
NIC_MODEL_NOTE = ("Measured against gpucomm's software NIC model as a drain-only consumer (it reads doorbells and "
                  "completes everything without touching the WQEs), on one GPU: what posting costs the GPU, not what "
                  "a real NIC sustains.")

def load_jsonl(path):
    out = []
    if path and os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    out.append({"status": "error", "note": "unparsable row: " + line[:200]})
    return out


def read(path, default=""):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def ok(rows):
    return [r for r in rows if r.get("status") == "ok"]


def pick(rows, **kw):
    res = []
    for r in rows:
        if all((r.get(k) in v) if isinstance(v, (list, tuple, set)) else r.get(k) == v for k, v in kw.items()):
            res.append(r)
    return res


def best(rows, key=max, where=lambda r: True):
    c = [r for r in rows if where(r)]
    return key(c, key=lambda r: r["value"]) if c else None


def fmt_size(b):
    b = int(b)
    for unit, n in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= n and b % n == 0:
            return f"{b // n} {unit}"
    return f"{b} B"


def fmt(v, unit=""):
    if v is None:
        return "n/a"
    if abs(v) >= 100:
        s = f"{v:.0f}"
    elif abs(v) >= 10:
        s = f"{v:.1f}"
    else:
        s = f"{v:.2f}"
    return s + (f" {unit}" if unit else "")


def fmt_rate(v):
    """WQEs/s (or any per-second count) in M/s."""
    return "n/a" if v is None else fmt(v / 1e6, "M WQEs/s")


class Line:
    """One line of the headline table: gpucomm's value, the peer's, the reference and the target."""

    def __init__(self, what, g, peer=None, peer_name="NVSHMEM", ref="", target=None, higher=True, unit="",
                 g_where="", peer_where="", fmt_value=None, fmt_target=None, wanted=""):
        """wanted: the target in words, for a target relative to a figure this run lacks (then "not measured")."""
        self.what, self.g, self.peer, self.peer_name = what, g, peer, peer_name
        self.ref, self.target, self.higher, self.unit, self.wanted = ref, target, higher, unit, wanted
        self.g_where, self.peer_where = g_where, peer_where
        self.fmt_value = fmt_value or (lambda v: fmt(v, unit))
        self.fmt_target = fmt_target or (lambda v: f"{v:g} {unit}")

    def g_txt(self):
        return self.fmt_value(self.g) + self.g_where

    def peer_txt(self):
        if self.peer is None and self.peer_name is None:
            return ""
        return self.fmt_value(self.peer) + self.peer_where + (f" ({self.peer_name})" if self.peer_name != "NVSHMEM" else "")

    def ratio(self):
        """gpucomm against the peer, > 1 when gpucomm is better: g/peer for rates, peer/g for latencies."""
        if self.g is None or self.peer is None or self.g <= 0 or self.peer <= 0:
            return None
        return self.g / self.peer if self.higher else self.peer / self.g

    def ratio_txt(self):
        x = self.ratio()
        if x is None:
            return ""
        return f"{x:.2f}x" + (f" (vs {self.peer_name})" if self.peer_name != "NVSHMEM" else "")

    def target_txt(self):
        if self.target is None:
            return self.wanted
        return (">= " if self.higher else "<= ") + self.fmt_target(self.target)

    def verdict(self):
        if self.target is None:
            return "not measured" if self.wanted else ""
        if self.g is None:
            return "not measured"
        if (self.g >= self.target) if self.higher else (self.g <= self.target):
            return "met"
        return "MISSED by " + self.fmt_value(abs(self.target - self.g))

    def cells(self):
        return [self.what, self.g_txt(), self.peer_txt(), self.ratio_txt(), self.ref, self.target_txt(), self.verdict()]


HEADLINE_HEAD = ["what", "gpucomm", "NVSHMEM (or NCCL)", "gpucomm vs peer (> 1: gpucomm better)",
                 "physical reference", "target", "result"]


def headline(rows):
    """The issue's targets (H200, NV18) as Lines, each next to the peer and the physical reference."""
    r = ok(rows)
    lines = []

    def val(x):
        return x["value"] if x else None

    def where_txt(x):
        return f" ({x['ctas']} CTA{'' if x['ctas'] == 1 else 's'}, {fmt_size(x['size'])})" if x else ""

    def bw(lib, variant, ctas=None, min_size=0):
        return best(pick(r, case="put_bw", library=lib, scope="block", variant=variant),
                    where=lambda x: (ctas is None or x["ctas"] == ctas) and x["size"] >= min_size)

    def worst_from(lib, min_size):
        """The worst point at >= min_size with the grid whose best point there is highest."""
        top = bw(lib, "uni", min_size=min_size)
        if not top:
            return None
        pts = [x for x in pick(r, case="put_bw", library=lib, scope="block", variant="uni", ctas=top["ctas"])
               if x["size"] >= min_size]
        return min(pts, key=lambda x: x["value"]) if pts else None

    ce = best(pick(r, case="ce_copy", variant="uni"))
    sm = {c: best(pick(r, case="sm_store", variant="store-uni", ctas=c)) for c in (1, 4, 8, 16, 132)}
    g16, n16 = worst_from("gpucomm", 16 << 20), worst_from("nvshmem", 16 << 20)
    lines.append(Line("put_bw uni, block, >= 16 MiB (worst size at the best grid)", val(g16), val(n16),
                      ref=f"CE {fmt(val(ce), 'GB/s')}", target=365, unit="GB/s", g_where=where_txt(g16),
                      peer_where=where_txt(n16)))
    gb, nb = bw("gpucomm", "bidir"), bw("nvshmem", "bidir")
    lines.append(Line("put_bw bidir, block, best", val(gb), val(nb), target=730, unit="GB/s", g_where=where_txt(gb),
                      peer_where=where_txt(nb)))
    for c, t in ((1, 50), (4, 200)):
        gx, nx = bw("gpucomm", "uni", ctas=c), bw("nvshmem", "uni", ctas=c)
        lines.append(Line(f"put_bw uni, block, {c} CTA{'' if c == 1 else 's'}, best size", val(gx), val(nx),
                          ref=f"SM store {fmt(val(sm.get(c)), 'GB/s')}", target=t, unit="GB/s", g_where=where_txt(gx),
                          peer_where=where_txt(nx)))

    def lat(case, lib, **kw):
        return best(pick(r, case=case, library=lib, **kw), key=min)

    fp = best(pick(r, case="flag_pingpong"), key=min)
    gp = lat("put_signal_pingpong", "gpucomm", scope="thread", size=8)
    npp = lat("put_signal_pingpong", "nvshmem", scope="thread", size=8)
    lines.append(Line("put_signal ping-pong one way, thread, 8 B", val(gp), val(npp), ref=f"flag {fmt(val(fp), 'us')}",
                      target=1.35, higher=False, unit="us"))
    gpl, npl = lat("p_latency", "gpucomm", size=4), lat("p_latency", "nvshmem", size=4)
    lines.append(Line("p + quiet, 4 B", val(gpl), val(npl), target=0.9, higher=False, unit="us"))
    ga = lat("atomic_latency", "gpucomm", variant="fetch_add")
    na = lat("atomic_latency", "nvshmem", variant="fetch_add")
    lines.append(Line("fetch_add latency", val(ga), val(na), target=0.93, higher=False, unit="us"))
    for pes, t in ((2, 1.5), (4, 2.0)):
        gbar, nbar = lat("barrier", "gpucomm", npes=pes), lat("barrier", "nvshmem", npes=pes)
        lines.append(Line(f"barrier, {pes} PEs (best scope)", val(gbar), val(nbar), target=t, higher=False, unit="us",
                          g_where=f" ({gbar['scope']})" if gbar else "", peer_where=f" ({nbar['scope']})" if nbar else ""))
    for pes in (2, 4):
        for size in (8, 64 << 10):
            gar = lat("all_reduce", "gpucomm", npes=pes, size=size)
            nar = lat("all_reduce", "nccl", npes=pes, size=size)
            if gar or nar:
                lines.append(Line(f"all_reduce in a graph, {pes} PEs, {fmt_size(size)}", val(gar), val(nar),
                                  peer_name="NCCL", higher=False, unit="us"))
    lines.extend(p2pcopy_lines(r, bw))
    lines.extend(proxyqueue_lines(r, gp))
    lines.extend(collective_lines(r))
    lines.extend(moe_lines(r))
    # verbs_gpu against the software NIC model (drain-only): what posting costs the GPU, no NIC.
    nic = "software NIC model (drain-only), not a real NIC"
    gr = best(pick(r, case="verbs_posting_rate", library="gpucomm", scope="gpu"))
    if gr or pick(rows, case="verbs_posting_rate"):
        lines.append(Line("verbs_gpu posting rate, whole GPU, warps batching 32 WQEs, QP per warp", val(gr),
                          peer_name=None, ref=nic, target=400e6, fmt_value=fmt_rate,
                          fmt_target=lambda v: f"{v / 1e6:g} M WQEs/s"))
    gl = lat("verbs_post_to_doorbell_latency", "gpucomm", scope="thread")
    if gl or pick(rows, case="verbs_post_to_doorbell_latency"):
        p99 = f" (p99 {fmt(gl['max'], 'us')})" if gl and gl.get("max") else ""
        lines.append(Line("verbs_gpu post to doorbell, 1 thread, 1 WQE, median", val(gl), peer_name=None, ref=nic,
                          target=1.0, higher=False, unit="us", g_where=p99))
    return lines


# The staging P2PCopy recommends for puts from global memory (gpucomm::P2PCopy128K: 8 stages of
# 16 KiB in dynamic shared memory, one store in flight), as the benchmark names its rows.
P2PCOPY_RECOMMENDED = "global 8x16KiB/1"


def p2pcopy_lines(r, nvlink_bw):
    """P2PCopy's targets (its issue), block scope, one issuing thread per CTA, each at its best size:
    from global memory with the recommended staging at >= 0.97x NVLinkStore's put at 1 and 4 CTAs and
    at >= 0.97x the raw bulk copy (copy_limits' best bulk-* variant) at 8 CTAs; from shared memory at
    >= 50 GB/s with one CTA. The default staging (a static __shared__ variable) is shown beside them."""
    def p2p(variant, ctas):
        return best(pick(r, case="p2pcopy_put_bw", library="gpucomm", scope="block", variant=variant, ctas=ctas))

    def where_txt(x):
        return f" ({x['ctas']} CTA{'' if x['ctas'] == 1 else 's'}, {fmt_size(x['size'])})" if x else ""

    lines = []
    for c in (1, 4):
        g, nv = p2p(P2PCOPY_RECOMMENDED, c), nvlink_bw("gpucomm", "uni", ctas=c)
        default = p2p("global", c)
        lines.append(Line(f"P2PCopy put_bw, block, {c} CTA{'' if c == 1 else 's'}, source global, recommended "
                          "staging, best size", g and g["value"], nv and nv["value"], peer_name="NVLinkStore",
                          unit="GB/s", g_where=where_txt(g), ref=f"default staging: {fmt(default and default['value'], 'GB/s')}",
                          target=0.97 * nv["value"] if nv else None, wanted="0.97x NVLinkStore",
                          fmt_target=lambda v: f"0.97x NVLinkStore = {fmt(v, 'GB/s')}"))
    g = p2p(P2PCOPY_RECOMMENDED, 8)
    raw = best([x for x in pick(r, case="copy_limits", scope="block", ctas=8) if x["variant"].startswith("bulk-")])
    lines.append(Line("P2PCopy put_bw, block, 8 CTAs, source global, recommended staging, best size",
                      g and g["value"], raw and raw["value"],
                      peer_name=f"raw bulk copy {raw['variant']}" if raw else "raw bulk copy", unit="GB/s",
                      g_where=where_txt(g),
                      target=0.97 * raw["value"] if raw else None, wanted="0.97x the raw bulk copy",
                      fmt_target=lambda v: f"0.97x the raw bulk copy = {fmt(v, 'GB/s')}"))
    shared = p2p("shared", 1)
    lines.append(Line("P2PCopy put_bw, block, 1 CTA, source shared, best size", shared and shared["value"],
                      peer_name=None, target=50, unit="GB/s", g_where=where_txt(shared)))
    return lines


def proxyqueue_lines(r, nvlink_pingpong):
    """ProxyQueue's targets (its issue), against the copy engine and NVLinkStore of the same run: bulk
    put of 16 MiB or more at >= 0.97x the copy engine's rate with one posting thread; put_signal of
    8 B at <= 7 us one way; >= 20 M commands per second per proxy."""
    lines = []
    ce = {x["size"]: x["value"] for x in pick(r, case="ce_copy", variant="uni")}
    pq = {x["size"]: x["value"] for x in pick(r, case="proxyqueue_put_bw", library="gpucomm", scope="block", ctas=1,
                                              variant="uni")}
    sizes = sorted(s for s in set(ce) & set(pq) if s >= 16 << 20)
    worst = min(sizes, key=lambda s: pq[s] / ce[s]) if sizes else None
    lines.append(Line("ProxyQueue put_bw, block, 1 CTA (one posting thread), >= 16 MiB: the worst size against "
                      "the copy engine", pq.get(worst), ce.get(worst), peer_name="copy engine", unit="GB/s",
                      g_where=f" ({fmt_size(worst)})" if worst else "", target=0.97 * ce[worst] if worst else None,
                      wanted="0.97x the copy engine", fmt_target=lambda v: f"0.97x copy engine = {fmt(v, 'GB/s')}"))
    ps = best(pick(r, case="proxyqueue_put_signal_pingpong", library="gpucomm", size=8), key=min)
    lines.append(Line("ProxyQueue put_signal ping-pong one way, 8 B (best scope)", ps and ps["value"], peer_name=None,
                      ref=f"NVLinkStore {fmt(nvlink_pingpong and nvlink_pingpong['value'], 'us')}", target=3,
                      higher=False, unit="us", g_where=f" ({ps['scope']})" if ps else ""))

    def per_proxy(x):  # the rate is summed over both PEs: per_pe runs a proxy for each
        return x["value"] / (2 if x["variant"].endswith("/per_pe") else 1)

    def best_rate(kind):
        pts = [x for x in pick(r, case="proxyqueue_command_rate", library="gpucomm") if x["variant"].startswith(kind)]
        return max(pts, key=per_proxy) if pts else None

    # Runs before the scattered variant named the contiguous one "put_nbi 8 B".
    put, nop = best_rate("put_nbi 8 B contiguous/") or best_rate("put_nbi 8 B/"), best_rate("nop/")
    scattered = best_rate("put_nbi 8 B scattered/")
    lines.append(Line("ProxyQueue commands per second per proxy, contiguous 8-byte put_nbi, store path off "
                      "(best posting threads)",
                      put and per_proxy(put), peer_name=None, target=20, unit="M/s",
                      g_where=f" ({put['threads']} threads, {put['variant'].split('/')[1]})" if put else "",
                      ref=f"nops: {fmt(nop and per_proxy(nop), 'M/s')}; scattered puts: "
                          f"{fmt(scattered and per_proxy(scattered), 'M/s')}"))
    return lines


def collective_lines(r):
    """The device collectives' targets against NCCL in the same run. allreduce (float32 and bf16):
    time per call at most NCCL's (3 % for the repetitions' spread) at every size; at 8 B at most 2.5 /
    3.0 us on 2 / 4 PEs with PDL and 3.5 / 4.0 without, 64 KiB 3.5 / 5.5 us, 1 MiB 9 / 11 us; busbw at
    256 MiB at least 1.05x / 1.0x NCCL's. allgather, alltoall and reduce_scatter: at least NCCL at
    every size (time per call no longer than NCCL's). alltoallv has no NCCL counterpart. The PyTorch
    TP layer's allreduce (tp_layer): at most 0.7x torch + NCCL's time up to 4 MiB, 1.0x above."""
    lines = []

    def by_size(case, lib, pes, metric, variant="float32"):
        return {x["size"]: x for x in pick(r, case=case, library=lib, npes=pes, variant=variant, metric=metric)}

    for pes in sorted({x.get("npes") for x in pick(r, case=list(COLL_CASES) + ["tp_layer"])}):
        for variant in ("float32", "bf16"):
            g, n = by_size("allreduce", "gpucomm", pes, "latency", variant), by_size("allreduce", "nccl", pes, "latency", variant)
            both = sorted(set(g) & set(n))
            if not both:
                continue
            worst = max(both, key=lambda s: g[s]["value"] / n[s]["value"])
            slower = sum(g[s]["value"] > 1.03 * n[s]["value"] for s in both)
            lines.append(Line(f"allreduce {variant} time per call, {pes} PEs, every size: the worst against NCCL",
                              g[worst]["value"], n[worst]["value"], peer_name="NCCL", higher=False, unit="us",
                              g_where=f" ({fmt_size(worst)}; over 1.03x NCCL at {slower} of {len(both)} sizes)",
                              target=1.03 * n[worst]["value"], fmt_target=lambda v: f"NCCL's + 3 % = {fmt(v, 'us')}"))
            if variant != "float32":
                continue
            no_pdl = by_size("allreduce", "gpucomm", pes, "latency", "float32-no-pdl")
            for size, label, table, rows_of in ((8, "8 B, PDL", {2: 2.5, 4: 3.0}, g), (8, "8 B, no PDL", {2: 3.5, 4: 4.0}, no_pdl),
                                                (64 << 10, "64 KiB", {2: 3.5, 4: 5.5}, g), (1 << 20, "1 MiB", {2: 9.0, 4: 11.0}, g)):
                if size in rows_of and size in n:
                    lines.append(Line(f"allreduce time per call, {pes} PEs, {label}", rows_of[size]["value"],
                                      n[size]["value"], peer_name="NCCL", higher=False, unit="us",
                                      target=table.get(pes)))
        tg, tn = (by_size("tp_layer", lib, pes, "latency", "allreduce") for lib in ("gpucomm", "nccl"))
        for lo, hi, want in ((0, 4 << 20, 0.7), ((4 << 20) + 1, 1 << 40, 1.0)):
            both = sorted(s for s in set(tg) & set(tn) if lo <= s <= hi)
            if both:
                worst = max(both, key=lambda s: tg[s]["value"] / tn[s]["value"])
                lines.append(Line(f"PyTorch TP layer's allreduce, {pes} PEs, bf16, {fmt_size(both[0])} .. "
                                  f"{fmt_size(both[-1])}: the worst against {want}x torch + NCCL",
                                  tg[worst]["value"], tn[worst]["value"], peer_name="NCCL", higher=False, unit="us",
                                  g_where=f" ({fmt_size(worst)})", target=want * tn[worst]["value"],
                                  fmt_target=lambda v, w=want: f"{w}x NCCL = {fmt(v, 'us')}"))
        for case in COLL_CASES[:4]:
            gb, nb = by_size(case, "gpucomm", pes, "busbw"), by_size(case, "nccl", pes, "busbw")
            both = sorted(set(gb) & set(nb))
            if both:
                size = both[-1]
                want = {2: 1.05}.get(pes, 1.0) if case == "allreduce" else 1.0
                lines.append(Line(f"{case} busbw, {pes} PEs, {fmt_size(size)} (largest size)", gb[size]["value"],
                                  nb[size]["value"], peer_name="NCCL", unit="GB/s", g_where=f" ({gb[size]['ctas']} CTAs)",
                                  target=want * nb[size]["value"] if size >= 256 << 20 else None,
                                  fmt_target=lambda v, w=want: (f"{w}x NCCL = " if w != 1.0 else "NCCL's ") + fmt(v, 'GB/s')))
            if case == "allreduce":
                continue
            gt, nt = by_size(case, "gpucomm", pes, "latency"), by_size(case, "nccl", pes, "latency")
            both = sorted(set(gt) & set(nt))
            if both:
                worst = max(both, key=lambda s: gt[s]["value"] / nt[s]["value"])
                slower = sum(gt[s]["value"] > nt[s]["value"] for s in both)
                lines.append(Line(f"{case} time per call, {pes} PEs, every size: the worst against NCCL",
                                  gt[worst]["value"], nt[worst]["value"], peer_name="NCCL", higher=False, unit="us",
                                  g_where=f" ({fmt_size(worst)}; slower than NCCL at {slower} of {len(both)} sizes)",
                                  target=nt[worst]["value"], fmt_target=lambda v: f"NCCL's {fmt(v, 'us')}"))
        av = by_size("alltoallv", "gpucomm", pes, "busbw")
        if av:
            size = max(av)
            lines.append(Line(f"alltoallv busbw, {pes} PEs, {fmt_size(size)} (largest size, even counts)",
                              av[size]["value"], peer_name=None, unit="GB/s", g_where=f" ({av[size]['ctas']} CTAs)",
                              ref="NCCL has no alltoallv"))
    return lines


def moe_points(r):
    """{(npes, shape): {(library, mode, metric): row}} of the moe case's rows."""
    pts = defaultdict(dict)
    for x in pick(r, case=MOE_CASE):
        shape, _, mode = x.get("variant", "").partition(" ")
        pts[(x.get("npes"), shape)][(x["library"], mode, x["metric"])] = x
    return pts


def moe_baseline(p):
    """The torch baseline of one point: the faster of torch + NCCL graph-captured and eager, as
    (mode, latency row, bandwidth row), or None."""
    modes = [m for m in ("graph", "eager") if ("nccl", m, "latency") in p]
    if not modes:
        return None
    m = min(modes, key=lambda m: p[("nccl", m, "latency")]["value"])
    return m, p[("nccl", m, "latency")], p.get(("nccl", m, "bandwidth"))


def moe_lines(r):
    """MoE dispatch + combine (examples/torch/bench_moe.py) against the torch baseline (the faster of
    its graph-captured and eager modes): decode shape, gpucomm's graph-captured time per pair at most
    0.5x the baseline's; prefill shape, at least 250 GB/s of dispatched bytes per GPU."""
    lines = []
    pts = moe_points(r)
    for (pes, shape), p in sorted(pts.items(), key=lambda kv: (kv[0][0], MOE_SHAPES.index(kv[0][1])
                                                              if kv[0][1] in MOE_SHAPES else 9, kv[0][1])):
        if shape not in MOE_SHAPES:
            continue
        g = p.get(("gpucomm", "graph", "latency"))
        ge = p.get(("gpucomm", "eager", "latency"))
        base = moe_baseline(p)
        peer = f"torch + NCCL, {base[0]}" if base else "torch + NCCL"
        eager = f"; eager {fmt(ge['value'], 'us')}" if ge else ""
        if shape == "decode":
            bl = base[1]["value"] if base else None
            lines.append(Line(f"MoE dispatch + combine, decode shape, {pes} PEs: time per pair against the torch "
                              "baseline", g and g["value"], bl, peer_name=peer, higher=False, unit="us",
                              g_where=f" (graph{eager})", target=0.5 * bl if bl else None,
                              fmt_target=lambda v: f"0.5x the baseline = {fmt(v, 'us')}",
                              wanted="<= 0.5x the torch baseline"))
        else:
            gb = p.get(("gpucomm", "graph", "bandwidth"))
            bb = base[2] if base else None
            lines.append(Line(f"MoE dispatch + combine, prefill shape, {pes} PEs: GB/s of dispatched bytes per GPU",
                              gb and gb["value"], bb and bb["value"], peer_name=peer, unit="GB/s",
                              g_where=f" (graph, {fmt(g['value'], 'us')} per pair{eager})" if g else "",
                              target=250))
    return lines


def moe_tables(rows):
    """MoE dispatch + combine: one table per PE count, a line per shape."""
    pts = moe_points(ok(rows))
    if not pts:
        return []
    out = ["examples/torch/bench_moe.py: time per (dispatch, combine) pair (median over repetitions), bf16 tokens, "
           "random routing with a fixed seed (shapes in each row's note). bytes = the bytes dispatched per GPU: one "
           "row of 2 x hidden bytes per (token, other rank) pair, rows that stay on their rank left out (mean over "
           "the ranks); GB/s = 2 x bytes / time (dispatch sends them, combine brings as many back). gpucomm: "
           "MoEPlan.dispatch + combine; torch + NCCL: all_to_all_single plus index permutes, graph-captured with the "
           "routing's split sizes fixed, or eager with the split sizes read on the host every call; the baseline is "
           "the faster of the two. \"baseline / gpucomm\" is the baseline's time over gpucomm's graph-captured time "
           "(> 1: gpucomm faster).", ""]
    head = ["shape", "bytes", "gpucomm graph us", "gpucomm eager us", "torch + NCCL graph us", "torch + NCCL eager us",
            "baseline / gpucomm", "gpucomm GB/s", "baseline GB/s", "CTAs"]
    for pes in sorted({k[0] for k in pts}):
        out += [f"### moe · {pes} PEs", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        shapes = sorted((s for n, s in pts if n == pes), key=lambda s: (MOE_SHAPES.index(s) if s in MOE_SHAPES else 9, s))
        for shape in shapes:
            p = pts[(pes, shape)]

            def v(lib, mode, metric="latency"):
                x = p.get((lib, mode, metric))
                return x["value"] if x else None

            base = moe_baseline(p)
            g = v("gpucomm", "graph")
            any_row = next(iter(p.values()))
            cells = [shape, fmt(any_row["size"] / 1e6, "MB")] + [
                fmt(x) if x is not None else "" for x in (g, v("gpucomm", "eager"), v("nccl", "graph"), v("nccl", "eager"))]
            cells.append(f"{base[1]['value'] / g:.2f}x ({base[0]})" if base and g else "")
            cells.append(fmt(v("gpucomm", "graph", "bandwidth")) if v("gpucomm", "graph", "bandwidth") is not None else "")
            cells.append(fmt(base[2]["value"]) if base and base[2] else "")
            cells.append(str(p.get(("gpucomm", "graph", "latency"), {}).get("ctas", "")))
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return out


def headline_md(rows):
    out = ["| " + " | ".join(HEADLINE_HEAD) + " |", "|" + "---|" * len(HEADLINE_HEAD)]
    for line in headline(rows):
        out.append("| " + " | ".join(line.cells()) + " |")
    return out


def vs_nvshmem(rows):
    """put_bw block points where gpucomm is below NVSHMEM (the >= NVSHMEM at every point target)."""
    r = ok(rows)
    idx = {}
    for x in pick(r, case="put_bw", library="nvshmem", scope="block"):
        idx[(x["variant"], x["ctas"], x["size"])] = x["value"]
    below, total = [], 0
    for x in pick(r, case="put_bw", library="gpucomm", scope="block"):
        k = (x["variant"], x["ctas"], x["size"])
        if k in idx:
            total += 1
            if x["value"] < idx[k]:
                below.append((idx[k] / x["value"] if x["value"] else float("inf"), k, x["value"], idx[k]))
    below.sort(reverse=True)
    return total, below


def tables(rows):
    """One markdown table per (case, variant, scope, npes, metric): sizes down, (ctas, library) across."""
    groups = defaultdict(list)
    for x in ok(rows):
        if (x["case"] in COLL_CASES and x.get("metric") in COLL_METRICS) or x["case"] == MOE_CASE:
            continue  # coll_tables, moe_tables
        if x["case"] in VERBS_CASES:  # a handful of points: one table, a line per scope and variant
            groups[(x["case"], "", "", x.get("npes", 1), x["metric"], x["unit"])].append(x)
        elif x["case"] in LIMIT_CASES and x["case"] != "copy_limits":  # one table per case, a line per variant
            groups[(x["case"], "", x.get("scope", ""), x.get("npes", 2), x["metric"], x["unit"])].append(x)
        else:
            groups[(x["case"], x.get("variant", ""), x.get("scope", ""), x.get("npes", 2), x["metric"], x["unit"])].append(x)
    order = ["put_bw", "get_bw", "put_latency", "p_latency", "atomic_latency", "atomic_rate", "put_signal_pingpong",
             "barrier", "all_reduce", "verbs_posting_rate", "verbs_post_to_doorbell_latency", "ce_copy", "sm_store",
             "flag_pingpong", *LIMIT_CASES]
    keys = sorted(groups, key=lambda k: (order.index(k[0]) if k[0] in order else 99, k[1], k[2], k[3]))
    out = []
    for k in keys:
        case, variant, scope, npes, metric, unit = k
        g = groups[k]
        cols = sorted({(x["ctas"], x["library"]) for x in g}, key=lambda c: (c[0], LIBS.index(c[1]) if c[1] in LIBS else 9))
        by_point = case in ("atomic_latency", "barrier", "flag_pingpong") or case in VERBS_CASES or (
            case in LIMIT_CASES and case != "copy_limits")
        if case in VERBS_CASES:
            cols = sorted({(0, x["library"]) for x in g})
            row_key = lambda x: f"{x.get('scope', '')} {x.get('variant', '')}".strip()
        elif by_point:
            row_key = lambda x: x.get("variant", "") if case != "barrier" else x.get("scope", "")
        else:
            row_key = lambda x: x["size"]
        scale = 1e6 if unit == "WQEs/s" else 1
        cells = defaultdict(dict)
        for x in g:
            cells[row_key(x)][(0 if case in VERBS_CASES else x["ctas"], x["library"])] = x["value"] / scale
        shown_unit = "M WQEs/s" if scale != 1 else unit
        pes = "1 GPU" if case in VERBS_CASES else f"{npes} PEs"
        title = f"### {case}" + "".join(f" · {t}" for t in (variant, scope) if t) + f" · {pes} · {metric} ({shown_unit})"
        out.append(title)
        out.append("")
        if case in VERBS_CASES:
            out.append(NIC_MODEL_NOTE)
            out.append("")
        multi_cta = len({c[0] for c in cols}) > 1
        head = ["point" if by_point else "size"]
        head += [f"{lib} {ct} CTA" if multi_cta else lib for ct, lib in cols]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        def order_key(v):
            if case in VERBS_CASES:  # thread, warp, block, gpu
                first = v.split(" ")[0]
                return (VERBS_SCOPES.index(first) if first in VERBS_SCOPES else 9, v)
            return (isinstance(v, str), v)

        for rk in sorted(cells, key=order_key):
            label = fmt_size(rk) if isinstance(rk, int) else str(rk)
            out.append("| " + " | ".join([label] + [fmt(cells[rk].get(c)) if c in cells[rk] else "" for c in cols]) + " |")
        out.append("")
    return out


def coll_tables(rows):
    """The device collectives: one table per (case, element type, PEs), a line per size (nccl-tests' size),
    gpucomm's and NCCL's time per call, busbw and algbw side by side."""
    pts = defaultdict(dict)  # (case, variant, npes) -> size -> (library, metric) -> row
    for x in ok(rows):
        if x["case"] in COLL_CASES and x.get("metric") in COLL_METRICS:
            pts[(x["case"], x.get("variant", ""), x.get("npes", 2))].setdefault(x["size"], {})[
                (x["library"], x["metric"])] = x
    if not pts:
        return []
    out = ["Semantics of nccl-tests (`all_reduce_perf` and the others with `-G`): size = the bytes nccl-tests counts "
           "(allreduce: the buffer; allgather: the gathered receive buffer; reduce_scatter and alltoall: the whole "
           "send buffer), time = median over repetitions of the time per call in a replayed CUDA graph of K calls "
           "(PE 0's stream), algbw = size / time, busbw = algbw x 2(n-1)/n (allreduce) or (n-1)/n (the others). "
           "Every element of every rank's result is checked before and after timing. "
           "\"NCCL / gpucomm\" is NCCL's time over gpucomm's (> 1: gpucomm faster); CTAs = gpucomm's CTAs per "
           "PE, each running one workspace part (the rows' `threads` field has their size).", ""]
    order = {c: i for i, c in enumerate(COLL_CASES)}
    for key in sorted(pts, key=lambda k: (order.get(k[0], 9), k[2], k[1] != "float32", k[1])):
        case, variant, npes = key
        sizes = pts[key]
        smoke = any(str(x.get("note", "")).startswith("smoke") for p in sizes.values() for x in p.values())
        out.append(f"### {case} · {variant} · {npes} PEs" + (" (smoke: PEs share a GPU, not link figures)" if smoke else ""))
        out.append("")
        head = ["size", "gpucomm us", "NCCL us", "gpucomm busbw GB/s", "NCCL busbw GB/s", "gpucomm algbw GB/s",
                "NCCL algbw GB/s", "NCCL / gpucomm", "CTAs"]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for size in sorted(sizes):
            p = sizes[size]

            def v(lib, metric):
                x = p.get((lib, metric))
                return x["value"] if x else None

            gt, nt = v("gpucomm", "latency"), v("nccl", "latency")
            ratio = f"{nt / gt:.2f}x" if gt and nt else ""
            ctas = p.get(("gpucomm", "latency"), {}).get("ctas", "")
            cells = [fmt_size(size)] + [fmt(x) if x is not None else "" for x in (
                gt, nt, v("gpucomm", "busbw"), v("nccl", "busbw"), v("gpucomm", "algbw"), v("nccl", "algbw"))]
            out.append("| " + " | ".join(cells + [ratio, str(ctas)]) + " |")
        out.append("")
    return out


# ---- what limits NVLinkStore: the isolating variants and the copy variants' counters ------------------

NCU_METRICS = [  # (column, ncu metric, scale)
    ("L1TEX->XBAR request port busy, busiest SM (%)",
     "l1tex__m_l1tex2xbar_req_cycles_active.max.pct_of_peak_sustained_elapsed", 1),
    ("LSU requests in, busiest SM (%)", "l1tex__lsuin_requests.max.pct_of_peak_sustained_elapsed", 1),
    ("MiB read into L1TEX", "l1tex__m_xbar2l1tex_read_bytes.sum", 1 / (1 << 20)),
    ("MiB written out of L1TEX", "l1tex__m_l1tex2xbar_write_bytes.sum", 1 / (1 << 20)),
    ("stall: LSU queue full (lg_throttle)", "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio", 1),
    ("stall: waiting on a load (long_scoreboard)",
     "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio", 1),
]


def load_ncu(csv_path, launches_path):
    """ncu --csv --page raw over bench_cuda's copy_profile: one record per kernel, named by the launch rows
    copy_profile wrote (same order)."""
    if not csv_path or not os.path.exists(csv_path):
        return []
    with open(csv_path) as f:
        table = list(csv.reader(line for line in f if line.startswith('"')))
    if len(table) < 3:
        return []
    head, data = table[0], table[2:]  # table[1] holds the units
    launches = [x for x in load_jsonl(launches_path) if x.get("metric") == "launch"] if launches_path else []
    out = []
    for i, cells in enumerate(data):
        rec = dict(zip(head, cells))

        def num(k):
            try:
                return float(rec.get(k, "").replace(",", ""))
            except ValueError:
                return None

        launch = launches[i] if i < len(launches) else {}
        ns = num("gpu__time_duration.sum")
        size = launch.get("size")
        item = {"variant": launch.get("variant", rec.get("Kernel Name", "?")[:60]), "ctas": launch.get("ctas"),
                "size": size, "duration_ns": ns, "gbps": size / ns if ns and size else None}
        for _, metric, _ in NCU_METRICS:
            item[metric] = num(metric)
        out.append(item)
    return out


def ncu_md(profile):
    if not profile:
        return []
    head = ["variant", "CTAs", "GB/s under ncu"] + [c for c, _, _ in NCU_METRICS]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in profile:
        cells = [p["variant"], str(p["ctas"]), fmt(p["gbps"])]
        cells += [fmt(p[m] * k) if p.get(m) is not None else "" for _, m, k in NCU_METRICS]
        out.append("| " + " | ".join(cells) + " |")
    return out


def limits_summary(rows):
    """Each missed target next to the raw variants of the same run that isolate its cost."""
    r = ok(rows)

    def named(x, name, memory):
        """The variant called `name`; on `memory` where the variant names a memory kind ("name [kind]")."""
        v = x.get("variant", "")
        base, _, kind = v.partition(" [")
        return base == name and (not kind or kind.rstrip("]") == memory)

    def one(case, name, memory="cudaMalloc", **kw):
        xs = [x for x in pick(r, case=case, **kw) if named(x, name, memory)]
        return xs[0]["value"] if len(xs) == 1 else None

    def best_of(case, name, key=max, **kw):
        return best([x for x in pick(r, case=case, **kw) if named(x, name, "cudaMalloc")], key=key)

    def cell(label, value, unit):
        return f"{label}: {fmt(value, unit)}" if value is not None else None

    def join(*items, note=""):
        """The measured variants, with the note; nothing when none was measured."""
        measured = "; ".join(i for i in items if i)
        return measured + note if measured else ""

    lines = []
    big = 256 << 20
    for ctas in (1, 4):
        g = best(pick(r, case="put_bw", library="gpucomm", scope="block", variant="uni", ctas=ctas))
        bulk = max((one("copy_limits", b, ctas=ctas, size=big) or 0 for b in ("bulk-4x16KiB", "bulk-8x16KiB",
                                                                             "bulk-4x32KiB")), default=0) or None
        lines.append((f"put_bw uni, block, {ctas} CTA{'' if ctas == 1 else 's'}", fmt(g["value"] if g else None, "GB/s"),
                      join(cell("store only (no loads)", one("copy_limits", "store-only", ctas=ctas, size=big), "GB/s"),
                           cell("SM copy loop, unroll 2 (gpucomm's)", one("copy_limits", "copy-unroll2", ctas=ctas,
                                                                          size=big), "GB/s"),
                           cell("unroll 4", one("copy_limits", "copy-unroll4", ctas=ctas, size=big), "GB/s"),
                           cell("unroll 8", one("copy_limits", "copy-unroll8", ctas=ctas, size=big), "GB/s"),
                           cell("unroll 8, non-coherent loads", one("copy_limits", "copy-unroll8-nc", ctas=ctas,
                                                                    size=big), "GB/s"),
                           cell("bulk-copy unit, best staging", bulk, "GB/s"),
                           note=" (256 MiB, grid barrier per iteration)")))
    g16 = best(pick(r, case="put_bw", library="gpucomm", scope="block", variant="uni", size=16 << 20))
    s16 = best_of("copy_limits", "store-only", size=16 << 20)
    c16 = best_of("copy_limits", "copy-unroll2", size=16 << 20)
    lines.append(("put_bw uni, block, 16 MiB, best grid",
                  fmt(g16["value"] if g16 else None, "GB/s") + (f" ({g16['ctas']} CTAs)" if g16 else ""),
                  join(cell(f"store only, best grid ({s16['ctas']} CTAs)" if s16 else "store only", s16 and s16["value"],
                            "GB/s"),
                       cell(f"SM copy loop, best grid ({c16['ctas']} CTAs)" if c16 else "SM copy loop",
                            c16 and c16["value"], "GB/s"),
                       cell("store only at 256 MiB, 132 CTAs", one("copy_limits", "store-only", ctas=132, size=big),
                            "GB/s"),
                       note=" (grid barrier per iteration)")))
    gp = best(pick(r, case="put_signal_pingpong", library="gpucomm", scope="thread", size=8), key=min)
    lines.append(("put_signal ping-pong, thread, 8 B, one way", fmt(gp["value"] if gp else None, "us"),
                  join(cell("volatile flag (not ordered)", one("pingpong_limits", "volatile-flag (not ordered)"), "us"),
                       cell("relaxed flag, acquire poll", one("pingpong_limits", "relaxed-post acquire-poll"), "us"),
                       cell("release flag, acquire poll", one("pingpong_limits", "release-post acquire-poll"),
                            "us"),
                       cell("release flag, relaxed poll + acquire fence",
                            one("pingpong_limits", "release-post relaxed-poll+fence"), "us"),
                       cell("data from a register, release flag", one("pingpong_limits", "data release-post acquire-poll"),
                            "us"),
                       cell("data loaded from memory, release flag (put_signal's work)",
                            one("pingpong_limits", "loaded data release-post acquire-poll (put_signal)"),
                            "us"),
                       cell("the same on VMM+RDMA-capable memory (the heap's kind)",
                            one("pingpong_limits", "loaded data release-post acquire-poll (put_signal)",
                                memory="VMM+RDMA-capable"),
                            "us"))))
    gq = best(pick(r, case="p_latency", library="gpucomm", size=4), key=min)
    lines.append(("p + quiet, 4 B", fmt(gq["value"] if gq else None, "us"),
                  join(cell("stores, no fence (not ordered)", one("quiet_limits", "stores + 2 syncs, no fence (not ordered)"), "us"),
                       cell("leader fence.acq_rel.sys (gpucomm's quiet)", one("quiet_limits", "leader fence.acq_rel.sys (NVLinkStore quiet)"), "us"),
                       cell("leader fence.sc.sys", one("quiet_limits", "leader fence.sc.sys"), "us"),
                       cell("every thread fences", one("quiet_limits", "every thread fence.acq_rel.sys"), "us"))))
    gb = best(pick(r, case="barrier", library="gpucomm", npes=2, scope="thread"), key=min)
    lines.append(("barrier, 2 PEs, thread", fmt(gb["value"] if gb else None, "us"),
                  join(cell("flags only, no fence (not ordered)", one("barrier_limits", "relaxed flag stores, relaxed poll, no fence (not ordered)"),
                            "us"),
                       cell("fence, flags, acquire poll", one("barrier_limits", "fence, relaxed flag stores, acquire poll"),
                            "us"),
                       cell("+ epoch kept in memory (gpucomm's work)",
                            one("barrier_limits", "epoch read and written in memory, then fence, flags, acquire poll "
                                                  "(NVLinkStore)"), "us"),
                       cell("epoch written after the flags",
                            one("barrier_limits", "epoch read, fence, flags, then epoch written, acquire poll"),
                            "us"),
                       cell("release store per flag", one("barrier_limits", "release flag stores, acquire poll"), "us"))))
    return [(a, b, c) for a, b, c in lines if c]


def limits_md(rows, profile):
    summary = limits_summary(rows)
    if not summary and not profile:
        return []
    out = ["| what | gpucomm | raw variants in the same run (benchmarks/cuda/limits.cu) |", "|---|---|---|"]
    out += [f"| {a} | {b} | {c} |" for a, b, c in summary]
    if profile:
        out += ["", "Hardware counters of the copy variants (ncu, one 64 MiB launch each, PE 0 -> PE 1; stalls are "
                "warp cycles per issued instruction):", ""]
        out += ncu_md(profile)
    return out


# ---- verbs-rows: bench_verbs_posting's JSON as rows -----------------------------------------------

# bench_verbs_posting's cases: name -> (scope, variant, CTAs, threads per CTA); "gpu" runs 2 CTAs per SM.
VERBS_SHAPES = {
    "thread_ring_every_wqe": ("thread", "ring every WQE", 1, 1),
    "thread_batched_32": ("thread", "doorbell every 32 WQEs (deferred)", 1, 1),
    "warp_batch_32": ("warp", "batch 32", 1, 32),
    "block_256_batch_256": ("block", "256 threads, batch 256", 1, 256),
    "gpu_warps_qp_per_warp": ("gpu", "warps batching 32, QP per warp", -2, 256),
}


def verbs_rows(doc, rc, run_note=""):
    """Rows (the harness's schema) from bench_verbs_posting's JSON; one error row when there is none."""
    base = {"library": "gpucomm", "transport": "verbs_gpu, NIC model drain-only", "npes": 1, "size": 0,
            "grid_barrier": False, "min": None, "max": None}
    if not doc:
        why = run_note if run_note and run_note != "ok" else f"exit status {rc}"
        return [dict(base, case="verbs_posting_rate", variant="", scope="", ctas=0, threads=0, metric="rate", value=0,
                     unit="WQEs/s", iterations=0, repetitions=0, status="error",
                     note=f"bench_verbs_posting wrote no results ({why}; see the log)")]
    sms = int(doc.get("sms", 0))
    failed = int(doc.get("failed_posts", 0))
    status = "ok" if failed == 0 else "error"
    caveat = f"{doc.get('consumer', 'nic_model drain_only')}, not a real NIC"
    if failed:
        caveat += f"; {failed} posts failed, so the value below is not a posting rate"
    out = []
    for x in doc.get("rate", []):
        name = x.get("case", "")
        scope, variant, ctas, threads = VERBS_SHAPES.get(name, (name.split("_")[0], name, 0, 0))
        if ctas < 0:
            ctas = -ctas * sms
        out.append(dict(base, case="verbs_posting_rate", variant=variant, scope=scope, ctas=ctas, threads=threads,
                        metric="rate", value=float(x.get("wqes_per_second", 0)), unit="WQEs/s",
                        iterations=int(x.get("wqes", 0)), repetitions=6, status=status,
                        note=f"{name}: median of 6 runs (after 1 warm-up) of {x.get('wqes')} WQEs; {caveat}"))
    lat = doc.get("post_to_doorbell_ns")
    if lat:
        out.append(dict(base, case="verbs_post_to_doorbell_latency", variant="single WQE", scope="thread", ctas=1,
                        threads=1, metric="latency", value=lat["median"] / 1e3, max=lat["p99"] / 1e3, unit="us",
                        iterations=int(lat.get("samples", 0)), repetitions=1, status=status,
                        note=f"%globaltimer from reserve to doorbell store, median of {lat.get('samples')} posts "
                             f"(max = p99); {caveat}"))
    if rc not in (0, 3) and out:
        for x in out:
            x["note"] += f"; the binary then exited with status {rc}"
    return out


def verbs_rows_main(argv):
    ap = argparse.ArgumentParser(prog="report.py verbs-rows",
                                 description="print bench_verbs_posting's JSON as JSON-lines rows")
    ap.add_argument("--json", required=True, help="the file bench_verbs_posting wrote (may be missing)")
    ap.add_argument("--rc", type=int, default=0, help="its exit status")
    ap.add_argument("--note", default="", help="what the driver saw (e.g. 'timed out after 60s')")
    a = ap.parse_args(argv)
    doc = None
    try:
        with open(a.json) as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError):
        doc = None
    for x in verbs_rows(doc, a.rc, a.note):
        print(json.dumps(x))


# ---- stored results: a run's rows as a table -------------------------------------------------------

RUN_SCHEMA = "gpucomm.bench-run/1"  # what main writes: rows as objects
STORED_SCHEMA = "gpucomm.bench-results/1"  # benchmarks/results/<kind>/latest.json: rows as a table
# The table's columns, in this order, then any other field a row has (sorted).
COLUMNS = ("case", "library", "transport", "variant", "scope", "ctas", "threads", "npes", "size", "metric", "value",
           "min", "max", "unit", "iterations", "repetitions", "grid_barrier", "status", "note")


def stored_rows(rows):
    """(columns, notes, table): a list per row, its fields in the order of columns (null where the row has
    none), its note the index of its text in notes (each text once: many rows share one)."""
    extra = sorted({k for r in rows for k in r} - set(COLUMNS))
    columns = list(COLUMNS) + extra
    notes, index = [], {}
    table = []
    for r in rows:
        cells = [r.get(c) for c in columns]
        note = r.get("note")
        if note is not None:
            if note not in index:
                index[note] = len(notes)
                notes.append(note)
            cells[columns.index("note")] = index[note]
        table.append(cells)
    return columns, notes, table


def rows_from_table(columns, notes, table):
    """The rows of stored_rows' table as objects; a null cell is a field the row does not have."""
    note = columns.index("note") if "note" in columns else -1
    rows = []
    for cells in table:
        r = {c: v for c, v in zip(columns, cells) if v is not None}
        if note >= 0 and cells[note] is not None:
            r["note"] = notes[cells[note]]
        rows.append(r)
    return rows


def load_results(path):
    """A results document (a run, or a stored latest.json) with its rows as objects."""
    with open(path) as f:
        doc = json.load(f)
    if doc.get("schema") == STORED_SCHEMA:
        doc = dict(doc, rows=rows_from_table(doc["columns"], doc["notes"], doc["rows"]))
    return doc


def sweep_mode(quick, command):
    """What the run swept: "quick", "named-cases" (bench.sh --cases: only some cases) or "full"."""
    if quick:
        return "quick"
    return "named-cases" if " --cases" in (command or "") else "full"


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "verbs-rows":
        return verbs_rows_main(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "markdown":
        # report.py markdown RESULTS.json: rewrite RESULTS.md from the JSON (after a change here).
        stem = sys.argv[2][:-len(".json")] if sys.argv[2].endswith(".json") else sys.argv[2]
        return markdown(load_results(stem + ".json"), stem)
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", required=True)
    ap.add_argument("--status", default="")
    ap.add_argument("--machine", default="")
    ap.add_argument("--topo", default="")
    ap.add_argument("--driver", default="")
    ap.add_argument("--command", default="")
    ap.add_argument("--commit", default="unknown", help="the commit the benchmarks were built from")
    ap.add_argument("--gpus", type=int, default=0)
    ap.add_argument("--quick", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=0)
    ap.add_argument("--ncu", default="", help="ncu --csv --page raw of bench_cuda's copy_profile")
    ap.add_argument("--ncu-launches", default="", help="the launch rows copy_profile wrote (names the kernels)")
    ap.add_argument("--note", default="", help="a caveat for the whole run (e.g. PEs sharing a GPU)")
    ap.add_argument("--out", required=True, help="path without extension")
    a = ap.parse_args()

    rows = load_jsonl(a.rows)
    runs = load_jsonl(a.status)
    try:
        machine = json.loads(read(a.machine, "{}") or "{}")
    except json.JSONDecodeError:
        machine = {}
    gpus = machine.get("gpus", [])
    machine_desc = {
        "gpu_name": gpus[0]["name"] if gpus else "unknown",
        "gpu_count_visible": machine.get("gpu_count", 0),
        "gpu_count_used": a.gpus,
        "driver_version": read(a.driver),
        "cuda_driver_api_version": machine.get("cuda_driver_version"),
        "cuda_runtime_version": machine.get("cuda_runtime_version"),
        "gpus": gpus,
        "topology": read(a.topo),
    }
    doc = {
        "schema": RUN_SCHEMA,
        "commit": a.commit,
        "command": a.command,
        "note": a.note,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "mode": sweep_mode(a.quick, a.command),
        "seconds": a.seconds,
        "machine": machine_desc,
        "environment": {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "NVSHMEM_DISABLE_NVLS",
                                                        "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_REMOTE_TRANSPORT")},
        "semantics": "one launch loops `iterations` times between CUDA events after a warm-up launch; value = median of "
                     "`repetitions`; GB/s decimal = bytes per iteration x iterations / time; put_bw/get_bw/atomic_rate "
                     "have a grid barrier every iteration and one quiet at the end (NVSHMEM perftest semantics); "
                     "ping-pong values are round trip / 2",
        "runs": runs,
        "rows": rows,
        "profile": load_ncu(a.ncu, a.ncu_launches),
    }
    with open(a.out + ".json", "w") as f:
        json.dump(doc, f, indent=1)
    markdown(doc, a.out)


def p2pcopy_md(rows, size=256 * 1024 * 1024, grid=(1, 4, 8)):
    """P2PCopy's put_bw (one issuing thread per group) next to NVLinkStore's put_bw and the raw copy
    references of copy_limits, at one size, per CTA count: the table its docs quote."""
    picked = {}
    for r in rows:
        if r.get("status") != "ok" or r.get("size") != size or r.get("ctas") not in grid:
            continue
        case, variant, scope = r.get("case"), r.get("variant", ""), r.get("scope", "")
        if case == "p2pcopy_put_bw":
            label = f"P2PCopy put, {scope}, source {variant}"
        elif case == "put_bw" and variant == "uni" and scope == "block":
            label = "NVLinkStore put_bw, block"
        elif case == "copy_limits":
            label = f"raw copy_limits {variant}"
        else:
            continue
        picked.setdefault(label, {})[r["ctas"]] = r["value"]
    if not any(k.startswith("P2PCopy") for k in picked):
        return []
    out = [f"GB/s at {fmt_size(size)} per iteration; block-scope P2PCopy rows have one issuing thread per CTA, "
           "their variant names the staging (stages x size / stores in flight; plain `global` is the default).", "",
           "| path | " + " | ".join(f"{c} CTA" for c in grid) + " |", "|---|" + "---|" * len(grid)]
    for label in sorted(picked, key=lambda k: (not k.startswith("P2PCopy"), k)):
        out.append(f"| {label} | " + " | ".join(fmt(picked[label].get(c)) if c in picked[label] else "" for c in grid) + " |")
    return out


def markdown(doc, out):
    """Writes <out>.md from a results document (what main writes to <out>.json)."""
    with open(out + ".md", "w") as f:
        f.write(markdown_text(doc))
    bad = [x for x in doc["rows"] if x.get("status") != "ok"]
    print(f"wrote {out}.md ({len(doc['rows'])} rows, {len(bad)} not ok)")


def markdown_text(doc):
    """The markdown report of a results document (rows as objects): headline, errors, every table."""
    rows, runs = doc["rows"], doc.get("runs", [])
    md = [f"# gpucomm benchmarks: {doc['machine']['gpu_name']} x {doc['machine']['gpu_count_used']}" + (" (smoke)" if doc.get('note') else ""), ""]
    if doc.get('note'):
        md.append(f"- **{doc.get('note')}**")
    md.append(f"- command: `{doc['command']}` ({doc['mode']} sweep, {doc['seconds']:.0f} s)")
    md.append(f"- date (UTC): {doc['date']}")
    md.append(f"- GPUs: {doc['machine']['gpu_count_used']} x {doc['machine']['gpu_name']}, driver {doc['machine']['driver_version'] or 'n/a'}, "
              f"CUDA runtime {doc['machine']['cuda_runtime_version']}")
    md.append("- NVLink multicast off (NCCL_NVLS_ENABLE=0, NVSHMEM_DISABLE_NVLS=1); gpucomm: comm<NVLinkStore>, "
              "except the p2pcopy_* cases (comm<P2PCopy>) and the proxyqueue_* cases (comm<ProxyQueue>)")
    md.append(f"- semantics: {doc['semantics']}")
    md.append("")
    if doc.get("note"):
        # Smoke runs (PEs sharing a GPU) say nothing about the link targets.
        md += ["## Headline figures and targets", "", "Not evaluated: " + doc["note"] + ".", ""]
    else:
        md.append("## Headline figures and targets")
        md.append("")
        md.extend(headline_md(rows))
        md.append("")
    total, below = vs_nvshmem(rows)
    md.append(f"put_bw (block scope) points where gpucomm is below NVSHMEM: {len(below)} of {total} compared.")
    if below:
        md.append("")
        md.append("| variant | CTAs | size | gpucomm GB/s | NVSHMEM GB/s |")
        md.append("|---|---|---|---|---|")
        for ratio, (variant, ctas, size), gv, nv in below[:20]:
            md.append(f"| {variant} | {ctas} | {fmt_size(size)} | {fmt(gv)} | {fmt(nv)} |")
    md.append("")
    p2p = p2pcopy_md(rows)
    if p2p:
        md += ["## P2PCopy next to NVLinkStore and the raw copies", ""] + p2p + [""]
    limits = limits_md(rows, doc.get("profile"))
    if limits:
        md += ["## What limits NVLinkStore", ""] + limits + [""]
    bad = [x for x in rows if x.get("status") != "ok"]
    failed_runs = [x for x in runs if str(x.get("rc")) not in ("0",)]
    if bad or failed_runs:
        md.append("## Errors and skipped points")
        md.append("")
        for x in failed_runs:
            md.append(f"- run {x.get('library')} {x.get('case')} (npes {x.get('npes')}): rc {x.get('rc')}, {x.get('note')}")
        for x in bad[:100]:
            md.append(f"- {x.get('library')} {x.get('case')} {x.get('variant', '')} {x.get('scope', '')} "
                      f"ctas {x.get('ctas')} size {x.get('size')}: {x.get('status')}: {x.get('note', '')[:300]}")
        if len(bad) > 100:
            md.append(f"- ... and {len(bad) - 100} more (see the JSON)")
        md.append("")
    coll = coll_tables(rows)
    if coll:
        md += ["## Device collectives next to NCCL", ""] + coll
    moe = moe_tables(rows)
    if moe:
        md += ["## MoE dispatch and combine next to torch + NCCL", ""] + moe
    md.append("## All results")
    md.append("")
    md.extend(tables(rows))
    if doc['machine']["topology"]:
        md.append("## Topology (nvidia-smi topo -m)")
        md.append("")
        md.append("```")
        md.append(doc['machine']["topology"])
        md.append("```")
    return "\n".join(md) + "\n"


if __name__ == "__main__":
    main()
