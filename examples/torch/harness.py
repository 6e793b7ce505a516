"""What the PyTorch example's tests share: the process group, and a verdict per case that every rank
takes part in (a case passes if it passed on every rank; rank 0 prints one line per case).

    args = harness.arguments(__doc__).parse_args()      # --device, and the test's own options
    rank, size, device = harness.start(args.device)     # gloo process group, the rank's GPU
    h = harness.Harness(rank, size, device)
    h.verdict("some case", ok, "detail")                 # collective
    h.refuses("CPU tensor", lambda: comm.f(torch.zeros(8)), ValueError, "cpu")
    sys.exit(h.finish(seconds))                           # PASS/FAIL total; 0 or 1

torch.distributed runs on gloo (NCCL refuses two ranks on one GPU): it carries the references'
inputs and the verdicts, never the data under test.
"""

from __future__ import annotations

import argparse
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def log(msg: str) -> None:
    print(msg, flush=True)


def arguments(doc: str) -> argparse.ArgumentParser:
    """A test's command line: its docstring's first line, and --device (the tests' own options follow)."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument(
        "--device",
        default=os.environ.get("GPUCOMM_TORCH_DEVICE", "0"),
        help="GPU of every rank ('local': LOCAL_RANK's); default 0: all ranks share GPU 0",
    )
    return parser


def start(device_arg: str) -> tuple[int, int, torch.device]:
    """The gloo process group and this rank's GPU: `device_arg` names one GPU for every rank, or is
    'local' (LOCAL_RANK's)."""
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    index = int(os.environ.get("LOCAL_RANK", "0")) if device_arg == "local" else int(device_arg)
    device = torch.device("cuda", index)
    torch.cuda.set_device(device)
    # A rank that fails to arrive makes the others' gloo calls fail after this long, not hang.
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    return rank, size, device


class Harness:
    def __init__(self, rank: int, size: int, device: torch.device):
        self.rank, self.size, self.device = rank, size, device
        self.results: list[tuple[str, bool]] = []

    def gather(self, t: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's CPU tensor t (same shape everywhere), in rank order, over gloo."""
        out = [torch.empty_like(t) for _ in range(self.size)]
        dist.all_gather(out, t.contiguous())
        return out

    def verdict(self, name: str, ok: bool, detail: str, seconds: float | None = None) -> bool:
        """Collective: the case passes if it passed on every rank; rank 0 prints one line."""
        flags = self.gather(torch.tensor([1 if ok else 0], dtype=torch.int64))
        everywhere = all(int(f.item()) for f in flags)
        details = [None] * self.size
        dist.all_gather_object(details, detail)
        if not ok:
            log(f"[rank {self.rank}] FAIL {name}: {detail}")
        if self.rank == 0:
            bad = [r for r, f in enumerate(flags) if not int(f.item())]
            timing = f"  {seconds * 1e3:8.3f} ms" if seconds is not None else ""
            status = "PASS" if everywhere else f"FAIL (ranks {bad})"
            log(f"{status:5} {name:58} {details[0]}{timing}")
        self.results.append((name, everywhere))
        return everywhere

    def refuses(self, what: str, call, error: type, word: str) -> bool:
        """Collective: `call` raises `error` with `word` in its message (case-insensitive) on every rank."""
        try:
            call()
            ok, detail = False, f"no error (expected {error.__name__})"
        except error as e:
            ok = word.lower() in str(e).lower()
            detail = f"{error.__name__}: {e}" if ok else f"{error.__name__} without '{word}': {e}"
        except Exception as e:
            ok, detail = False, f"{type(e).__name__} instead of {error.__name__}: {e}"
        return self.verdict(f"refuses: {what}", ok, detail[:90])

    def finish(self, seconds: float) -> int:
        """Prints the PASS/FAIL total (rank 0), leaves the process group; 0 if every case passed."""
        failed = [name for name, ok in self.results if not ok]
        if self.rank == 0:
            log(f"{'PASS' if not failed else 'FAIL'}: {len(self.results) - len(failed)} of {len(self.results)} cases "
                f"passed on every rank ({seconds:.1f} s)")
            for name in failed:
                log(f"  failed: {name}")
        dist.barrier()
        dist.destroy_process_group()
        return 0 if not failed else 1
