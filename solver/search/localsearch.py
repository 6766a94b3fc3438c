"""Local search on the real objective: swap moves scored by the time model (DESIGN §4–§5).

The surrogate models of :mod:`.decompose` and :mod:`.polish` see widest-path
bandwidths, not link sharing; this descent scores every move with
:func:`~rankmap.solver.cost.timemodel.layout_cost` (predicted time on shared links)
and takes the first improving one, in a fixed order, until no move improves
or the evaluation budget is spent.  The objective is a sum of maxima, flat
under most single moves, so a move that keeps the time and lowers the sum of
squared link times (``pressure``) also counts: the order (time, pressure)
strictly decreases, so the descent never cycles.  Moves keep the mode's structure:

* periodic uniform swaps (launcher mode, tried first, few): the same exchange of two local positions in every
  block of ``k`` positions (``k`` divides the host's ``G``), on every host at once.  A host of
  alike halves (NVLink pairs under PCIe switches) often needs both halves changed together: on
  8 hosts of four NVLink pairs, tp4 cp2 pp2, swapping local positions 1↔2 and 5↔6 together
  brings dp off the PCIe links (266.16 → 231.66 ms, the bound); neither swap alone improves, and
  the double swap was move 209 of 602, past the descent's ~60 evaluations;
* host swaps: exchange the rank blocks of two hosts (launcher and free mode); the
  hosts behind the link that sets the costliest class's time (:func:`hot_hosts`)
  are tried first, each with the nearest hosts first (a rack whose pipeline
  stage boundary leaves over one leaf's uplink moves half of it to the other
  leaf), then every other pair;
* uniform local swaps: exchange two local GPU positions on every host at once
  (launcher mode; keeps identical hosts identical);
* uniform 3-cycles and uniform double swaps of local GPU positions (hosts of up to
  ``COMPOUND_MOVE_MAX_GPUS`` GPUs), tried when no uniform swap improves.  A host's
  time is often set by two constraints at once (a tp ring that must stay on NVLink
  and the inter-host senders that must use different NICs): no single swap keeps
  the first while easing the second, a 3-cycle or two swaps together do (DGX-1,
  tp4 pp2: 999 ms → 798 ms);
* single-host local swaps (launcher mode, up to ``SINGLE_HOST_SWAP_MAX_HOSTS`` hosts);
* rank swaps between any two devices (free mode, up to ``RANK_SWAP_MAX_RANKS`` ranks).

The budget is a number of evaluations (deterministic: same input, same
budget, same answer whatever the machine's load); ``deadline`` is a wall-clock
safety cap only.
"""

from __future__ import annotations

import itertools
import threading
from typing import Callable, Iterator, Mapping

import numpy as np

from ..megatron.config import ParallelConfig
from ..fabric.cluster import Cluster
from .deadline import Deadline
from ..cost.timemodel import layout_cost
from ..results import CostBreakdown
from ..types import SolveCancelled

__all__ = ["descend", "SINGLE_HOST_SWAP_MAX_HOSTS", "RANK_SWAP_MAX_RANKS", "COMPOUND_MOVE_MAX_GPUS"]

SINGLE_HOST_SWAP_MAX_HOSTS = 16
#: Largest host (GPUs) whose uniform 3-cycles and double swaps are moves (8 GPUs: 112 + 210 of them).
COMPOUND_MOVE_MAX_GPUS = 8
RANK_SWAP_MAX_RANKS = 128
_REL = 1e-9


def _host_blocks(cluster: Cluster, dev: np.ndarray) -> list[np.ndarray]:
    """Ranks on each used host, in node-rank order (by lowest rank), local order by rank."""
    host = cluster.host_of[dev]
    order = np.argsort(host, kind="stable")
    counts = np.bincount(host, minlength=len(cluster.hosts))
    starts = np.concatenate([[0], np.cumsum(counts)])
    blocks = [order[starts[h]:starts[h + 1]] for h in range(len(cluster.hosts)) if counts[h]]
    blocks.sort(key=lambda b: int(b[0]))
    return blocks


def _compound_moves(G: int) -> list[tuple[tuple[int, ...], ...]]:
    """Uniform local moves beyond swaps on ``G`` positions: both 3-cycles of every triple, then every pair of disjoint swaps."""
    out: list[tuple[tuple[int, ...], ...]] = []
    for a, b, c in itertools.combinations(range(G), 3):
        out += [((a, b, c),), ((a, c, b),)]
    for (a, b), (c, d) in itertools.combinations(itertools.combinations(range(G), 2), 2):
        if len({a, b, c, d}) == 4:
            out.append(((a, b), (c, d)))
    return out


