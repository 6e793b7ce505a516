#!/usr/bin/env python3
"""Smoke benchmark of ProxyQueue's engine backend over UCX, next to UCX's own ucx_perftest on the
same path in the same run (its endpoints detecting a failed peer, -e, as the engine's do; and
without, for what that costs UCX): TCP over the loopback interface (UCX_TLS=tcp,self,
UCX_NET_DEVICES=lo), two processes on one machine. A smoke run: it says whether the proxy path adds
overhead to the engine, not what a network delivers.

  benchmarks/engine/smoke.py --build BUILD [--out RESULTS.json] [--no-build] [--repeat N]

BUILD is a build folder configured with -DGPUCOMM_BUILD_BENCHMARKS=ON where gpucomm::ucx and
gpucomm::mpi exist; the script builds bench_engine there (--no-build: runs the bench_engine
already in BUILD/benchmarks, e.g. one built on another machine). Needs mpirun and ucx_perftest (Debian:
openmpi-bin, ucx-utils). TCP over loopback moves a lot from one run to the next, so every
measurement runs --repeat times (default 5), the rounds interleaved (each round runs every case
once), and a row holds the median of its runs, its samples beside it. Writes gpucomm.engine-smoke/2
JSON: the rows (metric, size, value, unit, source, samples; latency rows a median too: the median of
the runs' medians), and the ratios the targets are stated in, of those medians:
  put_bw / ucx_perftest ucp_put_bw, per size (target >= 0.8);
  put_signal_lat median / (1.5 x ucx_perftest ucp_put_lat median + ring_rtt median) (target <= 1);
  and the put bandwidth with puts through the memory agents (the bounce path) over that by RMA.
bench_engine runs twice: puts by RMA, then through the agents (GPUCOMM_TEST_ENGINE_AGENTS=1).
Where a GPU is visible (nvidia-smi -L), it runs again with the heaps in GPU 0's memory
(GPUCOMM_TEST_ENGINE_HEAP=cuda; bandwidth rows only): through the agents always, by RMA (UCX
registering the GPU memory; UCX_TLS gains cuda_copy) when the UCX on the path has CUDA (ucx_info -d
lists cuda_copy).
The ranks run unbound (mpirun --bind-to none): bound to a core each, as Open MPI binds two ranks
by default, the test's thread and the proxy thread would take turns on it, and the latencies would
measure the scheduler's time slices (about 300 us), not the proxy.
"""

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UCX_ENV = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "lo", "UCX_WARN_UNUSED_ENV_VARS": "n"}
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
# (size, iterations): the same for both sides.
BW_CASES = [(65536, 2000), (1 << 20, 200), (4 << 20, 50)]
LAT_ITERATIONS = 2000


