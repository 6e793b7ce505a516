"""gpucomm all-reduce and MoE dispatch/combine for torch tensors: the Python side of the PyTorch example.

    import torch.distributed as dist
    import gpucomm_torch

    dist.init_process_group("gloo")                      # any backend: only its store is used
    comm = gpucomm_torch.Communicator.from_process_group(device=torch.device("cuda", 0))
    comm.all_reduce(x)                                    # x += every other rank's x, in place
    y = comm.all_reduce(x, out=torch.empty_like(x))       # or out of place

    plan = comm.moe_plan(experts_per_rank=4, hidden=1024, top_k=2, max_tokens=64, max_recv_rows=512)
    d = plan.dispatch(tokens, topk_ids, topk_weights)     # d.rows, d.counts, d.sources, ..., d.handle
    y = plan.combine(experts(d.rows, d.counts), d.handle) # [T, hidden] bf16
    comm.synchronize()                                    # raises what gpucomm counted on the device
    comm.close()                                          # collective, like the constructor (plans too)

Every rank is one gpucomm PE (a process per PE; several may share a GPU, and then their kernels
need the CUDA MPS daemon to run at the same time). The world is bootstrapped with
gpucomm::callback_bootstrap, whose allgather and barrier go through a c10d Store (set/get/wait under
a prefix of this communicator's own, a fresh key per call). all_reduce launches gpucomm's
allreduce (sum, NVLinkStore) on the tensor's memory directly, on torch's current CUDA stream of
the communicator's device: no staging copy, since gpucomm's load/store collectives move data
through their symmetric workspace and take any device memory as source and destination.

The compiled part (_gpucomm_torch, built by build.py) is looked for in $GPUCOMM_TORCH_BUILD, else in
build/ next to this file.
"""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path
from typing import NamedTuple

import torch
import torch.distributed as dist

_build = os.environ.get("GPUCOMM_TORCH_BUILD") or str(Path(__file__).resolve().parent / "build")
if _build not in sys.path:
    sys.path.insert(0, _build)
try:
    import _gpucomm_torch as _ext
except ImportError as e:  # pragma: no cover - a message for people who forgot to build
    raise ImportError(
        f"gpucomm_torch: the compiled extension _gpucomm_torch is not in {_build} ({e}); "
        "build it with `python3 examples/torch/build.py` (or run examples/torch/run.sh)"
    ) from e

__all__ = ["Communicator", "StoreBootstrap", "SUPPORTED_DTYPES", "MoEPlan", "MoERecv", "MoEDispatch", "MoEHandle"]

SUPPORTED_DTYPES = (
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int32,
    torch.int64,
    torch.int8,
    torch.uint8,
)

