"""Flow-level reference simulation of a layout's traffic with SimGrid (independent of rankmap's model).

This module is the yardstick for ``rankmap.solver``'s predicted per-class times
(DESIGN §2-4).  It deliberately does not import anything of rankmap's time
model: routes are computed here with networkx and the sharing of links is left
to SimGrid's max-min solver; NCCL's flows are written out pair by pair in
:mod:`simgrid_flows`.  Only the group catalogue (``rankmap.solver.megatron_groups``,
the Megatron oracle-tested part) is used, to know which ranks talk to which, and
the GPU-name table (``rankmap.solver.fabric.rates.gpu_arch``) to know the GPU
generation the calibrated NVLink rate depends on.

Model
-----
* Every undirected edge of the cluster graph is a split-duplex link: two
  independent directions of its *calibrated* rate each, the rate NCCL achieves
  on it as rankmap's model uses it (DESIGN §4): the edge's ``bandwidth`` GB/s
  (1e9 bytes/s) times :func:`link_factor` (``link`` ``net`` and ``fabric``
  x0.96; ``nvlink`` x0.8, Hopper 0.824, Blackwell 0.802, by the graph's ``gpu``;
  other links x1).  Only the GPU-name table ``gpu_arch`` is imported from
  rankmap; the factors are written here and checked against rankmap's
  calibration table by ``tests/test_simgrid.py``.
* A flow from GPU ``s`` to GPU ``d`` is routed on the widest path (largest
  bottleneck rate) whose interior nodes are not GPUs; among those the ones
  with the fewest hops; when several such paths remain the flow is split
  evenly over all of them (ECMP).  Paths are enumerated, so this is for small
  graphs (hundreds of nodes).
* All flows of a simulation start at time 0 (a flow whose route has
  ``latency_us`` starts after the sum of its links' latencies; links
  themselves are given zero latency in SimGrid so that bandwidth sharing stays
  pure max-min: CM02 would otherwise weight flows by their RTT).
* SimGrid runs its CM02 network model with every correction switched off:
  bandwidth factor 1, latency factor 1, weight-S 0, no cross-traffic (CM02's
  5 % reverse-direction ACK load), i.e. plain max-min fair sharing.  1 GB over
  one 50 GB/s link takes exactly 20 ms (checked by ``sanity_check``).

SimGrid allows one ``Engine`` per process, so each simulation runs in a fresh
child process (this file run as a script, JSON on stdin / stdout; the child
imports only ``json`` and ``simgrid``).  :func:`simulate_many` runs several
children in parallel.

Traffic (DESIGN §3), one simulation per part of a class, all of the class's
groups at once, flows as NCCL runs the collective (:mod:`simgrid_flows`
writes them pair by pair: NCCL nodes and rails from the graph, rings per node
and rail-aligned channels across nodes, PXN for all-to-all and pipeline):

============ ============================================ ===============================
class        group                                        collective (group of n, payload S)
============ ============================================ ===============================
tp           TENSOR_MODEL_PARALLEL_GROUP                  ring all-reduce, 2(n-1)/n·S per ring edge
cp           CONTEXT_PARALLEL_GROUP                       ring send/recv, S per ring edge
dp           DATA_PARALLEL_GROUP_WITH_CP                  ring all-gather, (n-1)/n·S per ring edge
edp          EXPERT_DATA_PARALLEL_GROUP                   ring all-gather
etp          EXPERT_TENSOR_PARALLEL_GROUP                 ring all-reduce
ep           EXPERT_MODEL_PARALLEL_GROUP                  all-to-all: S/n for every ordered pair (PXN)
pp           PIPELINE_MODEL_PARALLEL_GROUP                S between consecutive members, each direction (PXN)
embedding    EMBEDDING_GROUP                              ring all-reduce
============ ============================================ ===============================

Across NCCL nodes a ring's bytes fb per edge become c rail-aligned channels of
fb/c, each a path through every node's members (entering beside its NIC, leaving
from its exit member, :func:`simgrid_flows._node_paths`) and on from node to node.  The simulated step time is the sum over classes of each class's
makespan; it is what rankmap predicts as the *bandwidth* time of the *ring*
algorithm (``NcclModel(algorithm="ring", latency=False)``).
"""

