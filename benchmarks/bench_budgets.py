"""Work budgets against the wall clock: do solves end on their budgets, before the stop? (issue 28.4)

A solve's answer is decided by deterministic work budgets sized from the time limit (work models in
nominal seconds, ``solver/search/refine.py``, ``solver/bound/work.py``); the wall clock is only a safety
stop.  When the budgets overrun the limit on a machine, the stop decides and the answer depends on the
machine's speed.  Target: on an idle machine every 256–512-GPU quality instance ends before 0.9 × the
limit in both modes, with ``stopped_by == ""``.

Each solve runs in a fresh subprocess (cold caches, as a new ``rankmap solve`` or a new request's
cluster), ``orders="all"``; the table gives the wall time of ``solve()``, its ratio to the limit, the
stop reason, the predicted cost, and the load average before the run (the figures mean something only
on an idle machine: on 2 cores a second busy process slows the first by up to 1.5×).

    python benchmarks/bench_budgets.py                   # 256-512 GPUs, both modes, 6 s limit
    python benchmarks/bench_budgets.py --match nvl72-frag-512 --modes free --repeats 3

With ``--repeats N`` each instance and mode is solved N times (fresh processes) and the median wall
time counts (the same cold solve varies by 10-30% on this VM); "stopped_by" then counts the runs the
clock stopped, and the cost column says DIFFER if the runs disagreed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from quality_instances import instances, traffic_for
from rankmap.solver import SolveOptions, cluster_from_graph, parallel_config, solve
name, mode, limit = sys.argv[2], sys.argv[3], float(sys.argv[4])
inst = next(i for i in instances(False) if i.name == name)
cl = cluster_from_graph(inst.spec.build())
cfg = parallel_config(cl.num_devices, **inst.sizes)
tr = traffic_for(inst.mix, cfg)
t0 = time.perf_counter()
r = solve(cl, cfg, tr, SolveOptions(mode=mode, orders="all", time_limit_seconds=limit))
print(json.dumps({"wall_s": time.perf_counter() - t0, "stopped_by": r.stopped_by,
                  "cost_ms": r.cost.total_seconds * 1e3, "status": r.status}))
"""


def selected(args) -> list[str]:
    """Names of the quality instances with ``--min-gpus``..``--max-gpus`` GPUs matching every ``--match``."""
    sys.path.insert(0, str(HERE))
    from quality_instances import instances, traffic_for
    from rankmap.solver import cluster_from_graph, parallel_config

    out = []
    for inst in instances(False):
        if args.match and not all(m in inst.name for m in args.match):
            continue
        n = cluster_from_graph(inst.spec.build()).num_devices
        if not args.min_gpus <= n <= args.max_gpus:
            continue
        if traffic_for(inst.mix, parallel_config(n, **inst.sizes)) is None:
            continue
        out.append(inst.name)
    return out


def child_env() -> dict:
    """The solves' environment: BLAS threads no more than the CPUs this process may run on.

    Pinned with ``taskset -c 0`` a child's OpenBLAS still started one thread per core of the machine, and
    the two spun on one CPU: free 256-512-GPU solves took 5.0-5.7 s instead of 4.1-4.5 (2026-12-03).
    """
    env = dict(os.environ)
    n = str(len(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else None
    if n is not None:
        for key in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env.setdefault(key, n)
    return env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=6.0)
    ap.add_argument("--modes", default="launcher,free")
    ap.add_argument("--min-gpus", type=int, default=256)
    ap.add_argument("--max-gpus", type=int, default=512)
    ap.add_argument("--match", action="append", default=[], help="substring of the instance name (repeatable)")
    ap.add_argument("--share", type=float, default=0.9, help="the target: end before this share of the limit")
    ap.add_argument("--repeats", type=int, default=1,
                    help="solves per instance and mode (each in a fresh process): the median wall time counts")
    args = ap.parse_args()
    names = selected(args)
    modes = args.modes.split(",")
    T = args.time_limit
    print(f"{len(names)} instances x {len(modes)} modes, time limit {T:g} s, load average "
          f"{os.getloadavg()[0]:.2f} before the run")
    reps = max(1, args.repeats)
    print(f"{'instance':52s} {'mode':8s} {'wall s':>7s} {'/limit':>7s} {'stopped_by':>11s} {'cost ms':>10s}"
          + ("  walls s (median of the repeats above)" if reps > 1 else ""))
    ratios: dict[str, list[float]] = {m: [] for m in modes}
    stopped: dict[str, int] = {m: 0 for m in modes}
    for name in names:
        for mode in modes:
            runs = []
            for _ in range(reps):
                out = subprocess.run([sys.executable, "-c", CHILD, str(HERE), name, mode, str(T)],
                                     capture_output=True, text=True, check=True, env=child_env())
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            wall = statistics.median(r["wall_s"] for r in runs)
            costs = {r["cost_ms"] for r in runs}
            stop = sum(bool(r["stopped_by"]) for r in runs)
            ratios[mode].append(wall / T)
            stopped[mode] += stop > reps / 2
            r = runs[0]
            how = (r["stopped_by"] or "-") if reps == 1 else f"{stop}/{reps}"
            cost = f"{r['cost_ms']:.3f}" if len(costs) == 1 else "DIFFER"
            print(f"{name:52s} {mode:8s} {wall:7.2f} {wall / T:7.2f} {how:>11s} {cost:>10s}"
                  + ("  " + " ".join(f"{x['wall_s']:.2f}" for x in runs) if reps > 1 else ""), flush=True)
    print(f"\nload average after the run {os.getloadavg()[0]:.2f}")
    for mode in modes:
        rs = ratios[mode]
        if not rs:
            continue
        under = sum(x < args.share for x in rs)
        print(f"{mode:8s}: {under}/{len(rs)} end before {args.share:g} x the limit; wall/limit median "
              f"{statistics.median(rs):.2f}, max {max(rs):.2f}; {stopped[mode]} stopped by the clock")
    return 0


if __name__ == "__main__":
    sys.exit(main())
