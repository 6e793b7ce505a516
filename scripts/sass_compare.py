#!/usr/bin/env python3
"""Compare two `cuobjdump -sass` listings kernel by kernel and write a markdown report.

The SASS half of scripts/sass-compare.sh (which builds the two revisions and dumps them); it can
also be run on its own:
  scripts/sass_compare.py --base base.sass --new new.sass [--base-root DIR] [--new-root DIR]
                          [--base-label TEXT] [--new-label TEXT] [--header FILE] [--out FILE]
                          [--max-diff-lines N] [--rename-new REGEX=REPLACEMENT ...]
Prints one summary line on stdout. Standard library only (c++filt is used for names when present).

Normalization, so that equal code compares equal whatever moved around it:
  * addresses (/*0080*/) and encodings (/* 0x... */) are dropped, whitespace collapsed;
  * trailing padding (NOPs and the BRA-to-self after the last EXIT) is dropped, and not counted;
  * branch-like targets (BRA, BSSY, WARPSYNC.COLLECTIVE, CALL.REL, LEPC, ...) become labels
    .L0, .L1, ... numbered in code order, with a `.Ln:` line before the target instruction, so one
    inserted instruction shows as one line in a diff instead of every later branch; BRX's
    pc-relative base becomes `-pc`;
  * kernels are matched by (translation unit, mangled name), the anonymous-namespace tag that nvcc
    derives from the source path (_GLOBAL__N__<hash>_<n>_bw_cu_<hash>_<n>) replaced by a fixed one.
--rename-new rewrites the new side's mangled names (Python re.sub) before they are matched, for a
change that renames kernels without changing them: a template parameter added with a default gives
every kernel that names the template a longer mangled name. The report lists the rewrites.
Classes: identical; same after renumbering constant-bank offsets (equal once every c[0x0][0x...]
operand is a placeholder: the kernel's parameter layout moved); differs.
"""

from __future__ import annotations

import argparse
import difflib
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

# `        /*0080*/                   @P0 BRA 0x1e0 ;      /* 0x0000000000100947 */`
INSN_RE = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*(?:/\*\s*0x[0-9a-f]+\s*\*/)?\s*$")
FUNC_RE = re.compile(r"^\s*Function\s*:\s*(\S+)\s*$")
IDENT_RE = re.compile(r"^\s*identifier\s*=\s*(.+?)\s*$")
ELF_RE = re.compile(r"^\s*Fatbin elf code:")
PTX_RE = re.compile(r"^\s*Fatbin ptx code:")
# Opcodes whose last hex operand is a code address inside the function.
TARGET_OPS = ("BRA", "BSSY", "WARPSYNC.COLLECTIVE", "CALL.REL", "LEPC", "JMP", "SSY", "PBK", "PCNT")
OPCODE_RE = re.compile(r"^(?:@!?U?P(?:T|\d+)\s+)?([A-Z0-9_.]+)")
LAST_HEX_RE = re.compile(r"0x([0-9a-f]+)(\s*;?)$")
BRX_RE = re.compile(r"^(.*\bBRX\b.*\s)-0x([0-9a-f]+)(\s*;?)$")
CBANK0_RE = re.compile(r"c\[0x0\]\[0x([0-9a-f]+)\]")
ANON_RE = re.compile(r"(\d+)_GLOBAL__N_")


def stable_mangled(name: str) -> str:
    """Replace nvcc's path-derived anonymous-namespace identifier by `_GLOBAL__N_1`."""
    out, pos = [], 0
    for m in ANON_RE.finditer(name):
        if m.start() < pos:
            continue
        length = int(m.group(1))
        ident_start = m.start(1) + len(m.group(1))
        out.append(name[pos:m.start()])
        out.append("12_GLOBAL__N_1")
        pos = ident_start + length
    out.append(name[pos:])
    return "".join(out)