from __future__ import annotations

import hashlib
import heapq
import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from simgrid_flows import CLASS_SPECS, class_part_triples, class_parts, group_flows, nccl_view  # noqa: F401,E402

__all__ = [
    "CLASS_SPECS",
    "ClassSim",
    "Flow",
    "Router",
    "SimResult",
    "SimulationError",
    "class_flows",
    "link_factor",
    "link_rate",
    "nccl_view",
    "route_flows",
    "sanity_check",
    "simgrid_available",
    "simulate",
    "simulate_layout",
    "simulate_many",
]

#: SimGrid configuration of pure max-min sharing (see the module docstring).
SIMGRID_CFG = (
    "--cfg=network/model:CM02",
    "--cfg=network/bandwidth-factor:1",
    "--cfg=network/latency-factor:1",
    "--cfg=network/weight-S:0",
    "--cfg=network/crosstraffic:0",
    "--cfg=network/TCP-gamma:0",
    "--log=root.thresh:critical",
)

#: Above this many equal-cost paths for one GPU pair, give up (the graph is not small).
MAX_PATHS = 4096


class SimulationError(RuntimeError):
    """The SimGrid child failed or the input cannot be simulated."""


@dataclass(frozen=True)
class Flow:
    """``nbytes`` from GPU node ``src`` to GPU node ``dst``."""

    src: Any
    dst: Any
    nbytes: float


@dataclass(frozen=True)
class SimResult:
    """Outcome of one simulation.

    Attributes
    ----------
    makespan : float
        Completion time of the last flow, seconds (0 when there is nothing to send).
    flow_finish : tuple of float
        Completion time of each input flow (the last of its ECMP parts), seconds.
    parts : int
        Number of simulated SimGrid communications (flows × ECMP paths).
    """

    makespan: float
    flow_finish: tuple[float, ...] = ()
    parts: int = 0


# --------------------------------------------------------------------------- routing


def _is_gpu(graph, n) -> bool:
    return graph.nodes[n].get("kind", "gpu") == "gpu"


#: NCCL's calibrated rate over the line rate (DESIGN §4, rankmap's calibration table): a NIC port
#: (``link`` ``net``) and switch links (``fabric``) 0.96 (48 of 50 GB/s per 400G NIC); an NVLink
#: NCCL's per-port figure over the nominal 25 GB/s (SM70/SM80 20.0, SM90 20.6, SM100 40.1 of 50).
NET_FACTOR = 0.96
NVLINK_FACTOR = {"volta": 0.8, "ampere": 0.8, "hopper": 0.824, "blackwell": 0.802}
NVLINK_FACTOR_DEFAULT = 0.8


def graph_arch(graph) -> str | None:
    """GPU architecture family of the cluster (``graph.graph['gpu']``), rankmap's name table."""
    from rankmap.solver.fabric.rates import gpu_arch

    return gpu_arch(graph.graph.get("gpu"))


def link_factor(data: Mapping, arch: str | None) -> float:
    """Calibration factor of an edge with attributes ``data`` (kind = ``link`` up to a ``+``)."""
    kind = str(data.get("link", "") or "").split("+")[0]
    if kind in ("net", "fabric"):
        return NET_FACTOR
    if kind == "nvlink":
        return NVLINK_FACTOR.get(arch or "", NVLINK_FACTOR_DEFAULT)
    return 1.0


