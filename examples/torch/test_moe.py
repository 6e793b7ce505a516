"""Test of gpucomm's MoE dispatch and combine for torch tensors (gpucomm_torch.MoEPlan), run by every rank:

    python3 -m torch.distributed.run --standalone --nproc_per_node=2 examples/torch/test_moe.py

(run.sh --test moe does this, with both ranks on GPU 0 under MPS). Each rank makes its own tokens,
top-k ids and weights; they are all-gathered over gloo and every rank computes, in plain torch on
the CPU, what each rank must receive and what combine must return. Checked on every rank:

- routing: random over all experts (some slots -1, repeated experts), sparse (two experts in three
  receive nothing), every token to one expert, every slot of a token to the same expert; k = 1, 2,
  3, 4 and 8; bf16 and fp8 e4m3; int32 and int64 ids; several seeds; a rank with no tokens; one
  plan of many CTAs and one held to 2 CTAs;
- dispatch, every row against the reference: counts exactly; sources (rank, token, slot) and
  weights exactly; bf16 rows bitwise; fp8 rows per element within e4m3's rounding given the row's
  block scale (|q - x / s| <= max(2^-4 |x / s|, 2^-10): 3 mantissa bits, subnormal step 2^-9), and
  each scale within 2^-22 of amax / 448 (1 for a block of zeros); rows past the received count
  left untouched;
- combine: the experts' outputs are table entries picked by each row's (expert, source, token),
  computed on the GPU from dispatch's counts and sources (so a wrong source gives a wrong sum);
  "grid" data (tokens n / 16, outputs n / 32, weights m / 1024) make every product and sum exact
  in float, so the reference, summed per expert rank, rounded to bf16, summed in rank order and
  rounded (the library's stated order), must match bitwise; "normal" data (Gaussian outputs,
  softmax weights) must be within 2^-7 x 1.01 x sum_j |w_j y_j| of the exact weighted sum (two
  bf16 roundings of 2^-8 relative each, float accumulation's error far below the 1%);
- every output poisoned before each call (NaN, 0xFF bytes, -1) so a missing write fails; every run
  done twice, the second bitwise identical to the first;
- rows past max_recv_rows: the first rows kept, the counts saying so, combine summing the kept ones,
  and Communicator.synchronize() raising "max_recv_rows" on exactly the ranks that dropped rows;
- a device token count, and dispatch + experts + combine captured in a CUDA graph, replayed with new
  routing and counts each time (bf16 and fp8);
- refusals, each raising a named error on every rank before anything is launched: T over the bound,
  wrong dtypes and shapes, a CPU tensor, an unaligned tensor, a bad handle, a second dispatch before
  combine, plans that differ across ranks or that gpucomm refuses; and expert ids out of range,
  ignored and named by synchronize.

Prints one line per case (rank 0) and a PASS/FAIL total; exits 1 if any rank saw a failure.
--list prints the cases; --case WHICH runs only those it names (an index from --list, or part of a name).
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from dataclasses import dataclass, replace

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpucomm_torch  # noqa: E402  (after the path is set)
from harness import Harness, arguments, log, start  # noqa: E402

FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16


@dataclass(frozen=True)
class Case:
    experts_per_rank: int
    hidden: int
    top_k: int
    max_tokens: int
    token_dtype: torch.dtype = BF16
    index_dtype: torch.dtype = torch.int32
    routing: str = "random"  # random, sparse, one_expert, same_expert
    data: str = "grid"  # grid (exact sums: bitwise), normal (within the tolerance)
    seed: int = 1
    slack: int = 3  # max_recv_rows = the most rows any rank receives + slack
    empty_rank: bool = False  # the last rank dispatches no tokens
    max_ctas: int = 0

    def name(self) -> str:
        dt = "fp8" if self.token_dtype == FP8 else "bf16"
        it = "i64" if self.index_dtype == torch.int64 else "i32"
        extra = (" empty" if self.empty_rank else "") + (f" ctas<={self.max_ctas}" if self.max_ctas else "")
        return (f"E={self.experts_per_rank} H={self.hidden} k={self.top_k} Tm={self.max_tokens} {dt} {it} "
                f"{self.routing} {self.data} s{self.seed} slack {self.slack}{extra}")


class Inputs:
    """Every rank's inputs (gathered), padded to max_tokens: tokens [P, Tm, H] bf16, ids [P, Tm, k]
    int64 (-1 past each rank's T), weights [P, Tm, k] float32, T [P]; and this rank's own."""

    def __init__(self, tokens, ids, weights, counts, mine):
        self.tokens, self.ids, self.weights, self.counts = tokens, ids, weights, counts
        self.mine = mine  # (tokens [T, H], ids [T, k] of the index dtype, weights [T, k]) on the CPU


class Test(Harness):
    # ---- inputs and reference --------------------------------------------------------------------

    def make_inputs(self, c: Case, salt: int) -> Inputs:
        g = torch.Generator().manual_seed(1000003 * c.seed + 7919 * self.rank + 104729 * salt)
        tm, h, k, x = c.max_tokens, c.hidden, c.top_k, self.size * c.experts_per_rank
        if c.empty_rank and self.rank == self.size - 1:
            t = 0
        elif self.rank == 0 and salt % 2 == 0:  # the bound now and then
            t = tm
        else:
            t = int(torch.randint(0, tm + 1, (1,), generator=g))
        if c.data == "grid":  # n / 16 times a power of two per block of 128: at most 8 significant bits
            tokens = torch.randint(-128, 129, (t, h), generator=g).to(torch.float32) / 16
            tokens *= (2.0 ** (torch.arange(h) // 128 % 4)).to(torch.float32)
            weights = torch.randint(1, 1001, (t, k), generator=g).to(torch.float32) / 1024
        else:
            tokens = torch.randn((t, h), generator=g) * 3
            weights = torch.softmax(torch.randn((t, k), generator=g), dim=1)
        tokens[(torch.arange(t)[:, None] + torch.arange(h)[None, :] // 128) % 5 == 0] = 0  # zero blocks (fp8 scale 1)
        tokens = tokens.to(BF16)
        if c.routing == "random":  # uniform over the experts and -1, repeats allowed
            ids = torch.randint(-1, x, (t, k), generator=g)
        elif c.routing == "sparse":  # only experts 0, 3, 6, ...: the others receive nothing
            ids = torch.randint(0, (x + 2) // 3, (t, k), generator=g) * 3
            ids[torch.rand((t, k), generator=g) < 0.2] = -1
        elif c.routing == "one_expert":  # every token's slot 0 to the last expert
            ids = torch.full((t, k), -1, dtype=torch.int64)
            ids[:, 0] = x - 1
        else:  # same_expert: every slot of a token to one expert
            ids = torch.randint(0, x, (t, 1), generator=g).expand(t, k).contiguous()
        ids = ids.to(torch.int64)

        def padded(a: torch.Tensor, fill) -> torch.Tensor:
            out = torch.full((tm,) + tuple(a.shape[1:]), fill, dtype=a.dtype)
            out[: a.shape[0]] = a
            return out

        every_tokens = self.gather(padded(tokens.view(torch.int16).to(torch.int32), 0))  # gloo has no 16-bit types
        every_ids = self.gather(padded(ids, -1))
        every_weights = self.gather(padded(weights, 0.0))
        every_t = self.gather(torch.tensor([t], dtype=torch.int64))
        return Inputs(
            torch.stack(every_tokens).to(torch.int16).view(BF16),
            torch.stack(every_ids),
            torch.stack(every_weights),
            torch.cat(every_t),
            (tokens, ids.to(c.index_dtype), weights),
        )

    def routes(self, c: Case, inp: Inputs):
        """Every routed slot (s, t, j) in (source, token, slot) order, its expert x and its position
        among its receiver's rows (expert-major, then source, token, slot)."""
        tm, x_all = c.max_tokens, self.size * c.experts_per_rank
        live = torch.arange(tm)[None, :, None] < inp.counts[:, None, None]
        routed = live & (inp.ids >= 0) & (inp.ids < x_all)
        s, t, j = routed.nonzero(as_tuple=True)  # row-major: source, token, slot
        x = inp.ids[s, t, j]
        order = torch.sort(x, stable=True).indices  # receiver, expert, then (s, t, j)
        receiver = x[order] // c.experts_per_rank
        first = torch.searchsorted(receiver, torch.arange(self.size))
        position = torch.empty_like(x)
        position[order] = torch.arange(x.numel()) - first[receiver]
        need = torch.bincount(x // c.experts_per_rank, minlength=self.size)
        return s, t, j, x, position, need

    def reference_recv(self, c: Case, inp: Inputs, routes, rows_bound: int):
        """This rank's expected counts, and its kept rows' (s, t, j, x) in receive order."""
        s, t, j, x, position, _ = routes
        e = c.experts_per_rank
        here = (x // e == self.rank) & (position < rows_bound)
        idx = here.nonzero(as_tuple=True)[0]
        idx = idx[torch.argsort(position[idx])]
        counts = torch.bincount(x[idx] % e, minlength=e).to(torch.int32)
        return counts, s[idx], t[idx], j[idx], x[idx]

    def reference_out(self, c: Case, inp: Inputs, routes, rows_bound: int, table: torch.Tensor):
        """This rank's combine output (float64, exact before rounding; bf16 as the library rounds)
        and sum over slots of |w y| per element (for the tolerance)."""
        s, t, j, x, position, _ = routes
        mine = (s == self.rank) & (position < rows_bound)
        tt, xx = t[mine], x[mine]
        w = inp.weights[self.rank][tt, j[mine]].to(torch.float64)
        y = table[xx, self.rank, tt].to(torch.float64)
        contrib = w[:, None] * y  # [n, H]
        n_tok, h = int(inp.counts[self.rank]), c.hidden
        partial = torch.zeros((n_tok * self.size, h), dtype=torch.float64)
        partial.index_add_(0, tt * self.size + xx // c.experts_per_rank, contrib)
        magnitude = torch.zeros((n_tok, h), dtype=torch.float64).index_add_(0, tt, contrib.abs())
        exact = partial.view(n_tok, self.size, h).sum(1)
        rounded = partial.to(torch.float32).to(BF16).to(torch.float64).view(n_tok, self.size, h).sum(1)
        return exact, rounded.to(torch.float32).to(BF16), magnitude

    def make_table(self, c: Case, salt: int) -> torch.Tensor:
        """Expert outputs [experts, P, Tm, H] bf16 by (global expert, source, token), the same on every rank."""
        g = torch.Generator().manual_seed(7777 + 31 * c.seed + salt)
        shape = (self.size * c.experts_per_rank, self.size, c.max_tokens, c.hidden)
        if c.data == "grid":
            return (torch.randint(-256, 257, shape, generator=g).to(torch.float32) / 32).to(BF16)
        return torch.randn(shape, generator=g).to(BF16)

    @staticmethod
    def experts(plan, d, table: torch.Tensor, rank: int, size: int) -> torch.Tensor:
        """The 'experts' on the GPU, from dispatch's outputs alone (no host synchronisation, so it can
        be captured): row i's output is table[its expert, its source rank, its source token]; rows
        past the received count are NaN (combine must not read them)."""
        e, r = plan.experts_per_rank, plan.max_recv_rows
        ends = d.counts.to(torch.int64).cumsum(0)
        i = torch.arange(r, device=d.counts.device)
        local = torch.searchsorted(ends, i, right=True)
        src = d.sources.to(torch.int64)
        y = table[rank * e + local.clamp(max=e - 1), src[:, 0].clamp(0, size - 1), src[:, 1].clamp(0, plan.max_tokens - 1)]
        return torch.where((local < e)[:, None], y, torch.full_like(y, float("nan")))

    # ---- checks -------------------------------------------------------------------------------------

    @staticmethod
    def poison(recv: gpucomm_torch.MoERecv, out: torch.Tensor | None) -> None:
        recv.rows.view(torch.uint8).fill_(0xFF)  # NaN in bf16 and in e4m3
        if recv.scales is not None:
            recv.scales.fill_(float("nan"))
        recv.counts.fill_(-1)
        recv.sources.fill_(-1)
        recv.weights.fill_(float("nan"))
        if out is not None:
            out.fill_(float("nan"))

    def check_recv(self, c: Case, inp: Inputs, ref, got: dict) -> str | None:
        """None if this rank's dispatch outputs (CPU copies) match the reference; else what is wrong."""
        counts, s, t, j, x = ref
        n = int(counts.sum())
        if not torch.equal(got["counts"], counts):
            return f"counts {got['counts'].tolist()}, expected {counts.tolist()}"
        want_src = torch.stack([s, t, j], dim=1).to(torch.int32)
        if not torch.equal(got["sources"][:n], want_src):
            i = int((got["sources"][:n] != want_src).any(1).nonzero()[0])
            return f"source of row {i}: {got['sources'][i].tolist()}, expected {want_src[i].tolist()}"
        want_w = inp.weights[s, t, j]
        if not torch.equal(got["weights"][:n].view(torch.int32), want_w.view(torch.int32)):
            return "weights differ"
        rows = inp.tokens[s, t].to(torch.float32)  # [n, H]
        if c.token_dtype == BF16:
            if not torch.equal(got["rows"][:n].view(torch.int16), inp.tokens[s, t].view(torch.int16)):
                bad = (got["rows"][:n].view(torch.int16) != inp.tokens[s, t].view(torch.int16)).nonzero()[0].tolist()
                return f"bf16 row {bad[0]} element {bad[1]} differs"
        else:
            problem = self.check_fp8(rows, got["rows"][:n], got["scales"][:n])
            if problem:
                return problem
        untouched = got["rows"][n:].view(torch.uint8)
        if not bool((untouched == 0xFF).all()):
            return f"rows past the {n} received were written"
        if not bool((got["sources"][n:] == -1).all()) or not bool(torch.isnan(got["weights"][n:]).all()):
            return f"sources or weights past the {n} received were written"
        return None

    @staticmethod
    def check_fp8(rows: torch.Tensor, q8: torch.Tensor, scales: torch.Tensor) -> str | None:
        """rows [n, H] float32 (the bf16 tokens); q8 [n, H] e4m3; scales [n, H / 128]."""
        n, h = rows.shape
        blocks = rows.view(n, h // 128, 128)
        amax = blocks.abs().amax(dim=2)
        want_scale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
        if bool(torch.isnan(scales).any()):
            return "an fp8 scale is NaN (not written)"
        off = (scales.to(torch.float64) - want_scale.to(torch.float64)).abs()
        if bool((off > want_scale.to(torch.float64) * 2.0**-22).any()):
            i = (off > want_scale.to(torch.float64) * 2.0**-22).nonzero()[0].tolist()
            return f"scale [{i[0]}, {i[1]}] {float(scales[i[0], i[1]])!r}, expected {float(want_scale[i[0], i[1]])!r}"
        q = q8.to(torch.float32).to(torch.float64).view(n, h // 128, 128)
        if bool(torch.isnan(q).any()):
            return "an fp8 element is NaN (poison left: not written)"
        target = blocks.to(torch.float64) / scales.to(torch.float64)[:, :, None]
        tol = torch.maximum(target.abs() * 2.0**-4, torch.full_like(target, 2.0**-10)) * (1 + 2.0**-10)
        bad = (q - target).abs() > tol
        if bool(bad.any()):
            i = bad.nonzero()[0].tolist()
            return (f"fp8 row {i[0]} element {i[1] * 128 + i[2]}: {float(q[tuple(i)])!r} x scale, "
                    f"expected {float(target[tuple(i)])!r} within e4m3 rounding")
        return None

    @staticmethod
    def check_out(c: Case, exact, rounded, magnitude, got: torch.Tensor) -> tuple[str | None, str]:
        g = got.to(torch.float64)
        if bool(torch.isnan(g).any()):
            return f"{int(torch.isnan(g).sum())} output element(s) NaN (not written, or an unreceived row read)", ""
        if c.data == "grid":
            if not torch.equal(got.view(torch.int16), rounded.view(torch.int16)):
                i = (got.view(torch.int16) != rounded.view(torch.int16)).nonzero()[0].tolist()
                return (f"out[{i[0]}, {i[1]}] = {float(got[i[0], i[1]])!r}, expected {float(rounded[i[0], i[1]])!r} "
                        "(bitwise)"), ""
            return None, "bitwise"
        tol = magnitude * 2.0**-7 * 1.01
        err = (g - exact).abs()
        if bool((err > tol).any()):
            i = (err > tol).nonzero()[0].tolist()
            return (f"out[{i[0]}, {i[1]}] = {float(g[i[0], i[1]])!r}, exact {float(exact[i[0], i[1]])!r} "
                    f"(tolerance {float(tol[i[0], i[1]]):.3g})"), ""
        return None, f"max|err| {float(err.max()) if err.numel() else 0.0:.3g}"

    # ---- cases -----------------------------------------------------------------------------------------

    def attempt(self, name: str, body) -> None:
        """One case: body() returns (ok, detail, seconds); an exception fails it (the plans it made
        in `with` blocks are closed on the way out, collectively)."""
        try:
            ok, detail, seconds = body()
        except Exception as e:
            ok, detail, seconds = False, f"{type(e).__name__}: {e}", None
            traceback.print_exc()
        self.verdict(name, ok, detail[:120], seconds)

    def case(self, comm, c: Case, salt: int) -> None:
        self.attempt(c.name(), lambda: self.run_case(comm, c, salt))

    def run_case(self, comm, c: Case, salt: int):
        inp = self.make_inputs(c, salt)
        routes = self.routes(c, inp)
        need = routes[5]
        bound = max(1, int(need.max()) + c.slack)
        table = self.make_table(c, salt)
        ref = self.reference_recv(c, inp, routes, bound)
        exact, rounded, magnitude = self.reference_out(c, inp, routes, bound, table)
        table_dev = table.to(self.device)
        tokens, ids, weights = (a.to(self.device) for a in inp.mine)
        runs, seconds = [], None
        with comm.moe_plan(
            experts_per_rank=c.experts_per_rank, hidden=c.hidden, top_k=c.top_k, max_tokens=c.max_tokens,
            max_recv_rows=bound, token_dtype=c.token_dtype, index_dtype=c.index_dtype, max_ctas=c.max_ctas,
        ) as plan:
            for _ in range(2):  # the second run must be bitwise the first
                recv = plan.recv_buffers()
                out = torch.empty((tokens.shape[0], c.hidden), dtype=BF16, device=self.device)
                self.poison(recv, out)
                torch.cuda.synchronize(self.device)
                t0 = time.perf_counter()
                d = plan.dispatch(tokens, ids, weights, out=recv)
                y = self.experts(plan, d, table_dev, self.rank, self.size)
                res = plan.combine(y, d.handle, out=out)
                torch.cuda.synchronize(self.device)
                seconds = time.perf_counter() - t0
                if res.data_ptr() != out.data_ptr() or d.rows.data_ptr() != recv.rows.data_ptr():
                    out.fill_(float("nan"))  # not the out= tensors: fails below, after every rank's calls
                runs.append({f: getattr(d, f).cpu() for f in ("rows", "counts", "sources", "weights")} |
                            {"scales": d.scales.cpu() if d.scales is not None else None, "out": out.cpu()})
            dropped = int(need[self.rank]) > bound
            try:
                comm.synchronize()
                reported = ""
            except RuntimeError as e:
                reported = str(e)
        problem = self.check_recv(c, inp, ref, runs[0])
        detail = ""
        if problem is None:
            problem, detail = self.check_out(c, exact, rounded, magnitude, runs[0]["out"])
        if problem is None and not all(
            torch.equal(runs[0][f].view(torch.uint8), runs[1][f].view(torch.uint8))
            for f in runs[0] if runs[0][f] is not None
        ):
            problem = "the second run differs bitwise from the first"
        if problem is None and dropped != ("max_recv_rows" in reported):
            problem = f"synchronize said {reported!r} with {int(need[self.rank])} rows for a bound of {bound}"
        if problem is None and reported and not dropped:
            problem = f"synchronize raised {reported!r}"
        if problem:
            return False, problem, seconds
        dropping = [r for r, n in enumerate(need.tolist()) if n > bound]
        return True, f"rows per rank {need.tolist()}, {detail}" + (f", drops at {dropping} reported" if dropping else ""), seconds

    def graph_case(self, comm, c: Case, replays: int) -> None:
        self.attempt(f"CUDA graph, {replays} replays: " + c.name(), lambda: self.run_graph_case(comm, c, replays))

    def run_graph_case(self, comm, c: Case, replays: int):
        """Dispatch with a device token count, the experts and combine captured in one CUDA graph,
        replayed with new inputs and counts, each replay checked."""
        inputs = [self.make_inputs(replace(c, seed=c.seed + i), 100 + i) for i in range(replays)]
        all_routes = [self.routes(c, inp) for inp in inputs]
        bound = max(1, max(int(r[5].max()) for r in all_routes) + c.slack)
        table = self.make_table(c, 0)
        table_dev = table.to(self.device)
        tm, k, d_ = c.max_tokens, c.top_k, self.device
        tokens = torch.zeros((tm, c.hidden), dtype=BF16, device=d_)
        ids = torch.full((tm, k), -1, dtype=c.index_dtype, device=d_)
        weights = torch.zeros((tm, k), dtype=torch.float32, device=d_)
        count = torch.zeros((1,), dtype=torch.int32, device=d_)
        seen, first_problem = [], None
        with comm.moe_plan(
            experts_per_rank=c.experts_per_rank, hidden=c.hidden, top_k=c.top_k, max_tokens=c.max_tokens,
            max_recv_rows=bound, token_dtype=c.token_dtype, index_dtype=c.index_dtype,
        ) as plan:
            recv = plan.recv_buffers()
            out = torch.empty((tm, c.hidden), dtype=BF16, device=d_)
            y = torch.empty((plan.max_recv_rows, c.hidden), dtype=BF16, device=d_)

            def layer():
                dd = plan.dispatch(tokens, ids, weights, num_tokens=count, out=recv)
                y.copy_(self.experts(plan, dd, table_dev, self.rank, self.size))
                plan.combine(y, dd.handle, out=out)

            replay = capture(layer, d_)
            for i, (inp, routes) in enumerate(zip(inputs, all_routes)):
                mt, mi, mw = inp.mine
                n = mt.shape[0]
                tokens.zero_()
                tokens[:n] = mt.to(d_)
                ids.fill_(7 * c.experts_per_rank * self.size)  # out of range past the count: never read
                ids[:n] = mi.to(d_)
                weights.zero_()
                weights[:n] = mw.to(d_)
                count.fill_(n)
                self.poison(recv, out)
                replay()
                torch.cuda.synchronize(d_)
                got = {f: getattr(recv, f).cpu() for f in ("rows", "counts", "sources", "weights")}
                got["scales"] = recv.scales.cpu() if recv.scales is not None else None
                problem = self.check_recv(c, inp, self.reference_recv(c, inp, routes, bound), got)
                if problem is None:
                    exact, rounded, magnitude = self.reference_out(c, inp, routes, bound, table)
                    o = out.cpu()
                    problem, _ = self.check_out(c, exact, rounded, magnitude, o[:n])
                    if problem is None and not bool(torch.isnan(o[n:].to(torch.float32)).all()):
                        problem = f"combine wrote rows past the device count {n}"
                if problem and first_problem is None:  # replays go on: the ranks' graphs wait for each other
                    first_problem = f"replay {i}: {problem}"
                seen.append(n)
            comm.synchronize()  # nothing to report: no id out of range was read, nothing dropped
        if first_problem:
            return False, first_problem, None
        return True, f"token counts {seen}, every replay exact", None

    def device_errors(self, comm) -> None:
        """What only the device sees, ignored or clamped and named by synchronize on every rank."""
        plan = comm.moe_plan(experts_per_rank=2, hidden=128, top_k=2, max_tokens=8, max_recv_rows=64)
        d_, x = self.device, plan.experts
        tokens = torch.ones((8, 128), dtype=BF16, device=d_)
        weights = torch.full((8, 2), 0.5, device=d_)
        ids = torch.randint(0, x, (8, 2), dtype=torch.int32, device=d_)
        ids[0, 0], ids[3, 1] = x, -2  # two ids outside [-1, experts) on every rank

        def outcome(call) -> tuple[bool, str]:
            try:
                call()
                comm.synchronize()
                return False, "synchronize raised nothing"
            except RuntimeError as e:
                return True, str(e)

        def layer(**kw):
            d = plan.dispatch(tokens, ids, weights, **kw)
            return plan.combine(torch.zeros((plan.max_recv_rows, 128), dtype=BF16, device=d_), d.handle)

        ok, text = outcome(layer)
        ok = ok and "2 expert ids outside" in text
        self.verdict("reports: expert ids out of range (ignored)", ok, text[-90:])
        ok, text = outcome(lambda: layer(num_tokens=torch.tensor([13], dtype=torch.int32, device=d_)))
        ok = ok and "above max_tokens" in text and "13" in text
        self.verdict("reports: a device token count above max_tokens", ok, text[-90:])
        try:
            layer()
            comm.synchronize()
            ok, text = False, "the bad ids were not reported again"
        except RuntimeError as e:  # the two bad ids again: each call's are new counts
            ok, text = "2 expert ids" in str(e), str(e)
        self.verdict("reports: each call's bad ids anew", ok, text[-90:])
        ids[0, 0], ids[3, 1] = 0, -1
        try:
            layer()
            comm.synchronize()
            ok, text = True, "nothing to report"
        except RuntimeError as e:
            ok, text = False, str(e)
        self.verdict("reports: nothing once the ids are good", ok, text[-90:])
        plan.close()

    def refusals(self, comm) -> None:
        """Argument checks, on every rank together (nothing is launched, so no rank waits)."""
        d_ = self.device
        plan = comm.moe_plan(experts_per_rank=2, hidden=256, top_k=4, max_tokens=16, max_recv_rows=64)
        good = (torch.zeros((8, 256), dtype=BF16, device=d_), torch.zeros((8, 4), dtype=torch.int32, device=d_),
                torch.zeros((8, 4), device=d_))
        tok, ids, w = good
        flat = torch.zeros(8 * 256 + 8, dtype=BF16, device=d_)
        cases = [
            ("T over max_tokens", lambda: plan.dispatch(torch.zeros((17, 256), dtype=BF16, device=d_),
                                                        torch.zeros((17, 4), dtype=torch.int32, device=d_),
                                                        torch.zeros((17, 4), device=d_)), ValueError, "max_tokens"),
            ("num_tokens over the rows", lambda: plan.dispatch(tok, ids, w, num_tokens=9), ValueError, "num_tokens"),
            ("tokens float32", lambda: plan.dispatch(tok.float(), ids, w), TypeError, "dtype"),
            ("ids int64 on an int32 plan", lambda: plan.dispatch(tok, ids.long(), w), TypeError, "dtype"),
            ("weights bf16", lambda: plan.dispatch(tok, ids, w.to(BF16)), TypeError, "dtype"),
            ("hidden 128, plan 256", lambda: plan.dispatch(tok[:, :128].contiguous(), ids, w), ValueError, "shape"),
            ("ids [T, 3], top_k 4", lambda: plan.dispatch(tok, ids[:, :3].contiguous(), w), ValueError, "shape"),
            ("ids of 7 rows, tokens 8", lambda: plan.dispatch(tok, ids[:7], w), ValueError, "shape"),
            ("CPU tokens", lambda: plan.dispatch(tok.cpu(), ids, w), ValueError, "cpu"),
            ("non-contiguous ids", lambda: plan.dispatch(tok, torch.zeros((4, 8), dtype=torch.int32, device=d_).t(), w),
             ValueError, "contiguous"),
            ("unaligned tokens", lambda: plan.dispatch(flat[1 : 1 + 8 * 256].view(8, 256), ids, w), ValueError, "aligned"),
            ("device count, T < max_tokens", lambda: plan.dispatch(
                tok, ids, w, num_tokens=torch.tensor([4], dtype=torch.int32, device=d_)), ValueError, "max_tokens"),
            ("out of another plan's shape", lambda: plan.dispatch(tok, ids, w, out=gpucomm_torch.MoERecv(
                *plan.recv_buffers()[:3], torch.zeros((64, 2), dtype=torch.int32, device=d_), plan.recv_buffers().weights)),
             ValueError, "shape"),
            ("fp8 scales on a bf16 plan", lambda: plan.dispatch(tok, ids, w, out=plan.recv_buffers()._replace(
                scales=torch.zeros((64, 2), device=d_))), ValueError, "scales"),
            ("combine without a dispatch", lambda: plan.combine(torch.zeros((64, 256), dtype=BF16, device=d_), None),
             ValueError, "handle"),
        ]
        for what, call, error, word in cases:
            self.refuses(what, call, error, word)
        d = plan.dispatch(tok, ids, w)  # every rank: one good dispatch, then misuse before its combine
        self.refuses("a second dispatch before combine", lambda: plan.dispatch(tok, ids, w), RuntimeError, "second dispatch")
        y = torch.zeros((64, 256), dtype=BF16, device=d_)
        self.refuses("combine out of the wrong size", lambda: plan.combine(y, d.handle, out=torch.empty((7, 256), dtype=BF16, device=d_)),
                     ValueError, "shape")
        self.refuses("expert outputs float32", lambda: plan.combine(y.float(), d.handle), TypeError, "dtype")
        out = plan.combine(y, d.handle)
        self.refuses("a handle used twice", lambda: plan.combine(y, d.handle), ValueError, "handle")
        comm.synchronize()
        self.verdict("the good calls between the refusals", bool((out.cpu() == 0).all()), f"out {tuple(out.shape)} zeros")
        plan.close()
        self.refuses("dispatch on a closed plan", lambda: plan.dispatch(tok, ids, w), RuntimeError, "closed")

        def make(**changes):
            kw = dict(experts_per_rank=2, hidden=128, top_k=2, max_tokens=8, max_recv_rows=32) | changes
            p = comm.moe_plan(**kw)
            p.close()

        if self.size > 1:  # rank 1 alone passes something else
            one = self.rank == 1
            self.refuses("plans that differ across ranks", lambda: make(hidden=256 if one else 128), RuntimeError,
                         "hidden 256 against 128")
            self.refuses("a plan gpucomm refuses on one rank", lambda: make(hidden=100 if one else 128), RuntimeError,
                         "hidden 100")
            self.refuses("a dtype one rank gets wrong", lambda: make(token_dtype=torch.float16 if one else BF16),
                         TypeError, "rank 1: token_dtype")
        self.refuses("top_k 9", lambda: make(top_k=9), RuntimeError, "top_k 9")
        self.refuses("index dtype int16", lambda: make(index_dtype=torch.int16), TypeError, "index_dtype")
        self.refuses("max_tokens 2.5", lambda: make(max_tokens=2.5), TypeError, "max_tokens")
        make()  # and a good plan after all that
        self.verdict("a plan after the refused ones", True, "made and closed")


def capture(fn, device: torch.device):
    """fn() captured in a CUDA graph, after one eager warm-up run on a side stream (torch's kernels
    loaded before the capture); returns the graph's replay."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize(device)
    return graph.replay


def cases(seeds: int) -> list[Case]:
    out = []
    for seed in range(1, seeds + 1):
        out += [
            Case(3, 256, 2, 48, seed=seed),
            Case(4, 128, 8, 32, index_dtype=torch.int64, seed=seed, empty_rank=seed == 2),
            Case(2, 384, 4, 48, token_dtype=FP8, seed=seed),
            Case(1, 128, 1, 40, token_dtype=FP8, index_dtype=torch.int64, seed=seed),
        ]
    out += [
        Case(3, 256, 3, 40, routing="sparse"),
        Case(2, 128, 1, 40, routing="one_expert"),
        Case(2, 128, 8, 40, token_dtype=FP8, index_dtype=torch.int64, routing="one_expert"),
        Case(2, 256, 4, 40, routing="same_expert"),
        Case(4, 512, 2, 64, data="normal"),
        Case(2, 256, 4, 48, token_dtype=FP8, data="normal", seed=9),
        Case(4, 256, 2, 256, seed=11),  # many CTAs
        Case(4, 256, 2, 256, seed=12, max_ctas=2),
        Case(2, 128, 4, 40, slack=-5, seed=13),  # rows dropped
        Case(2, 256, 2, 40, token_dtype=FP8, index_dtype=torch.int64, routing="one_expert", slack=-3, seed=14),
    ]
    return out


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--seeds", type=int, default=3, help="seeds of the random-routing cases")
    parser.add_argument("--replays", type=int, default=3, help="replays of each CUDA graph")
    parser.add_argument(
        "--case", action="append", default=[], metavar="WHICH",
        help="run only the listed cases WHICH names: an index (--list), or else part of a name (repeatable); "
             "each keeps the inputs it has in the full run; the graph, report and refusal cases are left out",
    )
    parser.add_argument("--list", action="store_true", help="print the listed cases' indices and names, and exit")
    args = parser.parse_args()
    listed = list(enumerate(cases(args.seeds)))  # the index is the case's salt: its inputs
    if args.list:
        for salt, c in listed:
            print(f"{salt:3} {c.name()}")
        return 0
    if args.case:
        def named(salt: int, c: Case) -> bool:
            return any(w == str(salt) if w.isdigit() else w in c.name() for w in args.case)

        chosen = [(salt, c) for salt, c in listed if named(salt, c)]
        if not chosen:
            parser.error(f"--case {args.case} names none of the {len(listed)} cases (--list shows them)")
        listed = chosen
    rank, size, device = start(args.device)
    t = Test(rank, size, device)
    if rank == 0:
        log(f"gpucomm_torch MoE test: {size} ranks on {device} ({torch.cuda.get_device_name(device)}), "
            f"torch {torch.__version__} (CUDA {torch.version.cuda}), gloo for the reference")
    t0 = time.perf_counter()
    comm = gpucomm_torch.Communicator.from_process_group(device)
    for salt, c in listed:
        t.case(comm, c, salt)
    if args.case:
        comm.close()
        return t.finish(time.perf_counter() - t0)
    t.graph_case(comm, Case(3, 256, 4, 64, seed=20), args.replays)
    t.graph_case(comm, Case(2, 384, 2, 48, token_dtype=FP8, index_dtype=torch.int64, seed=30), args.replays)
    t.device_errors(comm)
    t.refusals(comm)
    comm.close()
    t.refuses("moe_plan after close()", lambda: comm.moe_plan(experts_per_rank=1, hidden=128, top_k=1, max_tokens=1,
                                                               max_recv_rows=1), RuntimeError, "closed")
    return t.finish(time.perf_counter() - t0)


if __name__ == "__main__":
    sys.exit(main())