def _check_tensor(op: str, t, name: str, device: torch.device) -> None:
    """t is a contiguous torch.Tensor on `device` (TypeError, ValueError otherwise)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} is a {type(t).__name__}, not a torch.Tensor")
    if t.device != device:
        raise ValueError(f"{op}: {name} is on {t.device}, the communicator on {device}")
    if not t.is_contiguous():
        raise ValueError(
            f"{op}: {name} is not contiguous (shape {tuple(t.shape)}, stride {t.stride()}); "
            "pass t.contiguous() and copy the result back"
        )


MOE_TOKEN_DTYPES = (torch.bfloat16, torch.float8_e4m3fn)
MOE_INDEX_DTYPES = (torch.int32, torch.int64)
MOE_SCALE_BLOCK = 128  # fp8 elements per float scale

# Communicators made in this process, in order: every rank makes them in the same order, so the
# n-th communicator of every rank has the same store prefix.
_serial = itertools.count()


class StoreBootstrap:
    """gpucomm::callback_bootstrap's allgather and barrier over a c10d Store.

    Every call uses keys of its own (`<call number>/<rank>` under this bootstrap's prefix), so calls
    never see each other's values; the last rank to read a call's keys deletes them where the store
    can delete keys.
    """

    def __init__(self, store: dist.Store, rank: int, size: int):
        self.store = store
        self.rank = rank
        self.size = size
        self.calls = 0

    def allgather(self, data: bytes) -> bytes:
        self.calls += 1
        call = f"c{self.calls}"
        keys = [f"{call}/{r}" for r in range(self.size)]
        self.store.set(keys[self.rank], data)
        self.store.wait(keys)  # raises after the store's timeout when a rank never comes
        parts = [data if r == self.rank else bytes(self.store.get(k)) for r, k in enumerate(keys)]
        if self.store.add(f"{call}/read", 1) == self.size:  # every rank has read: tidy up
            for k in keys + [f"{call}/read"]:
                try:
                    self.store.delete_key(k)
                except Exception:  # a store without delete (the keys are unique anyway)
                    break
        return b"".join(parts)

    def barrier(self) -> None:
        self.allgather(b"\x01")


class Communicator:
    """A gpucomm PE in this process and the world team's all-reduce workspace.

    store, rank, size: a c10d Store that every rank shares, this process's rank and the rank count.
    device: this process's GPU (several ranks may name the same one). block_bytes: bytes each rank
    sends each other rank per step of a collective (more: fewer steps, more memory; the workspace
    takes about 8 x size x block_bytes x parts per rank). parts: the most CTAs that share each
    collective (gpucomm's launchers choose how many of them a call runs, by its size).
    block_bytes=None and parts=None take gpucomm's defaults (gpucomm::workspace_options: 16 KiB and
    64 parts), which the launchers' automatic choice is tuned for. heap_bytes: gpucomm's symmetric
    heap per rank (0: its default). Construction and close() are collective: every rank, in the same
    order.
    """

    def __init__(
        self,
        store: dist.Store,
        rank: int,
        size: int,
        device: torch.device | int | str,
        *,
        block_bytes: int | None = None,
        parts: int | None = None,
        heap_bytes: int = 0,
    ):
        device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
        if device.type != "cuda":
            raise ValueError(f"gpucomm_torch.Communicator: device {device} is not a CUDA device")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if not 0 <= rank < size:
            raise ValueError(f"gpucomm_torch.Communicator: rank {rank} of {size}")
        for name, value in (("block_bytes", block_bytes), ("parts", parts)):
            if value is not None and value < 1:
                raise ValueError(f"gpucomm_torch.Communicator: {name}={value}; give at least 1, or None for the default")
        self.device = device
        prefix = f"gpucomm_torch/{next(_serial)}/"
        self._bootstrap = StoreBootstrap(dist.PrefixStore(prefix, store), rank, size)
        with torch.cuda.device(device):
            self._impl = _ext.Communicator(
                rank,
                size,
                device.index,
                self._bootstrap.allgather,
                self._bootstrap.barrier,
                0 if block_bytes is None else block_bytes,
                0 if parts is None else parts,
                heap_bytes,
            )

    @classmethod
    def from_process_group(cls, device: torch.device | int | str, **options) -> "Communicator":
        """A communicator over the default process group's ranks, bootstrapped through its store."""
        if not dist.is_initialized():
            raise RuntimeError("gpucomm_torch: call torch.distributed.init_process_group first")
        store = dist.distributed_c10d._get_default_store()
        return cls(store, dist.get_rank(), dist.get_world_size(), device, **options)

    @property
    def rank(self) -> int:
        return self._impl.rank

    @property
    def size(self) -> int:
        return self._impl.size

    @property
    def closed(self) -> bool:
        return self._impl.closed

    def all_reduce(self, tensor: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """out = the sum over ranks of `tensor` (out=None: in place, into `tensor`); returns out.

        Launched on torch's current CUDA stream of the communicator's device and ordered with the
        work on it like any torch op. float16 and bfloat16 accumulate in float32 (one rounding at
        the end); integers wrap. Every rank calls with the same numel and dtype, in the same order.
        """
        self._check(tensor, "input")
        if out is None:
            out = tensor
        else:
            self._check(out, "out")
            if out.dtype != tensor.dtype:
                raise TypeError(f"gpucomm all_reduce: out has dtype {out.dtype}, the input {tensor.dtype}")
            if out.numel() != tensor.numel():
                raise ValueError(f"gpucomm all_reduce: out has {out.numel()} elements, the input {tensor.numel()}")
        stream = torch.cuda.current_stream(self.device).cuda_stream
        self._impl.all_reduce(out, tensor, stream)
        return out

    def moe_plan(
        self,
        *,
        experts_per_rank: int,
        hidden: int,
        top_k: int,
        max_tokens: int,
        max_recv_rows: int,
        token_dtype: torch.dtype = torch.bfloat16,
        index_dtype: torch.dtype = torch.int32,
        max_ctas: int = 0,
    ) -> "MoEPlan":
        """An expert-parallel dispatch/combine plan over every rank (gpucomm::moe_plan; collective).

        experts_per_rank: local experts of each rank (expert x lives at rank x // experts_per_rank).
        hidden: elements per token, a multiple of 128. top_k: experts per token, 1 to 8.
        max_tokens: the most tokens a rank dispatches in one call. max_recv_rows: the most (token,
        expert) rows a rank receives in one call (the rest are dropped and reported by synchronize).
        token_dtype: what travels, torch.bfloat16 or torch.float8_e4m3fn (e4m3 with a float scale per
        128 elements, cast by dispatch from bf16 tokens). index_dtype: the top-k ids' dtype,
        torch.int32 or torch.int64. max_ctas: the most CTAs a call runs (an SM budget; 0: gpucomm's
        choice). Every rank calls it in the same order with the same arguments; a rank whose
        arguments differ or are refused makes every rank raise, naming it.
        """
        op = "gpucomm moe_plan"
        if self.closed:
            raise RuntimeError(f"{op}: the communicator is closed")
        numbers = dict(experts_per_rank=experts_per_rank, hidden=hidden, top_k=top_k, max_tokens=max_tokens,
                       max_recv_rows=max_recv_rows, max_ctas=max_ctas)
        problem = None
        try:
            for name, v in numbers.items():
                if not isinstance(v, int) or isinstance(v, bool):
                    raise TypeError(f"{name} is a {type(v).__name__}, not an int")
                if not -(2**31) <= v < 2**31:
                    raise ValueError(f"{name} {v} does not fit in 32 bits")
            if token_dtype not in MOE_TOKEN_DTYPES:
                raise TypeError(f"token_dtype {token_dtype} (torch.bfloat16 or torch.float8_e4m3fn)")
            if index_dtype not in MOE_INDEX_DTYPES:
                raise TypeError(f"index_dtype {index_dtype} (torch.int32 or torch.int64)")
        except (TypeError, ValueError) as e:
            problem = e
        self._agree(op, problem)
        # The shape's limits and its agreement across ranks: gpucomm's, on every rank (RuntimeError).
        with torch.cuda.device(self.device):
            impl = _ext.MoEPlan(
                self._impl,
                experts_per_rank,
                hidden,
                top_k,
                token_dtype == torch.float8_e4m3fn,
                index_dtype == torch.int64,
                max_tokens,
                max_recv_rows,
                max_ctas,
            )
        return MoEPlan(self, impl, token_dtype=token_dtype, index_dtype=index_dtype, **numbers)

    def synchronize(self) -> None:
        """Waits for this process's work on the communicator's GPU (every stream), then raises
        RuntimeError naming what gpucomm counted on the device since the last call: MoE rows past a
        plan's max_recv_rows ("received rows past max_recv_rows ... were dropped"), a device token
        count above max_tokens, expert ids outside [-1, experts). Local: each rank reports its own."""
        # The extension returns gpucomm's report as a str ("" when there is nothing); raised here.
        problem = self._impl.synchronize()
        if problem:
            raise RuntimeError(problem)

    def close(self) -> None:
        """Closes the MoE plans still open, then frees gpucomm's world and workspace (collective:
        every rank). Idempotent."""
        self._impl.close()

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check(self, t: torch.Tensor, name: str) -> None:
        _check_tensor("gpucomm all_reduce", t, name, self.device)
        if t.dtype not in SUPPORTED_DTYPES:
            names = ", ".join(str(d).replace("torch.", "") for d in SUPPORTED_DTYPES)
            raise TypeError(f"gpucomm all_reduce: {name} has dtype {t.dtype}; supported: {names}")

    def _agree(self, op: str, problem: BaseException | None) -> None:
        """Collective: every rank raises when some rank found a problem in its arguments (the first
        such rank's, named), so that no rank goes on into a collective call the others left."""
        kinds = (ValueError, TypeError)
        code = 0 if problem is None else 2 if isinstance(problem, TypeError) else 1
        text = b"" if problem is None else str(problem).encode()[:254]
        everyone = self._bootstrap.allgather(bytes([code]) + text.ljust(255, b"\0"))
        for r in range(self.size):
            verdict = everyone[256 * r : 256 * (r + 1)]
            if verdict[0]:
                detail = verdict[1:].rstrip(b"\0").decode(errors="replace")
                raise kinds[verdict[0] - 1](f"{op}: rank {r}: {detail}")


# ---- MoE dispatch and combine ----------------------------------------------------------------------


class MoERecv(NamedTuple):
    """What a dispatch writes at this rank, R = max_recv_rows rows of room; the first
    counts.sum() rows are written, expert-major (all rows of local expert 0, then 1, ...; within
    an expert by source rank, then source token, then slot). Rows past that are left as they were."""

    rows: torch.Tensor  # [R, hidden] bfloat16, or float8_e4m3fn: element h is rows[i, h] * scales[i, h // 128]
    scales: torch.Tensor | None  # fp8 plans: [R, hidden // 128] float32; bf16 plans: None
    counts: torch.Tensor  # [experts_per_rank] int32: rows per local expert (kept rows: see synchronize)
    sources: torch.Tensor  # [R, 3] int32: the row's source rank, its token there, its top-k slot
    weights: torch.Tensor  # [R] float32: the row's top-k weight


class MoEHandle:
    """What combine takes from the dispatch it undoes (one per dispatch, used once)."""

    __slots__ = ("plan", "call", "num_tokens")

    def __init__(self, plan: "MoEPlan", call: int, num_tokens: int | None):
        self.plan = plan
        self.call = call
        self.num_tokens = num_tokens  # None: a device count; combine writes max_tokens rows


class MoEDispatch(NamedTuple):
    """A dispatch's outputs (MoERecv's fields) and its handle."""

    rows: torch.Tensor
    scales: torch.Tensor | None
    counts: torch.Tensor
    sources: torch.Tensor
    weights: torch.Tensor
    handle: MoEHandle


class MoEPlan:
    """gpucomm's expert-parallel dispatch and combine over a Communicator's ranks (made by
    Communicator.moe_plan, collectively; close() is collective too, and the communicator closes the
    plans still open when it closes).

    Calls run on torch's current CUDA stream of the communicator's device, without host
    synchronisation, so they can be captured in a CUDA graph and replayed. Every rank calls
    dispatch, then combine, then dispatch, ..., in the same order (the calls of all ranks meet on
    the GPU: a rank that does not call leaves the others' kernels waiting). What only the device
    knows (expert ids outside [-1, experts), rows past max_recv_rows, a device token count above
    max_tokens) is counted there and raised by Communicator.synchronize().
    """

    def __init__(self, comm: Communicator, impl, *, token_dtype: torch.dtype, index_dtype: torch.dtype, **numbers):
        self.comm = comm
        self._impl = impl
        self.device = comm.device
        self.token_dtype = token_dtype
        self.index_dtype = index_dtype
        self.experts_per_rank: int = numbers["experts_per_rank"]
        self.hidden: int = numbers["hidden"]
        self.top_k: int = numbers["top_k"]
        self.max_tokens: int = numbers["max_tokens"]
        self.max_recv_rows: int = numbers["max_recv_rows"]
        self.max_ctas: int = numbers["max_ctas"]
        self._pending: MoEHandle | None = None

    @property
    def experts(self) -> int:
        """Experts of all ranks: ids run from 0 to experts - 1 (-1: a slot routed nowhere)."""
        return self.comm.size * self.experts_per_rank

    @property
    def ctas(self) -> int:
        return self._impl.ctas

    @property
    def workspace_bytes(self) -> int:
        """Symmetric bytes per rank of the plan's workspace (gpucomm/collectives/moe_shape.hpp)."""
        return self._impl.workspace_bytes

    @property
    def closed(self) -> bool:
        return self._impl.closed

    def recv_buffers(self) -> MoERecv:
        """Fresh (uninitialised) buffers for dispatch's out=."""
        r, h, d = self.max_recv_rows, self.hidden, self.device
        fp8 = self.token_dtype == torch.float8_e4m3fn
        return MoERecv(
            rows=torch.empty((r, h), dtype=self.token_dtype, device=d),
            scales=torch.empty((r, h // MOE_SCALE_BLOCK), dtype=torch.float32, device=d) if fp8 else None,
            counts=torch.empty((self.experts_per_rank,), dtype=torch.int32, device=d),
            sources=torch.empty((r, 3), dtype=torch.int32, device=d),
            weights=torch.empty((r,), dtype=torch.float32, device=d),
        )

    def dispatch(
        self,
        tokens: torch.Tensor,
        topk_ids: torch.Tensor,
        topk_weights: torch.Tensor,
        *,
        num_tokens: int | torch.Tensor | None = None,
        out: MoERecv | None = None,
    ) -> MoEDispatch:
        """Sends each token to the ranks of the experts its top-k ids name (once per rank) and returns
        what this rank received for its local experts, and the handle combine takes.

        tokens [T, hidden] bfloat16, topk_ids [T, top_k] (the plan's index_dtype; -1: no expert),
        topk_weights [T, top_k] float32; T <= max_tokens. num_tokens: None (T), an int (the first
        num_tokens rows), or an int32 CUDA tensor of one element read on the device (then the inputs
        hold max_tokens rows; the count may change between CUDA graph replays). out: buffers to write
        into (recv_buffers(), or earlier outputs); None: new ones from torch's allocator.
        """
        op = "gpucomm moe dispatch"
        self._check_open(op)
        if self._pending is not None:
            raise RuntimeError(f"{op}: a second dispatch on the plan before the combine of the first")
        _check_tensor(op, tokens, "tokens", self.device)
        rows = tokens.shape[0] if tokens.dim() == 2 else -1
        self._expect(op, tokens, "tokens", torch.bfloat16, (rows, self.hidden))
        self._expect(op, topk_ids, "topk_ids", self.index_dtype, (rows, self.top_k))
        self._expect(op, topk_weights, "topk_weights", torch.float32, (rows, self.top_k))
        _check_aligned(op, tokens, "tokens")
        count = None
        if num_tokens is None:
            num_tokens = rows
        elif isinstance(num_tokens, torch.Tensor):
            self._expect(op, num_tokens, "num_tokens", torch.int32, tuple(num_tokens.shape))
            if num_tokens.numel() != 1:
                raise ValueError(f"{op}: num_tokens has {num_tokens.numel()} elements, not 1")
            if rows != self.max_tokens:
                raise ValueError(
                    f"{op}: with a device token count the inputs hold max_tokens ({self.max_tokens}) rows, not {rows}"
                )
            count, num_tokens = num_tokens.reshape(1), None
        elif not isinstance(num_tokens, int) or isinstance(num_tokens, bool):
            raise TypeError(f"{op}: num_tokens is a {type(num_tokens).__name__} (None, an int or an int32 tensor)")
        elif not 0 <= num_tokens <= rows:
            raise ValueError(f"{op}: num_tokens {num_tokens} outside [0, {rows}] (the rows given)")
        if num_tokens is not None and num_tokens > self.max_tokens:
            raise ValueError(f"{op}: {num_tokens} tokens, above the plan's max_tokens ({self.max_tokens})")
        recv = self.recv_buffers() if out is None else self._check_recv(op, out)
        stream = torch.cuda.current_stream(self.device).cuda_stream
        call = self._impl.dispatch(
            tokens, topk_ids, topk_weights, 0 if num_tokens is None else num_tokens, count,
            recv.rows, recv.scales, recv.counts, recv.sources, recv.weights, stream,
        )
        self._pending = MoEHandle(self, call, num_tokens)
        return MoEDispatch(*recv, self._pending)

    def combine(self, expert_outputs: torch.Tensor, handle: MoEHandle, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """out[t] = the sum over token t's routed slots of weight x the expert's output row, as
        bfloat16; returns out, [T, hidden] (T of the handle's dispatch; max_tokens rows for a device
        count, of which the first count are written).

        expert_outputs [max_recv_rows, hidden] bfloat16, row i the output for dispatch's row i. Each
        expert rank sums its slots of a token in slot order (float, fused multiply-add) and rounds
        to bfloat16; the token's rank sums those rows in rank order (float) and rounds: the order is
        fixed, so the result is bitwise the same from run to run.
        """
        op = "gpucomm moe combine"
        self._check_open(op)
        if not isinstance(handle, MoEHandle) or handle.plan is not self or handle is not self._pending:
            raise ValueError(f"{op}: the handle is not of this plan's last dispatch, or that dispatch was combined")
        self._expect(op, expert_outputs, "expert_outputs", torch.bfloat16, (self.max_recv_rows, self.hidden))
        _check_aligned(op, expert_outputs, "expert_outputs")
        rows = self.max_tokens if handle.num_tokens is None else handle.num_tokens
        if out is None:
            out = torch.empty((rows, self.hidden), dtype=torch.bfloat16, device=self.device)
        else:
            self._expect(op, out, "out", torch.bfloat16, (rows, self.hidden))
            _check_aligned(op, out, "out")
        stream = torch.cuda.current_stream(self.device).cuda_stream
        self._impl.combine(handle.call, expert_outputs, out, stream)
        self._pending = None
        return out

    def close(self) -> None:
        """Frees the plan's workspace (collective: every rank). Idempotent."""
        self._impl.close()
        self._pending = None

    def __enter__(self) -> "MoEPlan":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_open(self, op: str) -> None:
        if self._impl.closed:
            raise RuntimeError(f"{op}: the plan is closed")

    def _expect(self, op: str, t, name: str, dtype: torch.dtype, shape: tuple) -> None:
        _check_tensor(op, t, name, self.device)
        if t.dtype != dtype:
            raise TypeError(f"{op}: {name} has dtype {t.dtype}, not {dtype}")
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"{op}: {name} has shape {tuple(t.shape)}, not {tuple(shape)}")

    def _check_recv(self, op: str, out) -> MoERecv:
        if not isinstance(out, (MoERecv, MoEDispatch)):
            raise TypeError(f"{op}: out is a {type(out).__name__}, not an MoERecv (plan.recv_buffers())")
        recv = MoERecv(*out[:5])
        r, h = self.max_recv_rows, self.hidden
        self._expect(op, recv.rows, "out.rows", self.token_dtype, (r, h))
        _check_aligned(op, recv.rows, "out.rows")
        if self.token_dtype == torch.float8_e4m3fn:
            self._expect(op, recv.scales, "out.scales", torch.float32, (r, h // MOE_SCALE_BLOCK))
        elif recv.scales is not None:
            raise ValueError(f"{op}: out.scales is for fp8 plans; this plan's tokens are {self.token_dtype}")
        self._expect(op, recv.counts, "out.counts", torch.int32, (self.experts_per_rank,))
        self._expect(op, recv.sources, "out.sources", torch.int32, (r, 3))
        self._expect(op, recv.weights, "out.weights", torch.float32, (r,))
        return recv


def _check_aligned(op: str, t: torch.Tensor, name: str) -> None:
    if t.data_ptr() % 16:
        raise ValueError(f"{op}: {name} is not 16-byte aligned (rows move as 16-byte vectors); pass a fresh tensor")
