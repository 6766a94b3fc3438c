"""Measured rates on the cluster graph's links, as the cluster model reads them (issue 27).

A graph edge may carry ``measured_gbps`` (GB/s, the rate NCCL reaches on the link as measured,
:func:`rankmap.solver.fabric.measured.apply_measured` writes it) and ``measured_source``.  The
cluster model (:func:`rankmap.solver.fabric.cluster.cluster_from_graph`) takes
``min(NCCL's rate, measured_gbps)`` for the link: a measurement derates, never raises.  This
module checks the attribute and finds each measured edge's directed links in the
:class:`~rankmap.solver.fabric.links.Fabric`, so a solve can say which measured links its layout
relies on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidArgumentError
from .graph import MAX_BANDWIDTH_GBPS, MIN_BANDWIDTH_GBPS

__all__ = ["MeasuredLink", "measured_cap", "measured_links"]


@dataclass(frozen=True)
class MeasuredLink:
    """A graph link whose rate a measurement capped.

    Attributes
    ----------
    link : (str, str)
        The edge's two nodes.
    measured_gbps : float
        The cap, GB/s one direction (what NCCL reaches on it).
    line_gbps : float
        The edge's ``bandwidth`` (the nominal line rate), GB/s.
    source : str
        The measurement(s) that set it.
    link_ids : tuple of int
        Its directed links in the cluster's fabric (both directions; empty when the fabric
        merged it away).
    """

    link: tuple
    measured_gbps: float
    line_gbps: float
    source: str
    link_ids: tuple = ()

    def to_dict(self) -> dict:
        """``{link: [from, to], measured_gbps, line_gbps, source}`` (GB/s), as the JSON result shows it."""
        return {"link": [str(x) for x in self.link], "measured_gbps": self.measured_gbps,
                "line_gbps": self.line_gbps, "source": self.source}


def measured_cap(u, v, data) -> float:
    """The edge's ``measured_gbps``, checked (GB/s, in the graph's bandwidth range).

    Raises
    ------
    InvalidArgumentError
        Not a finite number in 1e-6..1e9 GB/s (naming the edge; field ``cluster.edges``).
    """
    m = data.get("measured_gbps")
    try:
        if isinstance(m, bool):
            raise TypeError
        v_ = float(m)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"edge ({u!r}, {v!r}) has measured_gbps {m!r}, which is not a number (GB/s)",
                                   "cluster.edges") from None
    if not math.isfinite(v_) or not MIN_BANDWIDTH_GBPS <= v_ <= MAX_BANDWIDTH_GBPS:
        raise InvalidArgumentError(f"edge ({u!r}, {v!r}) has measured_gbps {m!r}; it must be finite and in "
                                   f"{MIN_BANDWIDTH_GBPS:g}..{MAX_BANDWIDTH_GBPS:g} GB/s", "cluster.edges")
    return v_


def measured_links(fabric, edges) -> tuple[MeasuredLink, ...]:
    """:class:`MeasuredLink` of each measured edge ``(u, v, data)`` with its fabric link ids.

    O(edges · attachments); the fabric's link numbering is :meth:`~.links.Fabric.link_name`'s.
    """
    N = int(fabric.parent.size)
    n, A = fabric.att_node.shape
    E = int(fabric.direct_key.size)
    gpos = {g: i for i, g in enumerate(fabric.gpu_names)}
    node = fabric.node_index or {}
    out = []
    for u, v, data in edges:
        ids: tuple = ()
        gu, gv = gpos.get(u), gpos.get(v)
        if gu is not None and gv is not None and E:
            lo, hi = min(gu, gv), max(gu, gv)
            e = int(np.searchsorted(fabric.direct_key, lo * n + hi))
            if e < E and int(fabric.direct_key[e]) == lo * n + hi:
                base = 2 * N + 2 * n * A
                ids = (base + e, base + E + e)
        elif (gu is None) != (gv is None):
            g, x = (gu, node.get(v)) if gu is not None else (gv, node.get(u))
            if x is not None:
                hit = np.flatnonzero(fabric.att_node[g] == x)
                if hit.size:
                    i = int(hit[0])
                    ids = (2 * N + g * A + i, 2 * N + n * A + g * A + i)
        else:
            x, y = node.get(u), node.get(v)
            if x is not None and y is not None and x != y:
                c = x if fabric.parent[x] == y else y if fabric.parent[y] == x else None
                if c is not None:
                    ids = (int(c), N + int(c))
        out.append(MeasuredLink((u, v), measured_cap(u, v, data), float(data.get("bandwidth", 0.0) or 0.0),
                                str(data.get("measured_source", "") or ""), ids))
    return tuple(out)
