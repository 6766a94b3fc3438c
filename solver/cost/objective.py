"""Traffic families: which ranks exchange how many bytes (DESIGN §3), and the objective's entry points.

The objective itself — predicted communication time on shared links — lives in
:mod:`.timemodel` (``layout_cost``), its lower bound in :mod:`rankmap.solver.bound`.  This
module lists, per traffic class, the flows of its collective shape as rank
pairs with bytes: ring neighbours for all-reduce / all-gather / reduce-scatter,
every ordered pair for all-to-all, consecutive members both ways for pipeline
sends.  The search's surrogate models (CP-SAT over the widest-path
ultrametric, scipy's FAQ, the swap polish) weigh rank pairs by these bytes.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..megatron.config import ParallelConfig
from .timemodel import class_groups, flow_bytes
from ..traffic import TRAFFIC_CLASSES, class_collectives, subgroups

__all__ = [
    "active_families",
    "ordered_pairs",
]



def active_families(cfg: ParallelConfig, traffic: Mapping[str, float], groups: Mapping[str, np.ndarray] | None = None):
    """The traffic classes that move bytes, with their groups.

    Yields
    ------
    (class, kind, groups, per_pair_bytes)
        One tuple per part of a class (:func:`~rankmap.solver.traffic.class_collectives`);
        ``groups`` has shape (number of groups, n) with n > 1, ranks without
        ``rank_offset``, members ascending; ``per_pair_bytes`` the bytes of
        one flow (:func:`~rankmap.solver.cost.timemodel.flow_bytes`).  Classes with
        no payload or groups of one rank are skipped.
    """
    fam = class_groups(cfg, groups)
    for c in TRAFFIC_CLASSES:
        arr = np.sort(fam[c] - cfg.rank_offset, axis=1)
        if arr.shape[1] <= 1:
            continue
        for part in class_collectives(traffic, c):
            sub = subgroups(arr, part)
            k = sub.shape[1]
            if k > 1:
                yield c, part.kind, sub, flow_bytes(part.kind, part.payload_bytes, k)


def ordered_pairs(arr: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(sender, receiver) rank arrays of every flow of these groups (DESIGN §3).

    Ring neighbours ``m_i → m_(i+1 mod n)`` for ring collectives (``arr`` rows
    ascending), every ordered pair for ``all_to_all`` (size g·n·(n-1): small
    groups only), consecutive members both ways for ``p2p_chain``.
    """
    if kind == "p2p_chain":
        a, b = arr[:, :-1].ravel(), arr[:, 1:].ravel()
        return np.concatenate([a, b]), np.concatenate([b, a])
    n = arr.shape[1]
    if kind == "all_to_all":
        ii, jj = np.nonzero(~np.eye(n, dtype=bool))
        return arr[:, ii].ravel(), arr[:, jj].ravel()
    return arr.ravel(), np.roll(arr, -1, axis=1).ravel()
