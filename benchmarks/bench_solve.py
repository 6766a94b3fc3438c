"""Speed and peak memory of ``rankmap solve`` at 1,024 / 16,384 / 131,072 GPUs.

Each size runs in a fresh subprocess (so peak RSS is that solve's own) a few
times; the table reports the median wall time of graph build, cluster model
and solve, peak RSS, the chosen order, status and cost ratio against the
Megatron default layout.

    python benchmarks/bench_solve.py                 # all sizes, 3 repeats
    python benchmarks/bench_solve.py --sizes 16384 --repeat 1
    python benchmarks/bench_solve.py --routes json,kubernetes,slurm --repeat 3   # the CLI per input route

Routes mode (``--routes``, issue 28.2): ``rankmap solve`` as a whole process (reading the input,
building the cluster, writing the answer) on ``--gpus`` GPUs (default 131,072) from each input
route: a node-link JSON graph, ``kubectl get nodes -o json`` with two topology labels
(``--kubernetes-nodes``), a Slurm ``topology.conf`` tree (``--fabric``).  One cluster: hosts of 8
H100 under leaves of 256 hosts and one spine, 4:1 oversubscribed, job tp8 cp2 pp16, ``--time-limit``
(default 30).  Each run's peak RSS is the child's own (``os.wait4``); the table shows every run's
wall time and peak RSS, and the worst against the targets (2 GiB, limit + 3 s).

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


#: Routes mode: hosts per leaf and the leaves' oversubscription (the 64-leaf x 256-host 4:1 tree of issue 28).
LEAF_HOSTS = 256
OVERSUBSCRIPTION = 4.0


def write_route(route: str, gpus: int, folder: str) -> list[str]:
    """Write the input of ``route`` for ``gpus`` GPUs into ``folder``; the ``rankmap solve`` arguments that read it."""
    import os

    hosts = gpus // 8
    names = [f"node{i:05d}" for i in range(hosts)]
    if route == "json":
        from rankmap.solver import fat_tree_cluster
        from rankmap.solver.formats.graphfile import node_link_text

        g = fat_tree_cluster(hosts, 8, tiers=[(LEAF_HOSTS, OVERSUBSCRIPTION)], host_names=names)
        path = os.path.join(folder, "cluster.json")
        with open(path, "w") as f:
            f.write(node_link_text(g))
        return [path]
    if route == "kubernetes":
        items = [{"kind": "Node", "metadata": {"name": n, "labels": {
            "kubernetes.io/hostname": n, "example.com/spine": "spine0", "example.com/leaf": f"leaf{i // LEAF_HOSTS}",
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
            "status": {"capacity": {"cpu": "192", "nvidia.com/gpu": "8"}}} for i, n in enumerate(names)]
        path = os.path.join(folder, "nodes.json")
        with open(path, "w") as f:
            json.dump({"kind": "List", "items": items}, f)
        return ["--kubernetes-nodes", path, "--topology-labels", "example.com/spine,example.com/leaf",
                "--oversubscription", str(OVERSUBSCRIPTION)]
    if route == "slurm":
        lines = [f"SwitchName=leaf{j} Nodes=node[{j * LEAF_HOSTS:05d}-{min(hosts, (j + 1) * LEAF_HOSTS) - 1:05d}]"
                 for j in range((hosts + LEAF_HOSTS - 1) // LEAF_HOSTS)]
        lines.append(f"SwitchName=spine Switches=leaf[0-{len(lines) - 1}]")
        path = os.path.join(folder, "topology.conf")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return ["--fabric", path, "--gpu", "h100", "--gpus-per-node", "8", "--oversubscription", str(OVERSUBSCRIPTION)]
    raise SystemExit(f"unknown route {route!r}: json, kubernetes or slurm")


def run_routes(args) -> int:
    """Routes mode (module docstring): every run of every route, then the worst of each."""
    import os
    import tempfile
    import time

    job = ["--tp", "8", "--cp", "2", "--pp", "16", "--time-limit", str(args.time_limit)]
    print(f"| route | GPUs | run | wall s (whole process) | peak RSS MiB | status | stopped_by | cost / default |")
    print("|---|---:|---:|---:|---:|---|---|---:|")
    worst = {}
    with tempfile.TemporaryDirectory() as folder:
        for route in args.routes.split(","):
            src = write_route(route, args.gpus, folder)
            for k in range(args.repeat):
                out_path = os.path.join(folder, "out.json")
                t0 = time.perf_counter()
                with open(out_path, "w") as out:
                    proc = subprocess.Popen([sys.executable, "-m", "rankmap", "solve", *src, *job], stdout=out,
                                            stderr=subprocess.PIPE, text=True)
                    _pid, status, usage = os.wait4(proc.pid, 0)
                wall = time.perf_counter() - t0
                err = proc.stderr.read()
                proc.returncode = os.waitstatus_to_exitcode(status)
                if proc.returncode:
                    print(err, file=sys.stderr)
                    return 1
                with open(out_path) as f:
                    doc = json.load(f)
                rss = usage.ru_maxrss / 1024
                base = doc["baseline"]["cost"]["total_seconds"]
                ratio = doc["cost"]["total_seconds"] / base if base else 1.0
                print(f"| {route} | {args.gpus:,} | {k + 1} | {wall:.1f} | {rss:.0f} | {doc['status']} | "
                      f"{doc['stopped_by'] or '-'} | {ratio:.3f} |", flush=True)
                w = worst.setdefault(route, [0.0, 0.0])
                w[0], w[1] = max(w[0], wall), max(w[1], rss)
    print()
    for route, (wall, rss) in worst.items():
        print(f"{route}: worst wall {wall:.1f} s (target {args.time_limit + 3:g} s: "
              f"{'ok' if wall <= args.time_limit + 3 else 'OVER'}), worst peak RSS {rss:.0f} MiB "
              f"(target 2048: {'ok' if rss <= 2048 else 'OVER'})")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1024,16384,131072")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--orders", default="all")
    ap.add_argument("--routes", default=None, help="routes mode: json,kubernetes,slurm (see the module docstring)")
    ap.add_argument("--gpus", type=int, default=131072, help="routes mode: GPUs (default 131072)")
    ap.add_argument("--time-limit", type=float, default=30.0, help="routes mode: --time-limit (default 30)")
    args = ap.parse_args()
    if args.routes:
        return run_routes(args)
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
