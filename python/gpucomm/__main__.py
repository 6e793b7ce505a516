"""python -m gpucomm --include: print gpucomm.get_include(); --version: the version."""

import argparse

from . import __version__, get_include

parser = argparse.ArgumentParser(prog="python -m gpucomm", description=__doc__)
parser.add_argument("--include", action="store_true", help="print the directory to pass as -I")
parser.add_argument("--version", action="store_true", help="print gpucomm's version")
args = parser.parse_args()
if args.version:
    print(__version__)
if args.include or not args.version:
    print(get_include())
