"""MoE dispatch + combine, gpucomm against the torch baseline a user writes without DeepEP.

Every rank holds T tokens (bf16, hidden H), each routed by a random router (fixed seed) to k
distinct experts of the P x E experts (E per rank), with softmax weights. One figure is the time per
(dispatch, combine) pair: dispatch sends each token to the ranks of its experts and returns, at each
rank, the rows of its local experts (expert-major); combine takes those rows back as the experts'
outputs (no expert computation in between) and returns, per token, the weighted sum. Two libraries,
each in two modes:

    gpucomm  MoEPlan.dispatch + MoEPlan.combine of gpucomm_torch (one row per (token, rank) crosses
             the link; the receiver expands it to one row per (token, local expert));
    nccl     the same data movement in plain torch over torch.distributed.all_to_all_single (NCCL):
             dispatch sorts the (token, destination rank) pairs by rank, gathers those rows and sends
             them with split sizes, and each row's routing (token, local expert or -1 per slot,
             weight per slot) in a second all_to_all_single; the receiver sorts the (row, slot) pairs
             by local expert and gathers the rows expert-major (in gpucomm's order: expert, source
             rank, token, slot); combine multiplies each output by its weight and sums a token's
             slots at the expert's rank (float, rounded to bf16), sends those partial rows back with
             the reverse splits, and the source sums them per token (float, rounded to bf16). The
             same bytes as gpucomm cross the links (a baseline that sent one row per (token, expert)
             would send up to k times more).

    graph    --calls pairs captured in one CUDA graph and replayed (median over --repetitions of 5
             replays; bench_tp_layer.time_graph). The baseline's split sizes are this routing's, fixed
             at capture (the routing is the same at every replay).
    eager    --calls pairs called back to back between two CUDA events (median over --repetitions).
             The baseline exchanges the split sizes on the device (an all_to_all_single of 2 P
             counts) and reads them on the host every call, as code without a bound must.

The baseline is the faster of nccl graph and nccl eager.

Bytes. B, the bytes dispatched per GPU, counts one row of 2H bytes (bf16) per (token, other rank)
pair: for rank r,

    B_r = 2 H x sum over r's tokens t of |{q != r : some slot j of t has expert id x_tj with x_tj // E == q}|

so rows that stay on their rank are left out, and a token with several experts on one rank counts
once there. The rows' size is the mean of B_r over the ranks. Each pair moves B out (dispatch) and
the same number of bf16 rows back (combine's partial rows), so the bandwidth rows say

    GB/s = 2 x B / (time per pair) / 1e9

the rate of one call when dispatch and combine take the same time: the figure per-call dispatch
rates (DeepEP, NCCL EP) compare with.

Before timing, each shape is checked once: the rows, per-expert counts, weights and sources that
gpucomm's dispatch delivers equal the baseline's bitwise; then with experts that scale each row by
2^-(global expert mod 8) (exact in bf16), each library's combined output is within 2^-7 x 1.01 of
the exact x_t x sum_j w_tj 2^-(x_tj mod 8) (two bf16 roundings of 2^-8 each; float sums add far
less), computed on each rank from its own tokens.

    NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \\
    python3 -m torch.distributed.run --standalone --nproc_per_node=2 \\
        examples/torch/bench_moe.py --device local --out rows.jsonl

(the three variables default to these values here, before NCCL starts). One rank per GPU (NCCL
refuses two ranks on one GPU). --out appends one JSON row per figure in the benchmark suite's row
format (case moe; scripts/bench.sh runs it with its other cases, and benchmarks/report.py renders
the rows). Rank 0 prints a table: shape, tokens, bytes, each library's time per pair in each mode,
the baseline's over gpucomm's graph-captured time (> 1: gpucomm faster), and the GB/s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta

import torch

BF16 = torch.bfloat16


def arguments(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="local", help="'local' (LOCAL_RANK's GPU) or a GPU number for every rank")
    p.add_argument("--shapes", default="decode,prefill", help="which of the two token counts to run")
    p.add_argument("--decode-tokens", type=int, default=128, help="tokens per rank of the decode shape")
    p.add_argument("--prefill-tokens", type=int, default=4096, help="tokens per rank of the prefill shape")
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--top-k", type=int, default=8)
    p.add_argument("--experts-per-rank", type=int, default=8)
    p.add_argument("--seed", type=int, default=1, help="the router's seed (rank r draws with seed x 1000003 + r)")
    p.add_argument("--calls", type=int, default=20, help="pairs per captured graph, and per eager repetition")
    p.add_argument("--repetitions", type=int, default=7)
    p.add_argument("--budget-s", type=float, default=240.0, help="stop starting shapes after this long")
    p.add_argument("--out", default="", help="append the rows (JSON lines) to this file (rank 0)")
    # As scripts/bench.sh runs every case: --case names it, --npes says how many ranks it expects.
    p.add_argument("--case", default="moe", choices=["moe"])
    p.add_argument("--npes", type=int, default=0, help="the rank count the caller expects (0: any)")
    p.add_argument("--quick", action="store_true", help="10 pairs per graph, 5 repetitions")
    a = p.parse_args(argv)
    if a.quick:
        a.calls, a.repetitions = 10, 5
    shapes = [s for s in a.shapes.split(",") if s]
    unknown = [s for s in shapes if s not in ("decode", "prefill")]
    if unknown or not shapes:
        p.error(f"--shapes takes decode and/or prefill, not {a.shapes!r}")
    a.shapes = [(s, a.decode_tokens if s == "decode" else a.prefill_tokens) for s in shapes]
    return a


# ---- routing and sizes (the same on every rank: each computes every rank's routing) -----------------


def route(tokens: int, size: int, experts_per_rank: int, top_k: int, seed: int, rank: int):
    """Rank `rank`'s router output: ids [T, k] int64, k distinct experts per token drawn uniformly
    from all size x experts_per_rank, and weights [T, k] float32 (softmax of random scores); CPU."""
    g = torch.Generator().manual_seed(seed * 1000003 + rank)
    ids = torch.rand((tokens, size * experts_per_rank), generator=g).topk(top_k, dim=1).indices
    weights = torch.softmax(torch.randn((tokens, top_k), generator=g), dim=1)
    return ids, weights


def destinations(ids: torch.Tensor, size: int, experts_per_rank: int):
    """mask [T, P] bool (token t has an expert on rank q) and each slot's rank [T, k] (size for an id
    of -1). No host synchronisation."""
    rank_of = torch.where(ids >= 0, torch.div(ids, experts_per_rank, rounding_mode="floor"), size)
    mask = torch.zeros((ids.shape[0], size + 1), dtype=torch.bool, device=ids.device)
    mask.scatter_(1, rank_of, True)
    return mask[:, :size], rank_of


def slot_counts(rank_of: torch.Tensor, size: int) -> torch.Tensor:
    """[P] int64: the slots (token, expert rows at the receiver) routed to each rank."""
    flat = rank_of.flatten()
    counts = torch.zeros(size + 1, dtype=torch.int64, device=flat.device)
    return counts.index_add_(0, flat, torch.ones_like(flat))[:size]


def dispatched_pairs(ids: torch.Tensor, rank: int, size: int, experts_per_rank: int) -> int:
    """The (token, other rank) pairs of one rank's routing: the rows it dispatches over links."""
    mask, _ = destinations(ids, size, experts_per_rank)
    return int(mask.sum()) - int(mask[:, rank].sum())


