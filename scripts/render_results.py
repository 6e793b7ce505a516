#!/usr/bin/env python3
"""The results files, and the status and performance sections of the docs rendered from them.

Results are written by programs, never by hand. The tree keeps the latest results of each machine
kind (the GPU model and count in lower case: h100-x4, h200-x2); git history keeps the rest.

  benchmarks/results/<kind>/latest.json  the kind's latest benchmark run (gpucomm.bench-results/1)
  benchmarks/results/<kind>/latest.md    its report (benchmarks/report.py's markdown), rendered
  tests/results/<kind>.json              the kind's GPU tests, the newest result of each (gpucomm.gpu-round/1)
  docs/contributing/status.md            rendered whole
  README.md, docs/contributing/benchmarks.md
                                         the text between "<!-- BEGIN rendered: NAME (scripts/render_results.py) -->"
                                         and "<!-- END rendered: NAME -->", rendered

  render_results.py [render] [--root REPO]   write every rendered file and section
  render_results.py check [--root REPO]      exit 1 with a diff where the tree differs from a render, or
                                             where a marker is missing or unbalanced (CI: results.rendered)
  render_results.py record --kind KIND --bench RESULTS.json [--commit C] [--partial] [--root REPO]
  render_results.py record --kind KIND --round SUMMARY.json [SUMMARY.json ...] [--root REPO]
  render_results.py self-test [--root REPO]  check passes on a copy of the tree and fails once a figure in
                                             a rendered section is edited by hand (CI: results.hand_edit_fails)

record --bench stores a run of scripts/bench.sh (its <stem>.json) as the kind's latest.json; record
--round merges summaries of scripts/gpu-round.sh (summary.json) into tests/results/<kind>.json, the
newest result of each test winning. Both render afterwards. bench.sh and gpu-round.sh call them with
--record KIND. Standard library only; imports benchmarks/report.py from this script's repository.
"""

import argparse
import difflib
import json
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import report  # noqa: E402

BENCH_DIR = "benchmarks/results"
TESTS_DIR = "tests/results"
COMPILE_COST = "benchmarks/results/debian12-2core/compile-cost.json"
CI_SUMMARY = "benchmarks/results/debian12-2core/ci.json"  # scripts/test.sh's record of a CI run
STATUS = "docs/contributing/status.md"
# The pages with rendered sections, and the sections each must have.
PAGES = {"README.md": ("performance", "transport-figures"), "docs/contributing/benchmarks.md": ("benchmark-results",)}
ROUND_SCHEMA = "gpucomm.gpu-round/1"
SUMMARY_SCHEMA = "gpucomm.gpu-round-summary/1"  # gpu-round.sh's summary.json; earlier ones have no schema
COMPILE_COST_SCHEMA = "gpucomm.compile-cost/1"
TEST_SUMMARY_SCHEMA = "gpucomm.test-summary/1"  # scripts/lib/test_summary.py
KIND = re.compile(r"[a-z0-9]+-x[1-9][0-9]*")
SANITIZERS = ("memcheck", "racecheck", "synccheck", "initcheck")
RENDER = "python3 scripts/render_results.py render"
BEGIN = re.compile(r"<!-- BEGIN rendered: ([a-z0-9-]+) \(scripts/render_results\.py\) -->")
END = re.compile(r"<!-- END rendered: ([a-z0-9-]+) -->")
MARKER = re.compile(r"^[ \t]*<!--\s*(BEGIN|END)\s+rendered\b.*?-->[ \t]*$", re.M)  # a marker has its own line
# An absolute path in a test's closing line ("not built: /x/build-gpu/tests/bin"): its file name is kept.
NOT_BUILT = "(not built:"  # how scripts/lib/gpu-test.sh closes a test whose binary is missing
ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?:[^\s/()]+/)+([^\s/()]+)")


class ResultsError(Exception):
    """An input that cannot be used: the message names the file and the field."""


# ---- reading and checking the inputs ---------------------------------------------------------------

def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise ResultsError(f"{path}: cannot read it: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path}: not valid JSON: {e}") from None


def field(obj, name, kind, path, prefix=""):
    """obj[name], which must be of type kind (a bool is no int)."""
    if not isinstance(obj, dict) or name not in obj:
        raise ResultsError(f"{path}: field '{prefix}{name}' is missing")
    value = obj[name]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ResultsError(f"{path}: field '{prefix}{name}' should be of type {kind.__name__}, "
                           f"not {type(value).__name__}")
    return value


def check_schema(doc, path, known):
    """The document's schema, one of known (None: a document written before schemas)."""
    if not isinstance(doc, dict):
        raise ResultsError(f"{path}: should hold a JSON object")
    schema = doc.get("schema")
    if schema not in known:
        names = ", ".join(k for k in known if k) + (", or none" if None in known else "")
        raise ResultsError(f"{path}: field 'schema' is {schema!r}, not a known schema ({names})")
    return schema


