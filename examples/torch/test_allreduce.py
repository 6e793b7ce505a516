"""Test of gpucomm's all-reduce for torch tensors (gpucomm_torch.Communicator), run by every rank:

    python3 -m torch.distributed.run --standalone --nproc_per_node=2 examples/torch/test_allreduce.py

(run.sh does this, with both ranks on GPU 0 under MPS). torch.distributed runs on gloo (NCCL refuses
two ranks on one GPU); gpucomm is bootstrapped through its store. Checks, on every rank:

- every dtype gpucomm_torch takes, sizes 1, 7, 4097, 65537 and 1048577 (~1M), in place and out of
  place: each rank makes its own inputs, the inputs are all-gathered with gloo on the CPU and the
  reference summed in rank order in float64 (int64 for integers, wrapped to the dtype's width);
  - "exact" data (small integers, which every dtype holds and sums without rounding): bit-exact;
  - "random" data (normal floats; int8, uint8, int32 over their whole range, so sums wrap; int64 up
    to 2^62 / size): integers exact,
    floats within  size x eps(dtype) x sum over ranks of |x|  per element (eps: 2^-10 float16,
    2^-7 bfloat16, 2^-23 float32, 2^-52 float64), which covers the size - 1 additions of the float
    accumulator and the final rounding;
  - the output is poisoned first (NaN, or a sentinel for integers), a guard of poisoned elements
    behind it must stay untouched, an out-of-place input must stay unchanged, and every rank's result
    must be bitwise the same;
- a tensor at an odd element offset (unaligned data pointer);
- 100 calls back to back without synchronising (sizes and dtypes changing, fresh inputs each), each
  result checked: the workspace's round counters carry over from call to call;
- a second communicator at the same time (4 CTAs per all-reduce, 4 KiB blocks: many rounds);
- refusals: a non-contiguous tensor, a CPU tensor, an unsupported dtype, a mismatched out, a
  communicator of 0 parts or 0-byte blocks.

Prints one line per case (rank 0) and a PASS/FAIL total; exits 1 if any rank saw a failure.
"""

from __future__ import annotations

import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpucomm_torch  # noqa: E402  (after the path is set)
from harness import Harness, arguments, log, start  # noqa: E402

EPS = {
    torch.float16: 2.0**-10,
    torch.bfloat16: 2.0**-7,
    torch.float32: 2.0**-23,
    torch.float64: 2.0**-52,
}
FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
INTS = (torch.int32, torch.int64, torch.int8, torch.uint8)
# An integer view of each dtype's bits, for the bitwise comparison across ranks.
BITS = {
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float64: torch.int64,
    torch.int32: torch.int32,
    torch.int64: torch.int64,
    torch.int8: torch.int8,
    torch.uint8: torch.uint8,
}
GUARD = 67  # poisoned elements behind every output
# The largest |integer| whose sums a dtype holds exactly ("exact" data: at most this over all ranks).
EXACT_LIMIT = {torch.bfloat16: 256, torch.float16: 2048, torch.int8: 127, torch.uint8: 255}