def dispatched_bytes(pairs: int, hidden: int) -> int:
    """B: one bf16 row of `hidden` elements per (token, other rank) pair (the module's formula)."""
    return 2 * hidden * pairs


def gb_per_s(nbytes: float, us_per_pair: float) -> float:
    """Decimal GB/s of a pair that moves nbytes out (dispatch) and as many back (combine)."""
    return 2.0 * nbytes / (us_per_pair * 1e-6) / 1e9


def exchange_sizes(every_ids: list[torch.Tensor], rank: int, experts_per_rank: int):
    """What `rank` sends to and receives from each rank under every rank's routing: (send rows per
    destination, receive rows per source, the (token, local expert) rows it receives in all)."""
    size = len(every_ids)
    per = [destinations(ids, size, experts_per_rank) for ids in every_ids]
    send = [int(v) for v in per[rank][0].sum(0)]
    recv = [int(per[s][0][:, rank].sum()) for s in range(size)]
    rows = sum(int(slot_counts(per[s][1], size)[rank]) for s in range(size))
    return send, recv, rows


# ---- the torch baseline's steps (pure torch, no communication: tested on the CPU) ---------------------


class Sent:
    """Dispatch's send side: rows [n, H] bf16 and meta [n, 1 + 2k] int32 (token, local expert per slot
    or -1, weight bits per slot) in destination-rank order (by token within a rank); token [n] int64."""

    def __init__(self, rows, meta, token):
        self.rows, self.meta, self.token = rows, meta, token