def check_kind(kind):
    if not KIND.fullmatch(kind):
        raise ResultsError(f"machine kind {kind!r}: the GPU model and count in lower case, e.g. h100-x4")
    return kind


def gpu_model(name):
    """'NVIDIA H100 80GB HBM3' -> 'h100'."""
    first = re.split(r"[\s-]+", re.sub(r"^NVIDIA\s+", "", name.strip()))[0]
    return re.sub(r"[^a-z0-9]", "", first.lower())


def bench_kind(doc, path):
    """The machine kind a run names: its GPU model and the machine's GPU count."""
    machine = field(doc, "machine", dict, path)
    name = field(machine, "gpu_name", str, path, "machine.")
    count = machine.get("gpu_count_visible") or machine.get("gpu_count_used")
    if not isinstance(count, int) or count < 1:
        raise ResultsError(f"{path}: field 'machine.gpu_count_visible' should be the machine's GPU count")
    return f"{gpu_model(name)}-x{count}"


def stored_bench(doc, path):
    """Checks a stored latest.json (gpucomm.bench-results/1); returns its rows as objects."""
    for name, kind in (("kind", str), ("commit", str), ("date", str), ("command", str), ("mode", str),
                       ("machine", dict), ("columns", list), ("notes", list), ("rows", list)):
        field(doc, name, kind, path)
    check_kind(doc["kind"])
    columns, notes = doc["columns"], doc["notes"]
    if not all(isinstance(c, str) for c in columns) or "case" not in columns or "note" not in columns:
        raise ResultsError(f"{path}: field 'columns' should be the rows' field names, 'case' and 'note' among them")
    note = columns.index("note")
    for i, cells in enumerate(doc["rows"]):
        if not isinstance(cells, list) or len(cells) != len(columns):
            raise ResultsError(f"{path}: field 'rows[{i}]' should be a list of {len(columns)} cells (the columns)")
        if cells[note] is not None and not (isinstance(cells[note], int) and 0 <= cells[note] < len(notes)):
            raise ResultsError(f"{path}: field 'rows[{i}]' has note {cells[note]!r}, not an index into 'notes'")
    return report.rows_from_table(columns, notes, doc["rows"])


def read_summary(path):
    """A summary.json of scripts/gpu-round.sh, checked."""
    doc = read_json(path)
    check_schema(doc, path, (SUMMARY_SCHEMA, None))
    r = field(doc, "round", dict, path)
    for name in ("started", "commit", "gpus", "gpu_names", "status"):
        field(r, name, str, path, "round.")
    if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\dZ", r["started"]):
        raise ResultsError(f"{path}: field 'round.started' should be a UTC time like 2026-11-29T04:33Z")
    field(doc, "steps", list, path)
    for i, t in enumerate(field(doc, "tests", list, path)):
        for name in ("name", "suite", "transport", "layout", "status"):
            field(t, name, str, path, f"tests[{i}].")
    return doc


class Bench:
    """One kind's latest.json, its rows as objects."""

    def __init__(self, root, kind):
        self.kind = kind
        self.json = f"{BENCH_DIR}/{kind}/latest.json"
        self.md = f"{BENCH_DIR}/{kind}/latest.md"
        path = os.path.join(root, self.json)
        self.doc = read_json(path)
        check_schema(self.doc, path, (report.STORED_SCHEMA,))
        self.rows = stored_bench(self.doc, path)
        if self.doc["kind"] != kind:
            raise ResultsError(f"{path}: field 'kind' is {self.doc['kind']!r}, not {kind} (its folder)")
        machine = self.doc["machine"]
        self.gpus = f"{machine.get('gpu_count_used') or machine.get('gpu_count_visible')} x {machine.get('gpu_name')}"
        self.date = self.doc["date"][:10]
        self.smoke = bool(self.doc.get("note"))  # PEs share a GPU: report.py holds no figure to a target
        self.sweep = "smoke run" if self.smoke else {"full": "full sweep", "quick": "quick sweep"}.get(
            self.doc["mode"], "some cases only")


def load_benches(root):
    folder = os.path.join(root, BENCH_DIR)
    kinds = sorted(k for k in os.listdir(folder) if os.path.isfile(os.path.join(folder, k, "latest.json")))
    return [Bench(root, check_kind(k)) for k in kinds]


