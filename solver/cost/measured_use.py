"""Which measured links a layout relies on (issue 27): its flows routed as the time model routes them.

The measured rates themselves cap the cluster's links when it is built
(:mod:`rankmap.solver.fabric.measured`); this module reads a layout's link loads per class
to report the measured links it crosses.
"""

from __future__ import annotations

import numpy as np

from .collective import part_times
from .timemodel import class_groups

__all__ = ["measured_links_used"]


def measured_links_used(cluster, cfg, dev_of_rank, traffic, groups=None) -> list[dict]:
    """The measured links (:attr:`~rankmap.solver.fabric.cluster.Cluster.measured_links`) a layout's flows cross, with the classes.

    Each class's collectives are routed as the time model routes them (NCCL's rings, channels
    and PXN, :func:`.collective.part_times`); a measured link counts when
    some class puts bytes on it.  Returns dicts ``link``, ``measured_gbps``, ``line_gbps``,
    ``source``, ``classes`` (the classes using it, Megatron's names); [] without measured links.
    """
    if not cluster.measured_links:
        return []
    from ..traffic import TRAFFIC_CLASSES, class_collectives

    fab = cluster.fabric
    dev = np.asarray(dev_of_rank, dtype=np.int64)
    fam = class_groups(cfg, groups)
    want = {i for ml in cluster.measured_links for i in ml.link_ids}
    used: dict = {}
    for c in TRAFFIC_CLASSES:
        if not float(traffic.get(c, 0.0) or 0.0) > 0:
            continue
        arr = fam[c] - cfg.rank_offset
        if arr.ndim != 2 or arr.shape[1] <= 1:
            continue
        load = np.zeros(fab.num_links)

        def timer(batches, _record, load=load):
            for bs, bd, b, _seg in batches:
                load += fab.route_loads(bs, bd, b).load_bytes
            return np.zeros(1), np.zeros(1), [None]

        for part in class_collectives(traffic, c):
            part_times(cluster, part, arr, dev[None, :], timer, record=True)
        for i in want:
            if load[i] > 0:
                used.setdefault(i, []).append(c)
    out = []
    for ml in cluster.measured_links:
        classes = sorted({c for i in ml.link_ids for c in used.get(i, ())},
                         key=lambda c: TRAFFIC_CLASSES.index(c))
        if classes:
            out.append({**ml.to_dict(), "classes": classes})
    return out
