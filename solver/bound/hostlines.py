"""Free mode: the tp and dp groups one host (or leaf) touches, on the rank grid (DESIGN §5; used by :mod:`.analytic`).

Setting: every GPU used, equal hosts of ``G ≤`` :data:`HOST_LINES_MAX_GPUS` GPUs, the NCCL nodes the hosts,
the tp class's and the dp class's parts rings over their whole groups (``t`` and ``K`` members), ``K ≥ 2``.

The rank grid (:mod:`.cutbound`): for one pipeline stage the ranks form a ``t × K`` matrix whose
*columns* are the tp groups (fixed cp, dp coordinates) and whose *rows* are the dp groups
(``DATA_PARALLEL_GROUP_WITH_CP``, fixed tp coordinate): a tp group and a dp group of one stage meet in
exactly one rank, of two stages in none.  A host holds ``G`` ranks, ``a_s`` of them in stage ``s``
(``Σ_s a_s = G``).  In stage ``s`` let ``W_c ≤ P_c`` be the host's whole and touched columns, ``W_r ≤ P_r``
its whole and touched rows.  Every free layout (any order, any bijection) satisfies, per stage:

* a whole column holds a rank of every row, so ``W_c ≥ 1 ⇒ P_r = t``; likewise ``W_r ≥ 1 ⇒ P_c = K``;
* by columns, ``t·W_c + (P_c − W_c) ≤ a ≤ t·W_c + (t − 1)(P_c − W_c)`` (a split column holds 1 to
  ``t − 1`` of its ranks here); by rows, the same with ``K``;
* whole columns and whole rows meet in one rank each: ``a ≥ t·W_c + K·W_r − W_c·W_r``;
* the ranks lie in touched rows and touched columns: ``a ≤ P_r·P_c``.

The host then touches ``s_tp = Σ_s (P_c − W_c)`` split tp groups and ``s_dp = Σ_s (P_r − W_r)`` split dp
groups.  Each split group sends its cut bytes out of the host (each of its channels leaves the node
once: ``fb``, or ``S`` where tree may run; :func:`~.ncclterms.crossing_bytes`), over links of ``C_h``
GB/s in all (:func:`~.hostsplit.host_out_gbps`, the most of any host), so a part of the class takes at
least ``s·cut / C_h``.  A whole tp (dp) group here lies inside one node: the part takes at least the
ring's floor inside a node (``T_W`` of :mod:`.nodering`, as low as the other all-reduce algorithms'
floors allow); a split one at least the floor of a group over several nodes (``T_S1`` of
:mod:`.nodering`, the averaged form).  With ``F`` the part's own floor (any layout), a tp part takes at
least ``max(F, [W_c ≥ 1]·T_W, [s_tp ≥ 1]·T_S1, s_tp·cut/C_h)`` and a dp part likewise.  A host whose ranks
lie in one stage (``pp ≥ 2``) has every rank's pipeline neighbours on other hosts: in an end stage
(first or last) one each, a flow of ``fb`` out per rank both ways of the chain, and its embedding partner
(the other end stage) elsewhere, ``G`` split embedding groups; in a middle stage (``pp ≥ 3``) two each.
So the pipeline part takes at least ``G·fb/C_h`` (end) or ``2·G·fb/C_h`` (middle) and the embedding part
``G·cut/C_h`` (end): the least of the two. Every host is in some combination the constraints allow (a
relaxation: more combinations than layouts), so the least over them of ``Σ_c x_c Σ_parts (term + NCCL's
latency beyond it)`` for the tp and dp classes, the pipeline and embedding parts raised on a host of one
stage, and the other classes' own floors with latency, bounds every layout.

Coarser domains.  The same holds for any set of ``G_D`` ranks on a domain ``D`` of whole hosts (a leaf,
``domain_out_gbps`` ``C_D``): its split groups send their cut bytes over ``D``'s out-links, and a domain of
one stage sends the pipeline and embedding flows out; only the whole-group ring floor ``T_W`` is the
host's alone (a group whole in a leaf may still span hosts).  Each class's time is at least its term for
the host and for the leaf, so the bound is the least over pairs (one combination each, taken
independently: a relaxation) of ``Σ_c x_c Σ_parts (max of the two terms + latency)``; per level the
domain of least ``C_D``, levels of domains of at most :data:`HOST_LINES_MAX_RANKS` ranks, while the
pairs number at most :data:`HOST_LINES_MAX_TUPLES`.  E.g. ``a30-pairs-16x4`` tp4 cp2 pp2 (hosts of 4 GPUs,
leaves of 4 hosts): a host holding one tp group has 4 split dp groups, a leaf of one stage sends its 16
ranks' pipeline and embedding flows out: 1669.85 ms, the layouts found 1669.99 ms (before: 1582.16 ms).  The combinations per stage are enumerated over
``a ≤ G`` (at most ``G⁴`` tuples each), kept Pareto-least in ``(s_tp, s_dp, whole tp, whole dp)``, and
summed over stages by a small dynamic programme (``min(pp, G)`` steps, noting a host of one stage).

Example (``dgx1-hcm-4x8`` tp4 pp2, GPT 24L/4096: hosts of 8 GPUs, 4 NICs of 12.5 GB/s, ``C_h`` = 50 GB/s;
tp ``fb`` 9.66 GB, ``T_W`` 483.2 ms, ``T_S1`` 386.5 ms; dp ``K = 4``, ``fb`` 3.79 GB, ``T_W`` 189.3 ms):
two whole tp groups leave every row of the stage split (``s_dp = 4``: dp ``4·3.79/50 = 302.9`` ms, tp
483.2 ms); one whole tp group and a whole dp group make every column touched (``s_tp = 3``: tp 579.8
ms); no whole tp group, ``s_tp ≥ 3``; two stages on a host, 4 + 4 ranks, ``s_dp ≥ 8`` or ``s_tp ≥ 4``.  The
least: 786.1 ms for tp and dp, with one stage a host, plus pipeline ``8·134 MB/50`` = 21.5 ms and embedding
``8·206 MB/50`` = 33.0 ms: 840.6 ms (the classes' own floors: 681.0 ms; the best layouts found: 895.1 ms).
"""

