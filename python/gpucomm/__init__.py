"""gpucomm's C++20 CUDA headers, for building extensions (PyTorch's among them) against them.

    import gpucomm
    gpucomm.get_include()   # the directory to pass as -I: it holds gpucomm/gpucomm.cuh
    gpucomm.__version__     # GPUCOMM_VERSION_MAJOR.MINOR.PATCH of include/gpucomm/config.hpp

`python -m gpucomm --include` prints the directory, for shell scripts and Makefiles.
gpucomm is header-only: nothing here is compiled, and the headers need only the CUDA toolkit
(compile with -std=c++20 for sm_90; no -rdc).
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["get_include", "__version__"]

_HERE = Path(__file__).resolve().parent


def get_include() -> str:
    """The directory that holds gpucomm/gpucomm.cuh: pass it to the compiler as -I."""
    shipped = _HERE / "include"  # an installed package: setup.py copied the headers here
    if (shipped / "gpucomm" / "gpucomm.cuh").is_file():
        return str(shipped)
    # The package used from the repository itself (PYTHONPATH=python, an editable install).
    repository = _HERE.parent.parent / "include"
    if (repository / "gpucomm" / "gpucomm.cuh").is_file():
        return str(repository)
    raise RuntimeError(
        f"gpucomm's headers are not installed next to {__file__}: reinstall the package "
        "(python3 -m pip install <gpucomm repository>)"
    )


def _version_from_headers() -> str:
    text = (Path(get_include()) / "gpucomm" / "config.hpp").read_text(encoding="utf-8")
    parts = [re.search(rf"^\s*#\s*define\s+GPUCOMM_VERSION_{p}\s+(\d+)", text, re.MULTILINE) for p in ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        raise RuntimeError("gpucomm/config.hpp has no GPUCOMM_VERSION_MAJOR/MINOR/PATCH")
    return ".".join(m.group(1) for m in parts)  # type: ignore[union-attr]


try:
    from ._version import __version__  # written at build time from config.hpp
except ImportError:  # used from the repository: read the same macros now
    __version__ = _version_from_headers()