def load_tests(root):
    """{kind: tests/results/<kind>.json}, checked."""
    folder = os.path.join(root, TESTS_DIR)
    out = {}
    for file in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if not file.endswith(".json"):
            continue
        path, kind = os.path.join(folder, file), file[:-len(".json")]
        doc = read_json(path)
        check_schema(doc, path, (ROUND_SCHEMA,))
        if field(doc, "kind", str, path) != kind:
            raise ResultsError(f"{path}: field 'kind' is {doc['kind']!r}, not {kind} (its name)")
        rounds = field(doc, "rounds", list, path)
        if not rounds:
            raise ResultsError(f"{path}: field 'rounds' is empty")
        for i, r in enumerate(rounds):
            for name in ("id", "started", "commit", "machine", "status"):
                field(r, name, str, path, f"rounds[{i}].")
        ids = {r["id"] for r in rounds}
        for i, t in enumerate(field(doc, "tests", list, path)):
            for name in ("name", "suite", "transport", "layout", "status", "round"):
                field(t, name, str, path, f"tests[{i}].")
            if t["round"] not in ids:
                raise ResultsError(f"{path}: field 'tests[{i}].round' names no round of 'rounds'")
        out[check_kind(kind)] = doc
    return out


def load_compile_cost(root):
    path = os.path.join(root, COMPILE_COST)
    if not os.path.exists(path):
        return None
    doc = read_json(path)
    check_schema(doc, path, (COMPILE_COST_SCHEMA,))
    for name, kind in (("date", str), ("nvcc", str), ("flags", str), ("runs", int), ("machine", dict),
                       ("revisions", list), ("cases", list), ("ratios", list)):
        field(doc, name, kind, path)
    return doc


def read_test_summary(path):
    doc = read_json(path)
    check_schema(doc, path, (TEST_SUMMARY_SCHEMA,))
    for name, kind in (("date", str), ("command", str), ("status", str), ("seconds", int), ("machine", dict),
                       ("steps", list)):
        field(doc, name, kind, path)
    for i, step in enumerate(doc["steps"]):
        field(step, "name", str, path, f"steps[{i}].")
        field(step, "seconds", int, path, f"steps[{i}].")
    return doc


def load_ci(root):
    path = os.path.join(root, CI_SUMMARY)
    return read_test_summary(path) if os.path.exists(path) else None


def record_ci(root, path):
    """Stores scripts/test.sh's record of a run on a clean clone (its build folder's test-summary.json)."""
    doc = read_test_summary(path)
    if not doc.get("commit") or doc["commit"].endswith("+dirty"):
        raise ResultsError(f"{path}: field 'commit' is {doc.get('commit')!r}: record a run of a clean checkout")
    if doc["status"] != "passed":
        raise ResultsError(f"{path}: the run {doc['status']} (exit status {doc.get('exit_code')}): CI's record is of a "
                           "passing run")
    write(root, CI_SUMMARY, json.dumps(doc, indent=1) + "\n")


# ---- rendering ---------------------------------------------------------------------------------------

def link(page, target):
    """target (relative to the repository) as a link from page."""
    return posixpath.relpath(target, posixpath.dirname(page) or ".")


def table(head, rows):
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def in_readme(line):
    """The headline lines the README shows: gpucomm against NVSHMEM, and against NCCL each device
    collective's bus bandwidth at its largest size, allreduce's time at the sizes its targets name,
    and the PyTorch TP layer's allreduce."""
    if line.peer_name == "NVSHMEM":
        return True
    return line.peer_name == "NCCL" and (" busbw, " in line.what or line.what.startswith(
        ("allreduce time per call, ", "PyTorch TP layer")))


def versus(line):
    """gpucomm's value vs the peer's, and the ratio; nothing where the run measured neither."""
    if line.g is None and line.peer is None:
        return ""
    ratio = line.ratio()
    text = f"{report.fmt(line.g)} vs {line.fmt_value(line.peer)}"
    return text + (f" ({ratio:.2f}x)" if ratio is not None else "")


def performance_md(benches, page):
    """README.md: the headline figures against the peers, a column per machine kind."""
    full = [b for b in benches if not b.smoke]
    smoke = [b for b in benches if b.smoke]
    out = []
    if full:
        lines = {b.kind: {x.what: x for x in report.headline(b.rows) if in_readme(x)} for b in full}
        whats = []
        for b in full:
            whats += [w for w in lines[b.kind] if w not in whats]
        rows = []
        for w in whats:
            peer = next(lines[b.kind][w].peer_name for b in full if w in lines[b.kind])
            rows.append([w, peer] + [versus(lines[b.kind][w]) if w in lines[b.kind] else "" for b in full])
        out += ["gpucomm (`comm<NVLinkStore>`) vs the peer library in the same run, and how many times better "
                "gpucomm is (above 1: gpucomm better; the peer's time over gpucomm's, or gpucomm's bandwidth over "
                "the peer's). Runs:", ""]
        out += [f"- [{b.kind}]({link(page, b.md)}): {b.gpus}, {b.sweep} of {b.date}" for b in full]
        out += [""] + table(["", "peer"] + [b.kind for b in full], rows)
    if smoke:
        out += ["", "Kinds with a smoke run only (PEs share one GPU: not link figures): " + ", ".join(
            f"[{b.kind}]({link(page, b.md)}) ({b.gpus}, {b.date})" for b in smoke) + "."]
    return out or ["No benchmark run recorded yet."]