def _periods(G: int) -> list[int]:
    """Block lengths ``k`` (``2 <= k < G``, ``k`` divides ``G``) of the periodic uniform swaps, longest first."""
    return [k for k in range(G // 2, 1, -1) if G % k == 0]


def hot_hosts(cluster: Cluster, cost: CostBreakdown) -> np.ndarray | None:
    """Hosts behind the shared link that sets the time of the costliest link-bound class, or None.

    The class with the largest ``x_c·T_c`` whose bottleneck is a link (not a
    lone flow); its link's far side (:meth:`~rankmap.solver.fabric.links.Fabric.devices_behind`):
    the hosts whose GPUs send (uplink) or receive (downlink) over it.
    """
    best = None
    for cc in cost.classes.values():
        b = cc.bottleneck
        if b is None or b.kind != "link" or b.link is None:
            continue
        v = cc.seconds * cc.exposure
        if v > 0 and (best is None or v > best[0]):
            best = (v, b.link)
    if best is None:
        return None
    devs = cluster.fabric.devices_behind(best[1])
    return np.unique(cluster.host_of[devs]) if devs.size else None


def _host_pairs(cluster: Cluster, dev: np.ndarray, blocks: list, hot: np.ndarray | None) -> Iterator[tuple[int, int]]:
    """Block pairs to exchange: each hot host's block with the others, nearest first, then every other pair."""
    H = len(blocks)
    first = dev[np.array([b[0] for b in blocks], dtype=np.int64)] if H else np.zeros(0, dtype=np.int64)
    is_hot = np.isin(cluster.host_of[first], hot) if hot is not None and H > 2 else np.zeros(H, dtype=bool)
    done: set = set()
    if is_hot.any() and not is_hot.all():
        others = np.flatnonzero(~is_hot)
        for i in np.flatnonzero(is_hot).tolist():
            lv = cluster.pair_level(np.full(others.size, first[i]), first[others])
            for j in others[np.argsort(lv, kind="stable")].tolist():
                key = (min(i, j), max(i, j))
                done.add(key)
                yield key
    for key in itertools.combinations(range(H), 2):
        if key not in done:
            yield key


def _mixed_moves(cluster: Cluster, dev: np.ndarray, blocks: list, hot: np.ndarray | None) -> Iterator[np.ndarray]:
    """Launcher moves on hosts of several sizes (issue 27): each host keeps one contiguous block of
    as many ranks as its GPUs, so exchanging two hosts re-lays every block between them (the
    host order changes, the ranks follow); then the uniform position swaps of each host size and,
    on few hosts, single-host swaps."""
    H = len(blocks)
    seqs = [dev[b] for b in blocks]
    for i, j in _host_pairs(cluster, dev, blocks, hot):
        order = list(range(H))
        order[i], order[j] = order[j], order[i]
        yield np.concatenate([seqs[k] for k in order])
    by_size: dict = {}
    for b in blocks:
        by_size.setdefault(b.size, []).append(b)
    for G, bs in sorted(by_size.items()):
        B = np.stack(bs)  # (hosts of this size, G) ranks
        for p in range(G):
            for q in range(p + 1, G):
                new = dev.copy()
                new[B[:, p]], new[B[:, q]] = dev[B[:, q]], dev[B[:, p]]
                yield new
    if 1 < H <= SINGLE_HOST_SWAP_MAX_HOSTS:
        for b in blocks:
            for p in range(b.size):
                for q in range(p + 1, b.size):
                    new = dev.copy()
                    new[b[p]], new[b[q]] = dev[b[q]], dev[b[p]]
                    yield new


def _moves(cluster: Cluster, dev: np.ndarray, mode: str, hot: np.ndarray | None = None) -> Iterator[np.ndarray]:
    blocks = _host_blocks(cluster, dev)
    H = len(blocks)
    sizes = {b.size for b in blocks}
    if mode == "launcher" and len(sizes) > 1:
        yield from _mixed_moves(cluster, dev, blocks, hot)
        return
    G = blocks[0].size if blocks else 0
    if mode == "launcher" and len(sizes) == 1 and G > 1:
        B = np.stack(blocks)  # (H, G) ranks
        for k in _periods(G):  # the same swap in every block of k positions (a host of two or four alike halves)
            for p in range(k):
                for q in range(p + 1, k):
                    new = dev.copy()
                    for o in range(0, G, k):
                        new[B[:, o + p]], new[B[:, o + q]] = dev[B[:, o + q]], dev[B[:, o + p]]
                    yield new
    if len(sizes) == 1:
        for i, j in _host_pairs(cluster, dev, blocks, hot):
            new = dev.copy()
            new[blocks[i]], new[blocks[j]] = dev[blocks[j]], dev[blocks[i]]
            yield new
    G = blocks[0].size if blocks else 0
    if len(sizes) == 1 and G > 1:
        B = np.stack(blocks)  # (H, G) ranks
        for p in range(G):
            for q in range(p + 1, G):
                new = dev.copy()
                new[B[:, p]], new[B[:, q]] = dev[B[:, q]], dev[B[:, p]]
                yield new
        if G <= COMPOUND_MOVE_MAX_GPUS:
            for cycles in _compound_moves(G):
                new = dev.copy()
                for cyc in cycles:  # position cyc[i] takes the ranks' GPUs of position cyc[i - 1]
                    for src, dst in zip(cyc, cyc[1:] + cyc[:1]):
                        new[B[:, dst]] = dev[B[:, src]]
                yield new
        if H <= SINGLE_HOST_SWAP_MAX_HOSTS and H > 1:
            for h in range(H):
                for p in range(G):
                    for q in range(p + 1, G):
                        new = dev.copy()
                        a, b = blocks[h][p], blocks[h][q]
                        new[a], new[b] = dev[b], dev[a]
                        yield new
    if mode == "free" and dev.size <= RANK_SWAP_MAX_RANKS:
        W = dev.size
        host = cluster.host_of[dev]
        for a in range(W):
            for b in range(a + 1, W):
                if host[a] != host[b]:
                    new = dev.copy()
                    new[a], new[b] = dev[b], dev[a]
                    yield new


def descend(
    cluster: Cluster,
    cfg: ParallelConfig,
    traffic: Mapping[str, float],
    start: np.ndarray,
    mode: str,
    max_evals: int,
    groups=None,
    exposure: Mapping[str, float] | None = None,
    deadline: Deadline | None = None,
    cancel: threading.Event | None = None,
    check: Callable[[np.ndarray], bool] | None = None,
    stop_at: float = 0.0,
) -> tuple[np.ndarray, float, int]:
    """First-improvement descent from ``start`` (device per rank) on the predicted time.

    Parameters
    ----------
    mode : str
        ``launcher`` or ``free`` (``fixed`` returns ``start``).
    max_evals : int
        Largest number of layouts scored.
    deadline : Deadline, optional
        The solve's wall-clock stop (safety only): the descent stops there and
        records the stop on it (:meth:`Deadline.check`).
    check : callable, optional
        Constraint check; moves it rejects are skipped.
    stop_at : float
        Seconds: stop as soon as the layout's predicted time is at most this
        (the lower bound is met: nothing can be better).

    Returns
    -------
    (device per rank, its predicted seconds, evaluations used)

    Raises
    ------
    SolveCancelled
        If ``cancel`` (or ``deadline.cancel``) is set.
    """
    def score(dev):
        st: dict = {}
        bd = layout_cost(cluster, cfg, dev, traffic, groups, exposure, st)
        return bd.total_seconds, st.get("pressure", 0.0), bd

    cur = np.asarray(start, dtype=np.int64).copy()
    cur_cost, cur_p, cur_bd = score(cur)
    evals = 1
    if mode == "fixed":
        return cur, cur_cost, evals
    improved = True
    while improved and evals < max_evals and cur_cost > stop_at:
        improved = False
        for new in _moves(cluster, cur, mode, hot_hosts(cluster, cur_bd)):
            if cancel is not None and cancel.is_set():
                raise SolveCancelled("solve cancelled")
            if evals >= max_evals or (deadline is not None and deadline.check()):
                return cur, cur_cost, evals
            if check is not None and not check(new):
                continue
            c, pr, bd = score(new)
            evals += 1
            # strictly better time, or the same time with less squared link load (plateau move)
            if c < cur_cost * (1 - _REL) or (c <= cur_cost * (1 + 1e-12) and pr < cur_p * (1 - _REL)):
                cur, cur_cost, cur_p, cur_bd = new, c, pr, bd
                improved = True
                break
    return cur, cur_cost, evals
