"""The end of a tensor-parallel MLP layer, gpucomm against torch.distributed + NCCL.

A Megatron-style MLP split over the ranks (column-parallel W1, row-parallel W2): each rank computes
y_r = gelu(x @ W1_r) @ W2_r, and the layer's output is the sum of y_r over the ranks, an allreduce of
tokens x hidden elements. Two measurements per token count and backend, both captured in CUDA
graphs of `--calls` calls and replayed (time per call = median over repetitions):

    allreduce   the allreduce of y alone (in place; NCCL: dist.all_reduce, gpucomm:
                Communicator.all_reduce with its defaults)
    layer       the whole layer: two matmuls, gelu, allreduce

Before timing, each backend reduces the same data once and every element is compared with a float64
reference gathered over gloo (within n x 2^-7 x the sum of |y| for bf16).

    python3 -m torch.distributed.run --standalone --nproc_per_node=2 \\
        examples/torch/bench_tp_layer.py --device local --out rows.jsonl

One rank per GPU (NCCL refuses two ranks on one GPU). --out appends one JSON row per figure in the
benchmark suite's row format (case tp_layer; scripts/bench.sh runs it with its other cases, and
benchmarks/report.py renders the rows). Rank 0 prints a table: tokens, bytes, each backend's time
and NCCL's time over gpucomm's (> 1: gpucomm faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F

import gpucomm_torch


def arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="local", help="'local' (LOCAL_RANK's GPU) or a GPU number for every rank")
    p.add_argument("--tokens", default="1,2,4,8,16,32,64,128,256,512,1024,2048", help="token counts")
    p.add_argument("--hidden", type=int, default=8192)
    p.add_argument("--ffn", type=int, default=4 * 8192, help="the MLP's inner size before the split")
    p.add_argument("--calls", type=int, default=20, help="calls per captured graph")
    p.add_argument("--repetitions", type=int, default=7)
    p.add_argument("--budget-s", type=float, default=240.0, help="stop starting token counts after this long")
    p.add_argument("--out", default="", help="append the rows (JSON lines) to this file (rank 0)")
    # As scripts/bench.sh runs every case: --case names it, --npes says how many ranks it expects.
    p.add_argument("--case", default="tp_layer", choices=["tp_layer"])
    p.add_argument("--npes", type=int, default=0, help="the rank count the caller expects (0: any)")
    p.add_argument("--quick", action="store_true", help="token counts 1, 16, 256, 2048 only")
    a = p.parse_args()
    if a.quick:
        a.tokens = "1,16,256,2048"
    return a


def log(msg: str) -> None:
    print(msg, flush=True)


def time_graph(run, calls: int, repetitions: int) -> tuple[float, float, float]:
    """(median, min, max) microseconds per call of `run`, captured `calls` times in one graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture (NCCL and gpucomm set up lazily)
        for _ in range(3):
            run()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            run()
    graph.replay()  # warm
    torch.cuda.synchronize()
    dist.barrier()
    replays = 5
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per_call = []
    for _ in range(repetitions):
        start.record()
        for _ in range(replays):
            graph.replay()
        stop.record()
        stop.synchronize()
        per_call.append(start.elapsed_time(stop) * 1e3 / (replays * calls))
    del graph
    return statistics.median(per_call), min(per_call), max(per_call)


def check(rank: int, size: int, got: torch.Tensor, y: torch.Tensor, what: str) -> str:
    """'' if got is the sum over ranks of y (float64 reference over gloo), else what differs."""
    mine = y.double().cpu()
    every = [torch.empty_like(mine) for _ in range(size)]
    dist.all_gather(every, mine)
    ref = torch.zeros_like(mine)
    mag = torch.zeros_like(mine)
    for t in every:
        ref += t
        mag += t.abs()
    err = (got.double().cpu() - ref).abs()
    bound = size * 2.0**-7 * mag + 1e-30
    bad = int((err > bound).sum())
    return "" if bad == 0 else f"{what}: {bad} of {ref.numel()} elements outside the bound (worst {float(err.max()):.3g})"


