"""Stage parts of a domain for the stage-split cut (:mod:`.stagecut`): the stage grids, the compositions of a
domain's ranks into stage parts, and per domain shape the tables ``Δ(x)``, ``Φ(x)`` and the points of its
compositions.  The argument and notation are those of :mod:`.stagecut`'s module docstring.
"""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np

from ..megatron.config import ParallelConfig
from .stageplane import plane_bound
from .work import charge

#: Compositions with up to this many nonempty stage parts are enumerated exactly.
EXACT_PARTS = 3
#: Compositions of one shape at most; beyond, only those of up to two parts are enumerated exactly.
COMPOSITIONS_MAX = 20000
#: Nominal seconds per composition evaluated (numpy, vectorised) and per candidate pair of thresholds.
COMPOSITION_SECONDS = 2.0e-7


def _stage_grids(cfg: ParallelConfig):
    """The two rank grids of ``cfg`` without the pipeline axis: ``[(axes, classes)]`` (empty grids left out)."""
    from .cutbound import grid_classes

    out = []
    for axes, classes in grid_classes(cfg):
        ax = {a: v for a, v in axes.items() if a != "pp"}
        cl = {c: g for c, g in classes.items() if c != "pp" and g & ax.keys()}
        if ax and cl:
            out.append((ax, cl))
    return out


def _compositions(m: int, S: int, P: int, q: int):
    """Every composition of ``m`` into ``q`` nonempty parts of at most ``S`` placed on ``q`` of ``P`` stages.

    Returns an int array of shape (N, P) (the per-stage sizes ``m_j``) and (N, q) (the part sizes).
    """
    if q == 1:
        sizes = np.array([[m]]) if 1 <= m <= S else np.zeros((0, 1), dtype=np.int64)
    else:
        grids = np.meshgrid(*[np.arange(1, S + 1)] * (q - 1), indexing="ij")
        first = np.stack([g.ravel() for g in grids], axis=1) if grids else np.zeros((1, 0), dtype=np.int64)
        last = m - first.sum(axis=1)
        ok = (last >= 1) & (last <= S)
        sizes = np.concatenate([first[ok], last[ok, None]], axis=1)
    rows, parts = [], []
    for pos in combinations(range(P), q):
        full = np.zeros((sizes.shape[0], P), dtype=np.int64)
        full[:, list(pos)] = sizes
        rows.append(full)
        parts.append(sizes)
    if not rows:
        return np.zeros((0, P), dtype=np.int64), np.zeros((0, q), dtype=np.int64)
    return np.concatenate(rows), np.concatenate(parts)


def _count(m: int, S: int, P: int, q: int) -> int:
    """How many compositions :func:`_compositions` returns (without building them)."""
    from math import comb

    # compositions of m into q parts in [1, S]: inclusion-exclusion over parts above S
    n = sum((-1) ** i * comb(q, i) * comb(m - i * S - 1, q - 1) for i in range(q + 1) if m - i * S - 1 >= q - 1)
    return n * comb(P, q)


