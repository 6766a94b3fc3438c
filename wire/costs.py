"""Costs and process groups on the wire: ``CostBreakdown`` <-> ``rankmap.v1.Cost``,
``{name: array}`` <-> ``map<string, RankGroups>``, ``Layout`` <-> ``rankmap.v1.Layout``."""

from __future__ import annotations

import re
from typing import Callable, Iterable, Mapping

import numpy as np

from rankmap.solver.megatron.catalogue import GROUP_NAMES
from rankmap.solver.results import Bottleneck, ClassCost, CostBreakdown, Layout
from rankmap.v1 import rankmap_pb2 as pb

__all__ = [
    "BOTTLENECK_TO_PROTO",
    "BOTTLENECK_FROM_PROTO",
    "cost_to_proto",
    "cost_from_proto",
    "groups_to_proto",
    "groups_from_proto",
]

BOTTLENECK_TO_PROTO = {
    "none": pb.BOTTLENECK_KIND_NONE,
    "link": pb.BOTTLENECK_KIND_LINK,
    "per-flow": pb.BOTTLENECK_KIND_PER_FLOW,
}
BOTTLENECK_FROM_PROTO = {v: k for k, v in BOTTLENECK_TO_PROTO.items()}
BOTTLENECK_FROM_PROTO[pb.BOTTLENECK_KIND_UNSPECIFIED] = "none"


#: Traffic classes in report order (DESIGN §3); the traffic module's when present.
try:  # pragma: no cover - depends on which solver modules exist
    from rankmap.solver.traffic import TRAFFIC_CLASSES as _TRAFFIC_CLASSES
except ImportError:  # pragma: no cover
    _TRAFFIC_CLASSES = ("tp", "cp", "ep", "etp", "dp", "edp", "pp", "embedding")


def _class_order(keys: Iterable[str]) -> list[str]:
    keys = list(keys)
    known = [c for c in _TRAFFIC_CLASSES if c in keys]
    return known + sorted(k for k in keys if k not in _TRAFFIC_CLASSES)


#: The scalar fields of ``Bottleneck`` / ``ClassCost`` (same names in the messages), with their types.
_BOTTLENECK_NUMBERS = (("load_bytes", float), ("capacity_gbps", float), ("utilization", float), ("flows", int),
                       ("flow_bytes", float), ("flow_gbps", float))
_CLASS_COST_NUMBERS = (("seconds", float), ("exposure", float), ("bytes_per_rank", float), ("payload_bytes", float),
                       ("latency_seconds", float), ("algorithm", str), ("channels", int))


def _numbers(source, fields) -> dict:
    """``{name: type(source.name)}`` for the ``(name, type)`` pairs of ``fields``."""
    return {name: kind(getattr(source, name)) for name, kind in fields}


def _copy_numbers(source, target, fields) -> None:
    for name, value in _numbers(source, fields).items():
        setattr(target, name, value)


def _bottleneck_to_proto(b: Bottleneck, out: "pb.Bottleneck") -> None:
    kind = BOTTLENECK_TO_PROTO.get(b.kind)
    if kind is None:  # a solver bug, not bad input: fail loudly (INTERNAL)
        raise ValueError(f"bottleneck kind {b.kind!r} is not one of {', '.join(BOTTLENECK_TO_PROTO)}")
    out.kind = kind
    if b.link is not None:
        out.link_from, out.link_to = str(b.link[0]), str(b.link[1])
    _copy_numbers(b, out, _BOTTLENECK_NUMBERS)


def _bottleneck_from_proto(msg: "pb.Bottleneck") -> Bottleneck:
    link = (msg.link_from, msg.link_to) if (msg.link_from or msg.link_to) else None
    return Bottleneck(kind=BOTTLENECK_FROM_PROTO.get(msg.kind, "none"), link=link,
                      **_numbers(msg, _BOTTLENECK_NUMBERS))


def cost_to_proto(cost: CostBreakdown) -> "pb.Cost":
    """A ``rankmap.v1.Cost``: total ``Σ x_c·T_c``, ``T_c`` per class, and each class's :class:`ClassCost`."""
    out = pb.Cost(total_seconds=float(cost.total_seconds))
    for k, v in cost.by_class.items():
        out.by_class_seconds[k] = float(v)
    for k, c in (cost.classes or {}).items():
        m = out.classes[k]
        _copy_numbers(c, m, _CLASS_COST_NUMBERS)
        _bottleneck_to_proto(c.bottleneck, m.bottleneck)
    return out


def cost_from_proto(msg: "pb.Cost") -> CostBreakdown:
    """The :class:`CostBreakdown` of a ``rankmap.v1.Cost`` (classes in report order).

    A ``Cost`` without ``classes`` gets the per-class defaults of
    :class:`CostBreakdown` (``T_c`` from ``by_class_seconds``, exposure 1).
    """
    by = dict(msg.by_class_seconds)
    classes = None
    if msg.classes:
        classes = {}
        for k in _class_order(msg.classes.keys()):
            m = msg.classes[k]
            classes[k] = ClassCost(**_numbers(m, _CLASS_COST_NUMBERS), bottleneck=_bottleneck_from_proto(m.bottleneck))
    return CostBreakdown(
        total_seconds=float(msg.total_seconds),
        by_class={k: by[k] for k in _class_order(by)},
        classes=classes,
    )