def pack(tokens, ids, weights, experts_per_rank: int, size: int, n_send: int, mask=None, rank_of=None) -> Sent:
    """The (token, destination) pairs sorted by destination then token (a static-shape sort: n_send,
    the pairs in all, comes from the caller, so this can be captured), their rows and routing."""
    t = tokens.shape[0]
    if mask is None:
        mask, rank_of = destinations(ids, size, experts_per_rank)
    dev = ids.device
    key = torch.arange(size, device=dev)[None, :] * t + torch.arange(t, device=dev)[:, None]
    key = torch.where(mask, key, size * t).flatten().sort().values[:n_send]
    dest = torch.div(key, t, rounding_mode="floor")
    token = key - dest * t
    here = rank_of.index_select(0, token) == dest[:, None]  # the slots of the row's destination
    local = torch.where(here, ids.index_select(0, token) % experts_per_rank, -1)
    meta = torch.cat([token[:, None].to(torch.int32), local.to(torch.int32),
                      weights.index_select(0, token).view(torch.int32)], dim=1)
    return Sent(tokens.index_select(0, token), meta, token)


class Received:
    """Dispatch's receive side: for each expert-major row, its message (row of the receive buffer)
    and slot, its local expert (sorted), its weight; and per-expert counts [E] int32."""

    def __init__(self, msg, slot, expert, weights, counts, n_msgs):
        self.msg, self.slot, self.expert, self.weights = msg, slot, expert, weights
        self.counts, self.n_msgs = counts, n_msgs


def unpack(meta: torch.Tensor, experts_per_rank: int, rows: int) -> Received:
    """Sorts the received (message, slot) pairs with a local expert by (expert, message, slot):
    messages arrive by source rank then token, so this is gpucomm's order. `rows`, the pairs in
    all, comes from the caller (static shapes)."""
    n, k = meta.shape[0], (meta.shape[1] - 1) // 2
    local = meta[:, 1:1 + k].to(torch.int64)
    nk = n * k
    flat = torch.arange(nk, device=meta.device).view(n, k)
    key = torch.where(local >= 0, local * nk + flat, experts_per_rank * nk).flatten().sort().values[:rows]
    expert = torch.div(key, nk, rounding_mode="floor")
    pos = key - expert * nk
    msg = torch.div(pos, k, rounding_mode="floor")
    slot = pos - msg * k
    counts = torch.searchsorted(expert, torch.arange(experts_per_rank + 1, device=meta.device)).diff().to(torch.int32)
    weights = meta[:, 1 + k:].contiguous().view(torch.float32)[msg, slot]
    return Received(msg, slot, expert, weights, counts, n)