from __future__ import annotations

import functools
import itertools
from typing import Mapping

import numpy as np

from ..fabric.cluster import Cluster
from ..megatron.config import ParallelConfig

__all__ = ["HOST_LINES_MAX_GPUS", "HOST_LINES_MAX_RANKS", "HOST_LINES_MAX_TUPLES", "HOST_LINES_SECONDS", "stage_combos",
           "host_combos", "combos_ops", "host_lines_bound"]

#: Hosts of at most this many GPUs (the combinations number at most ``G⁴`` a stage count).
HOST_LINES_MAX_GPUS = 16
#: Nominal work (:mod:`.work`) of one :func:`host_lines_bound` that applies: seconds, plus per domain level
#: (hosts, leaves), plus per elementary step of its combinations (:func:`combos_ops`).  Calibration
#: (2026-12-04, process time on the loaded 2-core machine, uncached): 2.1-2.5 ms at 8-rank domains (800-1,700
#: steps), 4.8-37 ms at 16 (6,500-152,000 steps, 0.25-0.75 µs a step); the floors and the tuples about 1 ms.
#: Charged every call (the tables are cached).
HOST_LINES_SECONDS, HOST_LINES_LEVEL_SECONDS, HOST_LINES_OP_SECONDS = 1e-3, 2e-3, 4e-7
#: Domains of more ranks than this (leaves, racks) are left out.
HOST_LINES_MAX_RANKS = 16
#: Combinations of one domain a level (one host, one leaf, ...) taken together at most.
HOST_LINES_MAX_TUPLES = 4096


