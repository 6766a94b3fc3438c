"""Traffic classes, collective shapes and the payloads they carry (DESIGN §3).

A *traffic class* is one kind of communication of a Megatron training step.
It runs inside the groups of one Megatron process-group family.  The registry
:data:`REGISTRY` holds each class once: its name, its group family
(``group_desc`` in Megatron-core) and the collective shape its payload takes
when the user gives bytes without a model (:data:`CLASS_KIND`):

=========  ==========================================  ==========
class      group (``group_desc`` in Megatron-core)      default
=========  ==========================================  ==========
tp         TENSOR_MODEL_PARALLEL_GROUP                 all_reduce
cp         CONTEXT_PARALLEL_GROUP                      ring_p2p
ep         EXPERT_MODEL_PARALLEL_GROUP                 all_to_all
etp        EXPERT_TENSOR_PARALLEL_GROUP                all_reduce
dp         DATA_PARALLEL_GROUP_WITH_CP                 all_gather
edp        EXPERT_DATA_PARALLEL_GROUP                  all_gather
pp         PIPELINE_MODEL_PARALLEL_GROUP               p2p_chain
embedding  EMBEDDING_GROUP                             all_reduce
=========  ==========================================  ==========

A model (:func:`~rankmap.solver.traffic.payloads.traffic_from_model`) gives
each class one or more :class:`Collective` parts whose kind follows the
Megatron options (sequence parallel, ``cp_comm_type``, distributed optimizer,
MoE dispatcher, virtual pipeline, ...).  :class:`Traffic` carries them next to
the plain ``class -> bytes`` mapping every caller already uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

from ..errors import InvalidArgumentError

__all__ = [
    "TrafficClass",
    "REGISTRY",
    "TRAFFIC_CLASSES",
    "CLASS_GROUP",
    "CLASS_KIND",
    "COLLECTIVE_KINDS",
    "pair_bytes_factor",
    "class_group_size",
    "Collective",
    "Traffic",
    "class_collectives",
    "subgroups",
    "collective_bytes_per_rank",
    "bytes_sent_per_rank",
]


@dataclass(frozen=True)
class TrafficClass:
    """One traffic class: its name, the Megatron group family it runs in, its default shape.

    Attributes
    ----------
    name : str
        ``tp cp ep etp dp edp pp embedding``.
    group : str
        Megatron-core ``group_desc`` of the family (e.g. ``TENSOR_MODEL_PARALLEL_GROUP``).
    kind : str
        Collective kind of an explicit payload (one of :data:`COLLECTIVE_KINDS`).
    what : str
        One line for people.
    """

    name: str
    group: str
    kind: str
    what: str


#: The one registry of traffic classes, in report order.  A new class is added here.
REGISTRY: tuple[TrafficClass, ...] = (
    TrafficClass("tp", "TENSOR_MODEL_PARALLEL_GROUP", "all_reduce", "tensor-parallel activations"),
    TrafficClass("cp", "CONTEXT_PARALLEL_GROUP", "ring_p2p", "context-parallel keys/values"),
    TrafficClass("ep", "EXPERT_MODEL_PARALLEL_GROUP", "all_to_all", "MoE token dispatch and combine"),
    TrafficClass("etp", "EXPERT_TENSOR_PARALLEL_GROUP", "all_reduce", "expert tensor-parallel tokens"),
    TrafficClass("dp", "DATA_PARALLEL_GROUP_WITH_CP", "all_gather", "dense gradients and parameters"),
    TrafficClass("edp", "EXPERT_DATA_PARALLEL_GROUP", "all_gather", "expert gradients and parameters"),
    TrafficClass("pp", "PIPELINE_MODEL_PARALLEL_GROUP", "p2p_chain", "pipeline activations and gradients"),
    TrafficClass("embedding", "EMBEDDING_GROUP", "all_reduce", "tied word-embedding gradient"),
)

#: The traffic classes, in report order.
TRAFFIC_CLASSES: tuple[str, ...] = tuple(c.name for c in REGISTRY)

#: Class -> the Megatron process-group family (``group_desc``) it runs in (DESIGN §3).
CLASS_GROUP: dict[str, str] = {c.name: c.group for c in REGISTRY}

#: Class -> collective kind of an explicit payload (DESIGN §3).
CLASS_KIND: dict[str, str] = {c.name: c.kind for c in REGISTRY}

#: The collective kinds (how a payload S moves between the members of a group):
#:
#: ``all_reduce``  NCCL ring all-reduce: 2(n−1)/n·S on every ring edge.
#: ``all_gather``  NCCL ring all-gather or reduce-scatter of an S-byte buffer: (n−1)/n·S per edge.
#: ``ring_p2p``    point-to-point sends to the ring successor (ring attention): S per edge.
#: ``all_to_all``  S/n to every other member.
#: ``p2p_chain``   S between consecutive members, both ways (pipeline); a
#:                 :attr:`Collective.wrap` share of S also between last and first.
COLLECTIVE_KINDS: tuple[str, ...] = ("all_reduce", "all_gather", "ring_p2p", "all_to_all", "p2p_chain")


def pair_bytes_factor(kind: str, n: int) -> float:
    """Average bytes rank ``i`` sends to one peer ``j`` of a group of ``n``, per byte of payload.

    ``all_reduce`` ``2/n`` (ring: 2(n−1)/n·S out of each rank, over n−1 peers);
    ``all_gather`` and ``all_to_all`` ``1/n``; ``ring_p2p`` ``1/(n−1)`` (S to
    one neighbour, averaged over peers); ``p2p_chain`` ``1`` between
    consecutive members (the caller applies the consecutive-only rule).  A
    group of one rank has no pairs: 0.

    Raises
    ------
    InvalidArgumentError
        For an unknown kind or a group size below 1.
    """
    if kind not in COLLECTIVE_KINDS:
        raise InvalidArgumentError(
            f"unknown collective kind {kind!r}; known: {', '.join(COLLECTIVE_KINDS)}", "kind"
        )
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise InvalidArgumentError(f"group size must be a positive integer, got {n!r}", "n")
    n = int(n)
    if n == 1:
        return 0.0
    if kind == "all_reduce":
        return 2.0 / n
    if kind in ("all_gather", "all_to_all"):
        return 1.0 / n
    if kind == "ring_p2p":
        return 1.0 / (n - 1)
    return 1.0


def class_group_size(cls: str, cfg) -> int:
    """Size of one group of the family a class runs in, for a ParallelConfig.

    tp -> tp; cp -> cp; ep -> ep; etp -> etp; dp -> dp*cp (the group is
    DATA_PARALLEL_GROUP_WITH_CP); edp -> edp; pp -> pp; embedding -> 2 when
    pp > 1 (first and last stage), else 1.

    Raises
    ------
    InvalidArgumentError
        For an unknown class.
    """
    if cls not in CLASS_GROUP:
        raise InvalidArgumentError(
            f"unknown traffic class {cls!r}; known: {', '.join(TRAFFIC_CLASSES)}", "traffic"
        )
    if cls == "dp":
        return cfg.dp * cfg.cp
    if cls == "embedding":
        return 2 if cfg.pp > 1 else 1
    return int(getattr(cfg, cls))


@dataclass(frozen=True)
class Collective:
    """One part of a class's traffic: a collective kind over (sub)groups with payload S.

    Attributes
    ----------
    kind : str
        One of :data:`COLLECTIVE_KINDS`.
    payload_bytes : float
        S, bytes per rank per training step (see :data:`COLLECTIVE_KINDS`).
    size : int
        0: the collective runs over the class's whole group.  Otherwise over
        subgroups of ``size`` members taken at ``stride`` inside each group (in
        group order, Megatron's ``create_hierarchical_groups``: position p is
        ``digit·stride + rest``): hierarchical context parallelism,
        distributed-optimizer instances, node-limited MoE dispatch.
    stride : int
        Distance between subgroup members, in group positions.
    wrap : float
        ``p2p_chain`` only: bytes between the last and the first member (each
        way) as a share of S — the interleaved pipeline's wrap-around.
    what : str
        What the bytes are, for people.
    """

    kind: str
    payload_bytes: float
    size: int = 0
    stride: int = 1
    wrap: float = 0.0
    what: str = ""

    def __post_init__(self) -> None:
        if self.kind not in COLLECTIVE_KINDS:
            raise InvalidArgumentError(f"unknown collective kind {self.kind!r}", "kind")
        if not math.isfinite(float(self.payload_bytes)) or self.payload_bytes < 0:
            raise InvalidArgumentError(f"payload {self.payload_bytes!r} must be finite and >= 0 bytes", "traffic")


class Traffic(dict):
    """Payloads ``class -> bytes per rank per step`` plus how each moves.

    A plain ``dict`` for every caller that reads bytes; :attr:`collectives`
    holds, per class derived from a model, its :class:`Collective` parts, and
    :attr:`notes` the formula and source of each class.  A class without parts
    moves with its default shape (:data:`CLASS_KIND`).  Copying with
    ``dict(traffic)`` drops the parts: use :meth:`replace` or :func:`class_collectives`.

    :attr:`model` is the :class:`~rankmap.solver.traffic.model.ModelSpec` the
    payloads were derived from (None for explicit bytes) and :attr:`explicit`
    the classes given as bytes on top of it: together they reproduce the
    traffic elsewhere (the gRPC client sends them, not the bytes, so the server
    derives the same shapes).
    """

    def __init__(self, payloads: Mapping[str, float] | Iterable = (),
                 collectives: Mapping[str, tuple[Collective, ...]] | None = None,
                 notes: Mapping[str, tuple[str, str]] | None = None,
                 model=None, explicit: Mapping[str, float] | None = None):
        super().__init__(payloads)
        self.collectives: dict[str, tuple[Collective, ...]] = {
            c: tuple(v) for c, v in (collectives or {}).items() if c in self
        }
        self.notes: dict[str, tuple[str, str]] = dict(notes or {})
        self.model = model
        self.explicit: dict[str, float] = {c: float(v) for c, v in (explicit or {}).items()}

    def replace(self, explicit: Mapping[str, float]) -> "Traffic":
        """A copy whose classes in ``explicit`` carry those bytes with their default shape."""
        payloads = dict(self)
        payloads.update({c: float(v) for c, v in explicit.items()})
        parts = {c: v for c, v in self.collectives.items() if c not in explicit}
        notes = {c: v for c, v in self.notes.items() if c not in explicit}
        for c in explicit:
            notes[c] = ("given explicitly", "user input")
        return Traffic(payloads, parts, notes, self.model, {**self.explicit, **explicit})

    def scaled(self, factors: Mapping[str, float]) -> "Traffic":
        """A copy with each class's payload (and parts) multiplied by ``factors[class]`` (default 1).

        The copy no longer derives from :attr:`model` (its ``model`` is None).
        """
        payloads = {c: v * float(factors.get(c, 1.0)) for c, v in self.items()}
        parts = {
            c: tuple(Collective(p.kind, p.payload_bytes * float(factors.get(c, 1.0)), p.size, p.stride, p.wrap,
                                p.what) for p in v)
            for c, v in self.collectives.items()
        }
        return Traffic(payloads, parts, self.notes)

    def __reduce__(self):
        return (Traffic, (dict(self), self.collectives, self.notes, self.model, self.explicit))


def class_collectives(traffic: Mapping[str, float], cls: str) -> tuple[Collective, ...]:
    """The parts of class ``cls``: its :class:`Collective` list, or its default shape with its bytes.

    Returns ``()`` when the class carries no bytes.
    """
    s = float(traffic.get(cls, 0.0) or 0.0)
    parts = getattr(traffic, "collectives", {}).get(cls)
    if parts:
        return tuple(p for p in parts if p.payload_bytes > 0)
    return (Collective(CLASS_KIND[cls], s),) if s > 0 else ()


def subgroups(groups: np.ndarray, part: Collective) -> np.ndarray:
    """The rank arrays a part runs over: shape (g·n/size, size), members in group order.

    ``groups`` has shape (g, n), members ascending (Megatron's order).  With
    ``size == 0`` the groups themselves.  Otherwise position ``p`` of a group
    is ``outer·(size·stride) + digit·stride + inner`` and a subgroup fixes
    ``outer`` and ``inner`` (Megatron-core ``create_hierarchical_groups``).

    Raises
    ------
    InvalidArgumentError
        When ``size·stride`` does not divide the group size.
    """
    arr = np.asarray(groups)
    if part.size in (0, arr.shape[1]) and part.stride in (1, 0) or arr.size == 0:
        return arr
    g, n = arr.shape
    k, st = int(part.size), int(part.stride)
    if k < 1 or st < 1 or n % (k * st):
        raise InvalidArgumentError(
            f"subgroups of {k} at stride {st} do not tile groups of {n} ranks", "traffic"
        )
    return arr.reshape(g, n // (k * st), k, st).transpose(0, 1, 3, 2).reshape(-1, k)


def part_size(part: Collective, n: int) -> int:
    """Members of one (sub)group of a part in a class group of ``n`` ranks."""
    return int(part.size) if part.size else int(n)


def collective_bytes_per_rank(part: Collective, n: int) -> float:
    """Bytes the busiest member puts on the wire for one part over groups of ``n`` (DESIGN §3).

    Ring all-reduce 2(k−1)/k·S, ring all-gather/reduce-scatter and all-to-all
    (k−1)/k·S, ring point-to-point S, pipeline S to each neighbour (2S for an
    inner stage; an end stage S plus the wrap share), with ``k`` the (sub)group size.
    """
    k = part_size(part, n)
    s = float(part.payload_bytes)
    if k <= 1 or s <= 0:
        return 0.0
    if part.kind == "all_reduce":
        return 2.0 * (k - 1) / k * s
    if part.kind in ("all_gather", "all_to_all"):
        return (k - 1) / k * s
    if part.kind == "ring_p2p":
        return s
    # p2p_chain
    inner = 2.0 * s if k > 2 else 0.0
    end = s + part.wrap * s
    return max(inner, end)


def bytes_sent_per_rank(traffic: Mapping[str, float], cfg) -> dict[str, float]:
    """Per class, the most bytes one rank puts on the wire per training step.

    What papers publish (e.g. Narayanan et al. SC'21 §3.3: 8bsh(t−1)/t per layer
    per micro-batch for tensor parallelism without sequence parallelism, in
    elements).  Sums :func:`collective_bytes_per_rank` over each class's parts.
    """
    out = {}
    for c in TRAFFIC_CLASSES:
        n = class_group_size(c, cfg)
        out[c] = float(sum(collective_bytes_per_rank(p, n) for p in class_collectives(traffic, c)))
    return out