# The README's transport table's figures: per transport, headline lines (report.headline) of the latest
# full run that measured them, as (transport, what the figure is, the headline line's name).
TRANSPORT_FIGURES = [
    ("NVLinkStore", "put bandwidth, one 1024-thread CTA, best size", "put_bw uni, block, 1 CTA, best size"),
    ("NVLinkStore", "put_signal ping-pong, one way, one thread, 8 B", "put_signal ping-pong one way, thread, 8 B"),
    ("P2PCopy", "put bandwidth, one CTA, best size, source in global memory, staging `P2PCopy128K`",
     "P2PCopy put_bw, block, 1 CTA, source global, recommended staging, best size"),
    ("ProxyQueue", "put bandwidth, one posting thread, >= 16 MiB, worst size",
     "ProxyQueue put_bw, block, 1 CTA (one posting thread), >= 16 MiB: the worst size against the copy engine"),
    ("ProxyQueue", "put_signal ping-pong, one way, 8 B", "ProxyQueue put_signal ping-pong one way, 8 B (best scope)"),
]


def transport_figures_md(benches, page):
    """README.md: one or two measured figures per transport, each from the latest full run that has it."""
    full = sorted((b for b in benches if not b.smoke), key=lambda b: b.date, reverse=True)
    lines = [(b, {x.what: x for x in report.headline(b.rows)}) for b in full]
    rows = []
    for transport, label, what in TRANSPORT_FIGURES:
        found = next(((b, ls[what]) for b, ls in lines if what in ls and ls[what].g is not None), None)
        if found is None:
            rows.append([f"`{transport}`", label, "not measured", ""])
            continue
        b, x = found
        extra = f" ({x.ref})" if x.ref.startswith("default staging") else ""
        rows.append([f"`{transport}`", label, x.g_txt() + extra, f"[{b.kind}]({link(page, b.md)}), {b.date}"])
    rows.append(["`IBGDAPost`, `route<..., IBGDAPost>`", "", "no run on a real NIC recorded",
                 f"the NIC model's figures are not a NIC's ([docs/contributing/benchmarks.md]({link(page, 'docs/contributing/benchmarks.md')}))"])
    return ["Measured figures of each transport (the benchmark suite; full runs only, one PE per GPU):", ""] + table(
        ["transport", "figure", "value", "run"], rows)


def results_md(benches, page):
    """docs/contributing/benchmarks.md: per machine kind the run, its whole headline table and what limits NVLinkStore."""
    out = ["gpucomm is `comm<NVLinkStore>` except in the P2PCopy and ProxyQueue lines; NVLink multicast off."]
    for b in benches:
        m = b.doc["machine"]
        out += ["", f"#### {b.kind}: {b.gpus}, {b.date} ({b.sweep})", "",
                f"Every table of the run: [latest.md]({link(page, b.md)}); every row, the machine and the "
                f"command: [latest.json]({link(page, b.json)}). Command `{b.doc['command'].strip()}`; driver "
                f"{m.get('driver_version') or 'n/a'}, CUDA runtime {m.get('cuda_runtime_version')}.", ""]
        if b.smoke:
            out.append(f"A smoke run, not held to the targets; its note: {b.doc['note']}.")
            continue
        out += report.headline_md(b.rows)
        total, below = report.vs_nvshmem(b.rows)
        if total:
            out += ["", f"put_bw (block scope): gpucomm is below NVSHMEM at {len(below)} of {total} points compared "
                        "(latest.md lists them)."]
        limits = report.limits_md(b.rows, None)
        if limits:
            out += ["", "What limits NVLinkStore: the raw variants of the same run, each changing one thing "
                        "(latest.md adds the copy variants' hardware counters where ncu ran):", ""]
            out += limits
        bad = [x for x in b.rows if x.get("status") != "ok"]
        failed = [x for x in b.doc.get("runs", []) if str(x.get("rc")) != "0"]
        if bad or failed:
            out += ["", f"Not measured: {len(bad)} points, {len(failed)} processes with a non-zero exit status "
                        "(latest.md lists them)."]
    return out if benches else ["No benchmark run recorded yet."]


def counts(tests, key):
    """'passed/total' of Catch2's counts (key: test_cases or assertions) over the tests that have them."""
    have = [t[key] for t in tests if isinstance(t.get(key), dict)]
    return f"{sum(c.get('passed', 0) for c in have)}/{sum(c.get('total', 0) for c in have)}" if have else ""


def layout_txt(t):
    """The test's layout and its name's other parts ("gpus2-pe1 mpi split"), not its sanitizer."""
    return " ".join([t["layout"]] + [m for m in t.get("modifiers", []) if m not in SANITIZERS])