def sources(meta: torch.Tensor, got: Received, recv_splits: list[int]) -> torch.Tensor:
    """[rows, 3] int32: each row's source rank, token there and slot (gpucomm's `sources`)."""
    src = torch.repeat_interleave(torch.arange(len(recv_splits), device=meta.device),
                                  torch.tensor(recv_splits, device=meta.device))
    return torch.stack([src[got.msg], meta[got.msg, 0].to(torch.int64), got.slot], dim=1).to(torch.int32)


def partials(expert_out: torch.Tensor, got: Received) -> torch.Tensor:
    """Per received message, the weighted sum of its slots' expert outputs (float), rounded to bf16."""
    rows = got.msg.shape[0]
    contrib = expert_out[:rows].to(torch.float32) * got.weights[:, None]
    out = torch.zeros((got.n_msgs, expert_out.shape[1]), dtype=torch.float32, device=expert_out.device)
    return out.index_add_(0, got.msg, contrib).to(BF16)


def finish(back: torch.Tensor, sent: Sent, tokens: int) -> torch.Tensor:
    """At the source: each token's partial rows (one per rank it went to) summed (float), as bf16."""
    out = torch.zeros((tokens, back.shape[1]), dtype=torch.float32, device=back.device)
    return out.index_add_(0, sent.token, back.to(torch.float32)).to(BF16)


def expert_outputs(rows: torch.Tensor, counts: torch.Tensor, rank: int, experts_per_rank: int, room: int):
    """The check's experts: row i times 2^-(its global expert mod 8), exact in bf16; [room, H], zeros
    past the received rows."""
    n = int(counts.sum())
    local = torch.repeat_interleave(torch.arange(experts_per_rank, device=rows.device), counts.to(torch.int64))
    scale = torch.pow(2.0, -((rank * experts_per_rank + local) % 8).to(torch.float32))
    y = torch.zeros((room, rows.shape[1]), dtype=BF16, device=rows.device)
    y[:n] = (rows[:n].to(torch.float32) * scale[:, None]).to(BF16)
    return y


def combine_reference(tokens: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor):
    """The exact combined output under expert_outputs' experts (float64) and its tolerance."""
    c = (weights.to(torch.float64) * torch.pow(2.0, -(ids % 8).to(torch.float64))).sum(1)
    exact = tokens.to(torch.float64) * c[:, None]
    return exact, exact.abs() * 2.0**-7 * 1.01


def compare_out(name: str, got: torch.Tensor, exact: torch.Tensor, tol: torch.Tensor) -> str:
    g = got.to(torch.float64)
    if bool(torch.isnan(g).any()):
        return f"{name}: {int(torch.isnan(g).sum())} NaN element(s)"
    bad = (g - exact).abs() > tol
    if bool(bad.any()):
        i = bad.nonzero()[0].tolist()
        return (f"{name}: {int(bad.sum())} element(s) off, first out[{i[0]}, {i[1]}] = {float(g[i[0], i[1]])!r}, "
                f"exact {float(exact[i[0], i[1]])!r}")
    return ""


def gpucomm_workspace_bound(size: int, hidden: int, top_k: int, max_tokens: int) -> int:
    """An upper bound of gpucomm's MoE workspace per rank (gpucomm/collectives/moe_shape.hpp: about
    4 P Tm H; 4 MiB covers the small regions at every shape gpucomm accepts)."""
    p, h, tm = size, hidden, max_tokens
    return p * tm * (96 + 2 * h) + p * tm * 2 * h + tm * (96 * top_k + 2 * h) + 8 * tm + (4 << 20)


# ---- the torch baseline over NCCL -----------------------------------------------------------------------


