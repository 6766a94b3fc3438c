"""Which hosts (or GPUs) a job smaller than its allocation runs on (DESIGN §5, issue 12 item 3).

When ``world_size`` is below the cluster's usable GPUs, the choice of hosts is part
of the search.  Launcher mode chooses whole hosts (``world_size / G`` of them, G GPUs
per host: torchrun and ``srun`` start G ranks on every node they use; when hosts of the
largest count G cannot make up the world size, whole hosts of several sizes that add up
to it, the first in launch order and the first along the fabric tree, issue 27); free mode
chooses GPUs.  The candidates:

* ``launcher``: what the launcher does with a larger allocation: the first hosts
  (GPUs) in launch order, i.e. ``srun -N k`` / ``torchrun --nnodes k`` on the first
  ``k`` nodes of the sorted node list.  Its default layout is the baseline.
* ``compact``: a best-fit packing along the fabric tree (the way Slurm's
  ``topology/tree`` plugin and Kueue's topology-aware scheduling pick nodes): the
  smallest domain (leaf, spine group, NVLink rack, …) that holds the job, else
  whole domains largest first and the remainder in the smallest domain that fits it,
  recursively down to hosts.
* ``compact-largest``: the same, but the remainder goes to the largest remaining domain
  (keeps the rest of the job's communication in one big domain instead of a snug small one).

Each distinct candidate is solved as a cluster of its own (the others excluded) with
an equal share of the time limit, and the cheapest predicted time wins (ties: the
earlier candidate, so the launcher's own choice when nothing beats it).  The status is
FEASIBLE: other host sets were not searched; the reported bound is 0 (the analytic
bound assumes every GPU runs a rank, so a slow GPU the job need not use would lift it
above layouts on the others; a candidate's own bound holds for its hosts only).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Sequence

import networkx as nx
import numpy as np

from ..fabric.cluster import Cluster
from ..errors import InvalidArgumentError
from ..launch.placement import launcher_device_order, launcher_host_order
from .deadline import Deadline, search_seconds

__all__ = ["pack_along_tree", "host_candidates", "device_candidates"]


def pack_along_tree(labels: Sequence[np.ndarray], count: int, largest_remainder: bool = False) -> np.ndarray:
    """Choose ``count`` items packed into as few and as small fabric domains as possible.

    Parameters
    ----------
    labels : sequence of numpy.ndarray of int, each shape (n,)
        Domain label of every item per level, finest level first; levels nest
        (items sharing a finer domain share every coarser one).  Items are
        given in preference order (ties go to earlier items and domains).
    count : int
        Items to choose, 0 < count <= n.
    largest_remainder : bool
        Put the remainder that no whole domain fills into the largest remaining
        domain instead of the smallest that holds it.

    Returns
    -------
    numpy.ndarray of int
        Indices of the chosen items, in preference order, shape (count,).
    """
    levels = [np.asarray(lab) for lab in labels]
    n = levels[0].size if levels else 0
    if not 0 < count <= n:
        raise ValueError(f"cannot choose {count} of {n} items")

    def pack(items: np.ndarray, depth: int, k: int) -> list[int]:
        if k == items.size:
            return items.tolist()
        if depth < 0:
            return items[:k].tolist()
        lab = levels[depth][items]
        doms, first, sizes = np.unique(lab, return_index=True, return_counts=True)
        if doms.size == 1:
            return pack(items, depth - 1, k)
        # domains in preference order of their first item
        order = np.argsort(first, kind="stable")
        doms, sizes = doms[order], sizes[order]
        fits = np.flatnonzero(sizes >= k)
        if fits.size:  # best fit: the smallest domain that holds all k (the first of equal ones)
            d = fits[np.argmin(sizes[fits])]
            return pack(items[lab == doms[d]], depth - 1, k)
        chosen: list[int] = []
        left = k
        rest = []
        for d in np.argsort(-sizes, kind="stable"):
            if sizes[d] <= left:
                chosen += items[lab == doms[d]].tolist()
                left -= int(sizes[d])
            else:
                rest.append(d)
        if left:
            rest_sizes = sizes[rest]
            ok = [r for r, s in zip(rest, rest_sizes) if s >= left]
            d = max(ok, key=lambda r: sizes[r]) if largest_remainder else min(ok, key=lambda r: sizes[r])
            chosen += pack(items[lab == doms[d]], depth - 1, left)
        return chosen

    out = pack(np.arange(n), len(levels) - 1, int(count))
    return np.asarray(sorted(out), dtype=np.int64)


def _host_levels(cluster: Cluster) -> list[np.ndarray]:
    """Per inter-host bandwidth level (finest first): the domain label of each host."""
    out = []
    for k in cluster.inter_host_levels():
        lab = np.empty(len(cluster.hosts), dtype=np.int64)
        lab[cluster.host_of] = cluster.domains[k]
        out.append(lab)
    return out


def host_scores(cluster: Cluster) -> np.ndarray:
    """The slowest widest-path bandwidth (GB/s) between two GPUs of each host, shape (hosts,).

    ``inf`` for a host with one GPU.  Hosts of one size are done together: O(Σ G²).
    """
    H = len(cluster.hosts)
    out = np.full(H, np.inf)
    for G, hs, members in cluster.hosts_by_size():  # members: (hosts of this size, G)
        a, b = np.triu_indices(G, 1)
        bw = cluster.bandwidth_gbps(members[:, a], members[:, b])
        out[hs] = bw.min(axis=1)
    return out


def _fast_first(order: np.ndarray, score: np.ndarray) -> np.ndarray:
    """``order`` stably re-sorted by descending ``score`` of each item."""
    return order[np.argsort(-score[order], kind="stable")]


def host_candidates(cluster: Cluster, num_hosts: int, launch_host_order: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """``(name, host indices)`` of the candidate host sets of ``num_hosts`` hosts, distinct, launcher first.

    ``launcher``: the first hosts in launch order; ``compact`` / ``compact-largest``: packed
    along the fabric tree; ``fast`` and ``compact-fast``: the same preferring hosts whose GPUs
    are best connected among themselves (:func:`host_scores`: a host whose GPUs meet only over
    PCIe or a NIC ranks after NVSwitch hosts).
    """
    order = np.asarray(launch_host_order, dtype=np.int64)
    fast = _fast_first(order, host_scores(cluster))
    tree = _host_levels(cluster)
    cands = [("launcher", order[:num_hosts])]
    for name, pref in (("compact", order), ("fast", fast)):
        levels = [lab[pref] for lab in tree]
        if name == "fast":
            cands.append(("fast", pref[:num_hosts]))
        if levels:
            cands.append((name if name == "compact" else "compact-fast", pref[pack_along_tree(levels, num_hosts)]))
            if name == "compact":
                cands.append(("compact-largest", pref[pack_along_tree(levels, num_hosts, largest_remainder=True)]))
    return _distinct(cands)


def device_candidates(cluster: Cluster, world_size: int, launch_device_order: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """``(name, device indices)`` of the candidate GPU sets of ``world_size`` GPUs (free mode), as
    :func:`host_candidates` with devices (the host score of each device's host)."""
    order = np.asarray(launch_device_order, dtype=np.int64)
    fast = _fast_first(order, host_scores(cluster)[cluster.host_of])
    cands = [("launcher", order[:world_size])]
    for name, pref in (("compact", order), ("fast", fast)):
        levels = [cluster.domains[k][pref] for k in range(cluster.domains.shape[0])]
        if name == "fast":
            cands.append(("fast", pref[:world_size]))
        cands.append((name if name == "compact" else "compact-fast", pref[pack_along_tree(levels, world_size)]))
        if name == "compact":
            cands.append(("compact-largest", pref[pack_along_tree(levels, world_size, largest_remainder=True)]))
    return _distinct(cands)


def _distinct(cands):
    seen, out = set(), []
    for name, idx in cands:
        key = tuple(sorted(idx.tolist()))
        if key not in seen:
            seen.add(key)
            out.append((name, idx))
    return out


def _mixed_host_sets(cluster: Cluster, W: int, options) -> list[tuple[str, np.ndarray]]:
    """Whole hosts of several sizes holding exactly ``W`` GPUs (issue 27: launcher mode with
    ``--nproc-per-node`` per host), ``(name, host indices)``: the first hosts in launch order that
    fit (the launcher's own choice, first), then the same over the fabric's depth-first order
    (hosts near each other); a host that would overshoot W is skipped.  Empty when neither adds
    up to W (the caller then keeps to hosts of the largest size)."""
    from .decompose import dfs_host_order

    gph = cluster.gpus_per_host
    out = []
    launch = launcher_host_order(cluster, options.launch_order, options.exclude_hosts)
    for name, order in (("launcher", launch), ("compact", dfs_host_order(cluster))):
        took, total = [], 0
        for h in order.tolist():
            if total + int(gph[h]) <= W:
                took.append(h)
                total += int(gph[h])
            if total == W:
                break
        if total == W:
            out.append((name, np.array(sorted(took), dtype=np.int64)))
    return _distinct(out)


def solve_subset(solve, graph: nx.Graph, cluster: Cluster, cfg, traffic, options, cancel=None, progress=None,
                 deadline: Deadline | None = None):
    """Solve a job of ``cfg.world_size`` ranks on part of ``cluster`` (see the module docstring).

    ``solve`` is :func:`~rankmap.solver.search.solve.solve`, run on each candidate host set.
    ``deadline``: the whole solve's wall-clock stop when the caller gave one (a gRPC deadline):
    each candidate's share ends by it, and candidates not started when it passed are skipped
    (the launcher's own hosts, the first, always run: their baseline is the baseline).

    Raises
    ------
    InvalidArgumentError
        Launcher mode with a world size that neither hosts of the largest GPU count nor whole
        hosts of several sizes (the first in launch order, or along the fabric) add up to.
    """
    t0 = time.perf_counter()
    W = cfg.world_size
    if options.mode == "launcher":
        gph = cluster.gpus_per_host
        # whole hosts of the largest GPU count G when W is a multiple of G and there are enough of
        # them (hosts with fewer usable GPUs, an excluded or failed GPU, then sit the job out);
        # else whole hosts of several sizes adding up to W (torchrun --nproc-per-node per host)
        G = int(gph.max())
        full = np.flatnonzero(gph == G)
        mixed = _mixed_host_sets(cluster, W, options) if (W % G or W // G > full.size) else []
        if mixed:
            cands = [(name, np.isin(cluster.host_of, idx)) for name, idx in mixed]
        elif W % G:
            raise InvalidArgumentError(
                f"world_size {W} is not a multiple of the {G} GPUs per host: launcher mode runs whole hosts "
                f"(torchrun --nproc-per-node {G}); use mode free or world_size {W // G * G or G}",
                "world_size",
            )
        if W // G > full.size:
            raise InvalidArgumentError(
                f"world_size {W} needs {W // G} hosts with {G} usable GPUs each; the cluster has {full.size} "
                f"(hosts with fewer GPUs cannot run --nproc-per-node {G}); use mode free", "world_size",
            )
        if not mixed:
            horder = launcher_host_order(cluster, options.launch_order, options.exclude_hosts)
            horder = horder[np.isin(horder, full)]
            cands = [(name, np.isin(cluster.host_of, idx)) for name, idx in host_candidates(cluster, W // G, horder)]
    else:
        dorder = launcher_device_order(cluster, options.launch_order, options.exclude_hosts)
        cands = []
        for name, idx in device_candidates(cluster, W, dorder):
            keep = np.zeros(cluster.num_devices, dtype=bool)
            keep[idx] = True
            cands.append((name, keep))
    share = options.time_limit_seconds / len(cands)
    results = []
    for name, keep in cands:
        drop_hosts = tuple(sorted({cluster.hosts[h] for h in cluster.host_of[~keep]}
                                  - {cluster.hosts[h] for h in cluster.host_of[keep]}))
        drop_devs = tuple(str(cluster.devices[i]) for i in np.flatnonzero(~keep)
                          if cluster.hosts[cluster.host_of[i]] not in drop_hosts)
        sub = dataclasses.replace(
            options,
            exclude_hosts=tuple(options.exclude_hosts) + drop_hosts,
            exclude_devices=tuple(options.exclude_devices) + drop_devs,
            time_limit_seconds=share,
        )
        if deadline is None:
            part = Deadline(search_seconds(share, cfg.world_size), cancel)
        else:
            if results and deadline.check():
                break  # the caller's deadline passed: answer with the candidates solved so far
            part = deadline.within(search_seconds(share, cfg.world_size))
        results.append((name, solve(graph, cfg, traffic, sub, cancel, progress, deadline=part)))
    best = results[0][1]
    for _, r in results[1:]:  # strictly cheaper than an earlier candidate (ties: the launcher's hosts)
        if r.layout.cost.total_seconds < best.layout.cost.total_seconds * (1 - 1e-9):
            best = r
    base = results[0][1]  # the launcher's own hosts: its baseline is the baseline
    # No bound over every host set is computed: the analytic bound assumes every GPU of the
    # cluster runs a rank (a slow GPU the job need not use would raise it above layouts on the
    # others), and each candidate's bound holds for its own hosts only.  0 is valid.
    bound = 0.0
    stopped = next((r.stopped_by for _, r in results if r.stopped_by), "")
    if deadline is not None and deadline.stopped and len(results) < len(cands):
        stopped = deadline.stopped_by
    return dataclasses.replace(
        best,
        baseline=base.baseline,
        status="FEASIBLE",
        bound_seconds=bound,
        solve_seconds=time.perf_counter() - t0,
        stopped_by=stopped,
    )
