"""Declarative placement constraints (``tp within host``): checks and capacity (DESIGN §5)."""

from __future__ import annotations

import numpy as np

from ..megatron.config import ParallelConfig

from ..megatron.catalogue import megatron_groups
from ..fabric.cluster import Cluster
from ..errors import InfeasibleError
from ..cost.timemodel import class_groups
from ..traffic import CLASS_GROUP

__all__ = ["constraint_pairs", "satisfies", "satisfies_batch", "constraint_check", "check_capacity"]

def constraint_pairs(cfg: ParallelConfig, groups, traffic_class: str) -> np.ndarray:
    """Consecutive member pairs (p, 2) of every group of a class (rank_offset removed)."""
    arr = class_groups(cfg, groups)[traffic_class] - cfg.rank_offset
    if arr.shape[1] < 2:
        return np.zeros((0, 2), dtype=np.int64)
    return np.stack([arr[:, :-1].ravel(), arr[:, 1:].ravel()], axis=1)


def satisfies(cluster: Cluster, cfg, groups, dev_of_rank, constraints) -> bool:
    for c in constraints:
        lab = cluster.level_labels(c.level)
        arr = class_groups(cfg, groups)[c.traffic_class] - cfg.rank_offset
        d = lab[dev_of_rank[arr]]
        if np.any(d != d[:, :1]):
            return False
    return True


def constraint_check(cluster: Cluster, cfg, groups, constraints):
    """``check(dev_of_rank) -> bool``: :func:`satisfies` for this configuration, or None without constraints.

    The form the local searches take (``check=``): a layout it rejects is skipped.
    """
    if not constraints:
        return None
    return lambda dev_of_rank: satisfies(cluster, cfg, groups, dev_of_rank, constraints)


def check_capacity(cluster: Cluster, cfg: ParallelConfig, constraints) -> None:
    """Raise InfeasibleError when a constrained group cannot fit any domain of its level."""
    for c in constraints:
        lab = cluster.level_labels(c.level)
        largest = int(np.bincount(lab).max())
        size = megatron_groups(cfg)[CLASS_GROUP[c.traffic_class]].shape[1]
        if size > largest:
            raise InfeasibleError(
                f"constraint '{c}' cannot hold: a {c.traffic_class} group has {size} ranks but the largest "
                f"{c.level} domain has {largest} GPUs",
                "constraints",
            )



def satisfies_batch(cluster: Cluster, cfg, groups, layouts: np.ndarray, constraints) -> np.ndarray:
    """Vectorised :func:`satisfies` over layouts of shape (L, world_size); returns a bool mask (L,)."""
    ok = np.ones(layouts.shape[0], dtype=bool)
    for c in constraints:
        lab = cluster.level_labels(c.level)
        arr = class_groups(cfg, groups)[c.traffic_class] - cfg.rank_offset
        d = lab[layouts[:, arr]]  # (L, g, n)
        ok &= np.all(d == d[:, :, :1], axis=(1, 2))
    return ok