@dataclass
class Kernel:
    tu: str
    mangled: str  # as nvcc wrote it
    raw: list[tuple[int, str]] = field(default_factory=list)  # (address, instruction text)
    lines: list[str] = field(default_factory=list)  # normalized, with label lines
    insns: list[str] = field(default_factory=list)  # normalized, instructions only
    count: int = 0

    def normalize(self) -> None:
        raw = self.raw
        # Padding: NOPs at the end, then the `BRA self` that closes every function, then NOPs.
        while raw and raw[-1][1].rstrip(" ;") == "NOP":
            raw.pop()
        if raw:
            m = LAST_HEX_RE.search(raw[-1][1])
            if opcode(raw[-1][1]) == "BRA" and m and int(m.group(1), 16) == raw[-1][0]:
                raw.pop()
        while raw and raw[-1][1].rstrip(" ;") == "NOP":
            raw.pop()
        addrs = {a for a, _ in raw}
        targets: dict[int, None] = {}
        texts = []
        for addr, text in raw:
            text = re.sub(r"\s+", " ", text).strip()
            text = re.sub(r"\s*;$", "", text)
            op = opcode(text)
            m = LAST_HEX_RE.search(text)
            if m and any(op == t or op.startswith(t + ".") for t in TARGET_OPS):
                tgt = int(m.group(1), 16)
                if tgt in addrs:
                    targets[tgt] = None
                    text = text[: m.start()] + f"@{tgt:x}"
            b = BRX_RE.match(text)
            if b and int(b.group(2), 16) == addr + 16:
                text = b.group(1) + "-pc"
            texts.append(text)
        label = {a: f".L{i}" for i, a in enumerate(sorted(targets))}
        self.lines, self.insns = [], []
        for (addr, _), text in zip(raw, texts):
            text = re.sub(r"@([0-9a-f]+)$", lambda m: label.get(int(m.group(1), 16), m.group(0)), text)
            if addr in label:
                self.lines.append(label[addr] + ":")
            self.lines.append("    " + text)
            self.insns.append(text)
        self.count = len(self.insns)


def opcode(text: str) -> str:
    m = OPCODE_RE.match(text.strip())
    return m.group(1) if m else ""


def tu_name(identifier: str, root: str | None) -> str:
    if root:
        r = root.rstrip("/") + "/"
        if identifier.startswith(r):
            return identifier[len(r):]
    return Path(identifier).name


def parse(path: Path, root: str | None) -> dict[tuple[str, str], Kernel]:
    kernels: dict[tuple[str, str], Kernel] = {}
    tu, in_elf, cur = "?", False, None
    for line in path.read_text(errors="replace").splitlines():
        if PTX_RE.match(line):
            in_elf, cur = False, None
            continue
        if ELF_RE.match(line):
            in_elf, cur = True, None
            continue
        m = IDENT_RE.match(line)
        if m:
            tu = tu_name(m.group(1), root)
            continue
        m = FUNC_RE.match(line)
        if m and in_elf:
            cur = Kernel(tu, m.group(1))
            key = (tu, stable_mangled(cur.mangled))
            n = 2
            while key in kernels:  # the same name twice in one TU: keep both, in order
                key = (tu, f"{stable_mangled(cur.mangled)}#{n}")
                n += 1
            kernels[key] = cur
            continue
        if cur is not None:
            m = INSN_RE.match(line)
            if m and m.group(2):
                cur.raw.append((int(m.group(1), 16), m.group(2)))
    for k in kernels.values():
        k.normalize()
    return kernels


def demangle(names: list[str]) -> dict[str, str]:
    exe = shutil.which("c++filt")
    if not exe or not names:
        return {n: n for n in names}
    res = subprocess.run([exe], input="\n".join(names) + "\n", capture_output=True, text=True, check=False)
    out = res.stdout.splitlines()
    if res.returncode != 0 or len(out) != len(names):
        return {n: n for n in names}
    return dict(zip(names, out))


def strip_params(demangled: str) -> str:
    """`f<A, B>(int, x<y>)` -> `f<A, B>`: drop the outermost trailing parenthesized list."""
    if not demangled.endswith(")"):
        return demangled
    depth = 0
    for i in range(len(demangled) - 1, -1, -1):
        c = demangled[i]
        if c == ")":
            depth += 1
        elif c == "(":
            depth -= 1
            if depth == 0:
                return demangled[:i] if i > 0 else demangled
    return demangled


