"""Speed and peak memory of ``rankmap solve`` at 1,024 / 16,384 / 131,072 GPUs.

Each size runs in a fresh subprocess (so peak RSS is that solve's own) a few
times; the table reports the median wall time of graph build, cluster model
and solve, peak RSS, the chosen order, status and cost ratio against the
Megatron default layout.

    python benchmarks/bench_solve.py                 # all sizes, 3 repeats
    python benchmarks/bench_solve.py --sizes 16384 --repeat 1

Clusters: hosts of 8 GPUs on NVSwitch (450 GB/s), 50 GB/s per GPU NIC, leaves
of 32 hosts (12,800 GB/s of NIC links) with 6,400 GB/s of uplinks (2:1), pods of
16 leaves with 51,200 GB/s of uplinks (2:1), spines of 32 pods (2:1): three switch
levels above the host, every link a physical capacity.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
from rankmap.solver import SolveOptions, cluster_from_graph, fat_tree_cluster, parallel_config, solve
W, orders = int(sys.argv[1]), sys.argv[2]
hosts = W // 8
t0 = time.perf_counter()
g = fat_tree_cluster(hosts, 8, tiers=[(32, 2.0), (16, 2.0), (32, 2.0)])
t1 = time.perf_counter()
cl = cluster_from_graph(g)
t2 = time.perf_counter()
cfg = parallel_config(W, tp=8, pp=8, cp=2, ep=4, etp=1)
traffic = {"tp": 4e9, "cp": 1e9, "dp": 2e9, "pp": 6e9, "ep": 3e9, "edp": 1e9}
r = solve(cl, cfg, traffic, SolveOptions(orders=orders, time_limit_seconds=30))
t3 = time.perf_counter()
print(json.dumps({
    "build_s": t1 - t0, "cluster_s": t2 - t1, "solve_s": t3 - t2,
    "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "order": r.order, "status": r.status, "cost": r.cost.total_seconds,
    "baseline": r.baseline.cost.total_seconds, "bound": r.bound_seconds,
    "orders": len(r.orders_searched),
}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1024,16384,131072")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--orders", default="all")
    args = ap.parse_args()
    rows = []
    for W in [int(x) for x in args.sizes.split(",")]:
        runs = []
        for _ in range(args.repeat):
            out = subprocess.run([sys.executable, "-c", CHILD, str(W), args.orders], capture_output=True, text=True)
            if out.returncode:
                print(out.stderr, file=sys.stderr)
                return 1
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        med = {k: statistics.median(r[k] for r in runs) for k in ("build_s", "cluster_s", "solve_s", "peak_rss_mib")}
        last = runs[-1]
        rows.append((W, med, last))
    print(f"| GPUs | graph build s | cluster model s | solve s (median of {args.repeat}) | peak RSS MiB | orders | "
          f"chosen | status | cost / default | gap to bound |")
    print("|---:|---:|---:|---:|---:|---:|---|---|---:|---:|")
    for W, med, last in rows:
        ratio = last["cost"] / last["baseline"] if last["baseline"] else 1.0
        gap = last["cost"] / last["bound"] - 1 if last["bound"] else float("nan")
        print(f"| {W:,} | {med['build_s']:.2f} | {med['cluster_s']:.2f} | {med['solve_s']:.2f} | "
              f"{med['peak_rss_mib']:.0f} | {last['orders']} | {last['order']} | {last['status']} | {ratio:.3f} | "
              f"{100 * gap:.0f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
