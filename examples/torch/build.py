"""Builds the PyTorch example's extension into examples/torch/build/ (or --build-dir):

1. libgpucomm_torch_core.so from gpucomm_torch_core.cu: gpucomm, compiled by nvcc itself
   (-std=c++20 -arch=sm_90, -I from gpucomm.get_include(), no -rdc, CUDA runtime linked statically);
2. _gpucomm_torch.<abi>.so from gpucomm_torch.cpp: the torch binding, a CppExtension built by
   torch.utils.cpp_extension.BuildExtension with the host compiler and torch's own flags (C++17 or
   C++20, whichever this torch wants), linked to (1) with an $ORIGIN rpath.

Why not one CUDAExtension: torch compiles .cu files with its own nvcc flags (its C++ standard,
-D__CUDA_NO_HALF_CONVERSIONS__ and friends, which gpucomm's half-precision reductions must not see)
and refuses a CUDA toolkit whose major version differs from the one torch was built with. Here
gpucomm's half never sees a torch flag, and the binding has no CUDA code, so torch built for
CUDA 12.x works with the CUDA 13 toolkit (the driver must support CUDA 13; torch's CUDA runtime and
the core's static one share the device's primary context, and streams pass between them).

Needs: torch, the gpucomm package (`python3 -m pip install <repo>`, or PYTHONPATH=<repo>/python),
nvcc (CUDA_HOME, PATH or /usr/local/cuda) and a host C++ compiler. Prints what it runs and how long.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXT_NAME = "_gpucomm_torch"
CORE_LIB = "gpucomm_torch_core"


def find_nvcc() -> str:
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    found = shutil.which("nvcc")
    if found:
        return found
    if Path("/usr/local/cuda/bin/nvcc").is_file():
        return "/usr/local/cuda/bin/nvcc"
    sys.exit("build.py: nvcc not found (set CUDA_HOME or put nvcc on PATH)")


def stale(target: Path, inputs: list[Path]) -> bool:
    if not target.exists():
        return True
    t = target.stat().st_mtime
    return any(p.stat().st_mtime > t for p in inputs)


def build_core(build: Path, nvcc: str, include: str, arch: str, release: bool, force: bool) -> Path:
    lib = build / f"lib{CORE_LIB}.so"
    headers = sorted(Path(include, "gpucomm").rglob("*"))
    inputs = [HERE / "gpucomm_torch_core.cu", HERE / "gpucomm_torch_core.hpp"] + [h for h in headers if h.is_file()]
    if not force and not stale(lib, inputs):
        print(f"[build] {lib.name}: up to date")
        return lib
    cmd = [nvcc, "-std=c++20", f"-arch={arch}", "-O3", "-shared", "-Xcompiler", "-fPIC", f"-I{include}",
           "-o", str(lib), str(HERE / "gpucomm_torch_core.cu")]
    if release:
        cmd.insert(1, "-DNDEBUG")  # gpucomm release mode: unbounded waits, no device-side checks
    print("[build] " + " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    print(f"[build] {lib.name}: {time.perf_counter() - t0:.1f} s", flush=True)
    return lib


def build_binding(build: Path, force: bool) -> None:
    from setuptools import setup
    from torch.utils.cpp_extension import BuildExtension, CppExtension

    # The binding exports its module's entry point and nothing else (see extra_link_args).
    exports = build / "binding.map"
    build.mkdir(parents=True, exist_ok=True)
    exports.write_text(f"{{ global: PyInit_{EXT_NAME}; local: *; }};\n")
    ext = CppExtension(
        name=EXT_NAME,
        sources=["gpucomm_torch.cpp"],  # relative: setuptools runs in HERE (below)
        include_dirs=[str(HERE)],
        library_dirs=[str(build)],
        libraries=[CORE_LIB],
        # The binding finds the core next to itself; '$ORIGIN' reaches the linker unexpanded (no shell).
        # Only PyInit is exported (binding.map), and nothing the host compiler links in statically
        # (toolchains such as manylinux's take parts of libstdc++ from a static archive): exported,
        # the binding's copies of libstdc++ code interpose on the core's calls into libstdc++.so (the
        # core is loaded as the binding's dependency, so the binding comes first in its lookup
        # scope). The core's std::ostringstream, made by the system's libstdc++, then ran another
        # version's ostream::_M_insert and crashed on the first gpucomm::error the core formatted.
        extra_link_args=["-Wl,-rpath,$ORIGIN", "-Wl,--exclude-libs,ALL", f"-Wl,--version-script={exports}"],
        # -Wno-attributes: pybind11's "declared with greater visibility" notes about our class.
        extra_compile_args={"cxx": ["-O2", "-Wno-attributes"]},
    )
    args = ["build_ext", "--build-lib", str(build), "--build-temp", str(build / "temp")]
    if force:
        args.append("--force")
    t0 = time.perf_counter()
    cwd = os.getcwd()
    os.chdir(HERE)
    try:
        setup(
            name="gpucomm_torch_example",
            version="0",
            py_modules=[],  # explicit: no automatic discovery of this folder's .py files
            packages=[],
            ext_modules=[ext],
            cmdclass={"build_ext": BuildExtension},
            script_args=args,
        )
    finally:
        os.chdir(cwd)
    print(f"[build] {EXT_NAME}: {time.perf_counter() - t0:.1f} s", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build-dir", default=os.environ.get("GPUCOMM_TORCH_BUILD") or str(HERE / "build"))
    parser.add_argument("--arch", default=os.environ.get("GPUCOMM_TORCH_ARCH", "sm_90"), help="nvcc -arch (default sm_90)")
    parser.add_argument("--release", action="store_true", help="compile gpucomm with -DNDEBUG (no bounded waits)")
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = parser.parse_args()

    try:
        import gpucomm
    except ImportError:
        sys.exit("build.py: the gpucomm package is not importable: python3 -m pip install <gpucomm repository> "
                 "(or PYTHONPATH=<gpucomm repository>/python)")
    import torch

    build = Path(args.build_dir).resolve()
    build.mkdir(parents=True, exist_ok=True)
    nvcc = find_nvcc()
    nvcc_version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    print(f"[build] gpucomm {gpucomm.__version__}, headers {gpucomm.get_include()}")
    print(f"[build] torch {torch.__version__} (built with CUDA {torch.version.cuda}); nvcc {nvcc}: {nvcc_version}")
    print(f"[build] output in {build}", flush=True)
    build_core(build, nvcc, gpucomm.get_include(), args.arch, args.release, args.force)
    build_binding(build, args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
