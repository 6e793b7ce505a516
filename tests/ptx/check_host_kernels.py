#!/usr/bin/env python3
"""Every kernel that host code names is compiled for the device too (no GPU):

    check_host_kernels.py --nvcc NVCC --include DIR [--source FILE] [--cases N]

Compiles each case of FILE (default tests/ptx/host_kernels.cu, which launches every kind of kernel
gpucomm's host side launches; -DHOST_KERNELS_CASE=1..N, default N 7) on its own and compares the kernel templates whose host-side launch stubs its object
holds (`__wrapper__device_stub_<kernel>`, made wherever host code names a kernel) with the
kernels in its PTX. A kernel named only in code the device pass does not read (the host-pass-only
bodies in detail/*.inl) has a stub and no PTX: launched, it fails as an invalid device function.
Exits 1 naming each such kernel (and its case); also when no case names a kernel at all (the check
would be empty).
"""
import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from sass_compare import demangle, strip_params  # noqa: E402  (c++filt, and a name without its parameters)

SOURCE = Path(__file__).with_name("host_kernels.cu")
STUB = "__wrapper__device_stub_"


def kernel_name(demangled):
    """'void ns::k<int>(int*)' -> 'ns::k<int>': drops the return type and the parameter list."""
    name = strip_params(demangled)
    return name[5:] if name.startswith("void ") else name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nvcc", default="nvcc")
    ap.add_argument("--include", required=True)
    ap.add_argument("--source", default=str(SOURCE))
    ap.add_argument("--cases", type=int, default=7)
    a = ap.parse_args()
    problems = named = 0
    for case in range(1, a.cases + 1):
        stubs, compiled = kernels_of(a, case)
        missing = sorted(stubs - compiled)
        for k in missing:
            print(f"case {case}: named by host code, not compiled for the device: {k}")
        print(f"case {case}: {len(stubs)} kernel(s) named by host code, {len(missing)} missing from the device code")
        problems += len(missing)
        named += len(stubs)
    if named == 0:
        print("no case names a kernel: the check saw nothing")
        return 1
    return 1 if problems else 0


def kernels_of(a, case):
    """(the kernels with host-side stubs, the kernels in the PTX) of one case."""
    with tempfile.TemporaryDirectory() as work:
        obj, ptx = Path(work) / "k.o", Path(work) / "k.ptx"
        common = [a.nvcc, "-std=c++20", "-arch=sm_90", f"-DHOST_KERNELS_CASE={case}", "-I", a.include, a.source]
        subprocess.run(common + ["-c", "-o", str(obj)], check=True)
        subprocess.run(common + ["--ptx", "-o", str(ptx)], check=True)
        symbols = subprocess.run(["nm", "--defined-only", str(obj)], capture_output=True, text=True,
                                 check=True).stdout.split()
        stubs = {kernel_name(d).replace(STUB, "") for d in demangle([s for s in symbols if STUB in s]).values()}
        entries = re.findall(r"^\.(?:visible|weak) \.entry (\w+)\(", ptx.read_text(), re.M)
        return stubs, {kernel_name(d) for d in demangle(entries).values()}


if __name__ == "__main__":
    sys.exit(main())