def main() -> int:
    a = arguments()
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    index = int(os.environ.get("LOCAL_RANK", "0")) if a.device == "local" else int(a.device)
    device = torch.device("cuda", index)
    torch.cuda.set_device(device)
    dist.init_process_group("cpu:gloo,cuda:nccl", timeout=timedelta(seconds=180), device_id=device)
    if a.ffn % size:
        raise SystemExit(f"--ffn {a.ffn} does not split over {size} ranks")
    if a.npes and a.npes != size:
        raise SystemExit(f"--npes {a.npes}, but {size} ranks were started")
    comm = gpucomm_torch.Communicator.from_process_group(device)
    nccl_version = ".".join(str(v) for v in torch.cuda.nccl.version())
    gen = torch.Generator(device=device).manual_seed(1234 + rank)
    dt = torch.bfloat16
    w1 = (torch.randn(a.hidden, a.ffn // size, device=device, generator=gen) * a.hidden**-0.5).to(dt)
    w2 = (torch.randn(a.ffn // size, a.hidden, device=device, generator=gen) * (a.ffn // size) ** -0.5).to(dt)
    tokens = [int(t) for t in a.tokens.split(",") if t]
    if rank == 0:
        log(f"tp_layer: {size} ranks, {torch.cuda.get_device_name(device)}, bf16, hidden {a.hidden}, ffn {a.ffn} "
            f"(per rank {a.ffn // size}), torch {torch.__version__}, NCCL {nccl_version}, gpucomm parts "
            f"{comm._impl.parts}, block {comm._impl.block_bytes} B")
        log(f"{'tokens':>6} {'bytes':>9} | {'allreduce us: nccl':>18} {'gpucomm':>8} {'ratio':>6} | "
            f"{'layer us: nccl':>14} {'gpucomm':>8} {'ratio':>6}")
    rows, failures = [], []
    t0 = time.monotonic()

    def row(library: str, variant: str, m: int, stats, note: str) -> dict:
        nbytes = m * a.hidden * 2
        return {
            "case": "tp_layer", "library": library,
            "transport": "NVLinkStore" if library == "gpucomm" else f"NCCL {nccl_version}",
            "variant": variant, "scope": "", "ctas": comm._impl.parts if library == "gpucomm" else 0, "threads": 0,
            "npes": size, "size": nbytes, "metric": "latency", "value": stats[0], "min": stats[1], "max": stats[2],
            "unit": "us", "iterations": a.calls * 5, "repetitions": a.repetitions, "grid_barrier": False,
            "status": "ok", "note": note,
        }

    for m in tokens:
        if time.monotonic() - t0 > a.budget_s:
            if rank == 0:
                log(f"time budget of {a.budget_s} s spent: {m} tokens and more not run")
            break
        x = (torch.randn(m, a.hidden, device=device, generator=gen)).to(dt)
        y = x @ w1
        y = F.gelu(y) @ w2
        # Correctness: each backend reduces the same y once.
        for name, reduce in (("nccl", lambda t: dist.all_reduce(t)), ("gpucomm", lambda t: comm.all_reduce(t))):
            got = y.clone()
            reduce(got)
            torch.cuda.synchronize()
            why = check(rank, size, got, y, f"{name}, {m} tokens")
            if why:
                failures.append(why)
        buf = torch.zeros_like(y)
        out = torch.empty_like(y)

        def nccl_allreduce():
            dist.all_reduce(buf)

        def gpucomm_allreduce():
            comm.all_reduce(buf)

        def layer(reduce):
            def run():
                torch.matmul(F.gelu(torch.matmul(x, w1)), w2, out=out)
                reduce(out)

            return run

        base = (f"Megatron-style MLP, bf16, hidden {a.hidden}, ffn {a.ffn} over {size} ranks, {m} tokens; CUDA graph "
                f"of {a.calls} calls, median of {a.repetitions} repetitions")
        t = {}
        t["nccl", "allreduce"] = time_graph(nccl_allreduce, a.calls, a.repetitions)
        t["gpucomm", "allreduce"] = time_graph(gpucomm_allreduce, a.calls, a.repetitions)
        t["nccl", "layer"] = time_graph(layer(lambda o: dist.all_reduce(o)), a.calls, a.repetitions)
        t["gpucomm", "layer"] = time_graph(layer(lambda o: comm.all_reduce(o)), a.calls, a.repetitions)
        for (lib, variant), stats in t.items():
            what = "dist.all_reduce (torch + NCCL)" if lib == "nccl" else "gpucomm_torch all_reduce, default options"
            rows.append(row(lib, variant, m, stats, f"{base}; {variant}: {what}"))
        if rank == 0:
            ar = t["nccl", "allreduce"][0] / t["gpucomm", "allreduce"][0]
            ly = t["nccl", "layer"][0] / t["gpucomm", "layer"][0]
            log(f"{m:>6} {m * a.hidden * 2:>9} | {t['nccl', 'allreduce'][0]:>18.2f} {t['gpucomm', 'allreduce'][0]:>8.2f} "
                f"{ar:>6.2f} | {t['nccl', 'layer'][0]:>14.2f} {t['gpucomm', 'layer'][0]:>8.2f} {ly:>6.2f}")
    return finish(rank, size, comm, rows, failures, a.out, t0)


def finish(rank: int, size: int, comm, rows: list[dict], failures: list[str], out: str, t0: float) -> int:
    """Collective: gathers every rank's failures, and on rank 0 prints them and appends the rows to
    `out` (every row an error row when a check failed anywhere); closes `comm` and the process group.
    1 when a check failed, else 0."""
    every = [None] * size
    dist.all_gather_object(every, failures)
    bad = [f for fs in every for f in fs]
    if rank == 0:
        for f in bad:
            log(f"FAIL {f}")
        if out:
            with open(out, "a") as f:
                for r in rows:
                    if bad:
                        r["status"] = "error"
                        r["note"] += "; the results check failed: " + bad[0]
                    f.write(json.dumps(r) + "\n")
        log(f"{'FAIL' if bad else 'PASS'}: every result checked ({time.monotonic() - t0:.0f} s)")
    comm.close()
    dist.barrier()
    dist.destroy_process_group()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
