"""Quality of rankmap's layouts against simple and general-purpose peers.

    python benchmarks/bench_quality.py            # full suite, about 12 minutes on 2 cores
    python benchmarks/bench_quality.py --quick    # a subset, about 2 minutes
    python benchmarks/bench_quality.py --no-speed # without bench_solve.py / bench_catalogue.py
    python benchmarks/bench_quality.py --no-sim   # without the SimGrid cross-check
    python benchmarks/bench_quality.py --instance 'frag-1lvl-16x8|tp8 pp2|gpt-24l-4096'   # one instance, verbose
    python benchmarks/bench_quality.py --match nvl72 --match 8192 --no-sim --no-speed   # a subset by name
    python benchmarks/bench_quality.py --max-gpus 2048 --time-limit 3 --no-sim --no-speed

The summary adds, per rankmap mode, wins / ties / losses against the best
peer of the mode, free <= launcher, solves within the time limit, and the
distribution of the gap (cost - bound) / cost of the solve's reported bound.

For every instance (cluster x parallel sizes x traffic mix) all layouts are scored
with rankmap's objective, the predicted communication time per step on shared
links (:func:`rankmap.solver.layout_cost`, DESIGN §4: per class, all groups at
once, max over flows and directed links of bytes / capacity; summed over
classes), whatever the peer itself optimised:

* **rankmap launcher**: ``solve(mode="launcher", orders="all")``; compared with
  the launcher-compatible peers (Megatron default, greedy);
* **rankmap free**: ``solve(mode="free", orders="all")``; compared with the
  free bijections (random, QAP);
* **Megatron**: default order ``tp-cp-ep-dp-pp``, baseline device order;
* **greedy**: the non-trivial dims ordered by bytes per rank (most bytes
  innermost = first in the order string; the closest order Megatron accepts),
  baseline device order with the hosts sorted by fabric domain (coarsest
  level first, stable);
* **random**: a random valid order and a random bijection, median of 5 seeds;
* **METIS tree / Scotch** (``benchmarks/tree_peers.py``): process mappers,
  own code on the tools' public APIs: top-down recursive METIS bisection
  (``pymetis``) along the fabric tree, and Scotch 7 static mapping
  (``pyscotch``) onto a tree-leaf architecture of the fabric's levels; the
  launcher variants map host blocks (compared with rankmap launcher), the
  free variants ranks (rankmap free); every megatron-cli order plus the
  orders rankmap chose, best kept.  Scotch is skipped when ``pyscotch`` does
  not import;
* **QAP faq / QAP 2opt**: ``scipy.optimize.quadratic_assignment`` on the W x W
  rank traffic matrix (bytes, from the Megatron groups of an order) and the
  W x W matrix of 1/bandwidth (from ``cluster.bandwidth_gbps``, the widest-path
  bandwidth of a pair; 0 on the diagonal): the classic pairwise surrogate
  Σ bytes / B, which ignores link sharing; the peer optimises it and its result
  is scored with ``layout_cost`` like every other layout.  faq starts at the barycenter; 2opt starts from the better of the
  faq result and the Megatron device order for that order (scipy's 2opt
  recomputes the full O(W^2) objective per swap, so it is only run for
  W <= 128; from a random start it needs ~50 s at W = 128).  Orders: every
  order Megatron accepts when W <= 64, else the megatron-cli orders Megatron
  accepts plus the order rankmap (free) chose; 2opt: every faq order for
  W <= 32, the best faq order for W <= 128; faq only for W <= 512.  The best
  over orders is kept.

Ratios are peer cost / rankmap cost (>= 1: rankmap is at least as good).  A
peer strictly below rankmap (relative tolerance 1e-9) is a *loss*; losses are
printed and written to ``benchmarks/out/losses.json`` with the peer's order and
device order (indices into ``cluster.devices``) so the case can be replayed.
A free-mode peer whose layout happens to be launchable (every block of G
consecutive ranks on one host) and is cheaper than rankmap launcher is listed
as a launcher-mode loss too.  An exception raised by ``solve`` is not hidden:
the row says ERROR and ``errors.json`` has the message.  Also checked: every
layout's cost >= rankmap's lower bound; rankmap's reported cost equals
``layout_cost``; rankmap free <= rankmap launcher; no OPTIMAL claim is beaten.
rankmap's time limit is ``TIME_LIMIT`` (6 s per solve, split over orders).

Simulation cross-check (``benchmarks/simgrid_model.py``, skipped with
``--no-sim`` or when SimGrid is not importable): for every instance up to
``SIM_MAX_W`` GPUs with at most ``SIM_MAX_FLOWS`` flows in a class, rankmap's
layout and the best peer's layout of each mode (lowest predicted time) are
simulated class by class with SimGrid's max-min flow model (routes by
networkx; no code shared with rankmap's time model); the report gives the
simulated times, whether rankmap is still <= the peer under simulation, and
how far the prediction is from the simulation.

Speed: ``benchmarks/bench_solve.py --repeat 1`` (solve time and peak RSS at
1,024 / 16,384 / 131,072 GPUs) and ``benchmarks/bench_catalogue.py`` run as
subprocesses and their tables are included.

Outputs (``benchmarks/out/``, git-ignored): ``quality.md`` (all tables),
``quality.png`` (left: time ratio per instance and peer, and the simulated
ratio against the best peer; right: rankmap solve time versus GPUs, log-log),
``quality.json`` (every number, simulations included), ``losses.json`` and
``errors.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import networkx as nx
import numpy as np
from scipy.optimize import quadratic_assignment

from rankmap.solver import (
    SolveOptions,
    candidate_orders,
    cluster_from_graph,
    layout_cost,
    lower_bound,
    parallel_config,
    solve,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import simgrid_model as sm  # noqa: E402  (benchmarks/simgrid_model.py: SimGrid flow-level reference)
import tree_peers  # noqa: E402  (benchmarks/tree_peers.py: METIS tree mapping, Scotch static mapping)

SCOTCH_OK, SCOTCH_WHY = tree_peers.scotch_available()

OUT = HERE / "out"
EXAMPLES = ROOT / "examples" / "clusters"
DEFAULT_ORDER = "tp-cp-ep-dp-pp"
REL_TOL = 1e-9
TIME_LIMIT = 6.0  # rankmap time limit per solve (seconds, split over orders)
QAP_MAX_W = 512
QAP_ALL_ORDERS_MAX_W = 64
TWO_OPT_ALL_ORDERS_MAX_W = 32
TWO_OPT_MAX_W = 128
RANDOM_SEEDS = 5
SIM_MAX_W = 512  # simulate instances up to this many GPUs (the whole suite; about 1 s per layout)
SIM_MAX_FLOWS = 20_000  # ... and with at most this many device-level flows in any class of a layout
SIM_WORKERS = 2  # SimGrid children at a time (one per class; run after the instance's solves, not beside them)
SIM_REL_TOL = 1e-6  # SimGrid's max-min solver works to ~1e-9 relative; a simulated loss must exceed this

from quality_instances import Instance, instances, traffic_for  # noqa: E402
from quality_report import (fmt_s, gap_and_record, is_loss, parse_solve_table, plot, quality_table,  # noqa: E402
                            rel_err, run_sub, sim_ratio, sim_summary, sim_table, summary)
from quality_peers import (PEERS, Outcome, best_peer, domain_sorted_devices, greedy_order,  # noqa: E402
                           inverse_bandwidth_matrix, traffic_matrix)

def simulate_instance(o: Outcome, graph: nx.Graph, cluster, cfg, router: sm.Router | None = None) -> None:
    """Simulate rankmap's layout and the best peer's layout of each mode with SimGrid (``o.sim``).

    Each class of a layout is one SimGrid run (all its groups at once, max-min fair sharing,
    routes by networkx in ``simgrid_model``); the simulated time of the layout is the sum
    over classes, to compare with the time model's bandwidth time of the same flows: ``layout_cost``
    on the cluster with ``NcclModel(algorithm="ring", latency=False)`` (SimGrid runs flows, not
    NVLS/tree caps or NCCL's latency; exposure 1 everywhere here).
    Skipped (``o.sim[mode]["skipped"]``) above ``SIM_MAX_W`` GPUs or ``SIM_MAX_FLOWS`` flows
    in a class.
    """
    if o.W > SIM_MAX_W:
        for mode in ("launcher", "free"):
            o.sim[mode] = dict(skipped=f"W = {o.W} > {SIM_MAX_W}")
        return
    router = router or sm.Router(graph)
    from rankmap.solver import NcclModel, cluster_from_graph, layout_cost

    ring = cluster_from_graph(graph, nccl=NcclModel(algorithm="ring", latency=False))
    todo = []  # (mode, who, order, dev, predicted)
    for mode in ("launcher", "free"):
        rm, p = o.rm[mode], best_peer(o, mode)
        if rm is None or p is None:
            o.sim[mode] = dict(skipped="rankmap raised" if rm is None else "no peer")
            continue
        o.sim[mode] = dict(peer=p)
        for who, order, dev in (("rankmap", rm["order"], rm["dev"]),
                                ("peer_sim", o.peers[p]["order"], o.peers[p]["dev"])):
            pred = layout_cost(ring, cfg.with_order(order), np.asarray(dev), o.traffic).total_seconds
            todo.append((mode, who, order, dev, pred))
    layouts = []
    for mode, who, order, dev, pred in todo:
        c = cfg.with_order(order)
        assign = [cluster.devices[i] for i in dev]
        nflows = max((len(f) for f in sm.class_flows(graph, c, assign, o.traffic, router).values()), default=0)
        if nflows > SIM_MAX_FLOWS:
            o.sim[mode] = dict(skipped=f"{nflows} flows in one class > {SIM_MAX_FLOWS}")
        layouts.append((c, assign))
    keep = [i for i, (mode, *_) in enumerate(todo) if "skipped" not in o.sim[mode]]
    try:
        sims = sm.simulate_layouts(graph, [layouts[i] for i in keep], o.traffic, workers=SIM_WORKERS, router=router)
    except sm.SimulationError as exc:
        for mode in ("launcher", "free"):
            if "skipped" not in o.sim[mode]:
                o.sim[mode] = dict(skipped=f"SimGrid failed: {exc}".splitlines()[0])
        return
    for i, r in zip(keep, sims):
        mode, who, order, dev, pred = todo[i]
        o.sim[mode][who] = dict(simulated=r.total, predicted=pred,
                                by_class={c: t for c, t in r.by_class.items() if r.flows.get(c)})


def run_instance(inst: Instance, verbose: bool = False, simulate: bool = True) -> Outcome | None:
    graph = inst.spec.build()
    cluster = cluster_from_graph(graph)
    W = cluster.num_devices
    try:
        cfg = parallel_config(W, **inst.sizes)
    except Exception:
        return None
    traffic = traffic_for(inst.mix, cfg)
    if traffic is None:
        return None
    out = Outcome(inst, W, dict(cfg.sizes), traffic, devices=[str(d) for d in cluster.devices])
    out.bound = lower_bound(cluster, cfg, traffic)

    def cost_of(order: str, dev: np.ndarray) -> float:
        return layout_cost(cluster, cfg.with_order(order), np.asarray(dev, dtype=np.int64), traffic).total_seconds

    # rankmap
    for mode in ("launcher", "free"):
        t0 = time.perf_counter()
        try:
            r = solve(cluster, cfg, traffic, SolveOptions(mode=mode, orders="all", time_limit_seconds=TIME_LIMIT))
        except Exception as exc:  # a solver bug: reported, not hidden
            out.rm[mode] = None
            out.errors.append(dict(mode=mode, error=f"{type(exc).__name__}: {exc}",
                                   seconds=time.perf_counter() - t0))
            continue
        idx = cluster.device_index()
        dev = np.array([idx[a] for a in r.assignment], dtype=np.int64)
        exact = cost_of(r.order, dev)
        out.rm[mode] = dict(cost=r.cost.total_seconds, exact=exact, bound=r.bound_seconds, status=r.status,
                            solve_s=r.solve_seconds, order=r.order, dev=dev.tolist(),
                            baseline=r.baseline.cost.total_seconds)

    # Megatron default
    base = np.arange(W, dtype=np.int64)
    out.peers["Megatron"] = dict(cost=cost_of(DEFAULT_ORDER, base), order=DEFAULT_ORDER, dev=base.tolist())

    # greedy
    t0 = time.perf_counter()
    g_order = greedy_order(cfg, traffic)
    g_dev = domain_sorted_devices(cluster)
    out.peers["greedy"] = dict(cost=cost_of(g_order, g_dev), order=g_order, dev=g_dev.tolist(),
                               seconds=time.perf_counter() - t0)

    # random: median of seeds
    orders_all = [c.order for c in candidate_orders(cfg, "all")]
    rnd = []
    for seed in range(RANDOM_SEEDS):
        rng = np.random.default_rng(seed)
        o = orders_all[int(rng.integers(len(orders_all)))]
        d = rng.permutation(W)
        rnd.append((cost_of(o, d), o, d, seed))
    rnd.sort(key=lambda x: x[0])
    c, o, d, seed = rnd[len(rnd) // 2]
    out.peers["random"] = dict(cost=c, order=o, dev=d.tolist(), note=f"median of seeds 0..{RANDOM_SEEDS - 1} "
                               f"(this is seed {seed}: numpy default_rng({seed}): integers(orders), permutation(W))")

    # QAP
    if W <= QAP_MAX_W:
        if W <= QAP_ALL_ORDERS_MAX_W:
            qorders = orders_all
        else:
            qorders = [c.order for c in candidate_orders(cfg, "megatron-cli")]
            if out.rm.get("free") and out.rm["free"]["order"] not in qorders:
                qorders.append(out.rm["free"]["order"])
        B = inverse_bandwidth_matrix(cluster)
        Bn = B / B.max()
        faq_runs = []
        t0 = time.perf_counter()
        for o in qorders:
            A = traffic_matrix(cfg.with_order(o), traffic)
            An = A / max(A.max(), 1e-300)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = quadratic_assignment(An, Bn, method="faq")
            d = np.asarray(res.col_ind, dtype=np.int64)
            faq_runs.append((cost_of(o, d), o, d, An))
        faq_s = time.perf_counter() - t0
        best = min(faq_runs, key=lambda x: x[0])
        out.peers["QAP faq"] = dict(cost=best[0], order=best[1], dev=best[2].tolist(), seconds=faq_s,
                                    note=f"orders tried: {len(qorders)}")
        if W <= TWO_OPT_MAX_W:
            runs = faq_runs if W <= TWO_OPT_ALL_ORDERS_MAX_W else [best]
            t0 = time.perf_counter()
            two = []
            for fc, o, d, An in runs:
                start = d if fc <= cost_of(o, base) else base
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    res = quadratic_assignment(An, Bn, method="2opt",
                                               options=dict(partial_guess=np.stack([np.arange(W), start], 1)))
                d2 = np.asarray(res.col_ind, dtype=np.int64)
                two.append((cost_of(o, d2), o, d2))
            b2 = min(two, key=lambda x: x[0])
            out.peers["QAP 2opt"] = dict(cost=b2[0], order=b2[1], dev=b2[2].tolist(),
                                         seconds=time.perf_counter() - t0, note=f"orders tried: {len(runs)}")
    # process mappers (benchmarks/tree_peers.py): every megatron-cli order and the orders rankmap chose
    porders = [c.order for c in candidate_orders(cfg, "megatron-cli")]
    for m in ("launcher", "free"):
        if out.rm.get(m) and out.rm[m]["order"] not in porders:
            porders.append(out.rm[m]["order"])
    mappers = [("METIS tree", tree_peers.metis_tree, True), ("METIS tree free", tree_peers.metis_tree, False)]
    if SCOTCH_OK:
        mappers += [("Scotch", tree_peers.scotch_map, True), ("Scotch free", tree_peers.scotch_map, False)]
    for name, fn, as_launcher in mappers:
        t0 = time.perf_counter()
        runs = []
        for o in porders:
            try:
                d = fn(cluster, cfg.with_order(o), traffic, as_launcher)
            except Exception as exc:  # a peer failing is reported in its note, not fatal
                out.peers.setdefault(name, dict(cost=math.inf, order=o, dev=base.tolist(),
                                                note=f"{type(exc).__name__}: {exc}"))
                continue
            if d is not None:
                runs.append((cost_of(o, d), o, d))
        if runs:
            c, o, d = min(runs, key=lambda x: x[0])
            out.peers[name] = dict(cost=c, order=o, dev=d.tolist(), seconds=time.perf_counter() - t0,
                                   note=f"orders tried: {len(porders)}")
        elif name in out.peers:
            del out.peers[name]
    # is a peer's layout one torchrun/Slurm could launch (blocks of G consecutive ranks per host)?
    G = int(cluster.gpus_per_host[0])
    uniform = np.unique(cluster.gpus_per_host).size == 1
    for p in out.peers.values():
        h = cluster.host_of[np.asarray(p["dev"], dtype=np.int64)].reshape(-1, G)
        p["launcher_layout"] = bool(uniform and (h == h[:, :1]).all())
    if simulate:
        t0 = time.perf_counter()
        simulate_instance(out, graph, cluster, cfg)
        out.sim_s = time.perf_counter() - t0
    if verbose:
        print(json.dumps({"instance": inst.name, "W": W, "sizes": out.cfg_sizes, "traffic": traffic,
                          "bound": out.bound,
                          "rankmap": {m: x and {k: v for k, v in x.items() if k != "dev"} for m, x in out.rm.items()},
                          "errors": out.errors,
                          "peers": {p: {k: v for k, v in x.items() if k != "dev"} for p, x in out.peers.items()},
                          "simulated": out.sim},
                         indent=1))
    return out


# ============================================================== report


def main(argv=None) -> int:
    global TIME_LIMIT
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a 3-minute subset")
    ap.add_argument("--instance", help="run one instance by name (see the table) and print everything")
    ap.add_argument("--no-speed", action="store_true", help="skip bench_solve.py and bench_catalogue.py")
    ap.add_argument("--no-sim", action="store_true", help="skip the SimGrid cross-check of rankmap's and the best "
                    "peer's layouts")
    ap.add_argument("--match", action="append", default=[],
                    help="run only instances whose name contains this text (repeatable: any of them)")
    ap.add_argument("--max-gpus", type=int, default=0, help="skip instances with more GPUs than this (0: no limit)")
    ap.add_argument("--time-limit", type=float, default=None, help="rankmap time limit per solve (default "
                    "TIME_LIMIT = 6 s)")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    if args.time_limit:
        TIME_LIMIT = float(args.time_limit)
    t_start = time.perf_counter()
    if args.instance:
        for inst in instances(False):
            if inst.name == args.instance:
                o = run_instance(inst, verbose=True, simulate=not args.no_sim)
                if o is None:
                    print("instance not applicable (sizes or traffic do not fit)")
                return 0
        print(f"unknown instance {args.instance!r}", file=sys.stderr)
        return 2
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    simulate = not args.no_sim
    if simulate:
        ok, why = sm.simgrid_available()
        if not ok:
            print(f"SimGrid not importable ({why}); the simulation cross-check is skipped "
                  "(apt-get install python3-simgrid; a venv with --system-site-packages)", file=sys.stderr)
            simulate = False
    outs: list[Outcome] = []
    for inst in instances(args.quick):
        if args.match and not any(m in inst.name for m in args.match):
            continue
        if args.max_gpus and inst.spec.gpus and inst.spec.gpus > args.max_gpus:
            continue
        t0 = time.perf_counter()
        o = run_instance(inst, simulate=simulate)
        if o is None:
            continue
        outs.append(o)
        L, F = o.rm["launcher"], o.rm["free"]
        flags = [p for p, m in PEERS if p in o.peers and o.rm[m] and is_loss(o.peers[p]["cost"], o.rm[m]["cost"])]
        simtxt = ""
        for m in ("launcher", "free"):
            x = o.sim.get(m) or {}
            if "rankmap" in x and "peer_sim" in x:
                simtxt += (f" sim{m[0].upper()} {sim_ratio(x['peer_sim']['simulated'], x['rankmap']['simulated']):.3f}"
                           f"/{rel_err(x['rankmap']):.0e}")
        print(f"# {len(outs):3d} {inst.name:48s} W={o.W:4d} L={L['cost'] if L else float('nan'):.4g} "
              f"F={F['cost'] if F else float('nan'):.4g} {time.perf_counter() - t0:5.1f}s{simtxt}"
              f"{'  LOSS vs ' + ','.join(flags) if flags else ''}{'  ERROR' if o.errors else ''}",
              file=sys.stderr, flush=True)
    t_quality = time.perf_counter() - t_start

    table = quality_table(outs)
    summ, losses, notes = summary(outs)
    t_sim = sum(o.sim_s for o in outs)
    sim_md = []
    if simulate:
        s_summ, s_losses = sim_summary(outs)
        sim_md = [
            "## Cross-check by simulation (SimGrid)",
            "",
            f"Every instance up to {SIM_MAX_W} GPUs (and at most {SIM_MAX_FLOWS:,} flows in a class): rankmap's layout "
            "and the best peer's layout (lowest predicted time among the peers of that mode) are simulated with "
            "`benchmarks/simgrid_model.py`: SimGrid's flow-level max-min sharing, routes computed by networkx "
            "(widest path, fewest hops, ECMP), no code shared with rankmap's time model. A layout's simulated time "
            "is the sum over classes of each class's makespan (all its groups at once). Ratios are peer / rankmap "
            f"(simulated, and predicted for comparison); a simulated loss needs the peer below rankmap by more than "
            f"{SIM_REL_TOL:g} relative. {t_sim:.0f} s of simulation in all.",
            "",
            s_summ,
            "",
        ]
        if s_losses:
            sim_md += ["Simulated losses (peer faster than rankmap under simulation):", "",
                       "| instance | mode | peer | peer sim | rankmap sim | peer / rankmap (sim) | "
                       "peer / rankmap (predicted) |", "|---|---|---|---:|---:|---:|---:|"]
            for l in s_losses:
                sim_md.append(f"| `{l['instance']}` | {l['mode']} | {l['peer']} | {fmt_s(l['peer_simulated'])} | "
                              f"{fmt_s(l['rankmap_simulated'])} | "
                              f"{sim_ratio(l['peer_simulated'], l['rankmap_simulated']):.4f} | "
                              f"{sim_ratio(l['peer_predicted'], l['rankmap_predicted']):.4f} |")
            sim_md += [""]
        else:
            sim_md += ["No simulated losses: under simulation rankmap's layout is never slower than the best peer's.",
                       ""]
        sim_md += ["Per instance:", "", sim_table(outs), ""]

    speed_md, solve_rows = "", []
    t_speed = 0.0
    if not args.no_speed:
        sizes = "1024,16384" if args.quick else "1024,16384,131072"
        solve_txt, t1 = run_sub(["benchmarks/bench_solve.py", "--repeat", "1", "--sizes", sizes])
        cat_args = ["benchmarks/bench_catalogue.py", "--worlds", sizes, "--repeats", "3", "--megatron-repeats", "1"]
        cat_txt, t2 = run_sub(cat_args)
        solve_rows = parse_solve_table(solve_txt)
        t_speed = t1 + t2
        speed_md = (f"## Speed\n\n`python benchmarks/bench_solve.py --repeat 1 --sizes {sizes}` ({t1:.0f} s):\n\n"
                    f"{solve_txt}\n\n`python {' '.join(cat_args)}` ({t2:.0f} s):\n\n{cat_txt}\n")

    n_opt = sum(bool(o.rm[m]) and o.rm[m]["status"] == "OPTIMAL" for o in outs for m in ("launcher", "free"))
    n_err = sum(len(o.errors) for o in outs)
    total = time.perf_counter() - t_start
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=ROOT).stdout.strip() or "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "solver", "rankmap"], capture_output=True,
                               text=True, cwd=ROOT).stdout.strip()
        if dirty:
            commit += " (+ uncommitted changes under solver/ or rankmap/ at the end of the run)"
    except OSError:
        commit = "unknown"
    md = [
        f"# rankmap layout quality ({'quick subset' if args.quick else 'full suite'})",
        "",
        f"`python benchmarks/bench_quality.py{' --quick' if args.quick else ''}` at commit {commit}, "
        f"{time.strftime('%Y-%m-%d')}.",
        "",
        f"{len(outs)} instances (cluster | sizes | traffic mix). Costs are the predicted communication time per "
        "step on shared links (DESIGN §4: per class, all groups at once, max over flows and directed links of "
        "bytes / capacity, summed over classes; seconds), every layout scored with `layout_cost`, whatever "
        "objective the peer itself optimised (the QAP peers minimise Σ bytes / pairwise bandwidth, a surrogate). "
        "Ratios are peer / rankmap "
        "(> 1: rankmap better; **bold ⚠** < 1: the peer beats rankmap). Megatron and greedy are launcher "
        "layouts and are compared with rankmap `mode=launcher`; random and QAP are free bijections and are "
        "compared with rankmap `mode=free` (both `orders=all`, time limit "
        f"{TIME_LIMIT:g} s). Gap = (rankmap cost − its reported lower bound) / cost. Status OPT = proved optimal, "
        "FEA = feasible. METIS tree / Scotch: process mappers (benchmarks/tree_peers.py), launcher variants map "
        "host blocks, free variants ranks" + ("" if SCOTCH_OK else f" (Scotch not importable: {SCOTCH_WHY})") + ".",
        "",
        table,
        "",
        "## Summary",
        "",
        summ,
        "",
        "Per rankmap mode: wins (rankmap strictly below every peer of the mode), ties (equal to the best peer "
        f"within {REL_TOL:g}), losses (some peer strictly below); free ≤ launcher; solves within the time limit "
        "(`solve_seconds` ≤ the limit); gap = (cost − bound) / cost with the solve's reported bound.",
        "",
        gap_and_record(outs, time_limit=TIME_LIMIT),
        "",
        f"rankmap status OPTIMAL in {n_opt} of {2 * len(outs)} solves; {n_err} solves raised an exception. "
        f"Losses (peer strictly cheaper, relative tolerance {REL_TOL:g}): {len(losses)}.",
        "",
    ]
    if notes:
        md += ["Consistency notes:", ""] + [f"* {n}" for n in notes] + [""]
    else:
        md += ["Consistency checks passed: every layout costs at least rankmap's lower bound; rankmap's "
               "reported costs equal `layout_cost`; no OPTIMAL claim is beaten or above its bound; rankmap free ≤ "
               "rankmap launcher.", ""]
    if losses:
        md += ["## Losses", "", "Instances where a peer's predicted time is below rankmap's; margin = how much "
               "slower rankmap is (rankmap / peer − 1).", "",
               "| instance | mode | peer | peer cost | rankmap cost | peer / rankmap | margin | peer order | "
               "rankmap order | rankmap status | peer layout launcher-compatible |",
               "|---|---|---|---:|---:|---:|---:|---|---|---|---|"]
        for l in losses:
            margin = l["rankmap_cost_seconds"] / l["peer_cost_seconds"] - 1 if l["peer_cost_seconds"] > 0 else math.inf
            md.append(f"| `{l['instance']}` | {l['mode']} | {l['peer']} | {l['peer_cost_seconds']:.9g} | "
                      f"{l['rankmap_cost_seconds']:.9g} | {l['ratio_peer_over_rankmap']:.4f} | {100 * margin:.2f}% | "
                      f"{l['peer_order']} | {l['rankmap_order']} | {l['rankmap_status']} | "
                      f"{'yes' if l['peer_layout_is_launcher_compatible'] else 'no'} |")
        md += ["", "Device orders: `benchmarks/out/losses.json`.", ""]
    md += sim_md
    md += [speed_md, f"Runtime: quality suite {t_quality:.0f} s (of which SimGrid {t_sim:.0f} s), speed benchmarks "
           f"{t_speed:.0f} s, total {total:.0f} s on {os.cpu_count()} CPUs.", ""]
    md_text = "\n".join(md)
    (out_dir / "quality.md").write_text(md_text)
    errors = [dict(instance=o.inst.name, cluster_recipe=o.inst.spec.recipe, world_size=o.W,
                   parallel_config_kwargs=o.inst.sizes, traffic=o.traffic, **e) for o in outs for e in o.errors]
    (out_dir / "losses.json").write_text(json.dumps(losses, indent=1))
    (out_dir / "errors.json").write_text(json.dumps(errors, indent=1))
    (out_dir / "quality.json").write_text(json.dumps([
        {"instance": o.inst.name, "cluster_recipe": o.inst.spec.recipe, "W": o.W, "sizes": o.cfg_sizes,
         "traffic": o.traffic, "bound": o.bound,
         "rankmap": {m: x and {k: v for k, v in x.items() if k != "dev"} for m, x in o.rm.items()},
         "errors": o.errors,
         "peers": {p: {k: v for k, v in x.items() if k != "dev"} for p, x in o.peers.items()},
         "simulated": o.sim}
        for o in outs], indent=1))
    try:
        plot(outs, solve_rows, out_dir / "quality.png")
    except ImportError as exc:  # matplotlib is in the [bench] extra
        print(f"no plot ({exc}); pip install matplotlib", file=sys.stderr)
    print(md_text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