class Test(Harness):
    # ---- helpers -------------------------------------------------------------------------------

    def make_input(self, dtype: torch.dtype, n: int, kind: str, seed: int) -> torch.Tensor:
        """This rank's input on the CPU: different on every rank and every case."""
        g = torch.Generator().manual_seed(1000003 * seed + 7919 * self.rank + 17)
        if kind == "exact":  # small integers whose sum over the ranks every dtype holds exactly
            limit = EXACT_LIMIT.get(dtype, 1000) // self.size
            lo = 0 if dtype == torch.uint8 else -limit
            return torch.randint(lo, limit + 1, (n,), generator=g, dtype=torch.int64).to(dtype)
        if dtype in FLOATS:
            scale = 4.0 if dtype in (torch.float16, torch.bfloat16) else 1000.0
            return (torch.randn(n, generator=g, dtype=torch.float64) * scale).to(dtype)
        if dtype == torch.int64:  # large, but no int64 overflow in the reference's sum
            bound = 2**62 // self.size
            return torch.randint(-bound, bound, (n,), generator=g, dtype=torch.int64)
        info = torch.iinfo(dtype)  # the whole range: sums wrap, as gpucomm's integer sums do
        return torch.randint(info.min, info.max + 1, (n,), generator=g, dtype=torch.int64).to(dtype)

    @staticmethod
    def poison(dtype: torch.dtype):
        return float("nan") if dtype in FLOATS else (77 if dtype == torch.uint8 else -77)

    def reference(self, inputs: list[torch.Tensor], dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """The sum in rank order (float64, or int64 wrapped to dtype's width) and sum of |x|."""
        if dtype in FLOATS:
            acc = torch.zeros_like(inputs[0], dtype=torch.float64)
            mag = torch.zeros_like(acc)
            for x in inputs:
                acc += x.to(torch.float64)
                mag += x.to(torch.float64).abs()
            return acc, mag
        acc = torch.zeros_like(inputs[0], dtype=torch.int64)
        for x in inputs:
            acc += x.to(torch.int64)  # int64 inputs are below 2^62 / size: no overflow here
        info = torch.iinfo(dtype)
        if dtype != torch.int64:
            span = info.max - info.min + 1
            acc = torch.remainder(acc - info.min, span) + info.min
        return acc, acc

    def compare(self, got: torch.Tensor, ref: torch.Tensor, mag: torch.Tensor, dtype: torch.dtype, exact: bool):
        """(ok, detail) for got (CPU, dtype) against the reference."""
        if dtype in FLOATS:
            g = got.to(torch.float64)
            nan = int(torch.isnan(g).sum())
            if nan:
                return False, f"{nan} element(s) NaN (poison left: not written?), first at {int(torch.isnan(g).nonzero()[0])}"
            err = (g - ref).abs()
            tol = torch.zeros_like(mag) if exact else mag * EPS[dtype] * self.size
            bad = err > tol
            worst = float(err.max()) if err.numel() else 0.0
            if bool(bad.any()):
                i = int(bad.nonzero()[0])
                return False, (
                    f"{int(bad.sum())} element(s) off; first [{i}]: got {float(g[i])!r}, "
                    f"expected {float(ref[i])!r} (tolerance {float(tol[i]):.3g})"
                )
            return True, ("exact" if worst == 0.0 else f"max|err| {worst:.3g}")
        bad = got.to(torch.int64) != ref
        if bool(bad.any()):
            i = int(bad.nonzero()[0])
            return False, f"{int(bad.sum())} element(s) off; first [{i}]: got {int(got[i])}, expected {int(ref[i])}"
        return True, "exact"

    # ---- cases -----------------------------------------------------------------------------------

    def case(self, comm, dtype: torch.dtype, n: int, kind: str, inplace: bool, seed: int, offset: int = 0) -> None:
        where = "in place" if inplace else "out of place"
        name = f"{str(dtype).replace('torch.', ''):8} n={n:<8} {kind:6} {where}" + (f" offset {offset}" if offset else "")
        ok, detail, seconds = True, "", None
        mine = torch.zeros(n, dtype=torch.int64)  # this rank's result bits, for the bitwise comparison
        try:
            x_cpu = self.make_input(dtype, n, kind, seed)
            inputs = self.gather(x_cpu.to(torch.float64) if dtype in FLOATS else x_cpu.to(torch.int64))
            ref, mag = self.reference(inputs, dtype)
            poison = self.poison(dtype)
            # The tensor in the middle of a poisoned buffer: `offset` elements before it, GUARD after.
            src_buf = torch.full((offset + n + GUARD,), poison, dtype=dtype, device=self.device)
            src = src_buf[offset : offset + n]
            src.copy_(x_cpu.to(self.device))
            if inplace:
                out_buf, out = src_buf, src
            else:
                out_buf = torch.full((offset + n + GUARD,), poison, dtype=dtype, device=self.device)
                out = out_buf[offset : offset + n]
            torch.cuda.synchronize(self.device)
            dist.barrier()  # both ranks start together: the time is the collective's, not the skew
            t0 = time.perf_counter()
            res = comm.all_reduce(src) if inplace else comm.all_reduce(src, out=out)
            torch.cuda.synchronize(self.device)
            seconds = time.perf_counter() - t0
            got = out.cpu()
            mine = got.view(BITS[dtype]).to(torch.int64)
            if res.data_ptr() != out.data_ptr():
                ok, detail = False, "all_reduce returned another tensor than its output"
            else:
                ok, detail = self.compare(got, ref, mag, dtype, exact=(kind == "exact"))
            buf = out_buf.cpu()
            guard_ok = self.untouched(buf[:offset], poison) and self.untouched(buf[offset + n :], poison)
            if ok and not guard_ok:
                ok, detail = False, "elements outside the output were written"
            if ok and not inplace:
                s = src_buf.cpu()
                kept = self.untouched(s[:offset], poison) and self.untouched(s[offset + n :], poison)
                if not (torch.equal(s[offset : offset + n], x_cpu) and kept):
                    ok, detail = False, "the input of an out-of-place all_reduce changed"
        except Exception as e:  # a CUDA error, say: report it; the collectives below still match
            ok, detail = False, f"{type(e).__name__}: {e}"
            traceback.print_exc()
        # Every rank's result is bitwise the same (gathered on every rank, whatever happened above, so
        # that the ranks' gloo calls stay matched).
        try:
            others = self.gather(mine)
            if ok and not all(torch.equal(mine, other) for other in others):
                ok, detail = False, "the ranks' results differ bitwise"
        except Exception as e:
            ok, detail = False, f"gathering the results failed: {type(e).__name__}: {e}"
        self.verdict(name, ok, detail, seconds)

    @staticmethod
    def untouched(t: torch.Tensor, poison) -> bool:
        if t.numel() == 0:
            return True
        if isinstance(poison, float):
            return bool(torch.isnan(t.to(torch.float64)).all())
        return bool((t.to(torch.int64) == poison).all())

    def repeated(self, comm, calls: int) -> None:
        """`calls` all-reduces back to back, no host synchronisation between them, then every result
        checked: the rounds of one call follow those of the last on the same workspace."""
        shapes = [(torch.float32, 4099), (torch.float16, 1), (torch.int32, 65536 + 3), (torch.bfloat16, 777)]
        ok, detail = True, f"{calls} calls"
        try:
            outs = []
            torch.cuda.synchronize(self.device)
            t0 = time.perf_counter()
            for i in range(calls):
                dtype, n = shapes[i % len(shapes)]
                idx = torch.arange(n, device=self.device, dtype=torch.int64)
                # Small integers, exact in every dtype: (rank + 1) * (i % 5 + 1) + idx % 13.
                x = ((self.rank + 1) * (i % 5 + 1) + idx % 13).to(dtype)
                outs.append((i, dtype, n, comm.all_reduce(x)))
            torch.cuda.synchronize(self.device)
            seconds = time.perf_counter() - t0
            ranks_sum = self.size * (self.size + 1) // 2
            for i, dtype, n, got in outs:
                idx = torch.arange(n, device=self.device, dtype=torch.int64)
                want = (ranks_sum * (i % 5 + 1) + self.size * (idx % 13)).to(dtype)
                if not torch.equal(got, want):
                    bad = int((got != want).sum())
                    ok, detail = False, f"call {i} ({dtype}, n={n}): {bad} element(s) wrong"
                    break
            if ok:
                detail = f"{calls} calls, every result exact ({seconds / calls * 1e6:.1f} us per call incl. launch)"
        except Exception as e:
            ok, detail, seconds = False, f"{type(e).__name__}: {e}", None
            traceback.print_exc()
        self.verdict(f"repeated: {calls} calls back to back, no sync", ok, detail)

    def refusals(self, comm) -> None:
        """Local argument checks (no rank waits for another): each must raise the stated error."""
        d = self.device
        x = torch.zeros(16, device=d)
        cases = [
            ("non-contiguous", lambda: comm.all_reduce(torch.zeros(8, 8, device=d).t()), ValueError, "contiguous"),
            ("CPU tensor", lambda: comm.all_reduce(torch.zeros(8)), ValueError, "cpu"),
            ("unsupported dtype", lambda: comm.all_reduce(torch.zeros(8, device=d, dtype=torch.complex64)), TypeError, "dtype"),
            ("bool dtype", lambda: comm.all_reduce(torch.zeros(8, device=d, dtype=torch.bool)), TypeError, "dtype"),
            ("out of another dtype", lambda: comm.all_reduce(x, out=torch.zeros(16, device=d, dtype=torch.float16)), TypeError, "dtype"),
            ("out of another size", lambda: comm.all_reduce(x, out=torch.zeros(15, device=d)), ValueError, "elements"),
            ("not a tensor", lambda: comm.all_reduce([1.0, 2.0]), TypeError, "tensor"),
            ("parts=0", lambda: gpucomm_torch.Communicator.from_process_group(d, parts=0), ValueError, "parts"),
            ("block_bytes=0", lambda: gpucomm_torch.Communicator.from_process_group(d, block_bytes=0), ValueError, "block_bytes"),
        ]
        for what, call, error, word in cases:
            self.refuses(what, call, error, word)


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--sizes", default="1,7,4097,65537,1048577", help="element counts (comma-separated)")
    parser.add_argument("--calls", type=int, default=100, help="calls of the back-to-back case")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]

    rank, size, device = start(args.device)
    t = Test(rank, size, device)
    if rank == 0:
        log(
            f"gpucomm_torch test: {size} ranks on {device} ({torch.cuda.get_device_name(device)}), "
            f"torch {torch.__version__} (CUDA {torch.version.cuda}), gloo for the reference"
        )

    t0 = time.perf_counter()
    comm = gpucomm_torch.Communicator.from_process_group(device)
    if rank == 0:
        log(f"communicator: {time.perf_counter() - t0:.2f} s to set up (block {comm._impl.block_bytes} B, {comm._impl.parts} parts)")
    seed = 0
    for dtype in FLOATS + INTS:
        for n in sizes:
            for kind in ("exact", "random"):
                for inplace in (False, True):
                    seed += 1
                    t.case(comm, dtype, n, kind, inplace, seed)
    for dtype in (torch.float16, torch.float32):  # an unaligned data pointer (an odd element offset)
        seed += 1
        t.case(comm, dtype, 65537, "random", False, seed, offset=1)
    t.repeated(comm, args.calls)

    # A second communicator while the first lives: 4 CTAs per all-reduce and 4 KiB blocks.
    try:
        wide = gpucomm_torch.Communicator.from_process_group(device, block_bytes=4096, parts=4)
    except Exception as e:
        traceback.print_exc()
        t.verdict("second communicator (4 parts, 4 KiB blocks)", False, f"{type(e).__name__}: {e}")
        wide = None
    if wide is not None:
        for dtype, n in ((torch.float32, 1048577), (torch.bfloat16, 65537), (torch.int64, 4097), (torch.float16, 3)):
            seed += 1
            t.case(wide, dtype, n, "random", False, seed)
        t.case(comm, torch.float32, 4097, "random", True, seed + 1)  # the first one still works
        t.repeated(wide, 20)
        wide.close()
    t.refusals(comm)
    comm.close()
    t.refuses("all_reduce after close()", lambda: comm.all_reduce(torch.zeros(4, device=device)), RuntimeError, "closed")
    return t.finish(time.perf_counter() - t0)


if __name__ == "__main__":
    sys.exit(main())
