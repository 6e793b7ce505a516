#!/usr/bin/env python3
"""Merge the rows of one benchmark run into benchmarks/results/<stem>.json and <stem>.md.

Standard library only (the GPU machine may lack anything else). Called by scripts/bench.sh:
  report.py --rows rows.jsonl --status status.jsonl --machine machine.json --topo topo.txt
            --driver driver.txt --command "scripts/bench.sh ..." --gpus N --quick 0|1 --seconds S
            --out benchmarks/results/<stem>
"""
import argparse
import datetime
import json
import os
from collections import defaultdict

LIBS = ["gpucomm", "nvshmem", "nccl", "cuda"]

# Targets from the issue (H200, NV18), with the reference each stands next to.
# (label, selector, op, target, unit, reference)
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


def headline(rows):
    """(what, gpucomm, nvshmem/nccl, physical reference, target, pass) lines."""
    r = ok(rows)
    lines = []

    def check(value, target, higher):
        if value is None:
            return "not measured"
        good = value >= target if higher else value <= target
        return "met" if good else "MISSED"

    def bw(lib, variant, ctas=None, min_size=0):
        return best(pick(r, case="put_bw", library=lib, scope="block", variant=variant),
                    where=lambda x: (ctas is None or x["ctas"] == ctas) and x["size"] >= min_size)

    def val(x):
        return x["value"] if x else None

    def where_txt(x):
        return f" ({x['ctas']} CTAs, {fmt_size(x['size'])})" if x else ""

    ce = best(pick(r, case="ce_copy", variant="uni"))
    sm = {c: best(pick(r, case="sm_store", variant="store-uni", ctas=c)) for c in (1, 4, 8, 16, 132)}
    g = bw("gpucomm", "uni", min_size=16 << 20)
    n = bw("nvshmem", "uni", min_size=16 << 20)
    # >= 365 GB/s from 16 MiB: the worst gpucomm point at >= 16 MiB with the best grid.
    g_from16 = None
    if g:
        pts = [x for x in pick(r, case="put_bw", library="gpucomm", scope="block", variant="uni", ctas=g["ctas"])
               if x["size"] >= 16 << 20]
        g_from16 = min(pts, key=lambda x: x["value"]) if pts else None
    lines.append(("put_bw uni, block, >= 16 MiB (worst size at best grid)", fmt(val(g_from16), "GB/s") + where_txt(g_from16),
                  fmt(val(n), "GB/s") + where_txt(n), f"CE {fmt(val(ce), 'GB/s')}", ">= 365 GB/s",
                  check(val(g_from16), 365, True)))
    gb = bw("gpucomm", "bidir")
    nb = bw("nvshmem", "bidir")
    lines.append(("put_bw bidir, block, best", fmt(val(gb), "GB/s") + where_txt(gb), fmt(val(nb), "GB/s") + where_txt(nb),
                  "", ">= 730 GB/s", check(val(gb), 730, True)))
    for c, t in ((1, 50), (4, 200)):
        gx, nx = bw("gpucomm", "uni", ctas=c), bw("nvshmem", "uni", ctas=c)
        lines.append((f"put_bw uni, block, {c} CTA(s), best size", fmt(val(gx), "GB/s") + where_txt(gx),
                      fmt(val(nx), "GB/s") + where_txt(nx), f"SM store {fmt(val(sm.get(c)), 'GB/s')}", f">= {t} GB/s",
                      check(val(gx), t, True)))

    def lat(case, lib, **kw):
        return best(pick(r, case=case, library=lib, **kw), key=min)

    fp = best(pick(r, case="flag_pingpong"), key=min)
    gp = lat("put_signal_pingpong", "gpucomm", scope="thread", size=8)
    npp = lat("put_signal_pingpong", "nvshmem", scope="thread", size=8)
    lines.append(("put_signal ping-pong one way, thread, 8 B", fmt(val(gp), "us"), fmt(val(npp), "us"),
                  f"flag {fmt(val(fp), 'us')}", "<= 1.35 us", check(val(gp), 1.35, False)))
    gpl = lat("p_latency", "gpucomm", size=4)
    npl = lat("p_latency", "nvshmem", size=4)
    lines.append(("p + quiet, 4 B", fmt(val(gpl), "us"), fmt(val(npl), "us"), "", "<= 0.9 us", check(val(gpl), 0.9, False)))
    ga = lat("atomic_latency", "gpucomm", variant="fetch_add")
    na = lat("atomic_latency", "nvshmem", variant="fetch_add")
    lines.append(("fetch_add latency", fmt(val(ga), "us"), fmt(val(na), "us"), "", "<= 0.93 us", check(val(ga), 0.93, False)))
    for pes, t in ((2, 1.5), (4, 2.0)):
        gbar = lat("barrier", "gpucomm", npes=pes)
        nbar = lat("barrier", "nvshmem", npes=pes)
        lines.append((f"barrier, {pes} PEs (best scope)", fmt(val(gbar), "us") + (f" ({gbar['scope']})" if gbar else ""),
                      fmt(val(nbar), "us") + (f" ({nbar['scope']})" if nbar else ""), "", f"<= {t} us",
                      check(val(gbar), t, False)))
    for pes in (2, 4):
        for size in (8, 64 << 10):
            gar = lat("all_reduce", "gpucomm", npes=pes, size=size)
            nar = lat("all_reduce", "nccl", npes=pes, size=size)
            if gar or nar:
                lines.append((f"all_reduce in a graph, {pes} PEs, {fmt_size(size)}", fmt(val(gar), "us"),
                              fmt(val(nar), "us") + " (NCCL)", "", "", ""))
    return lines


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
        groups[(x["case"], x.get("variant", ""), x.get("scope", ""), x.get("npes", 2), x["metric"], x["unit"])].append(x)
    order = ["put_bw", "get_bw", "put_latency", "p_latency", "atomic_latency", "atomic_rate", "put_signal_pingpong",
             "barrier", "all_reduce", "ce_copy", "sm_store", "flag_pingpong"]
    keys = sorted(groups, key=lambda k: (order.index(k[0]) if k[0] in order else 99, k[1], k[2], k[3]))
    out = []
    for k in keys:
        case, variant, scope, npes, metric, unit = k
        g = groups[k]
        cols = sorted({(x["ctas"], x["library"]) for x in g}, key=lambda c: (c[0], LIBS.index(c[1]) if c[1] in LIBS else 9))
        if case in ("atomic_latency", "barrier", "flag_pingpong"):
            row_key = lambda x: x.get("variant", "") if case != "barrier" else x.get("scope", "")
        else:
            row_key = lambda x: x["size"]
        cells = defaultdict(dict)
        for x in g:
            cells[row_key(x)][(x["ctas"], x["library"])] = x["value"]
        title = f"### {case}" + "".join(f" · {t}" for t in (variant, scope) if t) + f" · {npes} PEs · {metric} ({unit})"
        out.append(title)
        out.append("")
        multi_cta = len({c[0] for c in cols}) > 1
        head = ["size" if row_key is not None and case not in ("atomic_latency", "barrier", "flag_pingpong") else "point"]
        head += [f"{lib} {ct} CTA" if multi_cta else lib for ct, lib in cols]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for rk in sorted(cells, key=lambda v: (isinstance(v, str), v)):
            label = fmt_size(rk) if isinstance(rk, int) else str(rk)
            out.append("| " + " | ".join([label] + [fmt(cells[rk].get(c)) if c in cells[rk] else "" for c in cols]) + " |")
        out.append("")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", required=True)
    ap.add_argument("--status", default="")
    ap.add_argument("--machine", default="")
    ap.add_argument("--topo", default="")
    ap.add_argument("--driver", default="")
    ap.add_argument("--command", default="")
    ap.add_argument("--gpus", type=int, default=0)
    ap.add_argument("--quick", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=0)
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
        "command": a.command,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "mode": "quick" if a.quick else "full",
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
    }
    with open(a.out + ".json", "w") as f:
        json.dump(doc, f, indent=1)

    md = [f"# gpucomm benchmarks: {machine_desc['gpu_name']} x {a.gpus}", ""]
    md.append(f"- command: `{a.command}` ({doc['mode']} sweep, {a.seconds:.0f} s)")
    md.append(f"- date (UTC): {doc['date']}")
    md.append(f"- GPUs: {a.gpus} x {machine_desc['gpu_name']}, driver {machine_desc['driver_version'] or 'n/a'}, "
              f"CUDA runtime {machine_desc['cuda_runtime_version']}")
    md.append("- NVLink multicast off (NCCL_NVLS_ENABLE=0, NVSHMEM_DISABLE_NVLS=1); gpucomm: comm<NVLinkStore>")
    md.append(f"- semantics: {doc['semantics']}")
    md.append("")
    md.append("## Headline figures and targets")
    md.append("")
    md.append("| what | gpucomm | NVSHMEM / NCCL | physical reference | target | |")
    md.append("|---|---|---|---|---|---|")
    for line in headline(rows):
        md.append("| " + " | ".join(line) + " |")
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
    md.append("## All results")
    md.append("")
    md.extend(tables(rows))
    if machine_desc["topology"]:
        md.append("## Topology (nvidia-smi topo -m)")
        md.append("")
        md.append("```")
        md.append(machine_desc["topology"])
        md.append("```")
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"wrote {a.out}.json and {a.out}.md ({len(rows)} rows, {len(bad)} not ok)")


if __name__ == "__main__":
    main()
