#!/usr/bin/env python3
"""Host test of bench_moe.py's torch baseline and sizes, on the CPU (no GPU, no extension): every
rank's pack, a simulated all_to_all_single, unpack, the experts, partials, the reverse exchange and
finish, checked against a reference written apart (loops over every routed slot) and against
combine_reference; then TorchBaseline itself, eager and with fixed splits, over a gloo process
group of 3 processes. Skipped where torch is not installed (CTest's example_torch.bench_moe)."""
import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
except ImportError:
    torch = None

if torch is not None:
    import bench_moe as bm


def exchange(chunks_of: list[list]) -> list:
    """all_to_all_single by hand: chunks_of[s][q] goes from s to q; q gets its chunks in source order."""
    return [torch.cat([chunks_of[s][q] for s in range(len(chunks_of))]) for q in range(len(chunks_of))]


@unittest.skipIf(torch is None, "torch is not installed")
class BaselineTest(unittest.TestCase):
    def routing(self, size, e, k, t, seed, minus_ones=False):
        every = [bm.route(t, size, e, k, seed, r) for r in range(size)]
        if minus_ones:  # slots routed nowhere: the baseline must skip them as gpucomm does
            every = [(torch.where(torch.rand(ids.shape, generator=torch.Generator().manual_seed(9 + r)) < 0.3, -1, ids), w)
                     for r, (ids, w) in enumerate(every)]
        tokens = [(torch.randn((t, 256), generator=torch.Generator().manual_seed(77 + r)) * 3).to(bm.BF16)
                  for r in range(size)]
        return every, tokens

    def reference_rows(self, every, tokens, rank, e):
        """(expert, source, token, slot, weight) of every row `rank` receives, in gpucomm's order."""
        found = []
        for s, (ids, w) in enumerate(every):
            for t in range(ids.shape[0]):
                for j in range(ids.shape[1]):
                    x = int(ids[t, j])
                    if x >= 0 and x // e == rank:
                        found.append((x % e, s, t, j, float(w[t, j])))
        return sorted(found, key=lambda r: r[:4])

    def run_baseline(self, size, e, k, t, seed, minus_ones=False):
        every, tokens = self.routing(size, e, k, t, seed, minus_ones)
        sizes = [bm.exchange_sizes([x[0] for x in every], r, e) for r in range(size)]
        sent = [bm.pack(tokens[r], every[r][0], every[r][1], e, size, sum(sizes[r][0])) for r in range(size)]
        for r in range(size):  # by destination rank, then token: each chunk the tokens with an expert there
            ids = every[r][0]
            for q, chunk in enumerate(torch.split(sent[r].meta[:, 0], sizes[r][0])):
                want = [t_ for t_ in range(t) if any(int(x) >= 0 and int(x) // e == q for x in ids[t_])]
                self.assertEqual(chunk.tolist(), want)
        rows = exchange([list(torch.split(sent[s].rows, sizes[s][0])) for s in range(size)])
        metas = exchange([list(torch.split(sent[s].meta, sizes[s][0])) for s in range(size)])
        outs = []
        backs = [[None] * size for _ in range(size)]
        for q in range(size):
            send, recv, n = sizes[q]
            self.assertEqual(rows[q].shape[0], sum(recv))
            got = bm.unpack(metas[q], e, n)
            expert_rows = rows[q].index_select(0, got.msg)
            want = self.reference_rows(every, tokens, q, e)
            self.assertEqual(len(want), n)
            self.assertEqual(got.counts.tolist(), [sum(1 for x in want if x[0] == le) for le in range(e)])
            src = bm.sources(metas[q], got, recv)
            self.assertEqual(src.tolist(), [[s, t_, j] for _, s, t_, j, _ in want])
            self.assertEqual(got.weights.tolist(), [w for *_, w in want])
            for i, (_, s, t_, _, _) in enumerate(want):
                self.assertTrue(torch.equal(expert_rows[i].view(torch.int16), tokens[s][t_].view(torch.int16)))
            y = bm.expert_outputs(expert_rows, got.counts, q, e, n + 5)  # room past the rows, as gpucomm's
            part = bm.partials(y, got)
            self.assertEqual(part.shape[0], sum(recv))
            for s, chunk in enumerate(torch.split(part, recv)):
                backs[s][q] = chunk
        for r in range(size):
            back = torch.cat(backs[r])  # the reverse exchange: from each rank, in rank order
            out = bm.finish(back, sent[r], t)
            ids, w = every[r]
            exact, tol = bm.combine_reference(tokens[r], ids.clamp(min=0), torch.where(ids >= 0, w, 0.0))
            self.assertEqual(bm.compare_out("baseline", out, exact, tol), "")
            outs.append(out)
        return every, outs

    def test_two_ranks_top8_of_16(self):
        self.run_baseline(size=2, e=8, k=8, t=24, seed=1)

    def test_three_ranks_sparse_slots(self):
        self.run_baseline(size=3, e=2, k=3, t=17, seed=5, minus_ones=True)

    def test_a_rank_with_no_tokens(self):
        every, _ = self.routing(2, 4, 2, 0, 3)
        self.assertEqual(bm.exchange_sizes([x[0] for x in every], 0, 4), ([0, 0], [0, 0], 0))
        self.run_baseline(size=2, e=4, k=2, t=0, seed=3)

    def test_a_wrong_sum_is_caught(self):
        x = torch.ones((2, 256), dtype=bm.BF16)
        ids, w = torch.tensor([[0, 1], [2, 3]]), torch.tensor([[0.5, 0.5], [0.25, 0.75]])
        exact, tol = bm.combine_reference(x, ids, w)
        self.assertAlmostEqual(float(exact[0, 0]), 0.5 + 0.25)  # 2^0 and 2^-1
        self.assertAlmostEqual(float(exact[1, 0]), 0.25 * 0.25 + 0.75 * 0.125)
        self.assertEqual(bm.compare_out("x", exact.to(bm.BF16), exact, tol), "")
        self.assertIn("off", bm.compare_out("x", (exact * 1.02).to(bm.BF16), exact, tol))

    def test_route_is_seeded_and_distinct(self):
        a, wa = bm.route(64, 2, 8, 8, 1, 0)
        b, _ = bm.route(64, 2, 8, 8, 1, 0)
        c, _ = bm.route(64, 2, 8, 8, 1, 1)
        self.assertTrue(torch.equal(a, b))
        self.assertFalse(torch.equal(a, c))
        self.assertEqual(tuple(a.shape), (64, 8))
        self.assertTrue(all(len(set(r)) == 8 for r in a.tolist()))
        self.assertTrue(bool(((a >= 0) & (a < 16)).all()))
        self.assertTrue(torch.allclose(wa.sum(1), torch.ones(64)))


@unittest.skipIf(torch is None, "torch is not installed")
class BytesTest(unittest.TestCase):
    def test_one_row_per_token_and_other_rank(self):
        # 3 ranks, 2 experts each (rank q: experts 2q, 2q + 1). Rank 1's tokens:
        ids = torch.tensor([[2, 3, -1],  # both on rank 1 (itself): nothing crosses a link
                            [0, 1, 2],   # rank 0 twice (one row), itself once: 1
                            [0, 4, 5],   # ranks 0 and 2: 2
                            [5, -1, -1]])  # rank 2: 1
        self.assertEqual(bm.dispatched_pairs(ids, 1, 3, 2), 4)
        self.assertEqual(bm.dispatched_bytes(4, 7168), 4 * 2 * 7168)
        self.assertEqual(bm.dispatched_pairs(ids, 0, 3, 2), 4)  # as rank 0's: tokens 0, 1, 2, 3 one each
        self.assertAlmostEqual(bm.gb_per_s(1e6, 10.0), 200.0)  # 2 x 1 MB in 10 us

    def test_exchange_sizes(self):
        every = [torch.tensor([[0, 1], [2, 3]]), torch.tensor([[3, -1], [1, 2], [0, 0]])]
        # rank 0: token 0 to itself (2 rows), token 1 to rank 1 (2 rows); rank 1: token 0 to itself,
        # token 1 to both, token 2 to rank 0 (expert 0 twice: 2 rows, one message)
        self.assertEqual(bm.exchange_sizes(every, 0, 2), ([1, 1], [1, 2], 2 + 1 + 2))
        self.assertEqual(bm.exchange_sizes(every, 1, 2), ([2, 2], [1, 2], 2 + 1 + 1))

    def test_arguments(self):
        a = bm.arguments([])
        self.assertEqual(a.shapes, [("decode", 128), ("prefill", 4096)])
        self.assertEqual((a.hidden, a.top_k, a.experts_per_rank), (7168, 8, 8))
        a = bm.arguments(["--shapes", "prefill", "--prefill-tokens", "512", "--quick"])
        self.assertEqual((a.shapes, a.calls, a.repetitions), ([("prefill", 512)], 10, 5))
        with self.assertRaises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
            bm.arguments(["--shapes", "training"])

    def test_workspace_bound_covers_the_formula(self):
        # gpucomm/collectives/moe_shape.hpp's example: P = 8, Tm = 128, H = 7168 is about 29 MiB.
        b = bm.gpucomm_workspace_bound(8, 7168, 8, 128)
        self.assertGreater(b, 29 << 20)
        self.assertLess(b, 40 << 20)


def gloo_rank(rank: int, size: int, store: str, results) -> None:
    """One rank of GlooTest: both baselines' dispatch and combine over torch.distributed (gloo)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=size)
    try:
        e, k, t = 4, 3, 20 + 7 * rank  # ranks of different token counts
        every = [bm.route(20 + 7 * r, size, e, k, 2, r) for r in range(size)]
        ids, w = every[rank]
        x = (torch.randn((t, 256), generator=torch.Generator().manual_seed(rank)) * 2).to(bm.BF16)
        fixed = bm.exchange_sizes([a[0] for a in every], rank, e)
        exact, tol = bm.combine_reference(x, ids, w)
        verdicts = []
        for base in (bm.TorchBaseline(size, e), bm.TorchBaseline(size, e, fixed=fixed)):
            rows, got, sent, meta = base.dispatch(x, ids, w)
            y = bm.expert_outputs(rows, got.counts, rank, e, rows.shape[0])
            out = base.combine(y, got, sent, t)
            verdicts.append((base.last == fixed, rows.shape[0] == fixed[2], bm.compare_out("baseline", out, exact, tol)))
        results.put((rank, verdicts))
    finally:
        dist.destroy_process_group()


@unittest.skipIf(torch is None, "torch is not installed")
class GlooTest(unittest.TestCase):
    def test_the_baseline_over_a_process_group(self):
        import torch.multiprocessing as mp

        size = 3
        ctx = mp.get_context("spawn")
        results = ctx.Queue()
        with tempfile.TemporaryDirectory() as d:
            procs = [ctx.Process(target=gloo_rank, args=(r, size, os.path.join(d, "store"), results))
                     for r in range(size)]
            for p in procs:
                p.start()
            got = dict(results.get(timeout=120) for _ in range(size))
            for p in procs:
                p.join(30)
        for r in range(size):
            # eager: the splits read on the host are the routing's; fixed: given; both outputs exact
            self.assertEqual(got[r], [(True, True, ""), (True, True, "")], f"rank {r}")


if __name__ == "__main__":
    unittest.main()
