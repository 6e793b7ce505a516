"""gpucomm all-reduce for torch tensors: the Python side of the PyTorch example.

    import torch.distributed as dist
    import gpucomm_torch

    dist.init_process_group("gloo")                      # any backend: only its store is used
    comm = gpucomm_torch.Communicator.from_process_group(device=torch.device("cuda", 0))
    comm.all_reduce(x)                                    # x += every other rank's x, in place
    y = comm.all_reduce(x, out=torch.empty_like(x))       # or out of place
    comm.close()                                          # collective, like the constructor

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

__all__ = ["Communicator", "StoreBootstrap", "SUPPORTED_DTYPES"]

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
    sends each other rank per round of the collective (more: fewer rounds, more memory, 2 x size x
    block_bytes x parts per rank). parts: CTAs that share each all_reduce. heap_bytes: gpucomm's
    symmetric heap per rank (0: its default). Construction and close() are collective: every rank,
    in the same order.
    """

    def __init__(
        self,
        store: dist.Store,
        rank: int,
        size: int,
        device: torch.device | int | str,
        *,
        block_bytes: int = 1 << 20,
        parts: int = 1,
        heap_bytes: int = 0,
    ):
        device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
        if device.type != "cuda":
            raise ValueError(f"gpucomm_torch.Communicator: device {device} is not a CUDA device")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if not 0 <= rank < size:
            raise ValueError(f"gpucomm_torch.Communicator: rank {rank} of {size}")
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
                block_bytes,
                parts,
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

    def close(self) -> None:
        """Frees gpucomm's world and workspace (collective: every rank). Idempotent."""
        self._impl.close()

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check(self, t: torch.Tensor, name: str) -> None:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"gpucomm all_reduce: {name} is a {type(t).__name__}, not a torch.Tensor")
        if t.device != self.device:
            raise ValueError(f"gpucomm all_reduce: {name} is on {t.device}, the communicator on {self.device}")
        if t.dtype not in SUPPORTED_DTYPES:
            names = ", ".join(str(d).replace("torch.", "") for d in SUPPORTED_DTYPES)
            raise TypeError(f"gpucomm all_reduce: {name} has dtype {t.dtype}; supported: {names}")
        if not t.is_contiguous():
            raise ValueError(
                f"gpucomm all_reduce: {name} is not contiguous (shape {tuple(t.shape)}, stride {t.stride()}); "
                "pass t.contiguous() and copy the result back"
            )