def uncoloured(text: str) -> str:
    """A test's closing line without the terminal colours Catch2 prints under mpirun (their escape
    character may already be gone from the record), spaces squeezed."""
    return " ".join(re.sub(r"\x1b?\[[0-9;]*m", "", text).split())


def tests_md(doc):
    """One kind's GPU tests: per suite and transport, then the sanitizers, then the failures."""
    rounds = {r["id"]: r for r in doc["rounds"]}
    last = doc["rounds"][-1]

    def date(t):
        return rounds[t["round"]]["started"][:10]

    steps = ", ".join(f"{s.get('name')} {s.get('status')}" for s in last.get("steps", []))
    if last["status"] == "STOPPED":  # cut short by its time limit: say how far its tests got
        ran = [t for t in doc["tests"] if t["round"] == last["id"]]
        passed, failed = (sum(t["status"] == st for t in ran) for st in ("passed", "failed"))
        steps += (", " if steps else "") + f"stopped at its time limit after {passed} tests passed, {failed} failed"
    out = [f"GPU tests: {len(doc['tests'])} tests from {len(rounds)} round(s). The last round: "
           f"{last['started'][:10]}, {last['machine']}, {last['status']}" + (f" ({steps})" if steps else "")
           + (f"; {last['not_built']} of its tests did not run, their binaries not built." if last.get("not_built")
              else "."), ""]
    plain = [t for t in doc["tests"] if not set(t.get("modifiers", [])) & set(SANITIZERS)]
    groups = {}
    for t in plain:
        groups.setdefault((t["suite"], t["transport"]), []).append(t)
    rows = []
    for (suite, transport), ts in sorted(groups.items()):
        passed = sum(t["status"] == "passed" for t in ts)
        skipped = sum(t["status"] == "skipped" for t in ts)
        layouts = sorted({layout_txt(t) for t in ts})
        rows.append([suite, transport, ", ".join(layouts), max(date(t) for t in ts),
                     f"{passed}/{len(ts)}" + (f" ({skipped} skipped)" if skipped else ""),
                     counts(ts, "test_cases"), counts(ts, "assertions")])
    if rows:
        out += table(["suite", "transport", "layouts", "last run", "tests passed", "test cases passed",
                      "assertions passed"], rows) + [""]
    sanitized = [t for t in doc["tests"] if set(t.get("modifiers", [])) & set(SANITIZERS)]
    if sanitized:
        out += ["Sanitizers (compute-sanitizer over the `[sanitize]` cases):", ""]
        out += table(["suite", "transport", "tool", "layout", "last run", "result", "test cases passed"], [
            [t["suite"], t["transport"], " ".join(m for m in t["modifiers"] if m in SANITIZERS), layout_txt(t),
             date(t), t["status"], counts([t], "test_cases")]
            for t in sorted(sanitized, key=lambda t: t["name"])]) + [""]
    failed = [t for t in doc["tests"] if t["status"] not in ("passed", "skipped")]
    out += ["Failures:" if failed else "Failures: none.", ""]
    out += [f"- `{t['name']}` ({date(t)}, exit status {t.get('exit_code')}): "
            f"`{uncoloured(t.get('closing_line') or '') or 'no closing line'}`" for t in failed]
    return out + ([""] if failed else [])


def compile_cost_md(doc, page):
    """The newest revision the compile-cost run measured (the tree it ran in), with the toolkit's yardsticks."""
    rev = doc["revisions"][-1].get("rev") if doc["revisions"] else None
    cases = [c for c in doc["cases"] if c.get("rev") in (None, rev)]
    m = doc["machine"]
    out = ["## Compile cost (debian12-2core)", "",
           f"What the headers cost a user's translation unit: `nvcc -c` of each file alone (`{doc['flags']}`), the "
           f"median of {doc['runs']} runs on {doc['date'][:10]}, {m.get('nproc')} x {m.get('model_name')}, "
           f"{doc['nvcc']}. Every revision measured, and how: "
           f"[compile-cost.md]({link(page, posixpath.join(posixpath.dirname(COMPILE_COST), 'compile-cost.md'))}).",
           ""]
    out += table(["case", "seconds", "peak MiB"], [
        [f"`{c.get('label')}`", report.fmt(c.get("seconds")) if c.get("status") == "ok" else c.get("status", "?"),
         report.fmt(c.get("peak_mib")) if c.get("status") == "ok" else ""] for c in cases])
    ratios = [r for r in doc["ratios"] if r.get("rev") == rev]
    if ratios:
        out += [""] + table(["ratio", "time", "memory", "target"], [
            [r.get("name", "?"), report.fmt(r.get("time")), report.fmt(r.get("memory")),
             f"<= {r['target']:g}" if r.get("target") is not None else ""] for r in ratios])
    return out