SHORTEN = [
    (re.compile(r"\(anonymous namespace\)::"), ""),
    (re.compile(r"\bgpucomm_bench::"), ""),
    (re.compile(r"\bgpucomm::(detail::)?"), ""),
    (re.compile(r"\bbench::"), ""),
    (re.compile(r"\bstd::"), ""),
]


def shorten(demangled: str) -> str:
    s = demangled
    for rx, rep in SHORTEN:
        s = rx.sub(rep, s)
    return s.removeprefix("void ")


def short_names(keys: list[tuple[str, str]], full: dict[str, str]) -> dict[tuple[str, str], str]:
    """Template arguments kept, parameter list dropped unless two kernels of a TU then collide."""
    short = {k: shorten(strip_params(full[k[1]])) for k in keys}
    seen = Counter((k[0], s) for k, s in short.items())
    for k in keys:
        if seen[(k[0], short[k])] > 1:
            short[k] = shorten(full[k[1]])
    return short


def param_offset_changes(a: Kernel, b: Kernel) -> tuple[int, Counter]:
    """Instructions whose only difference is c[0x0][...] offsets, and the old->new offset pairs."""
    n, pairs = 0, Counter()
    for x, y in zip(a.insns, b.insns):
        if x == y:
            continue
        n += 1
        for ox, oy in zip(CBANK0_RE.findall(x), CBANK0_RE.findall(y)):
            if ox != oy:
                pairs[(int(ox, 16), int(oy, 16))] += 1
    return n, pairs


def placeholder(lines: list[str]) -> list[str]:
    return [CBANK0_RE.sub("c[0x0][#]", s) for s in lines]


