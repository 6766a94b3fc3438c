"""Which flows a layout's traffic makes, written out pair by pair for the SimGrid yardstick.

Independent of rankmap's time model: the shapes of DESIGN §3 (ring all-reduce,
ring all-gather, ring point-to-point, all-to-all, pipeline chain with the
interleaved wrap) and the subgroups of a class's parts are computed here from
the group catalogue alone (``rankmap.solver.megatron_groups``, oracle-tested).
Used by :mod:`simgrid_model`.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

__all__ = ["CLASS_SPECS", "group_flows", "class_parts", "class_part_triples"]

#: class -> (group name in the Megatron catalogue, collective shape)
CLASS_SPECS: dict[str, tuple[str, str]] = {
    "tp": ("TENSOR_MODEL_PARALLEL_GROUP", "ring_all_reduce"),
    "cp": ("CONTEXT_PARALLEL_GROUP", "ring_p2p"),
    "ep": ("EXPERT_MODEL_PARALLEL_GROUP", "all_to_all"),
    "etp": ("EXPERT_TENSOR_PARALLEL_GROUP", "ring_all_reduce"),
    "dp": ("DATA_PARALLEL_GROUP_WITH_CP", "ring_all_gather"),
    "edp": ("EXPERT_DATA_PARALLEL_GROUP", "ring_all_gather"),
    "pp": ("PIPELINE_MODEL_PARALLEL_GROUP", "p2p_chain"),
    "embedding": ("EMBEDDING_GROUP", "ring_all_reduce"),
}


def _ring(members, nbytes):
    n = len(members)
    return [(members[i], members[(i + 1) % n], nbytes) for i in range(n)]


def group_flows(kind: str, members: Sequence[int], payload: float, wrap: float = 0.0) -> list[tuple[int, int, float]]:
    """Rank-level flows ``(src_rank, dst_rank, bytes)`` of one group (members sorted here).

    Shapes as DESIGN §3 states them, written out pair by pair: ``ring_all_reduce``
    2(n−1)/n·S per ring edge, ``ring_all_gather`` (n−1)/n·S per ring edge,
    ``ring_p2p`` S per ring edge (ring attention), ``all_to_all`` S/n per ordered
    pair, ``p2p_chain`` S between consecutive members both ways, plus ``wrap``·S
    between the last and the first both ways (interleaved pipeline).
    """
    m = sorted(int(x) for x in members)
    n = len(m)
    if n < 2 or payload <= 0:
        return []
    if kind == "ring_all_reduce":
        return _ring(m, 2.0 * (n - 1) / n * payload)
    if kind == "ring_all_gather":
        return _ring(m, (n - 1) / n * payload)
    if kind == "ring_p2p":
        return _ring(m, float(payload))
    if kind == "all_to_all":
        return [(a, b, payload / n) for a in m for b in m if a != b]
    if kind == "p2p_chain":
        out = []
        for a, b in zip(m, m[1:]):
            out.append((a, b, float(payload)))
            out.append((b, a, float(payload)))
        if wrap > 0 and n > 1:
            out.append((m[-1], m[0], wrap * payload))
            out.append((m[0], m[-1], wrap * payload))
        return out
    raise ValueError(f"unknown collective kind {kind!r}")


#: rankmap's collective kind names -> this module's
_KIND = {"all_reduce": "ring_all_reduce", "all_gather": "ring_all_gather", "ring_p2p": "ring_p2p",
         "all_to_all": "all_to_all", "p2p_chain": "p2p_chain"}


def _subgroup_rows(row: Sequence[int], size: int, stride: int) -> list[list[int]]:
    """Members of each subgroup of one group: ``size`` members ``stride`` apart in group order.

    Written out position by position (Megatron-core ``create_hierarchical_groups``:
    position p = digit·stride + rest within blocks of size·stride).
    """
    m = sorted(int(x) for x in row)
    n = len(m)
    if not size or size == n:
        return [m]
    out = []
    for block in range(0, n, size * stride):
        for rest in range(stride):
            out.append([m[block + j * stride + rest] for j in range(size)])
    return out


def class_parts(traffic: Mapping[str, float], cls: str) -> list[tuple[str, float, int, int, float]]:
    """``(kind, payload, size, stride, wrap)`` of each part of a class (one part, its default shape,
    for plain byte counts; the parts of a model-derived ``Traffic`` otherwise)."""
    payload = float(traffic.get(cls, 0.0) or 0.0)
    parts = getattr(traffic, "collectives", {}).get(cls)
    if parts:
        return [(_KIND[p.kind], float(p.payload_bytes), int(p.size), int(p.stride), float(p.wrap))
                for p in parts if p.payload_bytes > 0]
    return [(CLASS_SPECS[cls][1], payload, 0, 1, 0.0)] if payload > 0 else []


def class_part_triples(cfg, assignment: Sequence[Any], traffic: Mapping[str, float]) -> dict[str, list[list[tuple]]]:
    """Device-level flows ``(src GPU, dst GPU, bytes)`` of each part of every class with a positive payload.

    The parts of a class run one after the other (DESIGN §3: hierarchical cp,
    distributed-optimizer instances, node-limited dispatch), so each is
    simulated on its own and the class's time is their sum.
    """
    from rankmap.solver import megatron_groups

    groups = megatron_groups(cfg)
    out: dict[str, list[list[tuple]]] = {}
    for cls in traffic:
        if cls not in CLASS_SPECS:
            raise ValueError(f"unknown traffic class {cls!r}")
        parts = class_parts(traffic, cls)
        if not parts:
            continue
        gname = CLASS_SPECS[cls][0]
        out[cls] = []
        for kind, payload, size, stride, wrap in parts:
            flows = []
            for row in groups[gname]:
                for sub in _subgroup_rows(row, size, stride):
                    for a, b, nb in group_flows(kind, sub, payload, wrap):
                        da, db = assignment[a], assignment[b]
                        if da != db:
                            flows.append((da, db, nb))
            out[cls].append(flows)
    return out