def perftest(test, size, iterations, port, error_handling):
    """ucx_perftest's Final line as (p50 overhead us, average overhead us, bandwidth MB/s); with
    error_handling, its endpoints detect a failed peer (-e), as the engine's do."""
    env = dict(os.environ, **UCX_ENV)
    e = ["-e"] if error_handling else []
    server = subprocess.Popen(["ucx_perftest", "-p", str(port)] + e, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):
            time.sleep(0.1)
            out = subprocess.run(["ucx_perftest", "127.0.0.1", "-p", str(port), "-t", test, "-s", str(size), "-n",
                                  str(iterations), "-w", "10"] + e, env=env, capture_output=True, text=True,
                                 timeout=300)
            final = [line for line in out.stdout.splitlines() if line.startswith("Final:")]
            if final:
                f = final[0].split()
                # Final: iterations p50 avg overall bw_avg bw_overall rate_avg rate_overall; UCX's MB is 2^20.
                return float(f[2]), float(f[3]), float(f[6]) * (1 << 20) / 1e6
        raise RuntimeError(f"ucx_perftest {test} gave no result: {out.stdout}{out.stderr}")
    finally:
        server.kill()
        server.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", required=True)
    parser.add_argument("--out")
    parser.add_argument("--no-build", action="store_true", help="run the bench_engine already in BUILD")
    parser.add_argument("--repeat", type=int, default=5, help="runs of every measurement (default 5)")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat takes a count >= 1")
    for tool in ("mpirun", "ucx_perftest"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found (Debian: openmpi-bin, ucx-utils)")
    bench = os.path.join(args.build, "benchmarks", "bench_engine")
    if not args.no_build:
        subprocess.run(["cmake", "--build", args.build, "--target", "bench_engine"], check=True,
                       stdout=subprocess.DEVNULL)
    elif not os.access(bench, os.X_OK):
        sys.exit(f"--no-build: {bench} is not there")
    samples = {}  # (metric, size, iterations, unit, source) -> [(value, median or None)], in run order

    def sample(metric, size, iterations, unit, source, value, median=None):
        samples.setdefault((metric, size, iterations, unit, source), []).append((value, median))

    port = 13600 + os.getpid() % 1000
    command = ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", "--mca", "pml", "ob1", "--mca", "btl",
               "self,tcp", "--mca", "btl_tcp_if_include", "lo", bench]
    gpu = shutil.which("nvidia-smi") is not None and subprocess.run(
        ["nvidia-smi", "-L"], capture_output=True).returncode == 0
    ucx_cuda = "cuda_copy" in subprocess.run(["ucx_info", "-d"], capture_output=True, text=True).stdout
    # Puts by RMA (the default), then through the memory agents (the bounce path for memory UCX
    # cannot register): the same cases, their rows told apart by source; then in GPU memory.
    runs = [("host", False), ("host", True)]
    if gpu:
        runs += [("cuda", False)] if ucx_cuda else []
        runs += [("cuda", True)]
    for _ in range(args.repeat):
        # The reference is UCX's benchmark with endpoints that detect a failed peer (-e), as the
        # engine's do (the same path); without it, for what failure detection costs UCX itself.
        for error_handling in (True, False):
            how = "" if error_handling else ", endpoints without error handling"
            for size, n in BW_CASES:
                port += 1
                _, _, bw = perftest("ucp_put_bw", size, n, port, error_handling)
                sample("put_bw", size, n, "MB/s", "ucx_perftest ucp_put_bw" + how, bw)
            port += 1
            p50, avg, _ = perftest("ucp_put_lat", 8, LAT_ITERATIONS, port, error_handling)
            sample("put_lat", 8, LAT_ITERATIONS, "us", "ucx_perftest ucp_put_lat" + how, avg, p50)
        for heap, agents in runs:
            env = dict(os.environ, **UCX_ENV, **MPI_ENV, GPUCOMM_TEST_ENGINE_AGENTS="1" if agents else "0",
                       GPUCOMM_TEST_ENGINE_HEAP=heap)
            if heap == "cuda" and ucx_cuda:  # GPU memory crosses through UCX's cuda_copy as well
                env["UCX_TLS"] = UCX_ENV["UCX_TLS"] + ",cuda_copy"
            out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
            if out.returncode != 0:
                sys.exit(f"bench_engine failed ({out.returncode}):\n{out.stdout}{out.stderr}")
            via = (", GPU memory" if heap == "cuda" else "") + (", data through the agents" if agents else "")
            for line in out.stdout.splitlines():
                if line.startswith("{"):
                    r = json.loads(line)
                    alone = r["metric"].startswith("engine_")
                    source = ("gpucomm ucx_engine alone" if alone else
                              "gpucomm engine_backend (ring, proxy thread, UCX)") + via
                    sample(r["metric"], r["size"], r["iterations"], r["unit"], source, r["value"], r.get("median"))
    rows = []
    for (metric, size, iterations, unit, source), got in samples.items():
        row = {"metric": metric, "size": size, "iterations": iterations,
               "value": round(statistics.median(v for v, _ in got), 3), "unit": unit, "source": source,
               "samples": [round(v, 3) for v, _ in got]}
        if got[0][1] is not None:
            row["median"] = round(statistics.median(m for _, m in got), 3)
        rows.append(row)

    def find(metric, source_prefix, size, agents=False, gpu_memory=False):
        return next(r for r in rows if r["metric"] == metric and r["source"].startswith(source_prefix)
                    and r["size"] == size and r["source"].endswith("through the agents") == agents
                    and ("GPU memory" in r["source"]) == gpu_memory and "without error handling" not in r["source"])

    ratios = {}
    for size, _ in BW_CASES:
        ratios[f"put_bw/ucx_perftest at {size} B"] = round(
            find("put_bw", "gpucomm", size)["value"] / find("put_bw", "ucx_perftest", size)["value"], 3)
        ratios[f"put_bw through the agents / by RMA at {size} B"] = round(
            find("put_bw", "gpucomm", size, True)["value"] / find("put_bw", "gpucomm", size)["value"], 3)
        if gpu:
            ratios[f"put_bw GPU memory, through the agents / by RMA at {size} B"] = round(
                find("put_bw", "gpucomm", size, True, True)["value"] / find("put_bw", "gpucomm", size, False, True)[
                    "value"], 3) if ucx_cuda else None
    lat = find("put_signal_lat", "gpucomm", 8)["median"]
    bound = 1.5 * find("put_lat", "ucx_perftest", 8)["median"] + find("ring_rtt", "gpucomm", 0)["median"]
    ratios["put_signal_lat median / (1.5 x ucp_put_lat median + ring_rtt median)"] = round(lat / bound, 3)
    # GPUCOMM_COMMIT names the tree where git's HEAD does not (a copied tree, as the GPU round's).
    commit = os.environ.get("GPUCOMM_COMMIT") or subprocess.run(
        ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {
        "schema": "gpucomm.engine-smoke/2",
        "note": "smoke: TCP over the loopback interface, two processes sharing the machine's cores; not a "
                "network figure",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit,
        "machine": {"cpus": os.cpu_count(), "ucx": subprocess.run(["ucx_info", "-v"], capture_output=True,
                                                                  text=True).stdout.splitlines()[0].strip("# "),
                    "ucx_cuda": ucx_cuda, "gpu": subprocess.run(
                        ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"], capture_output=True,
                        text=True).stdout.strip() if gpu else None},
        "environment": UCX_ENV,
        "command": "benchmarks/engine/smoke.py --build BUILD" + (" --out " + args.out if args.out else "") +
                   f" --repeat {args.repeat}",
        "repeat": args.repeat,
        "targets": {"put_bw/ucx_perftest": ">= 0.8", "put_signal_lat bound ratio": "<= 1"},
        "rows": rows,
        "ratios": ratios,
    }
    text = json.dumps(result, indent=1) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