def md_escape(s: str) -> str:
    return s.replace("|", "\\|")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, type=Path, help="cuobjdump -sass of the base revision")
    ap.add_argument("--new", required=True, type=Path, help="cuobjdump -sass of the new revision")
    ap.add_argument("--base-root", help="source tree the base was built from (TU names relative to it)")
    ap.add_argument("--new-root", help="source tree the new revision was built from")
    ap.add_argument("--base-label", default="base")
    ap.add_argument("--new-label", default="new")
    ap.add_argument("--header", type=Path, help="markdown put under the title (revisions, toolchain)")
    ap.add_argument("--out", type=Path, default=Path("sass-compare.md"))
    ap.add_argument("--max-diff-lines", type=int, default=200, help="per kernel, in the report")
    ap.add_argument("--rename-new", action="append", default=[], metavar="REGEX=REPLACEMENT",
                    help="rewrite the new side's mangled names before matching (repeatable)")
    args = ap.parse_args()

    base = parse(args.base, args.base_root)
    new = parse(args.new, args.new_root)
    renames = []
    for r in args.rename_new:
        rx, sep, rep = r.rpartition("=")
        if not sep or not rx:
            print(f"--rename-new takes REGEX=REPLACEMENT, not {r!r}", file=sys.stderr)
            return 2
        renames.append((re.compile(rx), rep))
    if renames:
        renamed = {}
        for (tu, name), kernel in new.items():
            for rx, rep in renames:
                name = rx.sub(rep, name)
            if (tu, name) in renamed:
                print(f"--rename-new maps two kernels of {tu} to {name}", file=sys.stderr)
                return 2
            renamed[(tu, name)] = kernel
        new = renamed
    if not base or not new:
        print(f"no kernels found in {args.base if not base else args.new}", file=sys.stderr)
        return 1
    keys = sorted(set(base) | set(new))
    mangled = sorted({k[1].split("#")[0] for k in keys})
    plain = demangle(mangled)
    full = {}
    for k in keys:
        name, _, nth = k[1].partition("#")
        full[k[1]] = plain[name] + (f" #{nth}" if nth else "")
    names = short_names(keys, full)
    # Rows by TU, then by the name a reader looks for; TUs by file name when that is unambiguous.
    keys.sort(key=lambda k: (k[0], names[k], k[1]))
    tus = {k[0] for k in keys}
    tu_shown = {t: Path(t).name for t in tus} if len({Path(t).name for t in tus}) == len(tus) else {t: t for t in tus}

    IDENT, RENUM, DIFF, ONLY_BASE, ONLY_NEW = (
        "identical", "same after renumbering constant-bank offsets", "differs",
        f"only in {args.base_label}", f"only in {args.new_label}")
    rows, diffs, renums = [], [], []
    tally = Counter()
    for k in keys:
        a, b = base.get(k), new.get(k)
        if a is None or b is None:
            cls = ONLY_NEW if a is None else ONLY_BASE
            note = ""
        elif a.lines == b.lines:
            cls, note = IDENT, ""
        elif placeholder(a.lines) == placeholder(b.lines):
            cls = RENUM
            n, pairs = param_offset_changes(a, b)
            moved = ", ".join(f"0x{o:x}→0x{p:x}" + (f" ×{c}" if c > 1 else "") for (o, p), c in sorted(pairs.items()))
            note = f"{n} instruction(s); c[0x0] offsets {moved}"
            renums.append((k, note))
            note = f"{n} insns"
        else:
            cls = DIFF
            d = list(difflib.unified_diff(a.lines, b.lines, args.base_label, args.new_label, n=3, lineterm=""))
            changed = sum(1 for s in d[2:] if s[:1] in "+-")
            note = f"{changed} changed line(s) in the diff"
            diffs.append((k, a.count, b.count, d))
        tally[cls] += 1
        rows.append((k, a.count if a else None, b.count if b else None, cls, note))

    summary = (f"{tally[IDENT]} identical, {tally[RENUM]} same-after-renumbering, {tally[DIFF]} differ"
               + (f", {tally[ONLY_BASE]} only in base" if tally[ONLY_BASE] else "")
               + (f", {tally[ONLY_NEW]} only in new" if tally[ONLY_NEW] else "")
               + f" ({len(keys)} kernels)")

    out = ["# SASS comparison of the gpucomm benchmark kernels", ""]
    if args.header and args.header.exists():
        out += [args.header.read_text().rstrip(), ""]
    if args.rename_new:
        out += ["The new side's mangled names were rewritten before matching (the kernels named in the "
                "table are the base's names):", ""]
        out += [f"- `{md_escape(r)}`" for r in args.rename_new]
        out.append("")
    out += [f"**Summary:** {summary}", "",
            "Instruction counts leave out the trailing padding (the BRA to self and the NOPs). Kernels are "
            "matched by translation unit and mangled name. Normalized SASS: no addresses or encodings, "
            "branch targets as labels (`.Ln`) in code order.", "",
            f"| TU | kernel | {md_escape(args.base_label)} | {md_escape(args.new_label)} | result |",
            "| --- | --- | ---: | ---: | --- |"]
    for k, ca, cb, cls, note in rows:
        res = f"{cls} ({note})" if cls == RENUM else cls
        if cls == DIFF:
            res = f"**differs** ({note}, {cb - ca:+d} insns)"
        out.append(f"| {md_escape(tu_shown[k[0]])} | `{md_escape(names[k])}` | {'' if ca is None else ca} | "
                   f"{'' if cb is None else cb} | {res} |")
    out.append("")
    if renums:
        out += ["## Kernels whose parameter offsets moved", "",
                "Equal once every `c[0x0][0x...]` operand is a placeholder (on sm_90 the kernel parameters "
                "start at `c[0x0][0x210]`); the instructions that differ, and how their offsets moved:", ""]
        for k, note in renums:
            out.append(f"- {tu_shown[k[0]]}: `{md_escape(names[k])}`: {note}")
        out.append("")
    if diffs:
        out += ["## Kernels that differ", ""]
        for k, ca, cb, d in diffs:
            out += [f"### {tu_shown[k[0]]}: `{md_escape(names[k])}`", "",
                    f"{ca} → {cb} instructions. Mangled: `{k[1]}`", ""]
            shown = d[: args.max_diff_lines]
            out += ["```diff", *shown, "```"]
            if len(d) > len(shown):
                out.append(f"({len(d) - len(shown)} more diff lines not shown)")
            out.append("")
    out += ["## Full names", "", "<details><summary>demangled names of every kernel</summary>", ""]
    for k in keys:
        out.append(f"- {k[0]}: `{md_escape(full[k[1]])}`")
    out += ["", "</details>", ""]
    args.out.write_text("\n".join(out))
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
