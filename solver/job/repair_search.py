"""The searches of a repair (:mod:`.repair`): the patch's spare choice, the pinned descent, the full solve.

Every layout is scored with the solve's time model (:func:`~rankmap.solver.cost.timemodel.layout_cost`)
on the repair's one cluster model (the surviving hosts and the spares).  Budgets are counts of scored
layouts sized from the time limit (:func:`~rankmap.solver.search.refine.eval_budget`), so the answer
does not depend on the machine's load unless the wall-clock deadline stops a phase first.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from ..megatron.config import ParallelConfig
from ..results import CostBreakdown
from ..types import SolveOptions
from .repair import PATCH_SHARE, PINNED_SHARE, _REL

__all__ = ["RepairState", "patch_layout", "pinned_layout", "full_layout", "FULL_HOST_CHOICE_MAX_GPUS"]

#: Largest world size whose full re-solve chooses among all the spares (above, it runs on the hosts
#: the pinned repair uses: choosing hosts rebuilds a cluster model per candidate host set).
FULL_HOST_CHOICE_MAX_GPUS = 8192


@dataclass
class RepairState:
    """What the phases share: the scoring cluster and the running layout on it.

    ``running_dev``: device (index into ``cluster.devices``) per rank, -1 for a failed rank, shape
    (world_size,); ``failed``: bool per rank; ``spares``: host indices of the spares (natural name
    order); ``deadline``: the wall-clock stop of the patch and pinned phases; ``evals``: layouts scored.
    """

    cluster: Any
    cfg: ParallelConfig
    traffic: Any
    exposure: dict
    groups: dict
    running_dev: np.ndarray       # device (in ``cluster``) per rank, -1 for a failed rank
    failed: np.ndarray            # bool per rank
    spares: list[int]             # host indices (in ``cluster``) of the spares, natural order
    deadline: Any
    mode: str
    evals: int = 0

    def score(self, dev: np.ndarray) -> tuple[float, float, CostBreakdown]:
        """(predicted seconds, squared link load ``pressure``, the cost) of device-per-rank ``dev``."""
        from ..cost.timemodel import layout_cost

        st: dict = {}
        bd = layout_cost(self.cluster, self.cfg, dev, self.traffic, self.groups, self.exposure, st)
        self.evals += 1
        return bd.total_seconds, st.get("pressure", 0.0), bd

    def moved_survivors(self, dev: np.ndarray) -> int:
        """Surviving ranks whose device in ``dev`` differs from the running layout."""
        return int(np.count_nonzero((dev != self.running_dev) & ~self.failed))


def patch_layout(st: RepairState, rank_host: list[str], old_local: list[int], hit: list[str], options: SolveOptions):
    """(device per rank, cost, stopped_by) of the patch, or a string saying why there is none.

    ``rank_host``: host of each rank in the running layout; ``old_local``: ``local_index`` of each
    rank's running GPU; ``hit``: the failed hosts that run ranks.  A first assignment gives each
    failed host (by lowest rank) the first free spare that fits (launcher mode: as many GPUs as the
    host ran ranks; free mode: at least as many); then each failed host tries every other free
    spare with the others fixed, taking it when strictly cheaper, within ``PATCH_SHARE`` of the
    time limit's evaluations and the phase deadline.
    """
    from ..search.refine import eval_budget

    cluster = st.cluster
    ranks_of: dict[str, list[int]] = {h: [] for h in hit}  # one pass over the ranks
    for r, h in enumerate(rank_host):
        if h in ranks_of:
            ranks_of[h].append(r)
    failed_hosts = sorted(hit, key=lambda h: ranks_of[h][0])
    # each failed host's ranks by their old GPU's local index: they take the spare's GPUs in that order
    need = {h: sorted(ranks_of[h], key=lambda r: (old_local[r], r)) for h in failed_hosts}
    spare_gpus = {s: cluster.host_devices[s][np.argsort(cluster.local_index[cluster.host_devices[s]], kind="stable")]
                  for s in st.spares}
    G = {h: len(need[h]) for h in failed_hosts}
    fits = {h: [s for s in st.spares if (spare_gpus[s].size == G[h] if st.mode == "launcher"
                                         else spare_gpus[s].size >= G[h])] for h in failed_hosts}
    # a first assignment: failed hosts by lowest rank take the first spare that fits
    chosen: dict[str, int] = {}
    used: set[int] = set()
    for h in failed_hosts:
        s = next((s for s in fits[h] if s not in used), None)
        if s is None:
            sizes = sorted({G[x] for x in failed_hosts})
            return (f"no free spare host with {' or '.join(map(str, sizes))} GPUs for failed host {h!r} "
                    f"({len(failed_hosts)} failed, {len(st.spares)} spare host(s))")
        chosen[h] = s
        used.add(s)

    def layout() -> np.ndarray:
        dev = st.running_dev.copy()
        for h, s in chosen.items():
            dev[need[h]] = spare_gpus[s][:G[h]]
        return dev

    budget = eval_budget(cluster, st.cfg, st.traffic, options.time_limit_seconds * PATCH_SHARE)
    dev = layout()
    cost, _p, bd = st.score(dev)
    start = st.evals
    for h in failed_hosts:  # then each failed host tries every free spare, the others fixed
        for s in fits[h]:
            if s in used:
                continue
            if st.evals - start >= budget or st.deadline.check():
                return dev, bd, st.deadline.stopped_by
            old = chosen[h]
            chosen[h] = s
            cand = layout()
            c, _p, cbd = st.score(cand)
            if c < cost * (1 - _REL):
                used.discard(old)
                used.add(s)
                dev, cost, bd = cand, c, cbd
            else:
                chosen[h] = old
    return dev, bd, st.deadline.stopped_by


def _blocks(cluster, dev: np.ndarray) -> dict[int, np.ndarray]:
    """Host index -> its ranks, by their GPU's local index (hosts that run ranks)."""
    host = cluster.host_of[dev]
    order = np.lexsort((cluster.local_index[dev], host))
    hs = host[order]
    cut = np.flatnonzero(np.diff(hs)) + 1
    return {int(hs[part[0]]): part for part in (order[a:b] for a, b in zip(np.r_[0, cut], np.r_[cut, hs.size]))}