def link_rate(graph, u, v, arch: str | None = None) -> float:
    """Calibrated rate of edge ``u``-``v``, GB/s per direction: ``bandwidth`` x :func:`link_factor`."""
    data = graph.edges[u, v]
    if "bandwidth" not in data:
        raise SimulationError(f"edge {u!r}-{v!r} has no bandwidth")
    bw = float(data["bandwidth"])
    if not bw > 0 or bw == float("inf"):
        raise SimulationError(f"edge {u!r}-{v!r} has bandwidth {bw!r}; need a finite positive GB/s")
    return bw * link_factor(data, arch)


class Router:
    """Widest-then-shortest routes between GPUs of a cluster graph, every tie kept (ECMP).

    Interior nodes of a route are never GPUs (GPUs do not relay).  Results are
    cached per source, so reusing one Router across many flow sets is cheap.
    """

    def __init__(self, graph):
        if graph.is_directed() or graph.is_multigraph():
            raise SimulationError("the cluster graph must be an undirected simple networkx.Graph")
        self.graph = graph
        self.arch = graph_arch(graph)
        #: calibrated rate (GB/s) of every edge, both orientations
        self.rate: dict[tuple, float] = {}
        for u, v in graph.edges:
            self.rate[(u, v)] = self.rate[(v, u)] = link_rate(graph, u, v, self.arch)
        self._adj = {u: [(v, self.rate[(u, v)]) for v in graph.neighbors(u)] for u in graph.nodes}
        self._view: tuple | None = None
        self._gpu = {n: _is_gpu(graph, n) for n in graph.nodes}
        self._widest: dict[Any, dict[Any, float]] = {}
        self._bfs: dict[tuple[Any, float], tuple[dict, dict]] = {}
        self._paths: dict[tuple[Any, Any], list[tuple[Any, ...]]] = {}

    def widest(self, src) -> dict:
        """Bottleneck capacity (GB/s) of the widest GPU-free-interior path from ``src`` to every node."""
        got = self._widest.get(src)
        if got is not None:
            return got
        best = {src: float("inf")}
        heap = [(-float("inf"), 0, src)]
        tie = 1
        done = set()
        while heap:
            negb, _, u = heapq.heappop(heap)
            if u in done:
                continue
            done.add(u)
            if u != src and self._gpu[u]:
                continue  # reached, but GPUs do not relay
            b = -negb
            for v, bw in self._adj[u]:
                nb = min(b, bw)
                if nb > best.get(v, 0.0):
                    best[v] = nb
                    heapq.heappush(heap, (-nb, tie, v))
                    tie += 1
        self._widest[src] = best
        return best

    def _dag(self, src, level: float):
        key = (src, level)
        got = self._bfs.get(key)
        if got is not None:
            return got
        dist = {src: 0}
        preds: dict[Any, list] = {src: []}
        frontier = [src]
        while frontier:
            nxt = []
            for u in frontier:
                if u != src and self._gpu[u]:
                    continue
                for v, bw in self._adj[u]:
                    if bw < level:
                        continue
                    if v not in dist:
                        dist[v] = dist[u] + 1
                        preds[v] = [u]
                        nxt.append(v)
                    elif dist[v] == dist[u] + 1:
                        preds[v].append(u)
            frontier = nxt
        self._bfs[key] = (dist, preds)
        return dist, preds

    def paths(self, src, dst) -> list[tuple[Any, ...]]:
        """All widest, then fewest-hop, paths ``src .. dst`` (node tuples)."""
        key = (src, dst)
        got = self._paths.get(key)
        if got is not None:
            return got
        if src == dst:
            raise SimulationError(f"flow from {src!r} to itself")
        for n in (src, dst):
            if n not in self._gpu:
                raise SimulationError(f"{n!r} is not a node of the cluster graph")
            if not self._gpu[n]:
                raise SimulationError(f"{n!r} is not a GPU (kind={self.graph.nodes[n].get('kind')!r})")
        level = self.widest(src).get(dst, 0.0)
        if level <= 0:
            raise SimulationError(f"no path from {src!r} to {dst!r} through non-GPU nodes")
        dist, preds = self._dag(src, level)
        out: list[tuple[Any, ...]] = []

        def walk(node, suffix):
            if len(out) > MAX_PATHS:
                raise SimulationError(f"more than {MAX_PATHS} equal-cost paths from {src!r} to {dst!r}")
            if node == src:
                out.append((src,) + suffix)
                return
            for p in preds[node]:
                walk(p, (node,) + suffix)

        walk(dst, ())
        out.sort(key=lambda p: tuple(map(str, p)))
        self._paths[key] = out
        return out

    def bandwidth(self, src, dst) -> float:
        """Widest-path (calibrated) rate between two GPUs, GB/s."""
        return self.widest(src)[dst]

    def view(self) -> tuple:
        """The graph's :func:`simgrid_flows.nccl_view` (NCCL node and rail of each GPU), cached."""
        if self._view is None:
            self._view = nccl_view(self.graph)
        return self._view


