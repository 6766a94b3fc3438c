"""Compare candidate allocations for one job (issue 26): solve it on each, rank by predicted time.

Each allocation is a set of hosts of the cluster (a Slurm hostlist such as ``node[01-04]``,
expanded by :func:`~rankmap.solver.formats.hostlist.expand`).  The job is solved
(:func:`~rankmap.solver.search.solve.solve`) on each allocation's hosts alone (every other host
excluded; the baseline is the allocation's hosts in sorted name order), and the allocations
are ranked by the predicted communication time per step of their best layout, cheapest first
(ties: the order given).  For each allocation after the first, ``difference`` names what makes
it slower than the best one: the traffic class whose exposed time ``x_c·T_c`` grows the most,
the two times, and that class's bottleneck in this allocation (the directed link at full load, or
the slowest flow alone; :class:`~rankmap.solver.results.Bottleneck`).

The time limit (``options.time_limit_seconds``, seconds) bounds the whole comparison: each
allocation's solve gets an equal share of its work budgets, and of the wall clock left.  At most :data:`MAX_ALLOCATIONS` allocations.

Pure Python over plain types: no argparse, no protobuf.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..errors import InvalidArgumentError
from ..megatron.config import ParallelConfig, ParallelSizes
from ..results import Bottleneck, SolveResult
from ..types import SolveOptions

__all__ = ["MAX_ALLOCATIONS", "Allocation", "AllocationResult", "CompareResult", "parse_allocations", "resolve_compare",
           "allocation_world_size", "allocation_graph", "compare"]

#: Allocations one comparison may hold.
MAX_ALLOCATIONS = 64


@dataclass(frozen=True)
class Allocation:
    """One candidate allocation: its text (a hostlist as given) and its hosts, in the order written."""

    text: str
    hosts: tuple[str, ...]


@dataclass(frozen=True)
class AllocationResult:
    """The job solved on one allocation.

    Attributes
    ----------
    rank : int
        1 for the cheapest allocation, 2 for the next, ...
    index : int
        Position of the allocation in the input (0-based).
    allocation : Allocation
    result : SolveResult
        The solve on the allocation's hosts (``result.cost`` is its predicted time, seconds).
    difference : dict or None
        None for the best allocation; else ``seconds`` (this total minus the best's, seconds),
        ``class`` (the traffic class whose exposed time grows the most; None when none grows: a tie),
        ``class_seconds`` /
        ``best_class_seconds`` (that class's ``x_c·T_c`` here and in the best allocation, seconds),
        ``link`` ([from, to], the class's busiest directed link here, or None), ``bottleneck``
        (one line, e.g. ``limited by leaf1→spine at 100% (...)``) and ``best_bottleneck``.
    """

    rank: int
    index: int
    allocation: Allocation
    result: SolveResult
    difference: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """``rank, index, allocation, hosts, cost, order, assignment, status, stopped_by, hostfile, difference``."""
        r = self.result
        return {
            "rank": self.rank,
            "index": self.index,
            "allocation": self.allocation.text,
            "hosts": list(self.allocation.hosts),
            "cost": r.cost.to_dict(),
            "order": r.order,
            "assignment": list(r.assignment),
            "status": r.status,
            "stopped_by": r.stopped_by,
            "hostfile": [h.host for h in r.hosts],
            "difference": None if self.difference is None else dict(self.difference),
        }


@dataclass(frozen=True)
class CompareResult:
    """Allocations best first (:func:`compare`)."""

    allocations: tuple[AllocationResult, ...]
    world_size: int

    def to_dict(self) -> dict[str, Any]:
        """The JSON of ``rankmap compare``: ``{"world_size": W, "allocations": [...]}`` best first."""
        return {"world_size": self.world_size, "allocations": [a.to_dict() for a in self.allocations]}


def parse_allocations(texts: Sequence[str], graph) -> list[Allocation]:
    """Allocations from hostlist expressions, checked against the cluster ``graph``.

    Raises
    ------
    InvalidArgumentError
        Fewer than 2 or more than :data:`MAX_ALLOCATIONS` allocations; a malformed hostlist, a host
        the cluster lacks or a host named twice in one allocation; each named (field
        ``allocations[i]``).
    """
    from ..formats.hostlist import expand

    texts = [str(t) for t in texts]
    if len(texts) < 2:
        raise InvalidArgumentError(f"compare needs at least 2 allocations, got {len(texts)}", "allocations")
    if len(texts) > MAX_ALLOCATIONS:
        raise InvalidArgumentError(f"{len(texts)} allocations: at most {MAX_ALLOCATIONS} per comparison",
                                   "allocations")
    known = {str(d.get("host") or n) for n, d in graph.nodes(data=True) if d.get("kind", "gpu") == "gpu"}
    out = []
    for i, text in enumerate(texts):
        where = f"allocations[{i}]"
        hosts = expand(text, where)
        if not hosts:
            raise InvalidArgumentError(f"allocation {i + 1} ({text[:80]!r}) names no host", where)
        seen: set[str] = set()
        for h in hosts:
            if h not in known:
                raise InvalidArgumentError(
                    f"allocation {i + 1} ({text[:80]!r}): {h[:80]!r} is not a host of the cluster", where)
            if h in seen:
                raise InvalidArgumentError(f"allocation {i + 1} ({text[:80]!r}) names host {h[:80]!r} twice", where)
            seen.add(h)
        out.append(Allocation(text, tuple(hosts)))
    return out


def _gpus(graph, hosts: Sequence[str], exclude_devices: Sequence[str] = ()) -> int:
    keep, skip = set(hosts), set(map(str, exclude_devices))
    return sum(1 for n, d in graph.nodes(data=True)
               if d.get("kind", "gpu") == "gpu" and str(d.get("host") or n) in keep and str(n) not in skip)


def allocation_world_size(graph, allocations: Sequence[Allocation], sizes: ParallelSizes,
                          exclude_devices: Sequence[str] = ()) -> int:
    """The job's world size: ``sizes.world_size``, else the GPUs every allocation has (they must agree).

    Raises
    ------
    InvalidArgumentError
        Allocations with different GPU counts and no world size (naming two of them); an allocation
        with fewer GPUs than the world size (naming it and how many are missing).
    """
    counts = [_gpus(graph, a.hosts, exclude_devices) for a in allocations]
    if sizes.world_size is None:
        if len(set(counts)) > 1:
            i = next(k for k, c in enumerate(counts) if c != counts[0])
            raise InvalidArgumentError(
                f"allocation 1 ({allocations[0].text[:80]!r}) has {counts[0]} GPUs and allocation {i + 1} "
                f"({allocations[i].text[:80]!r}) {counts[i]}: give --world-size, the job's ranks", "world_size")
        return counts[0]
    W = int(sizes.world_size)
    for i, (a, c) in enumerate(zip(allocations, counts)):
        if c < W:
            raise InvalidArgumentError(
                f"allocation {i + 1} ({a.text[:80]!r}) has {c} GPUs; the job needs {W}: {W - c} missing",
                f"allocations[{i}]")
    return W


def _difference(res: SolveResult, best: SolveResult) -> dict[str, Any]:
    def exposed(r: SolveResult) -> dict[str, float]:
        return {c: cc.seconds * cc.exposure for c, cc in r.cost.classes.items()}

    mine, theirs = exposed(res), exposed(best)
    classes = sorted(set(mine) | set(theirs))
    cls = max(classes, key=lambda c: (mine.get(c, 0.0) - theirs.get(c, 0.0), -classes.index(c)), default=None)
    if cls is None or mine.get(cls, 0.0) - theirs.get(cls, 0.0) <= 1e-9 * max(best.cost.total_seconds, 1e-30):
        # as fast as the best (a tie, in input order): no class makes a difference
        return {"seconds": res.cost.total_seconds - best.cost.total_seconds, "class": None, "class_seconds": 0.0,
                "best_class_seconds": 0.0, "link": None, "bottleneck": "", "best_bottleneck": ""}
    here = res.cost.classes.get(cls)
    there = best.cost.classes.get(cls)
    b = here.bottleneck if here is not None else Bottleneck()
    return {
        "seconds": res.cost.total_seconds - best.cost.total_seconds,
        "class": cls,
        "class_seconds": mine.get(cls, 0.0),
        "best_class_seconds": theirs.get(cls, 0.0),
        "link": list(b.link) if b.link is not None else None,
        "bottleneck": b.describe(),
        "best_bottleneck": (there.bottleneck if there is not None else Bottleneck()).describe(),
    }


def compare(graph, cfg: ParallelConfig, traffic: Mapping[str, float], allocations: Sequence[Allocation],
            options: SolveOptions | None = None, cancel: threading.Event | None = None,
            deadline=None) -> CompareResult:
    """Solve the job on each allocation's hosts and rank the allocations by predicted time (module docstring).

    Parameters
    ----------
    graph : networkx.Graph
        The whole cluster (DESIGN §2).
    cfg : ParallelConfig
        The job's sizes (``cfg.world_size`` ranks; :func:`allocation_world_size` gives the default).
    traffic : mapping class -> bytes per rank per step
    allocations : sequence of Allocation
        From :func:`parse_allocations`.
    options : SolveOptions, optional
        The job's search options; ``exclude_hosts`` gets every host outside the allocation, the
        launch order is the allocation's hosts sorted, ``time_limit_seconds`` (seconds) is shared
        equally between the allocations.
    cancel : threading.Event, optional
    deadline : Deadline, optional
        The wall-clock stop of the whole comparison (a gRPC call's budget, ``rankmap compare``'s
        process deadline); default ``search_seconds(time_limit_seconds, world_size)`` from now.  Each
        allocation's solve stops at its share of what is left, and by this deadline.

    The whole-cluster work is done once: the excluded devices and hosts
    checked on the full graph once; each allocation's solve then reads a graph of the switches and the
    allocation's GPUs only (the graph an exclusion of every other host gives, in the same order,
    without copying the whole cluster once per allocation).

    Returns
    -------
    CompareResult
        Allocations best first.

    Raises
    ------
    InvalidArgumentError
        As :func:`allocation_world_size`, or a bad job (the solve's errors, prefixed with the allocation).
    InfeasibleError
        Constraints no layout of an allocation satisfies (naming it).
    SolveCancelled
        ``cancel`` was set.
    """
    from ..errors import InfeasibleError
    from ..search.solve import solve

    options = options or SolveOptions()
    allocation_world_size(graph, allocations, ParallelSizes(world_size=cfg.world_size), options.exclude_devices)
    from ..search.deadline import Deadline, search_seconds
    from ..search.problem import _exclude

    total = deadline if deadline is not None else Deadline(search_seconds(options.time_limit_seconds,
                                                                          cfg.world_size), cancel)
    if total.cancel is None:
        total.cancel = cancel
    # once for all the allocations: the job's own exclusions checked and applied (hosts as the allocations
    # name them: a GPU's host, else its id; each solve's cluster model infers hosts from its graph as before)
    base = graph
    if options.exclude_devices or options.exclude_hosts:
        base = _exclude(base, options)
    share = options.time_limit_seconds / max(1, len(allocations))  # the work budgets: equal for each allocation
    solved = []
    for i, a in enumerate(allocations):
        total.check()  # raises once cancelled
        opts = dataclasses.replace(options, exclude_hosts=(), exclude_devices=(), launch_order="sorted",
                                   time_limit_seconds=share)
        # the wall clock: what is left, shared by the allocations still to solve, and never past the whole stop
        left = total.remaining() / (len(allocations) - i)
        try:
            solved.append((i, solve(allocation_graph(base, a.hosts), cfg, traffic, opts, cancel=cancel,
                                    deadline=total.within(min(share, left)))))
        except InfeasibleError as exc:
            raise InfeasibleError(f"allocation {i + 1} ({a.text[:80]!r}): {exc.message}", exc.field) from None
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"allocation {i + 1} ({a.text[:80]!r}): {exc.message}", exc.field) from None
    solved.sort(key=lambda t: (t[1].cost.total_seconds, t[0]))
    best = solved[0][1]
    out = tuple(AllocationResult(rank, i, allocations[i], r, None if rank == 1 else _difference(r, best))
                for rank, (i, r) in enumerate(solved, start=1))
    return CompareResult(out, cfg.world_size)


def allocation_graph(graph, hosts: Sequence[str]):
    """``graph`` without the GPUs of hosts outside ``hosts`` (and their links): what excluding every other
    host gives (``graph.copy()`` then removing them: the same nodes, links and order), built from the kept
    part alone.

    Parameters
    ----------
    graph : networkx.Graph
        A cluster graph; a GPU's host is its ``host``, else its id (as :func:`parse_allocations` reads them).
    hosts : sequence of str
        The hosts whose GPUs stay; every non-GPU node stays.
    """
    import networkx as nx

    keep = set(map(str, hosts))
    drop = {n for n, d in graph.nodes(data=True) if d.get("kind", "gpu") == "gpu" and str(d.get("host") or n) not in keep}
    if graph.is_multigraph() or graph.is_directed():  # the general way
        g = graph.copy()
        g.remove_nodes_from(drop)
        return g
    g = nx.Graph()
    g.graph.update(graph.graph)
    g.add_nodes_from((n, dict(d)) for n, d in graph.nodes(data=True) if n not in drop)
    # as Graph.copy adds them: every (u, v) of the adjacency in order (each link twice, the second a no-op)
    g.add_edges_from((u, v, dict(d)) for u, nbrs in graph.adj.items() if u not in drop
                     for v, d in nbrs.items() if v not in drop)
    return g


def resolve_compare(job: Mapping[str, Any], given: Mapping[str, Any] | None, allocation_texts: Sequence[str],
                    warn=None):
    """A comparison's job as ``rankmap compare`` reads it: ``(ResolvedJob, allocations)``.

    As :func:`~rankmap.solver.job.resolve.resolve_job` (a job file named as the cluster fills the
    keys left unset; Megatron-LM arguments give sizes; measured rates cap the links), except that the world size defaults to the
    GPUs of each allocation (:func:`allocation_world_size`) rather than the whole cluster's.

    Raises
    ------
    InvalidArgumentError
        A bad job value (named by its key), a bad allocation (field ``allocations[i]``), allocations
        of different sizes without a world size.
    """
    from ..megatron.ranks import DEFAULT_ORDER
    from .model import job_sizes
    from .resolve import ResolvedJob, job_graph, job_traffic

    filled, graph, options, measured = job_graph(job, given, warn)  # measured rates too, as a solve
    allocations = parse_allocations(allocation_texts, graph)
    sizes = job_sizes(filled)
    W = allocation_world_size(graph, allocations, sizes, options.exclude_devices)
    cfg = sizes.replace(world_size=W).to_config(DEFAULT_ORDER)
    return ResolvedJob(graph, cfg, job_traffic(filled, cfg), options, filled, measured), allocations