def _pinned_moves(st: RepairState, dev: np.ndarray, hot, room: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Moves one step from ``dev`` (module docstring), hot hosts first, as ``(ranks, their new devices)``.

    ``room``: surviving ranks that may still move.  Families that could not fit it are skipped before
    any pair is built (a block exchange moves every surviving rank of both blocks), so the moves tried
    stay near O(hosts x spares + hosts x GPUs^2) per step at any cluster size.
    """
    cluster = st.cluster
    blocks = _blocks(cluster, dev)
    used = set(blocks)
    free = [s for s in st.spares if s not in used]
    hot_set = set(hot.tolist()) if hot is not None else set()
    hosts = sorted(blocks, key=lambda h: (h not in hot_set, int(blocks[h].min())))
    surv = {h: int(np.count_nonzero(~st.failed[blocks[h]])) for h in hosts}
    spare = set(st.spares)
    gpus_of = {s: cluster.host_devices[s][np.argsort(cluster.local_index[cluster.host_devices[s]], kind="stable")]
               for s in free}
    # 1. a host's block to a free spare host (same GPU count in launcher mode), GPUs by local index
    for h in hosts:
        b = blocks[h]
        if surv[h] > room:
            continue
        for s in free:
            g = gpus_of[s]
            if g.size != b.size if st.mode == "launcher" else g.size < b.size:
                continue
            yield b, g[:b.size]
    # 2. two hosts' blocks exchanged (equal sizes; a block with failed ranks only onto a spare host)
    fits = [h for h in hosts if surv[h] <= room]
    for i, h in enumerate(fits):
        a = blocks[h]
        for k in fits[i + 1:]:
            b = blocks[k]
            if a.size != b.size or surv[h] + surv[k] > room:
                continue
            if (surv[h] < a.size and k not in spare) or (surv[k] < b.size and h not in spare):
                continue
            yield np.concatenate([a, b]), np.concatenate([dev[b], dev[a]])
    # 3. two ranks' GPUs exchanged inside a host
    if room >= 1:
        for h in hosts:
            b = blocks[h]
            for p in range(b.size):
                for q in range(p + 1, b.size):
                    yield b[[p, q]], dev[b[[q, p]]]
    if st.mode != "free":
        return
    # 4. free mode: two ranks on different hosts exchanged; one rank to a free GPU of a spare host
    from ..search.localsearch import RANK_SWAP_MAX_RANKS

    ranks = [r for h in hosts for r in blocks[h].tolist()][:RANK_SWAP_MAX_RANKS]
    host = cluster.host_of[dev]
    for x in range(len(ranks)):
        for y in range(x + 1, len(ranks)):
            a, b = ranks[x], ranks[y]
            if host[a] != host[b]:
                yield np.array([a, b]), dev[[b, a]]
    taken = np.zeros(cluster.num_devices, dtype=bool)
    taken[dev] = True
    spare_free = [int(g) for s in st.spares for g in cluster.host_devices[s].tolist() if not taken[g]]
    for r in ranks:
        for g in spare_free[:RANK_SWAP_MAX_RANKS]:
            yield np.array([r]), np.array([g])


def pinned_layout(st: RepairState, start: np.ndarray, max_moves: int, options: SolveOptions, deadline):
    """(device per rank, cost, stopped_by) of the pinned repair: a bounded descent from the patch.

    A move is scored only when the failed ranks it moves land on spare hosts and the surviving
    ranks moved from the running layout stay within ``max_moves`` (both checked on the moved
    ranks alone); the budget counts scored layouts, ``deadline`` is the wall-clock stop.  The answer
    is the cheapest layout the descent passed through, the fewest surviving ranks moved among equals
    (a plateau move that only spreads link load does not count as a gain).
    """
    from ..search.localsearch import hot_hosts
    from ..search.refine import eval_budget

    cluster = st.cluster
    on_spare = np.zeros(len(cluster.hosts), dtype=bool)
    on_spare[st.spares] = True
    surviving = ~st.failed
    budget = eval_budget(cluster, st.cfg, st.traffic, options.time_limit_seconds * PINNED_SHARE)
    cur = start.copy()
    cost, pressure, bd = st.score(cur)
    moved = st.moved_survivors(cur)
    best = (cost, moved, cur, bd)  # plateau moves may pass through layouts of equal time: keep the fewest moves
    used = 1
    improved = True
    while improved and used < budget:
        improved = False
        for ranks, devs in _pinned_moves(st, cur, hot_hosts(cluster, bd), max_moves - moved):
            if used >= budget or deadline.check():
                return best[2], best[3], deadline.stopped_by
            was = int(np.count_nonzero((cur[ranks] != st.running_dev[ranks]) & surviving[ranks]))
            now = int(np.count_nonzero((devs != st.running_dev[ranks]) & surviving[ranks]))
            if moved - was + now > max_moves or not on_spare[cluster.host_of[devs[st.failed[ranks]]]].all():
                continue
            new = cur.copy()
            new[ranks] = devs
            c, pr, nbd = st.score(new)
            used += 1
            if c < cost * (1 - _REL) or (c <= cost * (1 + 1e-12) and pr < pressure * (1 - _REL)):
                cur, cost, pressure, bd, moved = new, c, pr, nbd, moved - was + now
                if c < best[0] * (1 - _REL) or (c <= best[0] * (1 + _REL) and moved < best[1]):
                    best = (c, moved, cur, nbd)
                improved = True
                break
    return best[2], best[3], deadline.stopped_by


def full_layout(sub, cluster, st: RepairState, options: SolveOptions, orders, cancel, seconds: float,
                hosts_hint: np.ndarray | None = None):
    """(device per rank, cost, config, stopped_by) of a new solve over the surviving hosts and the spares
    (``sub``: their graph; ``cluster``: its model; ``seconds``: the solve's time limit).

    With more GPUs than ranks, which hosts run the job is part of the solve
    (:func:`~rankmap.solver.search.hostchoice.solve_subset`) up to :data:`FULL_HOST_CHOICE_MAX_GPUS`
    ranks; above, that rebuilds a cluster model per candidate host set (seconds each), so the solve
    runs on the hosts of ``hosts_hint`` (device per rank of the pinned repair: the survivors and the
    spares it took) when given.  The layout is scored on ``cluster``, as the other options.

    Raises
    ------
    InvalidArgumentError, InfeasibleError
        As :func:`~rankmap.solver.search.solve.solve` (e.g. constraints no layout meets).
    """
    from ..cost.timemodel import layout_cost
    from ..search.solve import solve

    full_options = dataclasses.replace(
        options, orders=orders if orders is not None else st.cfg.order, launch_order="sorted",
        exclude_devices=(), exclude_hosts=(), time_limit_seconds=seconds)
    W = st.cfg.world_size
    if cluster.num_devices == W:
        graph = cluster  # the cluster model already built
    else:
        graph = sub
        if W > FULL_HOST_CHOICE_MAX_GPUS and hosts_hint is not None:
            keep = np.isin(cluster.host_of, np.unique(cluster.host_of[hosts_hint]))
            if int(keep.sum()) == W:  # whole hosts: one cluster model of them
                graph = cluster.subset(keep, sub)
    result = solve(graph, st.cfg, st.traffic, full_options, cancel=cancel)
    index = cluster.device_index()
    dev = np.array([index[a] for a in result.assignment], dtype=np.int64)
    cost = layout_cost(cluster, result.config, dev, st.traffic, None, st.exposure)
    return dev, cost, result.config, result.stopped_by
