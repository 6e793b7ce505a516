#!/usr/bin/env python3
"""P2PCopy's compile-time choices, checked in the PTX of tests/ptx/p2p_copy_paths.cu (no GPU):

    check_p2p_copy_ptx.py --nvcc NVCC --include DIR

  * the L2 prefetch (cp.async.bulk.prefetch.L2) is in a staged put of a policy with PrefetchAhead
    > 0, and in no other kernel (not the default policy's put, not a get);
  * with GPUCOMM_DEBUG=1 the unstaged-copy note (a call of detail::note_unstaged_p2p_copy) is in
    the put and the get with a plain group, and not in those through without_staging nor in the
    staged ones; with GPUCOMM_DEBUG=0 it is in no kernel.
Exits 1 with what differs.
"""
import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("p2p_copy_paths.cu")
KERNELS = ["staged_default", "staged_prefetch", "staged_prefetch_get", "plain_put", "plain_get", "chosen_put",
           "chosen_get"]


def entries(ptx):
    """{kernel name: its PTX body}, for the extern "C" kernels."""
    out = {}
    for m in re.finditer(r"^\.visible \.entry (\w+)\(", ptx, re.M):
        end = ptx.find("\n}", m.end())
        out[m.group(1)] = ptx[m.end():end]
    return out


def ptx_of(nvcc, include, debug, work):
    out = Path(work) / f"paths-{debug}.ptx"
    cmd = [nvcc, "-std=c++20", "-arch=sm_90", "--ptx", f"-DGPUCOMM_DEBUG={debug}", "-I", include, str(SOURCE), "-o",
           str(out)]
    subprocess.run(cmd, check=True)
    return entries(out.read_text())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nvcc", default="nvcc")
    ap.add_argument("--include", required=True)
    a = ap.parse_args()
    problems = []
    with tempfile.TemporaryDirectory() as work:
        for debug in (1, 0):
            kernels = ptx_of(a.nvcc, a.include, debug, work)
            missing = [k for k in KERNELS if k not in kernels]
            if missing:
                problems.append(f"GPUCOMM_DEBUG={debug}: no PTX entry for {missing}")
                continue
            for k in KERNELS:
                prefetch = "cp.async.bulk.prefetch.L2" in kernels[k]
                note = re.search(r"call[^;]*note_unstaged_p2p_copy", kernels[k], re.S) is not None
                want_prefetch = k == "staged_prefetch"
                want_note = debug == 1 and k in ("plain_put", "plain_get")
                if prefetch != want_prefetch:
                    problems.append(f"GPUCOMM_DEBUG={debug} {k}: L2 prefetch {'present' if prefetch else 'absent'}")
                if note != want_note:
                    problems.append(f"GPUCOMM_DEBUG={debug} {k}: unstaged note {'called' if note else 'not called'}")
    for p in problems:
        print(p)
    print("ok" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
