"""Batch throughput: the same jobs through the local process pool and through a local Ray instance.

Writes ``--jobs`` small, varied jobs (default 200: 8- and 16-GPU clusters of
four shapes, different tp/cp/ep/pp sizes, traffic models, modes and order
policies; a 30 s time limit that none of them comes near, so that the
wall-clock deadline never cuts a search and results do not depend on load) as one JSONL batch input, then solves it with
:func:`rankmap.batch.solve_many` through ``executor="process"`` and
``executor="ray"`` (a local Ray started for each run on ``--workers`` CPUs,
as ``rankmap batch --executor ray`` does), ``--repeat`` times each, alternating.
Prints jobs per second of each run (wall time of the whole call: pool or Ray
start-up included), the medians and the ratio ray / process, and checks
that both gave the same results (timing fields removed).

    python benchmarks/bench_batch.py                 # 200 jobs, 2 workers, 3 runs each (~2 min on 2 cores)
    python benchmarks/bench_batch.py --jobs 50 --repeat 1
    python benchmarks/bench_batch.py --json

Needs the ray extra (``pip install 'rankmap[ray]'``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from rankmap.batch import solve_many
from rankmap.solver.fabric.builders import fat_tree_cluster
from rankmap.solver.formats.graphfile import node_link_text

#: (file name, hosts, GPUs per host, intra, tiers)
CLUSTERS = [
    ("nvswitch-2x4.json", 2, 4, "nvswitch", ()),
    ("pcie-4x2.json", 4, 2, "pcie", ()),
    ("nvswitch-4x4-leaves.json", 4, 4, "nvswitch", [(2, 2.0)]),
    ("pairs-2x8.json", 2, 8, "nvlink-pairs", ()),
]
#: size / traffic variants; every job gets one (cycled) on one cluster (cycled independently)
SIZES = [
    {"tp": 2, "pp": 2, "traffic": {"tp": 4e9, "pp": 8e9, "dp": 1e8}},
    {"tp": 4, "model": "llama3-8b"},
    {"tp": 2, "model": "llama3-8b", "mode": "free"},
    {"tp": 2, "ep": 2, "traffic": {"ep": 8e9, "dp": 1e9}, "orders": "all"},
    {"pp": 2, "traffic": {"pp": 1e9, "dp": 4e9}, "orders": "megatron-cli"},
    {"tp": 2, "cp": 2, "model": "gpt-24l-4096", "exposure": "dp=0.2"},
    {"tp": 4, "ep": 2, "etp": 1, "model": "mixtral-8x7b"},
]


def write_jobs(folder: str, n: int) -> str:
    """Write the clusters and ``n`` jobs (JSONL) into ``folder``; the JSONL path."""
    for name, hosts, gph, intra, tiers in CLUSTERS:
        g = fat_tree_cluster(hosts, gph, intra=intra, tiers=tiers)
        with open(os.path.join(folder, name), "w", encoding="utf-8") as fh:
            fh.write(node_link_text(g))
    path = os.path.join(folder, "jobs.jsonl")
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(n):
            job = {"name": f"job{i:03d}", "cluster": CLUSTERS[i % len(CLUSTERS)][0], "time_limit": 30, "seed": i % 3}
            job.update(SIZES[(i // len(CLUSTERS)) % len(SIZES)])
            fh.write(json.dumps(job) + "\n")
    return path


def _strip(docs):
    out = []
    for d in docs:
        d = json.loads(json.dumps(d))
        if d["ok"]:
            d["result"].pop("solve_seconds", None)
        out.append(d)
    return out


def run_once(path: str, executor: str, workers: int) -> tuple[float, list]:
    """Seconds for the whole batch through ``executor`` (start-up included), and its documents."""
    t0 = time.perf_counter()
    docs = solve_many(path, executor, workers=workers, omit_groups=True)
    return time.perf_counter() - t0, docs


def main(argv=None) -> int:
    """Run the benchmark; prints one line per run, then medians and the ratio."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2, help="processes of the pool = CPUs of the local Ray")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="one JSON document instead of text")
    args = ap.parse_args(argv)
    try:
        import ray  # noqa: F401
    except ImportError:
        print("bench_batch: needs Ray: pip install 'rankmap[ray]'", file=sys.stderr)
        return 2
    runs: dict[str, list[float]] = {"process": [], "ray": []}
    results = {}
    with tempfile.TemporaryDirectory(prefix="rankmap-bench-batch-") as tmp:
        path = write_jobs(tmp, args.jobs)
        for r in range(args.repeat):
            for executor in ("process", "ray"):
                secs, docs = run_once(path, executor, args.workers)
                runs[executor].append(secs)
                results[executor] = _strip(docs)
                failed = sum(1 for d in docs if not d["ok"])
                if not args.json:
                    print(f"run {r + 1}  {executor:7s}  {args.jobs} jobs in {secs:6.2f} s  "
                          f"{args.jobs / secs:6.1f} jobs/s  ({failed} failed)", flush=True)
    same = results["process"] == results["ray"]
    differ = [a["name"] for a, b in zip(results["process"], results["ray"]) if a != b]
    if differ and not args.json:
        print(f"results differ on {len(differ)} jobs: {', '.join(differ[:10])}")
    med = {k: statistics.median(v) for k, v in runs.items()}
    rate = {k: args.jobs / v for k, v in med.items()}
    ratio = rate["ray"] / rate["process"]
    summary = {
        "jobs": args.jobs, "workers": args.workers, "repeat": args.repeat, "cpus": os.cpu_count(),
        "seconds": runs, "median_seconds": med, "median_jobs_per_second": rate,
        "ratio_ray_over_process": ratio, "same_results": same, "differ": differ,
    }
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print(f"median  process {rate['process']:.1f} jobs/s ({med['process']:.2f} s)   "
              f"ray {rate['ray']:.1f} jobs/s ({med['ray']:.2f} s)   "
              f"ratio ray/process {ratio:.2f}   same results: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
