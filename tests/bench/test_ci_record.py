#!/usr/bin/env python3
"""Host tests of CI's own record: scripts/lib/test_summary.py (what scripts/test.sh writes when it ends)
and scripts/render_results.py record-ci (what stores it and renders the "CI" section of status.md): the
steps and ctest's counts come through, a failed run or a dirty tree is refused, and the rendered section
names no commit."""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import render_results  # noqa: E402


def summarize(tmp, status, log_text):
    log = os.path.join(tmp, "ctest.log")
    with open(log, "w") as f:
        f.write(log_text)
    out = os.path.join(tmp, "test-summary.json")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "lib", "test_summary.py"), "--out", out, "--status",
                    str(status), "--seconds", "1234", "--steps", "packages=3 configure=10 build=1000 ctest=200",
                    "--ctest-log", log], check=True)
    with open(out) as f:
        return out, json.load(f)


class TestSummaryTest(unittest.TestCase):
    def test_steps_counts_and_status(self):
        with tempfile.TemporaryDirectory() as tmp:
            _, doc = summarize(tmp, 0, "...\n97% tests passed, 2 tests failed out of 58\n")
            self.assertEqual(doc["schema"], "gpucomm.test-summary/1")
            self.assertEqual(doc["status"], "passed")
            self.assertEqual(doc["seconds"], 1234)
            self.assertEqual([s["name"] for s in doc["steps"]], ["packages", "configure", "build", "ctest"])
            self.assertEqual(doc["steps"][2]["seconds"], 1000)
            self.assertEqual(doc["ctest"], {"total": 58, "failed": 2})
            _, failed = summarize(tmp, 2, "no closing line\n")
            self.assertEqual(failed["status"], "failed")
            self.assertEqual(failed["exit_code"], 2)
            self.assertIsNone(failed["ctest"])


class RecordCiTest(unittest.TestCase):
    def record(self, doc):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "summary.json")
            with open(path, "w") as f:
                json.dump(doc, f)
            root = os.path.join(tmp, "repo")
            os.makedirs(root)
            render_results.record_ci(root, path)
            with open(os.path.join(root, render_results.CI_SUMMARY)) as f:
                return json.load(f)

    def passing(self):
        with tempfile.TemporaryDirectory() as tmp:
            _, doc = summarize(tmp, 0, "100% tests passed, 0 tests failed out of 58\n")
        doc["commit"] = "0123456789abcdef0123456789abcdef01234567"
        return doc

    def test_a_clean_passing_run_is_stored(self):
        doc = self.passing()
        self.assertEqual(self.record(doc), doc)

    def test_a_failed_run_or_a_dirty_tree_is_refused(self):
        failed = dict(self.passing(), status="failed", exit_code=1)
        with self.assertRaisesRegex(render_results.ResultsError, "passing run"):
            self.record(failed)
        dirty = dict(self.passing(), commit="0123456789abcdef0123456789abcdef01234567+dirty")
        with self.assertRaisesRegex(render_results.ResultsError, "clean checkout"):
            self.record(dirty)

    def test_the_rendered_section_names_no_commit(self):
        doc = self.passing()
        text = "\n".join(render_results.ci_md(doc, render_results.STATUS))
        self.assertIn("passed in 1234 s", text)
        self.assertIn("build 1000 s", text)
        self.assertIn("ctest 58/58 passed", text)
        self.assertIsNone(re.search(r"\b[0-9a-f]{7,40}\b", text))


class ClosingLineTest(unittest.TestCase):
    def test_colours_leave_a_failed_test_closing_line(self):
        # Catch2 under mpirun colours its totals; a record may hold them with or without the escape.
        for esc in ("\x1b", " "):
            line = f"killed at the time limit (200 s); test cases: 1 {esc}[0;37m | {esc}[0m {esc}[1;31m1 failed{esc}[0m"
            self.assertEqual(render_results.uncoloured(line),
                             "killed at the time limit (200 s); test cases: 1 | 1 failed")
        self.assertEqual(render_results.uncoloured("the [barrier] cases"), "the [barrier] cases")


if __name__ == "__main__":
    unittest.main()