def ci_md(doc, page):
    """The recorded CI run: scripts/test.sh's wall time, per step, and ctest's counts."""
    m = doc["machine"]
    steps = ", ".join(f"{s['name']} {s['seconds']} s" for s in doc["steps"])
    ctest = doc.get("ctest") or {}
    counts = (f"; ctest {ctest['total'] - ctest['failed']}/{ctest['total']} passed" if ctest.get("total") is not None
              else "")
    return ["## CI (debian12-2core)", "",
            f"`{doc['command']}` on a clean clone, {doc['date'][:10]}, {m.get('nproc')} x "
            f"{m.get('model_name')}: {doc['status']} in {doc['seconds']} s ({steps}){counts}. The record: "
            f"[ci.json]({link(page, CI_SUMMARY)}) (with the commit), written by the run itself "
            "(`<build>/test-summary.json`)."]


def status_md(benches, tests, compile_cost, ci=None):
    out = [f"<!-- Generated by `{RENDER}` from the results files; do not edit by hand. -->", "# Status", "",
           "What the recorded GPU test rounds of each machine kind found, and the benchmark run each kind's "
           "figures come from; generated from `tests/results/<kind>.json` and `benchmarks/results/` by "
           f"`{RENDER}` ([docs/contributing/testing.md](testing.md) says how results are recorded). Do not edit it by hand."]
    bench = {b.kind: b for b in benches}
    for kind in sorted(set(bench) | set(tests)):
        out += ["", f"## {kind}", ""]
        b = bench.get(kind)
        out.append(f"Benchmarks: {b.sweep} of {b.date}, {b.gpus} ([latest.md]({link(STATUS, b.md)}))." if b
                   else "Benchmarks: no run recorded for this kind.")
        out.append("")
        if kind in tests:
            out += tests_md(tests[kind])
        else:
            out += ["GPU tests: no round recorded for this kind.", ""]
        while out[-1] == "":
            out.pop()
    if compile_cost:
        out += [""] + compile_cost_md(compile_cost, STATUS)
    if ci:
        out += [""] + ci_md(ci, STATUS)
    return "\n".join(out) + "\n"


def sections_of(text, page):
    """{name: (start, end)}: where each rendered section's content lies in text; ResultsError where a
    marker is missing, malformed, unbalanced or unknown."""
    spans, open_name, open_at = {}, None, 0
    for m in MARKER.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        marker = m.group(0).strip()
        begin, end = BEGIN.fullmatch(marker), END.fullmatch(marker)
        if not begin and not end:
            raise ResultsError(f"{page}:{line}: malformed marker {marker!r}")
        if begin:
            if open_name:
                raise ResultsError(f"{page}:{line}: section '{begin.group(1)}' begins inside '{open_name}'")
            open_name, open_at = begin.group(1), m.end()
        else:
            if end.group(1) != open_name:
                raise ResultsError(f"{page}:{line}: END of '{end.group(1)}' without its BEGIN")
            if open_name in spans:
                raise ResultsError(f"{page}:{line}: section '{open_name}' appears twice")
            spans[open_name] = (open_at, m.start())
            open_name = None
    if open_name:
        raise ResultsError(f"{page}: section '{open_name}' has no END marker")
    expected = PAGES[page]
    for name in expected:
        if name not in spans:
            raise ResultsError(f"{page}: no rendered section '{name}' (markers: <!-- BEGIN rendered: {name} "
                               f"(scripts/render_results.py) --> ... <!-- END rendered: {name} -->)")
    for name in spans:
        if name not in expected:
            raise ResultsError(f"{page}: unknown rendered section '{name}' (this page has {', '.join(expected)})")
    return spans


def read_text(root, path):
    try:
        with open(os.path.join(root, path)) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def render_all(root):
    """{path relative to root: text}: every rendered file, the pages with their sections rendered."""
    pages = {page: read_text(root, page) for page in PAGES}
    spans = {page: sections_of(text, page) for page, text in pages.items()}  # markers first: cheap
    benches, tests, compile_cost = load_benches(root), load_tests(root), load_compile_cost(root)
    out = {b.md: report.markdown_text(dict(b.doc, rows=b.rows)) for b in benches}
    out[STATUS] = status_md(benches, tests, compile_cost, load_ci(root))
    render = {"performance": performance_md, "benchmark-results": results_md, "transport-figures": transport_figures_md}
    for page, text in pages.items():
        # From the last section to the first, so that the spans of those before stay where they are.
        for name, (start, end) in sorted(spans[page].items(), key=lambda s: -s[1][0]):
            body = "\n".join(render[name](benches, page)).strip("\n")
            text = text[:start] + "\n\n" + body + "\n\n" + text[end:]
        out[page] = text
    return out


def write(root, path, text):
    full = os.path.join(root, path)
    if read_text(root, path) == text and os.path.exists(full):
        return
    os.makedirs(os.path.dirname(full) or ".", exist_ok=True)
    with open(full, "w") as f:
        f.write(text)
    print(f"wrote {path}")