class TorchBaseline:
    """all_to_all_single over NCCL plus index permutes. fixed=None: the split sizes are exchanged and
    read on the host at every call; fixed=(send, recv, rows): those, with no host synchronisation
    (capturable)."""

    def __init__(self, size: int, experts_per_rank: int, fixed=None):
        self.size, self.e, self.fixed = size, experts_per_rank, fixed
        self.last = None  # (send, recv, rows) of the last dispatch

    def dispatch(self, tokens, ids, weights):
        import torch.distributed as dist

        mask, rank_of = destinations(ids, self.size, self.e)
        if self.fixed is None:
            # per destination: the rows sent, and the (token, expert) rows they become there
            mine = torch.stack([mask.sum(0), slot_counts(rank_of, self.size)], dim=1).flatten()
            theirs = torch.empty_like(mine)
            dist.all_to_all_single(theirs, mine)
            host = torch.cat([mine, theirs]).tolist()
            p = self.size
            send, recv, rows = host[0:2 * p:2], host[2 * p::2], sum(host[2 * p + 1::2])
        else:
            send, recv, rows = self.fixed
        self.last = (send, recv, rows)
        sent = pack(tokens, ids, weights, self.e, self.size, sum(send), mask, rank_of)
        recv_rows = torch.empty((sum(recv), tokens.shape[1]), dtype=BF16, device=tokens.device)
        dist.all_to_all_single(recv_rows, sent.rows, recv, send)
        recv_meta = torch.empty((sum(recv), sent.meta.shape[1]), dtype=torch.int32, device=tokens.device)
        dist.all_to_all_single(recv_meta, sent.meta, recv, send)
        got = unpack(recv_meta, self.e, rows)
        return recv_rows.index_select(0, got.msg), got, sent, recv_meta

    def combine(self, expert_out, got: Received, sent: Sent, tokens: int):
        import torch.distributed as dist

        send, recv, _ = self.last
        part = partials(expert_out, got)
        back = torch.empty((sum(send), expert_out.shape[1]), dtype=BF16, device=expert_out.device)
        dist.all_to_all_single(back, part, send, recv)
        return finish(back, sent, tokens)


# ---- measurement ---------------------------------------------------------------------------------------


def log(msg: str) -> None:
    print(msg, flush=True)


def time_eager(run, calls: int, repetitions: int) -> tuple[float, float, float]:
    """(median, min, max) microseconds per call of `run`, called `calls` times between CUDA events."""
    import torch.distributed as dist

    for _ in range(3):
        run()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per_call = []
    for _ in range(repetitions):
        dist.barrier()
        start.record()
        for _ in range(calls):
            run()
        stop.record()
        stop.synchronize()
        per_call.append(start.elapsed_time(stop) * 1e3 / calls)
    return statistics.median(per_call), min(per_call), max(per_call)