_HIER = re.compile(r"^(.*_L)(\d+)$")


def _group_sort_key(name: str) -> tuple[int, int, str]:
    if name in GROUP_NAMES:
        return GROUP_NAMES.index(name), 0, name
    m = _HIER.match(name)
    if m and f"{m.group(1)}*" in GROUP_NAMES:
        return GROUP_NAMES.index(f"{m.group(1)}*"), int(m.group(2)), name
    return len(GROUP_NAMES), 0, name


def _varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Protobuf varint encoding of non-negative int64 ``values`` (shape (m,)), as a matrix.

    Returns ``(chunks, keep)``, both of shape (m, w) with w the longest encoding (1..10
    bytes; 3 for ranks below 2**21): row i's encoding is ``chunks[i][keep[i]]``.
    """
    small = values.size == 0 or int(values.max()) < (1 << 32)
    v = values.astype(np.uint32 if small else np.uint64)  # 32-bit arithmetic is faster (ranks)
    lengths = np.ones(v.size, dtype=np.int8)
    for k in range(1, 10):
        over = v >= (1 << (7 * k))
        if not over.any():
            break
        lengths += over
    width = int(lengths.max(initial=1))
    shifts = np.arange(0, 7 * width, 7, dtype=v.dtype)
    chunks = ((v[:, None] >> shifts[None, :]) & v.dtype.type(0x7F)).astype(np.uint8)
    col = np.arange(width)[None, :]
    chunks |= ((col < (lengths[:, None] - 1)) * 0x80).astype(np.uint8)
    return chunks, col < lengths[:, None]


def _rank_groups_bytes(rows: np.ndarray) -> bytes:
    """The wire bytes of ``RankGroups{groups: [RankGroup{ranks: row} for row in rows]}``.

    ``rows``: non-negative int64 ranks, shape (groups, size >= 1).  Built with numpy (one
    message per group took about half a second at 131,072 ranks): each group is field 1
    (tag 0x0A) holding a ``RankGroup`` whose packed ``ranks`` is field 1 (tag 0x0A).  One
    (groups, bytes) matrix and its mask, flattened row by row.
    """
    g, s = rows.shape
    pay, pkeep = _varints(rows.ravel())
    row_len = pkeep.sum(axis=1).reshape(g, s).sum(axis=1)  # packed ranks bytes per group
    ilen, ikeep = _varints(row_len)
    olen, okeep = _varints(1 + ikeep.sum(axis=1) + row_len)  # RankGroup message bytes
    tag = np.full((g, 1), 0x0A, dtype=np.uint8)
    yes = np.ones((g, 1), dtype=bool)
    data = np.concatenate([tag, olen, tag, ilen, pay.reshape(g, -1)], axis=1)
    keep = np.concatenate([yes, okeep, yes, ikeep, pkeep.reshape(g, -1)], axis=1)
    return data[keep].tobytes()


def groups_to_proto(groups: Mapping[str, np.ndarray], target, check: Callable[[], None] | None = None) -> None:
    """Write ``{name: (groups, size) array}`` into a ``map<string, RankGroups>`` field.

    ``check`` is called every few thousand groups (a deadline / cancel check point).
    Rows of non-negative ranks are encoded in bulk (:func:`_rank_groups_bytes`, a block of
    rows at a time) and parsed into the message: the same message as adding each group.
    """
    for name, arr in groups.items():
        if check is not None:
            check()
        rg = target[name]
        rows = np.asarray(arr)
        step = max(1, 65536 // max(1, rows.shape[1] if rows.ndim == 2 else 1))
        bulk = rows.ndim == 2 and rows.shape[1] > 0 and rows.size and np.issubdtype(rows.dtype, np.integer) \
            and int(rows.min()) >= 0
        for start in range(0, len(rows), step):
            if check is not None and start:
                check()
            if bulk:
                rg.MergeFromString(_rank_groups_bytes(rows[start:start + step].astype(np.int64)))
                continue
            for row in rows[start:start + step].tolist():
                rg.groups.add().ranks.extend(row)


def groups_from_proto(source) -> dict[str, np.ndarray]:
    """``{name: int64 array (groups, size)}`` from a ``map<string, RankGroups>``, in Megatron's order."""
    out = {}
    for name in sorted(source.keys(), key=_group_sort_key):
        rows = [list(g.ranks) for g in source[name].groups]
        width = len(rows[0]) if rows else 0
        out[name] = np.asarray(rows, dtype=np.int64).reshape(len(rows), width)
    return out


def _layout_to_proto(layout: Layout) -> "pb.Layout":
    return pb.Layout(order=layout.order, assignment=[str(a) for a in layout.assignment], cost=cost_to_proto(layout.cost))


def _layout_from_proto(msg: "pb.Layout") -> Layout:
    return Layout(order=msg.order, assignment=tuple(msg.assignment), cost=cost_from_proto(msg.cost))