def render(root):
    for path, text in render_all(root).items():
        write(root, path, text)


def check(root):
    """0 when every rendered file and section matches a render of the results files; 1 with a diff."""
    differ = 0
    for path, text in render_all(root).items():
        disk = read_text(root, path)
        if disk != text:
            differ += 1
            sys.stdout.writelines(difflib.unified_diff(disk.splitlines(True), text.splitlines(True),
                                                       f"{path} (in the tree)", f"{path} (rendered)"))
    if differ:
        print(f"\n{differ} file(s) differ from what the results files render. Rendered text is never edited by "
              f"hand: record results (scripts/bench.sh or scripts/gpu-round.sh --record KIND), or run `{RENDER}` "
              "after a change to the rendering, and commit what it writes.")
    return 1 if differ else 0


# ---- recording -----------------------------------------------------------------------------------------

def dump_stored(doc):
    """latest.json's text: the document indented, a row per line."""
    head = json.dumps({k: v for k, v in doc.items() if k != "rows"}, indent=1)
    rows = ",\n".join("  " + json.dumps(r, separators=(",", ":")) for r in doc["rows"])
    return head[:-2] + ',\n "rows": [' + (f"\n{rows}\n " if rows else "") + "]\n}\n"


def record_bench(root, kind, path, commit, partial):
    doc = read_json(path)
    schema = check_schema(doc, path, (report.RUN_SCHEMA, report.STORED_SCHEMA, None))
    named = bench_kind(doc, path)
    if named != kind:
        raise ResultsError(f"{path}: field 'machine' names a {named} machine ({doc['machine']['gpu_name']}), not {kind}")
    for name in ("date", "command", "mode"):
        field(doc, name, str, path)
    if doc["mode"] == "named-cases" and not partial:
        raise ResultsError(f"{path}: field 'mode' is named-cases: a run of some cases only (bench.sh --cases) would "
                           "replace a whole sweep; record a full one, or pass --partial")
    if schema == report.STORED_SCHEMA:
        stored_bench(doc, path)
        stored = dict(doc, kind=kind)
    else:
        rows = field(doc, "rows", list, path)
        for i, r in enumerate(rows):
            if not isinstance(r, dict):
                raise ResultsError(f"{path}: field 'rows[{i}]' should be an object")
        columns, notes, table_ = report.stored_rows(rows)
        run_commit = doc.get("commit") if doc.get("commit") not in (None, "", "unknown") else None
        stored = {"schema": report.STORED_SCHEMA, "kind": kind, "commit": run_commit or commit or "unknown"}
        stored.update((k, v) for k, v in doc.items() if k not in ("schema", "kind", "commit", "rows"))
        stored.update(columns=columns, notes=notes, rows=table_)
    write(root, f"{BENCH_DIR}/{kind}/latest.json", dump_stored(stored))


def round_entry(doc):
    """A summary's round as tests/results/<kind>.json keeps it: its provenance and its steps."""
    r = doc["round"]
    entry = {"id": f"{r['started']} {r['commit']} {r.get('steps_asked')}: {r.get('suites')}", "started": r["started"], "commit": r["commit"],
             "machine": r["gpu_names"], "gpus": r["gpus"], "command": r.get("command")}
    entry.update((k, r.get(k)) for k in ("steps_asked", "suites", "counts", "test_spec", "status", "tests_skipped"))
    entry["not_built"] = sum(str(t.get("closing_line", "")).startswith(NOT_BUILT) for t in doc["tests"])
    entry["steps"] = [dict(s, closing_line=ABSOLUTE_PATH.sub(r"\1", str(s.get("closing_line", ""))))
                      for s in doc["steps"] if isinstance(s, dict)]
    return entry


def record_rounds(root, kind, paths):
    target = os.path.join(root, TESTS_DIR, f"{kind}.json")
    existing = load_tests(root).get(kind, {"rounds": [], "tests": []})
    rounds = {r["id"]: r for r in existing["rounds"]}
    tests = {t["name"]: t for t in existing["tests"]}
    model, count = kind.rsplit("-x", 1)
    for path in paths:
        doc = read_summary(path)
        names = re.fullmatch(r"(\d+) (.+)", doc["round"]["gpu_names"])
        if gpu_model(names.group(2) if names else doc["round"]["gpu_names"]) != model:
            raise ResultsError(f"{path}: field 'round.gpu_names' is {doc['round']['gpu_names']!r}, not {model} GPUs")
        if len(doc["round"]["gpus"].split(",")) > int(count):
            raise ResultsError(f"{path}: field 'round.gpus' is {doc['round']['gpus']!r}: more GPUs than {kind} has")
        entry = round_entry(doc)
        rounds[entry["id"]] = entry
        for t in doc["tests"]:
            if str(t.get("closing_line", "")).startswith(NOT_BUILT):
                continue  # its binary was not built: it did not run, and an earlier result stands
            old = tests.get(t["name"])
            if old is None or rounds[old["round"]]["started"] <= entry["started"]:
                tests[t["name"]] = dict(t, closing_line=ABSOLUTE_PATH.sub(r"\1", str(t.get("closing_line", ""))),
                                        round=entry["id"])
    last = max(rounds.values(), key=lambda r: r["started"])
    used = {t["round"] for t in tests.values()} | {last["id"]}
    out = {"schema": ROUND_SCHEMA, "kind": kind, "commit": last["commit"], "machine": last["machine"],
           "command": last["command"], "date": last["started"],
           "rounds": sorted((r for r in rounds.values() if r["id"] in used), key=lambda r: (r["started"], r["id"])),
           "tests": [tests[n] for n in sorted(tests)]}
    write(root, os.path.relpath(target, root), json.dumps(out, indent=1) + "\n")


