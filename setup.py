"""Build hooks of the `gpucomm` Python package (metadata: pyproject.toml).

build_py copies include/gpucomm/** into the package (gpucomm/include/gpucomm/...) and writes
gpucomm/_version.py, so the repository keeps one copy of the headers. The version is
GPUCOMM_VERSION_MAJOR.MINOR.PATCH from include/gpucomm/config.hpp. setuptools' build tree goes under
build/python/ (the repository's .gitignore covers /build*/), not next to the CMake build's files.
"""

import re
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
HEADERS = ROOT / "include" / "gpucomm"


def read_version() -> str:
    config = HEADERS / "config.hpp"
    text = config.read_text(encoding="utf-8")
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(rf"^\s*#\s*define\s+GPUCOMM_VERSION_{part}\s+(\d+)\s*$", text, re.MULTILINE)
        if not m:
            raise RuntimeError(f"{config}: no '#define GPUCOMM_VERSION_{part} <number>' line")
        parts.append(m.group(1))
    return ".".join(parts)


class build_py_with_headers(build_py):
    """build_py, plus the headers and _version.py in the built package."""

    def run(self):
        super().run()
        if not (HEADERS / "gpucomm.cuh").is_file():
            raise RuntimeError(f"{HEADERS}: gpucomm's headers are missing (build from the repository root)")
        package = Path(self.build_lib) / "gpucomm"
        target = package / "include" / "gpucomm"
        # Copied afresh every time: a stale header from an earlier build must not survive in the wheel.
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(HEADERS, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        (package / "_version.py").write_text(
            f'# Written by setup.py from include/gpucomm/config.hpp.\n__version__ = "{VERSION}"\n', encoding="utf-8"
        )


VERSION = read_version()
BUILD_BASE = "build/python"  # relative to the source tree, which setuptools runs in
Path(BUILD_BASE).mkdir(parents=True, exist_ok=True)  # egg_info insists that egg_base exists

setup(
    version=VERSION,
    cmdclass={"build_py": build_py_with_headers},
    options={"build": {"build_base": BUILD_BASE}, "egg_info": {"egg_base": BUILD_BASE}},
)