def stage_combos(t: int, K: int, a: int) -> np.ndarray:
    """The combinations of one stage holding ``a`` ranks of the host (module doc), Pareto-least.

    Parameters
    ----------
    t, K : int
        tp and dp group sizes (the stage's matrix is ``t × K``).
    a : int
        Ranks of the host in the stage, ``0 ≤ a ≤ t·K``.

    Returns
    -------
    numpy.ndarray of int, shape (r, 4)
        Rows ``(s_tp, s_dp, whole tp, whole dp)`` (flags 0/1), none dominated by another; ``(0, 0, 0, 0)``
        for ``a = 0``; empty when no combination is possible.
    """
    if a <= 0:
        return np.zeros((1, 4), dtype=np.int64)
    wc = np.arange(0, a // t + 1)
    pc = np.arange(1, min(K, a) + 1)
    wr = np.arange(0, a // K + 1)
    pr = np.arange(1, min(t, a) + 1)
    Wc, Pc, Wr, Pr = (x.ravel() for x in np.meshgrid(wc, pc, wr, pr, indexing="ij"))
    ok = (Wc <= Pc) & (Wr <= Pr)
    ok &= (Wc == 0) | (Pr == t)
    ok &= (Wr == 0) | (Pc == K)
    ok &= (t * Wc + (Pc - Wc) <= a) & (a <= t * Wc + (t - 1) * (Pc - Wc))
    ok &= (K * Wr + (Pr - Wr) <= a) & (a <= K * Wr + (K - 1) * (Pr - Wr))
    ok &= a >= t * Wc + K * Wr - Wc * Wr
    ok &= a <= Pr * Pc
    rows = np.stack([Pc - Wc, Pr - Wr, (Wc > 0).astype(np.int64), (Wr > 0).astype(np.int64)], axis=1)[ok]
    return _pareto(rows)


def _pareto(rows: np.ndarray) -> np.ndarray:
    """The rows of ``rows`` (int, shape (r, 4)) not dominated (≥ in every column, > in one) by another."""
    rows = np.unique(rows, axis=0)
    if rows.shape[0] <= 1:
        return rows
    ge = (rows[:, None, :] >= rows[None, :, :]).all(axis=2)
    dominated = (ge & (rows[:, None, :] != rows[None, :, :]).any(axis=2)).any(axis=1)
    return rows[~dominated]


def _pareto_set(rows) -> frozenset:
    """The tuples of ``rows`` not dominated (≤ in every component, unequal) by another (pure Python: a few rows)."""
    rows = set(rows)
    return frozenset(r for r in rows if not any(o != r and all(x <= y for x, y in zip(o, r)) for o in rows))


@functools.lru_cache(maxsize=256)
def _host_combos(t: int, K: int, G: int, pp: int) -> tuple:
    cap = t * K
    per = {a: [tuple(r) for r in stage_combos(t, K, a).tolist()] for a in range(1, min(G, cap) + 1)}
    per = {a: v for a, v in per.items() if v}

    def add(x, y):
        return (x[0] + y[0], x[1] + y[1], x[2] | y[2], x[3] | y[3])

    # layer: combinations of n ranks over j nonempty stages (step j ≤ min(pp, G)), Pareto-least; the fifth
    # component says one stage (j = 1)
    steps = min(pp, G)
    layer = {0: frozenset({(0, 0, 0, 0)})}
    done = set()
    ops = sum(a ** 2 for a in range(1, min(G, cap) + 1))  # the stage tables (meshgrids of at most a⁴ / a² rows)
    for j in range(1, steps + 1):
        nxt: dict = {}
        for n, rows in layer.items():
            for a, st in per.items():
                if n + a <= G:
                    nxt.setdefault(n + a, set()).update(add(x, y) for x in rows for y in st)
                    ops += len(rows) * len(st)
        ops += sum(len(v) ** 2 for v in nxt.values())
        layer = {n: _pareto_set(v) for n, v in nxt.items()}
        done |= {r + (int(j == 1),) for r in layer.get(G, frozenset())}
        if not layer:
            break
    return tuple(sorted(_pareto_set(done))), ops


def host_combos(t: int, K: int, G: int, pp: int) -> np.ndarray:
    """Every host's combinations over its stages (module doc), Pareto-least.

    ``G`` ranks over at most ``min(pp, G)`` stages of ``t·K`` ranks each; counts add, flags or.  Cached.

    Returns
    -------
    numpy.ndarray of int, shape (r, 5)
        Rows ``(s_tp, s_dp, whole tp, whole dp, one stage)``: the columns of :func:`stage_combos` summed over
        the stages, and 1 when the host's ranks lie in one stage.
    """
    rows, _ops = _host_combos(int(t), int(K), int(G), int(pp))
    return np.array(rows, dtype=np.int64).reshape(-1, 5)


def combos_ops(t: int, K: int, G: int, pp: int) -> int:
    """The elementary steps of :func:`host_combos` (tuples combined and compared; the count its work is charged
    by), a function of the sizes only."""
    return int(_host_combos(int(t), int(K), int(G), int(pp))[1])


def host_lines_bound(cluster: Cluster, cfg: ParallelConfig, parts: dict, own: dict,
                     exposure: Mapping[str, float] | None = None) -> float:
    """The least over a host's combinations (module doc), seconds, over every free layout of ``cfg``'s sizes;
    0 when the setting does not hold (then nothing is claimed).

    Parameters
    ----------
    cluster : Cluster
    cfg : ParallelConfig
        Sizes (any order: the bound holds for all).
    parts : dict
        Per class its parts ``(Collective, groups, size)`` (:func:`~.analytic._part_sizes`).
    own : dict
        Per class the parts' own floors, seconds (size terms, valid for every layout).
    exposure : mapping class -> x_c, optional

    Returns
    -------
    float
        Seconds, ≥ 0.
    """
    from ..cost.timemodel import flow_bytes
    from ..traffic import class_group_size
    from .hostsplit import host_out_gbps, node_host_gpus
    from .ncclterms import RING_KINDS, crossing_bytes, latency_extra_seconds
    from .nodering import ring_case_floors
    from .work import charge

    W = cfg.world_size
    G = node_host_gpus(cluster, W)
    if G is None:
        return 0.0
    t, K, pp = int(cfg.tp), class_group_size("dp", cfg), int(cfg.pp)
    exposure = dict(exposure or {})
    tp, dp = parts.get("tp") or [], parts.get("dp") or []
    if not (2 <= G <= HOST_LINES_MAX_GPUS) or t < 2 or K < 2 or not tp or not dp \
            or float(exposure.get("tp", 1.0)) <= 0 or float(exposure.get("dp", 1.0)) <= 0:
        return 0.0
    if any(p.kind not in RING_KINDS or k != t for p, _g, k in tp) \
            or any(p.kind not in RING_KINDS or k != K for p, _g, k in dp):
        return 0.0
    C = host_out_gbps(cluster) * 1e9
    if C <= 0:
        return 0.0
    levels = [(G, C, True)] + _upper_levels(cluster, G, W)
    charge(HOST_LINES_SECONDS + sum(HOST_LINES_LEVEL_SECONDS + HOST_LINES_OP_SECONDS * combos_ops(t, K, g, pp)
                                    for g, _c, _n in levels))
    # every part of every exposed class: (class, part, size, own floor, x_c) and its per-part constants
    flat = [(c, p, k, float(own[c][i]), float(exposure.get(c, 1.0)))
            for c, plist in parts.items() for i, (p, _g, k) in enumerate(plist) if float(exposure.get(c, 1.0)) != 0]
    const = []
    for c, p, k, f, _x in flat:
        fb = flow_bytes(p.kind, p.payload_bytes, k)
        if c in ("tp", "dp"):
            whole, split = ring_case_floors(cluster, p.kind, k, p.payload_bytes)
            const.append((whole, split, crossing_bytes(p.kind, fb, p.payload_bytes, cluster, k, True)[1]))
        elif c == "pp" and p.kind == "p2p_chain" and k == pp and pp >= 2:
            const.append(("pp", fb))
        elif c == "embedding" and p.kind in RING_KINDS and k == 2 and pp >= 2:
            const.append(("emb", crossing_bytes(p.kind, fb, p.payload_bytes, cluster, k, True)[1]))
        else:
            const.append(None)
    base = np.array([f for _c, _p, _k, f, _x in flat])

    def vectors(Gd: int, Cd: float, node: bool) -> list[np.ndarray]:
        """Per combination of a domain of ``Gd`` ranks and ``Cd`` B/s out: a floor per part (one stage, pp ≥ 3:
        an end stage and a middle stage, two vectors)."""
        out = []
        for a, b, wt, wd, st in host_combos(t, K, Gd, pp).tolist():
            v = base.copy()
            for j, (c, _p, _k, f, _x) in enumerate(flat):
                if c in ("tp", "dp"):
                    whole, split, cut = const[j]
                    s_, w_ = (a, wt) if c == "tp" else (b, wd)
                    v[j] = max(f, whole if (w_ and node) else 0.0, split if s_ >= 1 else 0.0, s_ * cut / Cd)
            if st and pp >= 2:
                ends = (1,) if pp == 2 else (1, 2)  # chain flows out per rank: end stage 1, middle 2
                for e in ends:
                    u = v.copy()
                    for j, cj in enumerate(const):
                        if isinstance(cj, tuple) and cj[0] == "pp":
                            u[j] = max(u[j], e * Gd * cj[1] / Cd)
                        elif isinstance(cj, tuple) and cj[0] == "emb" and e == 1:
                            u[j] = max(u[j], Gd * cj[1] / Cd)
                    out.append(u)
            else:
                out.append(v)
        return out

    per_level = []
    n_tuples = 1
    for Gd, Cd, node in levels:  # (the host level first; coarser ones while the tuples stay few)
        vs = vectors(Gd, Cd, node)
        if per_level and n_tuples * len(vs) > HOST_LINES_MAX_TUPLES:
            break
        per_level.append(vs)
        n_tuples *= len(vs)
    memo: dict = {}

    def extra(j: int, v: float) -> float:
        key = (j, v)
        if key not in memo:
            _c, p, k, _f, _x = flat[j]
            memo[key] = latency_extra_seconds(cluster, p.kind, k, v)
        return memo[key]

    xs = np.array([x for _c, _p, _k, _f, x in flat])
    best = np.inf
    for combo in itertools.product(*per_level):
        M = np.max(np.stack(combo), axis=0)
        best = min(best, float(sum(xs[j] * (M[j] + extra(j, float(M[j]))) for j in range(M.size))))
    return float(best) if np.isfinite(best) else 0.0


def _upper_levels(cluster: Cluster, G: int, W: int) -> list[tuple[int, float, bool]]:
    """Levels coarser than the hosts whose domains are unions of whole hosts: per level its domain of least
    outward capacity, ``(ranks G_D, capacity B/s, False)``, ``G < G_D < W``, ``G_D ≤`` :data:`HOST_LINES_MAX_RANKS`."""
    from .ncclterms import node_levels

    out = {}
    for doms, outs in ((cluster.domains, cluster.domain_out_gbps),
                       (cluster.widest_domains, cluster.widest_domain_out_gbps)):
        whole = node_levels(cluster, doms)
        for lvl in range(min(doms.shape[0], len(outs))):
            lab = np.asarray(doms[lvl], dtype=np.int64)
            cap = np.asarray(outs[lvl], dtype=float)
            sizes = np.bincount(lab)
            if not whole[lvl] or cap.size != sizes.size:
                continue
            ok = (sizes > G) & (sizes < W) & (sizes <= HOST_LINES_MAX_RANKS) & (cap > 0)
            if not ok.any():
                continue
            d = int(np.flatnonzero(ok)[np.argmin(cap[ok])])
            key = int(sizes[d])
            out[key] = min(out.get(key, np.inf), float(cap[d]) * 1e9)
    return [(g, c, False) for g, c in sorted(out.items())]