class _Tables:
    """``Δ(x)`` and ``Φ(x)`` of one domain capacity (module doc), lower bounds refined to exact on demand.

    ``delta[x] ≤ max(0, Ψ(x) − F_Σ)`` (Ψ: the stage grids' joint cut with each part's floor) and
    ``phi[x] ≤`` the same joint cut without floors; both start at the classes' own least splits
    (a part of ``x`` ranks splits at least ``⌈r/(k − 1)⌉`` groups of size ``k``, ``r = x mod k``, or
    ``x`` when ``k > x``) and become the joint cuts (:func:`~rankmap.solver.bound.gridcut.domain_grid_bound`)
    for the sizes :func:`stage_cut_bound` asks for.
    """

    def __init__(self, cluster, grids, within, cap: float, node_level: bool, top: int, S: int,
                 r_above: float = np.inf, fragment: bool = False):
        from ..cost.timemodel import flow_bytes
        from .cutbound import _covers
        from .gridcut import _Term
        from .ncclterms import crossing_bytes

        self.top, self.fragment = top, fragment
        self.delta = np.zeros(top + 1)
        self.phi = np.zeros(top + 1)
        self.exact = np.zeros(top + 1, dtype=bool)
        self.exact[0] = True
        self.grids = []
        self.planes = []  # two-axis stage grids, one class along each axis: exact (plane_bound)
        xs = np.arange(top + 1)
        for axes, classes in grids:
            with_f0, cut_only, lines2 = {}, {}, {}
            f0g = 0.0
            for c in classes:
                k = 1
                for a in classes[c]:
                    k *= axes[a]
                r = np.where(xs < k, xs, xs % k)
                smin = np.ceil(r / max(k - 1, 1))
                for p, kp, x, f0 in within.get(c, []):
                    fb = flow_bytes(p.kind, p.payload_bytes, kp)
                    w = (kp - 1) if p.kind == "all_to_all" else 1
                    g = x * w * crossing_bytes(p.kind, fb, p.payload_bytes, cluster, kp, node_level)[1] / (cap * 1e9)
                    with_f0.setdefault(c, []).append(_Term(f0, 0.0, g))
                    # a split group's flow joins GPUs first joined above the domain (module cutbound)
                    c1 = x * crossing_bytes(p.kind, fb, p.payload_bytes, cluster, kp, node_level)[0] / r_above
                    lines2.setdefault(c, []).append((f0, c1, g))
                    cut_only.setdefault(c, []).append(_Term(0.0, 0.0, g))
                    self.delta += np.maximum(0.0, g * smin - f0)
                    self.phi += g * smin
                    f0g += f0
            if with_f0:
                class_k = {c: math.prod(axes[a] for a in classes[c]) for c in classes}  # group sizes
                self.grids.append((axes, classes, _covers(axes, classes), with_f0, cut_only, class_k,
                                   {c: S // class_k[c] for c in classes}, f0g))
                spans = [next(iter(classes[c])) for c in with_f0 if len(classes[c]) == 1]
                plane = None
                if len(axes) == 2 and len(with_f0) == 2 and len(spans) == 2 and set(spans) == set(axes):
                    plane = [(axes[a], lines2[c]) for a, c in zip(spans, with_f0)]
                self.planes.append(plane)

    @property
    def whole_lines(self):
        """``(a, b, split extra, A's floors, B's parts [(F, g)])`` when the stage grids hold one two-axis grid
        of classes (:func:`plane_bound`), else None: see :meth:`_Shape.values`."""
        if len(self.planes) != 1 or self.planes[0] is None:
            return None
        (a, la), (b, lb) = self.planes[0]
        extra = sum(max(0.0, c1 - f0) for f0, c1, _g in la)
        return a, b, extra, sum(f0 for f0, _c1, _g in la), [(f0, g) for f0, _c1, g in lb]

    def refine(self, xs) -> bool:
        """Make ``delta`` and ``phi`` exact at the sizes ``xs``; True when some was not."""
        from .gridcut import domain_grid_bound

        todo = sorted({int(x) for x in xs if 0 < x <= self.top and not self.exact[int(x)]})
        for x in todo:
            d = ph = 0.0
            for (axes, classes, covers, with_f0, cut_only, class_k, groups, f0g), plane in zip(self.grids,
                                                                                                  self.planes):
                if plane is not None:  # no split floor c1 here: Δ adds over the parts, c1 would not (a max)
                    plane = [(n, [(f0, 0.0, g) for f0, _c1, g in lines]) for n, lines in plane]
                if plane is not None and self.fragment:  # fragmented levels: the plane's own bound alone
                    dg, pg = plane_bound(x, plane)
                else:
                    dg = domain_grid_bound(x, axes, classes, covers, with_f0, class_k, groups)
                    pg = domain_grid_bound(x, axes, classes, covers, cut_only, class_k, groups)
                    if plane is not None:
                        dg, pg = np.maximum((dg, pg), plane_bound(x, plane))
                d += max(0.0, dg - f0g)
                ph += pg
            self.delta[x] = max(self.delta[x], d)
            self.phi[x] = max(self.phi[x], ph)
            self.exact[x] = True
        return bool(todo)


class _Shape:
    """One domain shape of a level: its compositions (up to ``EXACT_PARTS`` parts) and their pp / embedding times."""

    def __init__(self, m: int, cap: float, tables: _Tables, S: int, P: int, pp_time, emb_time):
        self.m, self.tables = m, tables
        top = min(m, S)
        self.sizes = []  # per q: (N_q, q) part sizes
        rows_all = []
        self.exact_parts = EXACT_PARTS
        while self.exact_parts > 2 and _count(m, top, P, self.exact_parts) > COMPOSITIONS_MAX:
            self.exact_parts -= 1
        for q in range(1, min(self.exact_parts, P, m) + 1):
            rows, sizes = _compositions(m, top, P, q)
            rows_all.append(rows)
            self.sizes.append(sizes)
        rows = np.concatenate(rows_all)
        charge(COMPOSITION_SECONDS * rows.shape[0])
        self.X = np.abs(np.diff(rows, axis=1)).sum(axis=1)
        self.Y = np.abs(rows[:, 0] - rows[:, -1])
        self.ends = rows[:, 0] + rows[:, -1]
        self.pp = pp_time(np.arange(2 * m + 1, dtype=float))
        self.emb = emb_time(np.arange(m + 1, dtype=float))
        self.f0_sum = 0.0
        self.tail = P > self.exact_parts and m > self.exact_parts
        self.P, self.top = P, top

    def values(self, f0_sum: float) -> np.ndarray:
        """``V`` of every composition: ``max(F_Σ + Σ Δ, Σ Φ, F_Σ)`` over its parts."""
        t = self.tables
        d = np.concatenate([t.delta[s].sum(axis=1) for s in self.sizes])
        ph = np.concatenate([t.phi[s].sum(axis=1) for s in self.sizes])
        charge(COMPOSITION_SECONDS * d.size)
        V = np.maximum(f0_sum + d, ph)
        wl = t.whole_lines
        if wl is not None:
            # either some part splits a group of class A (its time then at least its split floor c1), or
            # every part is whole A-lines: then each part of ``x < a·b`` ranks splits all ``a`` B-lines
            a, b, extra, fa, lb = wl
            whole = []
            for s in self.sizes:
                nb = np.where(s < a * b, a, 0).sum(axis=1).astype(float)
                v = (f0_sum - fa - sum(f0 for f0, _g in lb)) + fa + sum(np.maximum(f0, g * nb) for f0, g in lb)
                whole.append(np.where((s % a == 0).all(axis=1), v, np.inf))
            V = np.maximum(V, np.minimum(f0_sum + extra, np.concatenate(whole)))
        return V

    def part_sizes(self, i: int) -> np.ndarray:
        """The part sizes of composition ``i``."""
        for s in self.sizes:
            if i < s.shape[0]:
                return s[i]
            i -= s.shape[0]
        raise IndexError(i)

    def tail_point(self, f0_sum: float):
        """``(V, parts)`` least over compositions of more than ``EXACT_PARTS`` parts, or None (knapsacks)."""
        if not self.tail:
            return None
        t, m, top = self.tables, self.m, self.top
        wl = t.whole_lines
        if t.fragment and wl is None:
            return f0_sum, []  # fragmented levels, no knapsack: the floors
        if t.fragment:
            # (fragmented levels, no knapsack) as :meth:`values`: some part splits an A-line, or each of the
            # ``≥ EXACT_PARTS + 1`` parts is whole A-lines and all but ``⌊m / (a·b)⌋`` of them split a B-lines
            a, b, extra, fa, lb = wl
            nb = float(a * max(0, self.exact_parts + 1 - m // (a * b)))
            v = (f0_sum - fa - sum(f0 for f0, _g in lb)) + fa + sum(max(f0, g * nb) for f0, g in lb)
            return max(f0_sum, min(f0_sum + extra, v)), []
        out = []
        for arr, base in ((t.delta, f0_sum), (t.phi, 0.0)):
            best = np.full(m + 1, np.inf)
            best[0] = 0.0
            choice = []
            tail, tail_q = np.inf, 0
            for q in range(1, min(self.P, m) + 1):
                cand = np.full((top + 1, m + 1), np.inf)
                for x in range(1, top + 1):
                    cand[x, x:] = best[:m + 1 - x] + arr[x]
                arg = np.argmin(cand, axis=0)
                best = cand[arg, np.arange(m + 1)]
                choice.append(arg)
                charge(COMPOSITION_SECONDS * (m + 1) * top)
                if q > self.exact_parts and best[m] < tail:
                    tail, tail_q = float(best[m]), q
            parts, rest = [], m
            for q in range(tail_q, 0, -1):
                x = int(choice[q - 1][rest])
                parts.append(x)
                rest -= x
            out.append((base + tail, parts))
        v = max(out[0][0], out[1][0], f0_sum)
        return (v, out[0][1] + out[1][1]) if np.isfinite(v) else None
