#!/usr/bin/env python3
"""Host tests of benchmarks/report.py's logic that needs no GPU: reading ncu's CSV, naming its
kernels by copy_profile's launch rows, picking the isolating variants for the limits table, the
headline's targets, and the MoE dispatch/combine rows."""
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


class SweepModeTest(unittest.TestCase):
    def test_cases_runs_are_not_called_full(self):
        self.assertEqual(report.sweep_mode(0, "scripts/bench.sh --skip-build"), "full")
        self.assertEqual(report.sweep_mode(1, "scripts/bench.sh --quick"), "quick")
        self.assertEqual(report.sweep_mode(0, "scripts/bench.sh --cases alltoallv"), "named-cases")
        self.assertEqual(report.sweep_mode(0, None), "full")


class StoredRowsTest(unittest.TestCase):
    """latest.json keeps the rows as a table (stored_rows); load_results gives them back as objects."""

    def test_a_table_gives_back_the_rows_and_shares_notes(self):
        rows = [row("put_bw", "uni", 1.5, note="same"), row("put_bw", "bidir", 3.0, note="same"),
                row("barrier", "", 2.0, extra_field=7), {"case": "x", "status": "skipped", "note": ""}]
        columns, notes, table = report.stored_rows(rows)
        self.assertEqual(columns[:len(report.COLUMNS)], list(report.COLUMNS))
        self.assertEqual(columns[len(report.COLUMNS):], ["extra_field"])
        self.assertEqual(notes, ["same", ""])
        self.assertEqual(report.rows_from_table(columns, notes, table), rows)

    def test_load_results_reads_runs_and_stored_documents(self):
        rows = [row("put_bw", "uni", 1.5, note="n"), row("p_latency", "", 0.9, min=None)]
        columns, notes, table = report.stored_rows(rows)
        stored = {"schema": report.STORED_SCHEMA, "columns": columns, "notes": notes, "rows": table}
        with tempfile.TemporaryDirectory() as d:
            for doc in (stored, {"schema": report.RUN_SCHEMA, "rows": rows}):
                path = os.path.join(d, "r.json")
                with open(path, "w") as f:
                    json.dump(doc, f)
                loaded = report.load_results(path)["rows"]
                self.assertEqual([{k: v for k, v in r.items() if v is not None} for r in loaded],
                                 [{k: v for k, v in r.items() if v is not None} for r in rows])


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


def line(lines, prefix, exact=False):
    found = [x for x in lines if (x.what == prefix if exact else x.what.startswith(prefix))]
    assert len(found) == 1, (prefix, [x.what for x in lines])
    return found[0]