def route_flows(graph, flows: Iterable[Flow], router: Router | None = None) -> dict:
    """The JSON job of one simulation: links, and each flow's ECMP parts on them.

    Returns
    -------
    dict
        ``links``: ``[[name, bytes_per_second], ...]`` (calibrated rates, :func:`link_rate`);
        ``parts``: ``[[flow_index, src_host, dst_host, [[link, dir], ...], bytes, delay_s], ...]``
        where ``dir`` is 0 for the edge's first-to-second endpoint (SimGrid UP) and 1 for
        the reverse (DOWN), and ``src_host`` carries the ECMP path index so every
        (src_host, dst_host) pair has exactly one route.
    """
    router = router or Router(graph)
    edge_index: dict[tuple, tuple[int, int]] = {}
    links = []
    for i, (u, v, data) in enumerate(graph.edges(data=True)):
        links.append([f"e{i}", router.rate[(u, v)] * 1e9])
        edge_index[(u, v)] = (i, 0)
        edge_index[(v, u)] = (i, 1)
    names: dict[Any, str] = {}

    def name(n):
        s = names.get(n)
        if s is None:
            s = names[n] = f"n{len(names)}"
        return s

    parts = []
    nflows = 0
    for k, f in enumerate(flows):
        nflows += 1
        if f.src == f.dst or not f.nbytes > 0:
            continue
        paths = router.paths(f.src, f.dst)
        share = float(f.nbytes) / len(paths)
        for p_idx, path in enumerate(paths):
            hops = [edge_index[(a, b)] for a, b in zip(path, path[1:])]
            delay = 1e-6 * sum(float(graph.edges[a, b].get("latency_us", 0.0) or 0.0) for a, b in zip(path, path[1:]))
            parts.append([k, f"{name(f.src)}#{p_idx}", name(f.dst), [list(h) for h in hops], share, delay])
    return {"links": links, "parts": parts, "flows": nflows}


# --------------------------------------------------------------------------- SimGrid child


