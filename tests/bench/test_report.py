#!/usr/bin/env python3
"""Host tests of benchmarks/report.py's logic that needs no GPU: reading ncu's CSV, naming its
kernels by copy_profile's launch rows, and picking the isolating variants for the limits table."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
import report  # noqa: E402

PORT = "l1tex__m_l1tex2xbar_req_cycles_active.max.pct_of_peak_sustained_elapsed"
STALL = "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio"


def row(case, variant, value, **kw):
    r = {"case": case, "library": kw.pop("library", "cuda"), "variant": variant, "scope": kw.pop("scope", "thread"),
         "ctas": kw.pop("ctas", 1), "npes": 2, "size": kw.pop("size", 8), "metric": kw.pop("metric", "latency"),
         "unit": kw.pop("unit", "us"), "value": value, "status": kw.pop("status", "ok")}
    r.update(kw)
    return r


class NcuTest(unittest.TestCase):
    def write(self, directory, name, text):
        path = os.path.join(directory, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_kernels_are_named_by_the_launch_rows_in_order(self):
        with tempfile.TemporaryDirectory() as d:
            csv_path = self.write(d, "ncu.csv", "\n".join([
                "==PROF== Connected to process 1",
                f'"ID","Kernel Name","gpu__time_duration.sum","{PORT}","{STALL}"',
                '"","","ns","%","inst"',
                '"0","copy_limit_kernel<0>","1,000,000","79.8","0"',
                '"1","copy_limit_kernel<2>","2,000,000","80.7","91.0"',
                "==PROF== Disconnected",
            ]) + "\n")
            launches = self.write(d, "launches.jsonl", "\n".join(json.dumps(x) for x in [
                {"case": "copy_profile", "variant": "store-only", "ctas": 1, "size": 64 << 20, "metric": "launch"},
                {"case": "copy_profile", "variant": "copy-unroll8", "ctas": 4, "size": 64 << 20, "metric": "launch"},
            ]) + "\n")
            profile = report.load_ncu(csv_path, launches)
        self.assertEqual([p["variant"] for p in profile], ["store-only", "copy-unroll8"])
        self.assertEqual([p["ctas"] for p in profile], [1, 4])
        self.assertAlmostEqual(profile[0]["gbps"], (64 << 20) / 1e6)  # bytes per ns = GB/s
        self.assertAlmostEqual(profile[1]["gbps"], (64 << 20) / 2e6)
        self.assertEqual(profile[1][PORT], 80.7)
        self.assertEqual(profile[1][STALL], 91.0)
        self.assertIsNone(profile[0]["smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"])

    def test_missing_or_empty_profile(self):
        self.assertEqual(report.load_ncu("", ""), [])
        self.assertEqual(report.load_ncu("/nonexistent/ncu.csv", ""), [])
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(report.load_ncu(self.write(d, "x.csv", "==ERROR== no kernels profiled\n"), ""), [])


class LimitsTest(unittest.TestCase):
    def rows(self):
        big = 256 << 20
        bw = dict(scope="block", size=big, metric="bandwidth", unit="GB/s")
        return [
            row("put_bw", "uni", 45.6, library="gpucomm", **bw),
            row("copy_limits", "store-only", 50.6, **bw),
            row("copy_limits", "copy-unroll2", 45.7, **bw),
            row("copy_limits", "copy-unroll8", 45.5, **bw),
            row("copy_limits", "copy-unroll8-nc", 45.4, **bw),  # a prefix of another name must not match it
            row("copy_limits", "bulk-4x16KiB", 40.0, **bw),
            row("copy_limits", "bulk-4x32KiB", 43.2, **bw),
            row("copy_limits", "copy-unroll4", 99.0, status="error", **bw),  # failed points are left out
            row("put_signal_pingpong", "set", 1.87, library="gpucomm"),
            row("pingpong_limits", "loaded data release-post acquire-poll (put_signal) [cudaMalloc]", 1.78),
            row("pingpong_limits", "loaded data release-post acquire-poll (put_signal) [VMM+RDMA-capable]", 1.79),
            row("pingpong_limits", "volatile-flag (not ordered) [cudaMalloc]", 0.73),
        ]

    def test_each_variant_by_its_exact_name_and_memory(self):
        summary = {what: (g, variants) for what, g, variants in report.limits_summary(self.rows())}
        g, v = summary["put_bw uni, block, 1 CTA"]
        self.assertEqual(g, "45.6 GB/s")
        self.assertIn("SM copy loop, unroll 2 (gpucomm's): 45.7 GB/s", v)
        self.assertIn("unroll 8: 45.5 GB/s", v)
        self.assertIn("unroll 8, non-coherent loads: 45.4 GB/s", v)
        self.assertIn("bulk-copy unit, best staging: 43.2 GB/s", v)
        self.assertNotIn("unroll 4:", v)
        g, v = summary["put_signal ping-pong, thread, 8 B, one way"]
        self.assertEqual(g, "1.87 us")
        self.assertIn("volatile flag (not ordered): 0.73 us", v)
        self.assertIn("(put_signal's work): 1.78 us", v)
        self.assertIn("(the heap's kind): 1.79 us", v)

    def test_targets_without_variants_are_left_out(self):
        whats = [what for what, _, _ in report.limits_summary(self.rows())]
        self.assertNotIn("barrier, 2 PEs, thread", whats)
        self.assertEqual(report.limits_md([], []), [])

    def test_latency_variants_make_one_table_per_case(self):
        md = report.tables(self.rows())
        titles = [line for line in md if line.startswith("### pingpong_limits")]
        self.assertEqual(len(titles), 1)
        self.assertEqual(len([line for line in md if line.startswith("### copy_limits")]), 6)  # one per variant


if __name__ == "__main__":
    unittest.main()