def main() -> int:
    a = arguments()
    for k, v in (("NCCL_NVLS_ENABLE", "0"), ("NVSHMEM_DISABLE_NVLS", "1"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")):
        os.environ.setdefault(k, v)
    import torch.distributed as dist

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpucomm_torch  # noqa: E402  (the compiled extension: see gpucomm_torch.py)
    from bench_tp_layer import finish, time_graph  # noqa: E402

    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    index = int(os.environ.get("LOCAL_RANK", "0")) if a.device == "local" else int(a.device)
    device = torch.device("cuda", index)
    torch.cuda.set_device(device)
    dist.init_process_group("cpu:gloo,cuda:nccl", timeout=timedelta(seconds=180), device_id=device)
    if a.npes and a.npes != size:
        raise SystemExit(f"--npes {a.npes}, but {size} ranks were started")
    h, k, e = a.hidden, a.top_k, a.experts_per_rank
    largest = max(t for _, t in a.shapes)
    need = gpucomm_workspace_bound(size, h, k, largest) + 8 * size * (16 << 10) * 64 + (64 << 20)
    have = int(os.environ.get("GPUCOMM_HEAP_BYTES") or 0) or (1 << 30)
    comm = gpucomm_torch.Communicator.from_process_group(device, heap_bytes=0 if need <= have else need)
    nccl_version = ".".join(str(v) for v in torch.cuda.nccl.version())
    if rank == 0:
        log(f"moe: {size} ranks, {torch.cuda.get_device_name(device)}, bf16, hidden {h}, top-{k}, {e} experts per "
            f"rank, torch {torch.__version__}, NCCL {nccl_version}")
        log(f"{'shape':>7} {'tokens':>6} {'bytes/GPU':>10} | {'gpucomm us: graph':>17} {'eager':>8} | "
            f"{'torch+NCCL us: graph':>20} {'eager':>8} | {'baseline/gpucomm':>16} | {'GB/s: gpucomm':>13} {'baseline':>8}")
    rows, failures = [], []
    t0 = time.monotonic()

    def row(library, variant, metric, value, lo, hi, nbytes, iterations, ctas, note):
        return {
            "case": "moe", "library": library,
            "transport": "NVLinkStore" if library == "gpucomm" else f"NCCL {nccl_version}",
            "variant": variant, "scope": "", "ctas": ctas, "threads": 0, "npes": size, "size": nbytes,
            "metric": metric, "value": value, "min": lo, "max": hi, "unit": "us" if metric == "latency" else "GB/s",
            "iterations": iterations, "repetitions": a.repetitions, "grid_barrier": False, "status": "ok", "note": note,
        }

    for shape, t in a.shapes:
        if time.monotonic() - t0 > a.budget_s:
            if rank == 0:
                log(f"time budget of {a.budget_s} s spent: the {shape} shape not run")
            break
        every = [route(t, size, e, k, a.seed, r) for r in range(size)]
        ids_cpu, w_cpu = every[rank]
        send, recv, my_rows = exchange_sizes([x[0] for x in every], rank, e)
        bound = max(exchange_sizes([x[0] for x in every], r, e)[2] for r in range(size))
        pairs = [dispatched_pairs(x[0], r, size, e) for r, x in enumerate(every)]
        nbytes = round(statistics.mean(dispatched_bytes(p, h) for p in pairs))
        gen = torch.Generator(device=device).manual_seed(a.seed * 7919 + rank)
        x = torch.randn((t, h), device=device, generator=gen).to(BF16)
        ids, w = ids_cpu.to(device), w_cpu.to(device)
        exact, tol = combine_reference(x.cpu(), ids_cpu, w_cpu)
        eager, graph = TorchBaseline(size, e), TorchBaseline(size, e, fixed=(send, recv, my_rows))
        with comm.moe_plan(experts_per_rank=e, hidden=h, top_k=k, max_tokens=t, max_recv_rows=max(1, bound),
                           index_dtype=torch.int64) as plan:
            # The check: dispatch against the baseline's, then each combine against the exact sum.
            recv_g = plan.recv_buffers()
            out_g = torch.empty((t, h), dtype=BF16, device=device)
            d = plan.dispatch(x, ids, w, out=recv_g)
            y_g = expert_outputs(d.rows, d.counts, rank, e, plan.max_recv_rows)
            plan.combine(y_g, d.handle, out=out_g)
            rows_b, got, sent, meta = eager.dispatch(x, ids, w)
            y_b = expert_outputs(rows_b, got.counts, rank, e, my_rows)
            out_b = eager.combine(y_b, got, sent, t)
            torch.cuda.synchronize(device)
            n = int(got.counts.sum())
            problems = []
            if eager.last != (send, recv, my_rows):
                problems.append(f"the exchanged split sizes {eager.last} are not the routing's {(send, recv, my_rows)}")
            elif not torch.equal(d.counts.cpu(), got.counts.cpu()):
                problems.append(f"counts: gpucomm {d.counts.tolist()}, baseline {got.counts.tolist()}")
            elif not torch.equal(d.rows[:n].view(torch.int16), rows_b.view(torch.int16)):
                problems.append("dispatched rows differ from the baseline's")
            elif not torch.equal(d.weights[:n].view(torch.int32), got.weights.view(torch.int32)):
                problems.append("dispatched weights differ from the baseline's")
            elif not torch.equal(d.sources[:n].cpu(), sources(meta, got, recv).cpu()):
                problems.append("dispatched sources differ from the baseline's")
            for name, out in (("gpucomm combine", out_g), ("baseline combine", out_b)):
                problems.append(compare_out(name, out.cpu(), exact, tol))
            try:
                comm.synchronize()
            except RuntimeError as err:
                problems.append(f"gpucomm synchronize: {err}")
            failures += [f"{shape}, rank {rank}: {p}" for p in problems if p]

            def gpucomm_pair():
                dd = plan.dispatch(x, ids, w, out=recv_g)
                plan.combine(y_g, dd.handle, out=out_g)

            def baseline_pair(base):
                def run():
                    r, g, s, _ = base.dispatch(x, ids, w)
                    base.combine(y_b, g, s, t)

                return run

            stats = {
                ("gpucomm", "graph"): time_graph(gpucomm_pair, a.calls, a.repetitions),
                ("gpucomm", "eager"): time_eager(gpucomm_pair, a.calls, a.repetitions),
                ("nccl", "graph"): time_graph(baseline_pair(graph), a.calls, a.repetitions),
                ("nccl", "eager"): time_eager(baseline_pair(eager), a.calls, a.repetitions),
            }
            ctas = plan.ctas
        base = (f"MoE dispatch + combine, bf16, hidden {h}, top-{k}, {e} experts per rank ({size * e} in all), {t} "
                f"tokens per rank ({shape}), random routing (seed {a.seed}: k distinct experts per token, softmax "
                f"weights); {nbytes} bytes dispatched per GPU (mean over ranks of 2 x hidden per (token, other rank) "
                f"pair); GB/s = 2 x bytes / time per (dispatch, combine) pair")
        what = {
            "gpucomm": f"gpucomm_torch MoEPlan dispatch + combine ({ctas} CTAs, max_recv_rows {bound})",
            "nccl": "torch baseline: all_to_all_single over NCCL (rows, routing; back: partial rows) + index permutes",
        }
        how = {
            "graph": f"CUDA graph of {a.calls} pairs, median of {a.repetitions} repetitions of 5 replays",
            "eager": f"{a.calls} pairs between CUDA events, median of {a.repetitions} repetitions",
        }
        splits = {("nccl", "graph"): " (split sizes of this routing fixed at capture)",
                  ("nccl", "eager"): " (split sizes exchanged and read on the host every call)"}
        for (lib, mode), (med, lo, hi) in stats.items():
            note = f"{base}; {what[lib]}{splits.get((lib, mode), '')}; {how[mode]}"
            iters = a.calls * (5 if mode == "graph" else 1)
            c = ctas if lib == "gpucomm" else 0
            rows.append(row(lib, f"{shape} {mode}", "latency", med, lo, hi, nbytes, iters, c, note))
            rows.append(row(lib, f"{shape} {mode}", "bandwidth", gb_per_s(nbytes, med), gb_per_s(nbytes, hi),
                            gb_per_s(nbytes, lo), nbytes, iters, c, note))
        if rank == 0:
            tg, te = stats["gpucomm", "graph"][0], stats["gpucomm", "eager"][0]
            ng, ne = stats["nccl", "graph"][0], stats["nccl", "eager"][0]
            bl = min(ng, ne)
            log(f"{shape:>7} {t:>6} {nbytes:>10} | {tg:>17.1f} {te:>8.1f} | {ng:>20.1f} {ne:>8.1f} | {bl / tg:>16.2f} | "
                f"{gb_per_s(nbytes, tg):>13.1f} {gb_per_s(nbytes, bl):>8.1f}")
    return finish(rank, size, comm, rows, failures, a.out, t0)


if __name__ == "__main__":
    sys.exit(main())