class TargetsTest(unittest.TestCase):
    """The headline lines of P2PCopy, ProxyQueue and the collectives: which figure each takes from
    the rows, and whether it says met, MISSED or not measured (expected values worked out by hand)."""

    def test_p2pcopy_takes_the_recommended_staging_against_nvlinkstore_and_the_raw_bulk_copy(self):
        mib = 1 << 20
        rec = report.P2PCOPY_RECOMMENDED
        rows = [row("p2pcopy_put_bw", rec, 44.0, library="gpucomm", scope="block", ctas=1, size=16 * mib),
                row("p2pcopy_put_bw", rec, 45.0, library="gpucomm", scope="block", ctas=1, size=256 * mib),
                row("p2pcopy_put_bw", "global", 99.0, library="gpucomm", scope="block", ctas=1, size=mib),
                row("p2pcopy_put_bw", "global 4x12KiB/1", 98.0, library="gpucomm", scope="block", ctas=1, size=mib),
                row("p2pcopy_put_bw", "shared", 49.0, library="gpucomm", scope="block", ctas=1, size=mib),
                row("p2pcopy_put_bw", "shared", 60.0, library="gpucomm", scope="block", ctas=4, size=mib),
                row("p2pcopy_put_bw", rec, 330.0, library="gpucomm", scope="block", ctas=8, size=16 * mib),
                row("p2pcopy_put_bw", rec, 336.0, library="gpucomm", scope="block", ctas=8, size=64 * mib),
                row("p2pcopy_put_bw", rec, 400.0, library="gpucomm", scope="block", ctas=16, size=16 * mib),
                row("copy_limits", "bulk-8x16KiB", 320.0, scope="block", ctas=8, size=64 * mib),
                row("copy_limits", "bulk-4x32KiB", 350.0, scope="block", ctas=8, size=64 * mib),
                row("copy_limits", "copy-unroll4", 390.0, scope="block", ctas=8, size=64 * mib),
                row("copy_limits", "bulk-4x32KiB", 999.0, scope="block", ctas=16, size=64 * mib),
                row("put_bw", "uni", 46.0, library="gpucomm", scope="block", ctas=1, size=mib)]
        lines = report.headline(rows)
        one = line(lines, "P2PCopy put_bw, block, 1 CTA, source global")
        self.assertEqual(one.g, 45.0)  # the recommended staging's best size, not another staging's
        self.assertEqual(one.peer, 46.0)
        self.assertAlmostEqual(one.target, 0.97 * 46.0)
        self.assertEqual(one.verdict(), "met")  # within 3 % of NVLinkStore
        self.assertEqual(one.ref, "default staging: 99.0 GB/s")
        self.assertEqual(line(lines, "P2PCopy put_bw, block, 4 CTAs").verdict(), "not measured")
        eight = line(lines, "P2PCopy put_bw, block, 8 CTAs")
        self.assertEqual(eight.g, 336.0)  # 8 CTAs' best size; 16 CTAs are another grid
        self.assertEqual(eight.peer, 350.0)  # the best bulk variant at 8 CTAs, not the SM copy
        self.assertAlmostEqual(eight.target, 0.97 * 350.0)
        self.assertTrue(eight.verdict().startswith("MISSED by 3.5"))
        shared = line(lines, "P2PCopy put_bw, block, 1 CTA, source shared")
        self.assertEqual(shared.g, 49.0)
        self.assertTrue(shared.verdict().startswith("MISSED by 1"))

    def test_proxyqueue_bulk_put_is_held_to_the_copy_engine_at_its_worst_size(self):
        mib = 1 << 20
        rows = [row("ce_copy", "uni", 390.0, size=16 * mib, metric="bandwidth"),
                row("ce_copy", "uni", 396.0, size=64 * mib, metric="bandwidth"),
                row("proxyqueue_put_bw", "uni", 389.0, library="gpucomm", scope="block", size=16 * mib),
                row("proxyqueue_put_bw", "uni", 380.0, library="gpucomm", scope="block", size=64 * mib),
                row("proxyqueue_put_bw", "uni", 10.0, library="gpucomm", scope="thread", size=64 * mib),
                row("proxyqueue_put_signal_pingpong", "set", 2.5, library="gpucomm", scope="warp", size=8),
                row("proxyqueue_put_signal_pingpong", "set", 2.0, library="gpucomm", scope="block", size=64),
                row("proxyqueue_command_rate", "put_nbi 8 B contiguous/per_pe", 30.0, library="gpucomm", threads=32),
                row("proxyqueue_command_rate", "put_nbi 8 B contiguous/per_process", 18.0, library="gpucomm",
                    threads=256),
                row("proxyqueue_command_rate", "put_nbi 8 B scattered/per_process", 25.0, library="gpucomm",
                    threads=256),
                row("proxyqueue_command_rate", "nop/per_process", 70.0, library="gpucomm", threads=256)]
        lines = report.headline(rows)
        bulk = line(lines, "ProxyQueue put_bw")
        self.assertEqual((bulk.g, bulk.peer), (380.0, 396.0))  # 380/396 is worse than 389/390
        self.assertTrue(bulk.verdict().startswith("MISSED by 4"))  # 0.97 x 396 = 384.1
        ping = line(lines, "ProxyQueue put_signal")
        self.assertEqual((ping.g, ping.verdict()), (2.5, "met"))  # 8 B only; <= 3 us
        rate = line(lines, "ProxyQueue commands per second")
        self.assertEqual(rate.g, 18.0)  # per_pe's 30 M is two proxies: 15 each
        self.assertEqual(rate.verdict(), "MISSED by 2.00 M/s")  # contiguous puts only
        self.assertIn("scattered puts: 25", rate.ref)
        self.assertEqual(line(report.headline([]), "ProxyQueue put_bw").verdict(), "not measured")
        legacy = [row("proxyqueue_command_rate", "put_nbi 8 B/per_process", 12.0, library="gpucomm", threads=32)]
        self.assertEqual(line(report.headline(legacy), "ProxyQueue commands per second").g, 12.0)  # older runs' name

    def test_collectives_are_held_to_nccl(self):
        rows = []
        for size, g, n in ((8, 2.4, 5.0), (64 << 10, 4.0, 6.0), (1 << 20, 9.0, 12.0), (256 << 20, 900.0, 1000.0)):
            for case in ("allreduce", "allgather"):
                rows.append(row(case, "float32", g, library="gpucomm", size=size, metric="latency"))
                rows.append(row(case, "float32", n, library="nccl", size=size, metric="latency"))
                rows.append(row(case, "float32", 1000.0 / g, library="gpucomm", size=size, metric="busbw"))
                rows.append(row(case, "float32", 1000.0 / n, library="nccl", size=size, metric="busbw"))
        rows.append(row("allreduce", "float32-no-pdl", 3.6, library="gpucomm", size=8, metric="latency"))
        rows.append(row("allreduce", "bf16", 6.3, library="gpucomm", size=8, metric="latency"))
        rows.append(row("allreduce", "bf16", 6.0, library="nccl", size=8, metric="latency"))
        for tokens, g, n in ((1, 3.0, 10.0), (256, 30.0, 40.0), (2048, 140.0, 141.0)):
            rows.append(row("tp_layer", "allreduce", g, library="gpucomm", size=tokens * 16384, metric="latency"))
            rows.append(row("tp_layer", "allreduce", n, library="nccl", size=tokens * 16384, metric="latency"))
        lines = report.headline(rows)
        self.assertEqual(line(lines, "allreduce time per call, 2 PEs, 8 B, PDL", exact=True).verdict(), "met")  # <= 2.5
        self.assertTrue(line(lines, "allreduce time per call, 2 PEs, 8 B, no PDL").verdict().startswith("MISSED by 0.10"))
        self.assertTrue(line(lines, "allreduce time per call, 2 PEs, 64 KiB").verdict().startswith("MISSED by 0.50"))
        self.assertEqual(line(lines, "allreduce time per call, 2 PEs, 1 MiB").verdict(), "met")  # <= 9 us
        every = line(lines, "allreduce float32 time per call, 2 PEs, every size")
        self.assertEqual(every.verdict(), "met")  # never above NCCL + 3 %
        self.assertIn("over 1.03x NCCL at 0 of 4 sizes", every.g_txt())
        bf16 = line(lines, "allreduce bf16 time per call, 2 PEs, every size")
        self.assertTrue(bf16.verdict().startswith("MISSED by 0.12"))  # 6.3 against 1.03 x 6.0 = 6.18
        self.assertEqual(line(lines, "allreduce busbw, 2 PEs, 256 MiB").target, 1.05 * 1000.0 / 1000.0)
        self.assertEqual(line(lines, "allreduce busbw, 2 PEs, 256 MiB").verdict(), "met")  # 1.11 >= 1.05
        self.assertEqual(line(lines, "allgather busbw, 2 PEs, 256 MiB").verdict(), "met")  # >= NCCL's
        every = line(lines, "allgather time per call, 2 PEs, every size")
        self.assertEqual(every.verdict(), "met")
        self.assertIn("slower than NCCL at 0 of 4 sizes", every.g_txt())
        small = line(lines, "PyTorch TP layer's allreduce, 2 PEs, bf16, 16 KiB .. 4 MiB")
        self.assertEqual((small.g, small.peer), (30.0, 40.0))  # 30/40 is the worse ratio of the two
        self.assertTrue(small.verdict().startswith("MISSED by 2.00"))  # 0.7 x 40 = 28
        self.assertEqual(line(lines, "PyTorch TP layer's allreduce, 2 PEs, bf16, 32 MiB").verdict(), "met")