# ---- self-test -----------------------------------------------------------------------------------------

def self_test(root):
    """check on a copy of the tree: passes as it is, fails once a figure of README's rendered section is
    edited by hand, and fails once a marker is gone."""
    script = os.path.abspath(__file__)
    with tempfile.TemporaryDirectory() as tmp:
        for path in ("README.md", "docs", BENCH_DIR, TESTS_DIR):
            src, dst = os.path.join(root, path), os.path.join(tmp, path)
            if os.path.isdir(src):
                shutil.copytree(src, dst)
            elif os.path.exists(src):
                shutil.copy(src, dst)

        def check_copy():
            return subprocess.run([sys.executable, script, "check", "--root", tmp], capture_output=True, text=True)

        readme = os.path.join(tmp, "README.md")
        with open(readme) as f:
            text = f.read()
        start, end = sections_of(text, "README.md")["performance"]
        figure = re.search(r"\d+\.\d+", text[start:end])
        if not figure:
            print("FAIL: README.md's performance section has no figure to edit")
            return 1
        at = start + figure.end() - 1
        edited = text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1:]
        cases = [("as it is", text, 0),
                 (f"with {figure.group(0)} edited to {edited[start + figure.start():at + 1]}", edited, 1),
                 ("without its END marker", text.replace("<!-- END rendered: performance -->", ""), 2)]
        failed = 0
        for what, content, want in cases:
            with open(readme, "w") as f:
                f.write(content)
            r = check_copy()
            ok = r.returncode == want and (want != 1 or "README.md (rendered)" in r.stdout)
            print(f"{'ok' if ok else 'FAIL'}: check on a copy of the tree, README.md {what}: exit status "
                  f"{r.returncode} (wanted {want})")
            if not ok:
                failed += 1
                print(r.stdout[-4000:] + r.stderr[-4000:])
        return 1 if failed else 0


def main(argv):
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["render"] + argv
    ap = argparse.ArgumentParser(description="Render the docs' results sections from the results files, check "
                                             "them, record results.")
    sub = ap.add_subparsers(dest="command", required=True)
    default_root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", default=default_root, help="the repository (default: the one holding this script)")
    sub.add_parser("render", parents=[common], help="write every rendered file and section")
    sub.add_parser("check", parents=[common], help="exit 1 with a diff where the tree differs from a render")
    sub.add_parser("self-test", parents=[common], help="check fails on a copy with a figure edited by hand")
    rec = sub.add_parser("record", parents=[common], help="store results of a machine kind, then render")
    rec.add_argument("--kind", required=True, help="the machine kind: GPU model and count, e.g. h100-x4")
    what = rec.add_mutually_exclusive_group(required=True)
    what.add_argument("--bench", metavar="RESULTS.json", help="a run of scripts/bench.sh: the kind's latest.json")
    what.add_argument("--round", nargs="+", metavar="SUMMARY.json", help="summaries of scripts/gpu-round.sh")
    rec.add_argument("--commit", help="--bench: the commit of a run that does not name one")
    rec.add_argument("--partial", action="store_true", help="--bench: record a run of some cases only (--cases)")
    ci = sub.add_parser("record-ci", parents=[common], help="store scripts/test.sh's record of a CI run, then render")
    ci.add_argument("summary", metavar="TEST-SUMMARY.json", help="<build>/test-summary.json of a clean clone's run")
    a = ap.parse_args(argv)
    root = os.path.abspath(a.root)
    try:
        if a.command == "check":
            return check(root)
        if a.command == "self-test":
            return self_test(root)
        if a.command == "record-ci":
            record_ci(root, a.summary)
        if a.command == "record":
            check_kind(a.kind)
            if a.bench:
                record_bench(root, a.kind, a.bench, a.commit, a.partial)
            else:
                record_rounds(root, a.kind, a.round)
        render(root)
        return 0
    except ResultsError as e:
        print(f"render_results.py: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