def _child_main() -> None:  # pragma: no cover - runs in the child process
    """Run one simulation: job JSON on stdin, result JSON on stdout."""
    job = json.load(sys.stdin)
    import simgrid as sg

    engine = sg.Engine(["rankmap-simgrid-child", *job.get("cfg", SIMGRID_CFG)])
    zone = sg.NetZone.create_full_zone("fabric")
    driver = zone.create_host("driver", 1e9).seal()
    links = []
    for lname, bps in job["links"]:
        link = zone.create_split_duplex_link(lname, float(bps))
        link.set_latency(0.0)
        link.seal()
        links.append((link.link_up, link.link_down))
    hosts: dict[str, Any] = {}

    def host(hname):
        h = hosts.get(hname)
        if h is None:
            h = hosts[hname] = zone.create_host(hname, 1e9).seal()
        return h

    routes: dict[tuple[str, str], list] = {}
    for _, s, d, hops, _, _ in job["parts"]:
        key = (s, d)
        if key in routes:
            if routes[key] != hops:
                raise SystemExit(f"two routes for {s}->{d}")
            continue
        routes[key] = hops
        zone.add_route(
            host(s).netpoint,
            host(d).netpoint,
            None,
            None,
            [sg.LinkInRoute(links[i][dirn]) for i, dirn in hops],
            False,
        )
    zone.seal()

    by_delay: dict[float, list[int]] = {}
    for j, part in enumerate(job["parts"]):
        by_delay.setdefault(float(part[5]), []).append(j)
    finish = [0.0] * len(job["parts"])

    def starter(delay, idxs):
        if delay > 0:
            sg.this_actor.sleep_for(delay)
        comms = []
        for j in idxs:
            _, s, d, _, nbytes, _ = job["parts"][j]
            comms.append(sg.Comm.sendto_async(hosts[s], hosts[d], max(1, int(round(nbytes)))))
        sg.Comm.wait_all(comms)
        for j, c in zip(idxs, comms):
            finish[j] = c.finish_time

    for n, (delay, idxs) in enumerate(sorted(by_delay.items())):
        sg.Actor.create(f"start{n}", driver, starter, delay, idxs)
    engine.run()
    json.dump({"finish": finish, "clock": sg.Engine.clock}, sys.stdout)


def _python_for_child() -> str:
    return os.environ.get("RANKMAP_SIMGRID_PYTHON") or sys.executable


_avail_lock = threading.Lock()
_avail: dict[str, tuple[bool, str]] = {}


def simgrid_available(python: str | None = None) -> tuple[bool, str]:
    """(True, version) when the child interpreter can import simgrid, else (False, reason)."""
    python = python or _python_for_child()
    with _avail_lock:
        if python not in _avail:
            try:
                r = subprocess.run(
                    [python, "-c", "import simgrid; print(simgrid.simgrid_version)"],
                    capture_output=True, text=True, timeout=60,
                )
                ok = r.returncode == 0
                _avail[python] = (ok, r.stdout.strip() if ok else (r.stderr.strip().splitlines() or ["?"])[-1])
            except (OSError, subprocess.SubprocessError) as exc:
                _avail[python] = (False, str(exc))
        return _avail[python]


_cache_lock = threading.Lock()
_cache: dict[str, SimResult] = {}


def _run_job(job: dict, timeout: float) -> SimResult:
    nflows = job.get("flows", 0)
    if not job["parts"]:
        return SimResult(0.0, tuple([0.0] * nflows), 0)
    payload = json.dumps(job, separators=(",", ":"), sort_keys=True)
    key = hashlib.sha256(payload.encode()).hexdigest()
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    try:
        r = subprocess.run(
            [_python_for_child(), os.path.abspath(__file__), "--child"],
            input=payload, capture_output=True, text=True, timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise SimulationError(f"SimGrid child timed out after {timeout:g} s ({len(job['parts'])} flows)") from None
    if r.returncode != 0:
        tail = "\n".join(r.stderr.strip().splitlines()[-15:])
        raise SimulationError(f"SimGrid child failed (exit {r.returncode}):\n{tail}")
    out = json.loads(r.stdout)
    finish = [0.0] * nflows
    for part, t in zip(job["parts"], out["finish"]):
        finish[part[0]] = max(finish[part[0]], float(t))
    res = SimResult(max(finish) if finish else 0.0, tuple(finish), len(job["parts"]))
    with _cache_lock:
        _cache[key] = res
    return res


def simulate(graph, flows: Sequence[Flow], router: Router | None = None, timeout: float = 300.0) -> SimResult:
    """Simulate ``flows`` (all starting at time 0) on ``graph`` with max-min sharing."""
    return _run_job(route_flows(graph, list(flows), router), timeout)


def simulate_many(jobs: Sequence[tuple[Any, Sequence[Flow]]], workers: int | None = None,
                  routers: Mapping[int, Router] | None = None, timeout: float = 300.0) -> list[SimResult]:
    """Simulate several ``(graph, flows)`` jobs, ``workers`` child processes at a time."""
    routers = dict(routers or {})
    specs = []
    for g, fl in jobs:
        r = routers.get(id(g))
        if r is None:
            r = routers[id(g)] = Router(g)
        specs.append(route_flows(g, list(fl), r))
    workers = workers or max(1, min(len(specs), os.cpu_count() or 1))
    if workers == 1 or len(specs) <= 1:
        return [_run_job(s, timeout) for s in specs]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda s: _run_job(s, timeout), specs))