class MoeTest(unittest.TestCase):
    """bench_moe.py's rows: the baseline is the faster torch + NCCL mode, held against gpucomm's
    graph-captured figure (decode: time <= 0.5x; prefill: >= 250 GB/s); one table per PE count."""

    def rows(self):
        rows = []
        for shape, nbytes, times in (("decode", 1835008, {("gpucomm", "graph"): 40.0, ("gpucomm", "eager"): 90.0,
                                                           ("nccl", "graph"): 120.0, ("nccl", "eager"): 300.0}),
                                     ("prefill", 117440512, {("gpucomm", "graph"): 1000.0, ("gpucomm", "eager"): 1100.0,
                                                             ("nccl", "graph"): 2500.0, ("nccl", "eager"): 2000.0})):
            for (lib, mode), us in times.items():
                common = dict(library=lib, scope="", ctas=16 if lib == "gpucomm" else 0, size=nbytes)
                rows.append(row("moe", f"{shape} {mode}", us, metric="latency", **common))
                rows.append(row("moe", f"{shape} {mode}", 2 * nbytes / us / 1e3, metric="bandwidth", unit="GB/s", **common))
        return rows

    def test_the_baseline_is_the_faster_torch_mode(self):
        lines = report.headline(self.rows())
        decode = line(lines, "MoE dispatch + combine, decode shape, 2 PEs")
        self.assertEqual((decode.g, decode.peer, decode.peer_name), (40.0, 120.0, "torch + NCCL, graph"))
        self.assertAlmostEqual(decode.target, 60.0)
        self.assertEqual(decode.verdict(), "met")
        self.assertIn("eager 90.0 us", decode.g_txt())
        prefill = line(lines, "MoE dispatch + combine, prefill shape, 2 PEs")
        self.assertEqual(prefill.peer_name, "torch + NCCL, eager")  # 2000 us eager beats 2500 us graph
        self.assertAlmostEqual(prefill.g, 2 * 117440512 / 1000.0 / 1e3)  # 234.9 GB/s
        self.assertAlmostEqual(prefill.peer, 2 * 117440512 / 2000.0 / 1e3)
        self.assertTrue(prefill.verdict().startswith("MISSED by 15"))

    def test_a_missing_baseline_or_gpucomm_is_not_measured(self):
        only_gpucomm = [x for x in self.rows() if x["library"] == "gpucomm"]
        decode = line(report.headline(only_gpucomm), "MoE dispatch + combine, decode shape")
        self.assertEqual((decode.target_txt(), decode.verdict()), ("<= 0.5x the torch baseline", "not measured"))
        only_nccl = [x for x in self.rows() if x["library"] == "nccl"]
        self.assertEqual(line(report.headline(only_nccl), "MoE dispatch + combine, prefill").verdict(), "not measured")
        self.assertEqual([x for x in report.headline([]) if x.what.startswith("MoE")], [])

    def test_one_table_per_pe_count_and_none_in_the_generic_tables(self):
        rows = self.rows() + [dict(x, npes=4) for x in self.rows()]
        md = report.moe_tables(rows)
        self.assertEqual([x for x in md if x.startswith("### ")], ["### moe · 2 PEs", "### moe · 4 PEs"])
        decode = next(x for x in md if x.startswith("| decode"))
        self.assertEqual(decode, "| decode | 1.84 MB | 40.0 | 90.0 | 120 | 300 | 3.00x (graph) | 91.8 | 30.6 | 16 |")
        prefill = next(x for x in md if x.startswith("| prefill"))
        self.assertIn("| 2.00x (eager) | 235 | 117 | 16 |", prefill)
        self.assertFalse([x for x in report.tables(rows) if "moe" in x])
        self.assertIn("## MoE dispatch and combine next to torch + NCCL", report.markdown_text({
            "rows": rows, "machine": {"gpu_name": "GPU", "gpu_count_used": 4, "driver_version": "",
                                      "cuda_runtime_version": 0, "topology": ""},
            "command": "x", "mode": "full", "seconds": 1, "date": "d", "semantics": "s"}))


if __name__ == "__main__":
    unittest.main()
