#!/usr/bin/env python3
"""Counts compute-sanitizer racecheck's hazard reports in a log, and those of the kind
scripts/lib/racecheck-bulk.sh lets pass: every access in the report is a bulk load into shared
memory that completes on an mbarrier.

    racecheck_hazards.py LOG BINARY   ->   prints "TOTAL KNOWN DISPLAYED"

A report is an "Error:"/"Warning:" "Race reported between <access>" line and its "and <access>"
lines. racecheck names an access either by the inlined frame that issued it or by the kernel and an
offset; which one varies from run to run. The frames that are such a load: gpucomm's own
gpucomm::detail::bulk_ptx::load (include/gpucomm/detail/bulk_ptx.cuh: exactly one
cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes), and libcu++'s cuda::ptx::cp_async_bulk
overload for shared destination, global source and an mbarrier (code built on <cuda/ptx>). For the
second, the instruction at that offset of that kernel's SASS (cuobjdump -sass BINARY, demangled
with cu++filt) must be a bulk copy from global to shared memory (UBLKCP.S.G on sm_90).
DISPLAYED is the count in racecheck's own summary line (-1 if missing), so a change of format
shows up as a mismatch instead of a silent pass.
"""
import re
import shutil
import subprocess
import sys

ACCESS = re.compile(r"(?:Race reported between|and) (Read|Write) access at (.*)\+0x([0-9a-f]+)(?: in \S+)?(?: \[\d+ hazards?\])?$")
LIBCU_BULK_LOAD = re.compile(
    r"cuda::ptx::\S*cp_async_bulk<void>\(.*dot_space\)2>, .*dot_space\)0>, void \*, const void \*, "
    r"const unsigned int &, unsigned long \*\)$")
OWN_BULK_LOAD = re.compile(r"gpucomm::detail::bulk_ptx::load\(void \*, const void \*, unsigned int, unsigned long \*\)$")


def clone_kernel(name):
    """racecheck names an access inside an inlined function as `[clone KERNEL] FUNCTION`, with the
    offset in KERNEL: the kernel, or the name as it is."""
    if not name.startswith("[clone "):
        return name
    depth = 0
    for i, ch in enumerate(name):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth == 0:
            return name[len("[clone "):i]
    return name


def normalise(name):
    """A kernel's name without its return type and parameter list (racecheck and c++filt spell
    parameters differently: `const char *` against `char const*`), spaces, the spelling of the
    anonymous namespace and of integer template arguments (racecheck: `(unsigned int)32`,
    c++filt: `32u`)."""
    name = clone_kernel(name).replace("(anonymous namespace)", "<unnamed>")
    name = re.sub(r"\((?:unsigned |signed )?(?:char|short|int|long|long long)\)(-?\d+)", r"\1", name)
    name = re.sub(r"\b(\d+)(?:ull|ul|u|ll|l)\b", r"\1", name)
    name = re.sub(r"\s+", "", name)
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    return name[len("void"):] if name.startswith("void") else name


def sass_bulk_loads(binary):
    """{normalised kernel name: set of offsets holding a global -> shared bulk copy}."""
    dump = subprocess.run(["cuobjdump", "-sass", binary], capture_output=True, text=True, check=True).stdout
    offsets, current = {}, None
    for line in dump.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            current = offsets.setdefault(m.group(1), set())
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?UBLKCP\.S\.G\b", line)
        if m and current is not None:
            current.add(int(m.group(1), 16))
    mangled = list(offsets)
    filt = shutil.which("cu++filt") or shutil.which("c++filt")
    names = mangled
    if filt and mangled:
        out = subprocess.run([filt], input="\n".join(mangled) + "\n", capture_output=True, text=True).stdout.splitlines()
        if len(out) == len(mangled):
            names = out
    return {normalise(n): offsets[m] for n, m in zip(names, mangled)}


def main():
    log, binary = sys.argv[1], sys.argv[2]
    reports, displayed = [], -1
    for line in open(log, errors="replace"):
        line = line.rstrip("\n")
        body = re.sub(r"^=+\s*", "", line)
        if re.match(r"(Error|Warning): Race reported between", body):
            reports.append([])
        m = ACCESS.search(body)
        if m and reports and (body.startswith("and ") or "Race reported between" in body):
            reports[-1].append((m.group(1), m.group(2).strip(), int(m.group(3), 16)))
        s = re.search(r"RACECHECK SUMMARY: (\d+) hazard", line)
        if s:
            displayed = int(s.group(1))
    loads = None
    known = 0
    for accesses in reports:
        ok = bool(accesses)
        for kind, where, offset in accesses:
            if kind != "Write":
                ok = False
            elif OWN_BULK_LOAD.search(where) or LIBCU_BULK_LOAD.search(where):
                continue
            else:
                if loads is None:
                    loads = sass_bulk_loads(binary)
                name = normalise(where)
                ok = ok and offset in loads.get(name, set())
        known += ok
    print(len(reports), known, displayed)


if __name__ == "__main__":
    main()