# --------------------------------------------------------------------------- traffic


def class_flows(graph, cfg, assignment: Sequence[Any], traffic: Mapping[str, float],
                router: Router | None = None) -> dict[str, list[Flow]]:
    """GPU-level flows of every class with a positive payload (all its parts together).

    ``cfg`` is a rankmap ``ParallelConfig`` (only its group catalogue is used),
    ``assignment[r]`` the GPU node of global rank ``r``; the flows are NCCL's on ``graph``
    (its nodes and rails), see :mod:`simgrid_flows`.
    """
    return {cls: [f for part in parts for f in part]
            for cls, parts in class_part_flows(graph, cfg, assignment, traffic, router).items()}


def class_part_flows(graph, cfg, assignment: Sequence[Any], traffic: Mapping[str, float],
                     router: Router | None = None) -> dict[str, list[list[Flow]]]:
    """GPU-level :class:`Flow` lists of each part of every class (:func:`simgrid_flows.class_part_triples`)."""
    view = router.view() if router is not None else nccl_view(graph)
    return {cls: [[Flow(a, b, nb) for a, b, nb in part] for part in parts]
            for cls, parts in class_part_triples(graph, cfg, assignment, traffic, view=view).items()}


@dataclass(frozen=True)
class ClassSim:
    """Simulated time per class (seconds) of one layout, and their sum."""

    by_class: dict[str, float] = field(default_factory=dict)
    flows: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.by_class.values())


def simulate_layouts(graph, layouts: Sequence[tuple[Any, Sequence[Any]]], traffic: Mapping[str, float],
                     workers: int | None = None, router: Router | None = None) -> list[ClassSim]:
    """Simulate several ``(cfg, assignment)`` layouts on one graph, every class separately."""
    router = router or Router(graph)
    jobs, index = [], []
    for li, (cfg, assignment) in enumerate(layouts):
        for cls, parts in class_part_flows(graph, cfg, assignment, traffic, router).items():
            for flows in parts:
                jobs.append((graph, flows))
                index.append((li, cls, len(flows)))
    results = simulate_many(jobs, workers=workers, routers={id(graph): router})
    out = [ClassSim({}, {}) for _ in layouts]
    for (li, cls, nf), res in zip(index, results):
        # the parts of a class run one after the other: their times add up
        out[li].by_class[cls] = out[li].by_class.get(cls, 0.0) + res.makespan
        out[li].flows[cls] = out[li].flows.get(cls, 0) + nf
    return out


def simulate_layout(graph, cfg, assignment: Sequence[Any], traffic: Mapping[str, float],
                    workers: int | None = None, router: Router | None = None) -> ClassSim:
    """Simulated time of each class of one layout (and ``.total``)."""
    return simulate_layouts(graph, [(cfg, assignment)], traffic, workers=workers, router=router)[0]


def sanity_check() -> float:
    """1 GB over one 50 GB/s link: must take 20 ms under pure max-min. Returns the time."""
    import networkx as nx

    g = nx.Graph()
    g.add_node("a", kind="gpu")
    g.add_node("b", kind="gpu")
    g.add_edge("a", "b", bandwidth=50.0)
    return simulate(g, [Flow("a", "b", 1e9)]).makespan


if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:
        _child_main()
    else:
        print(f"simgrid: {simgrid_available()}; 1 GB over 50 GB/s: {1e3 * sanity_check():.6f} ms (expect 20)")
