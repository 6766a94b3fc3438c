"""Plain domain types of a solve: options, constraints, costs and the result.

These are what the CLI, the gRPC conversion module and the Python client
exchange with :func:`rankmap.solver.solve`.  Units are in the names: bytes,
seconds, GB/s (1e9 bytes per second).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from .megatron.catalogue import ParallelConfig
from .errors import InvalidArgumentError

__all__ = [
    "MODES",
    "ORDER_POLICIES",
    "LAUNCH_ORDER_POLICIES",
    "DOMAIN_LEVELS",
    "Constraint",
    "SolveOptions",
    "Bottleneck",
    "ClassCost",
    "CostBreakdown",
    "HostPlacement",
    "Layout",
    "SolveResult",
    "SolveCancelled",
    "check_exposure",
    "parse_constraint",
]

#: Assignment modes (DESIGN §5).
MODES = ("launcher", "free", "fixed")
#: Named order policies; anything else is a comma-separated list of orders.
ORDER_POLICIES = ("default", "megatron-cli", "all")
#: Named launch orders (DESIGN §5 baseline); anything else is a sequence of host names.
LAUNCH_ORDER_POLICIES = ("sorted", "listed")
#: Named domain levels a constraint can refer to.  ``nvlink`` is the finest
#: bandwidth level, ``host`` the ``host`` attribute, ``leaf``/``spine``/``core``
#: the first/second/third bandwidth level coarser than a host; ``level:N`` is
#: the N-th bandwidth level counted from the finest (0).
DOMAIN_LEVELS = ("nvlink", "host", "leaf", "spine", "core")


@dataclass(frozen=True)
class Constraint:
    """Keep every group of a traffic class inside one domain of a level.

    Attributes
    ----------
    traffic_class : str
        One of ``tp cp ep etp dp edp pp embedding``.
    level : str
        One of :data:`DOMAIN_LEVELS` or ``level:N``.
    """

    traffic_class: str
    level: str

    def __str__(self) -> str:
        return f"{self.traffic_class} within {self.level}"


def check_exposure(exposure: Mapping[str, float] | None) -> dict[str, float]:
    """Validate per-class exposure factors ``x_c`` (DESIGN §4).

    Returns a plain dict (possibly empty; missing classes mean 1.0).

    Raises
    ------
    InvalidArgumentError
        On an unknown class or a value that is not a number in [0, 1], naming it
        (field ``exposure.CLASS``).
    """
    from .traffic import TRAFFIC_CLASSES

    out: dict[str, float] = {}
    for k, v in dict(exposure or {}).items():
        if k not in TRAFFIC_CLASSES:
            raise InvalidArgumentError(
                f"exposure names unknown traffic class {k!r}; known: {', '.join(TRAFFIC_CLASSES)}", f"exposure.{k}"
            )
        try:
            if isinstance(v, bool):
                raise TypeError
            fv = float(v)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"exposure {k} = {v!r} is not a number", f"exposure.{k}") from None
        if not (0.0 <= fv <= 1.0):
            raise InvalidArgumentError(f"exposure {k} = {v!r} must be in [0, 1]", f"exposure.{k}")
        out[k] = fv
    return out


def parse_constraint(text: str) -> Constraint:
    """Parse ``"tp within host"`` (also ``"tp:host"`` or ``"tp=host"``).

    Raises
    ------
    InvalidArgumentError
        On an unknown class or level, naming it.
    """
    from .traffic import TRAFFIC_CLASSES

    raw = text.strip()
    parts = raw.replace(":", " within ", 1).replace("=", " within ", 1).split() if "within" not in raw else raw.split()
    if len(parts) != 3 or parts[1] != "within":
        raise InvalidArgumentError(
            f"constraint {text!r} is not of the form 'CLASS within LEVEL' (e.g. 'tp within host')", "constraints"
        )
    cls, level = parts[0].lower(), parts[2].lower()
    if cls not in TRAFFIC_CLASSES:
        raise InvalidArgumentError(
            f"constraint {text!r}: unknown traffic class {cls!r}; known: {', '.join(TRAFFIC_CLASSES)}", "constraints"
        )
    if level not in DOMAIN_LEVELS and not (level.startswith("level:") and level[6:].isdigit()):
        raise InvalidArgumentError(
            f"constraint {text!r}: unknown level {level!r}; known: {', '.join(DOMAIN_LEVELS)}, level:N", "constraints"
        )
    return Constraint(cls, level)


@dataclass(frozen=True)
class SolveOptions:
    """What is searched and how (DESIGN §5).

    Attributes
    ----------
    mode : str
        ``launcher`` (ranks in contiguous blocks of G per host; the host order
        and each host's local GPU order are searched), ``free`` (any bijection)
        or ``fixed`` (baseline device order; only the order is searched).
    orders : str or tuple of str
        ``"default"``, ``"megatron-cli"``, ``"all"`` or explicit orders.
    constraints : tuple of Constraint
    exclude_devices, exclude_hosts : tuple of str
        GPU node ids / host names not to use.
    time_limit_seconds : float
        Wall-clock limit of the whole solve, seconds (cluster model, orders,
        CP-SAT, polish, local search, result).  It also sizes the
        deterministic work budgets (CP-SAT deterministic time, move and
        evaluation counts) that decide the answer; a solve the wall clock
        stops first says so (``SolveResult.stopped_by``).
    seed : int
        CP-SAT random seed.
    exposure : mapping of class -> float
        ``x_c`` in [0, 1] per traffic class (DESIGN §4): the share of the
        class's time not overlapped with compute; classes not named are 1.
    launch_order : str or tuple of str
        How the launcher numbers the hosts without rankmap, which makes the
        baseline (DESIGN §5) and the ``fixed`` mode's device order:
        ``"sorted"`` (default: natural-sorted host names, as ``srun`` and
        torchrun under Slurm), ``"listed"`` (order of first appearance in the
        cluster graph) or the host names in launch order (e.g. the
        scheduler's hostfile), every host of the cluster once.
    baseline_order : str
        The order Megatron-LM builds its groups in without rankmap, which with
        ``launch_order`` makes the baseline: ``tp-cp-ep-dp-pp`` (default) or
        ``tp-cp-ep-pp-dp`` (``--use-tp-pp-dp-mapping``; megatron-core
        ``initialize_model_parallel(order=...)``).  Set from the job's Megatron
        arguments when they are given.
    nccl : NcclModel
        How NCCL runs the collectives (:mod:`rankmap.solver.nccl`): algorithm (``NCCL_ALGO``),
        PXN, rate overrides, latency.  Default: NCCL's own defaults.
    """

    mode: str = "launcher"
    orders: str | tuple[str, ...] = "default"
    constraints: tuple[Constraint, ...] = ()
    exclude_devices: tuple[str, ...] = ()
    exclude_hosts: tuple[str, ...] = ()
    time_limit_seconds: float = 30.0
    seed: int = 0
    exposure: Mapping[str, float] = None  # type: ignore[assignment]
    launch_order: str | tuple[str, ...] = "sorted"
    baseline_order: str = "tp-cp-ep-dp-pp"
    nccl: "NcclModel" = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        from .fabric.rates import DEFAULT_NCCL, NcclModel
        from .megatron.orders import MEGATRON_CLI_ORDERS

        if self.nccl is None:
            object.__setattr__(self, "nccl", DEFAULT_NCCL)
        elif not isinstance(self.nccl, NcclModel):
            raise InvalidArgumentError(f"nccl must be an NcclModel, got {type(self.nccl).__name__}", "nccl")

        if self.baseline_order not in MEGATRON_CLI_ORDERS:
            raise InvalidArgumentError(
                f"baseline_order {self.baseline_order!r} is not an order stock Megatron-LM builds "
                f"({' or '.join(MEGATRON_CLI_ORDERS)})", "baseline_order")
        object.__setattr__(self, "exposure", check_exposure(self.exposure))
        lo = self.launch_order
        if isinstance(lo, str):
            if lo not in LAUNCH_ORDER_POLICIES:
                raise InvalidArgumentError(
                    f"launch_order {lo!r} is not one of {', '.join(LAUNCH_ORDER_POLICIES)} or a list of hosts",
                    "launch_order",
                )
        else:
            try:
                hosts = tuple(lo)
            except TypeError:
                raise InvalidArgumentError(f"launch_order must be sorted, listed or a list of hosts, got {lo!r}",
                                           "launch_order") from None
            if not hosts or not all(isinstance(h, str) and h for h in hosts):
                raise InvalidArgumentError(
                    f"launch_order must be a non-empty list of host names, got {list(hosts)[:4]!r}", "launch_order"
                )
            object.__setattr__(self, "launch_order", hosts)
        if self.mode not in MODES:
            raise InvalidArgumentError(f"mode {self.mode!r} is not one of {', '.join(MODES)}", "mode")
        if not (isinstance(self.time_limit_seconds, (int, float)) and np.isfinite(self.time_limit_seconds)) or (
            self.time_limit_seconds <= 0
        ):
            raise InvalidArgumentError(
                f"time_limit_seconds must be a positive number, got {self.time_limit_seconds!r}", "time_limit_seconds"
            )
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or not 0 <= self.seed < 2**31:
            raise InvalidArgumentError(
                f"seed must be an integer in [0, 2147483647] (CP-SAT's random_seed is 32-bit), got {self.seed!r}",
                "seed",
            )


@dataclass(frozen=True)
class Bottleneck:
    """What limits one traffic class's phase (DESIGN §4).

    Attributes
    ----------
    kind : str
        ``"link"`` (a shared directed link's ``load / capacity`` sets the time),
        ``"per-flow"`` (the slowest flow alone, ``bytes / B(route)``, sets it:
        no link is shared more than that) or ``"none"`` (the class moves no bytes).
    link : tuple of (str, str) or None
        The directed link ``(from node, to node)`` with the highest
        ``load / capacity`` (for ``per-flow`` too, for information); None when
        the class moves no bytes.
    load_bytes : float
        Bytes of the class's flows crossing ``link`` per step.
    capacity_gbps : float
        Capacity of ``link``, GB/s.
    utilization : float
        ``load / (capacity · T_class)`` in [0, 1]: 1.0 when the link is the bottleneck.
    flows : int
        Number of flows (ECMP parts) crossing ``link``.
    flow_bytes : float
        Bytes of the flow with the largest ``bytes / B(route)``.
    flow_gbps : float
        That flow's route bottleneck capacity B, GB/s.
    """

    kind: str = "none"
    link: tuple[str, str] | None = None
    load_bytes: float = 0.0
    capacity_gbps: float = 0.0
    utilization: float = 0.0
    flows: int = 0
    flow_bytes: float = 0.0
    flow_gbps: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "link": list(self.link) if self.link is not None else None,
            "load_bytes": self.load_bytes,
            "capacity_gbps": self.capacity_gbps,
            "utilization": self.utilization,
            "flows": self.flows,
            "flow_bytes": self.flow_bytes,
            "flow_gbps": self.flow_gbps,
        }

    def describe(self) -> str:
        """One line for people, e.g. ``limited by leaf0→spine at 100% (72 GB, 32 flows, 400 GB/s)``."""
        from .traffic.explicit import format_bytes

        if self.kind == "per-flow" and self.load_bytes == 0 and self.flow_bytes > 0:
            # an algorithm at NCCL's bus-bandwidth cap (NVLS, NVLSTree, tree: solver/cost/collective.py)
            return f"per-flow: {format_bytes(self.flow_bytes)} at {self.flow_gbps:g} GB/s (NCCL's bus bandwidth)"
        if self.kind == "none" or self.link is None:
            return "no traffic"

        a, b = self.link
        if self.kind == "link":
            return (f"limited by {a}→{b} at {100 * self.utilization:.0f}% "
                    f"({format_bytes(self.load_bytes)}, {self.flows} flows, {self.capacity_gbps:g} GB/s)")
        return (f"per-flow: {format_bytes(self.flow_bytes)} at {self.flow_gbps:g} GB/s "
                f"(busiest link {a}→{b} at {100 * self.utilization:.0f}%)")


@dataclass(frozen=True)
class ClassCost:
    """Predicted time of one traffic class (DESIGN §4).

    Attributes
    ----------
    seconds : float
        ``T_class = max(max_flow bytes / B(route), max_link load / capacity) + latency``.
    exposure : float
        ``x_c`` in [0, 1]: the share of ``T_class`` not hidden behind compute.
    bytes_per_rank : float
        Bytes one rank puts on the wire per step for this class (the busiest rank).
    payload_bytes : float
        ``S``, the class's payload per rank per step (the traffic input).
    latency_seconds : float
        The latency term included in ``seconds``: NCCL's latency model (:func:`rankmap.solver.nccl.latency_seconds`)
        plus the graph's per-hop ``latency_us`` along the routes.
    bottleneck : Bottleneck
    algorithm : str
        How NCCL runs the class's slowest part: ``ring``, ``tree``, ``nvls``, ``nvlstree``
        (all-reduce; all-gather / reduce-scatter: ``ring``) or ``p2p`` (all-to-all, send/recv);
        ``""`` when it moves no bytes.
    channels : int
        NCCL channels of that part: rail channels across nodes for a ring, tree or NVLSTree
        (1 for a ring inside one node), NVLS heads for NVLS, 1 for all-to-all and send/recv
        (their per-peer channels are not modelled); 0 when no bytes.
    """

    seconds: float
    exposure: float = 1.0
    bytes_per_rank: float = 0.0
    payload_bytes: float = 0.0
    latency_seconds: float = 0.0
    bottleneck: Bottleneck = Bottleneck()
    algorithm: str = ""
    channels: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "exposure": self.exposure,
            "bytes_per_rank": self.bytes_per_rank,
            "payload_bytes": self.payload_bytes,
            "latency_seconds": self.latency_seconds,
            "bottleneck": self.bottleneck.to_dict(),
            "algorithm": self.algorithm,
            "channels": self.channels,
        }


@dataclass(frozen=True)
class CostBreakdown:
    """Predicted communication time of a layout (DESIGN §4).

    Attributes
    ----------
    total_seconds : float
        Predicted communication time per step: ``Σ_c x_c · T_c``, seconds.
    by_class : dict of str -> float
        ``T_c`` of each traffic class, seconds (before exposure).
    classes : dict of str -> ClassCost
        Per class: time, exposure, bytes sent per rank, bottleneck.
    """

    total_seconds: float
    by_class: Mapping[str, float]
    classes: Mapping[str, ClassCost] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.classes is None:
            object.__setattr__(self, "classes", {c: ClassCost(float(t)) for c, t in self.by_class.items()})

    def to_dict(self) -> dict[str, Any]:
        return {
            "total_seconds": self.total_seconds,
            "by_class": dict(self.by_class),
            "classes": {c: v.to_dict() for c, v in self.classes.items()},
        }


@dataclass(frozen=True)
class HostPlacement:
    """Where one host sits in the layout.

    Attributes
    ----------
    host : str
        Host name.
    node_rank : int
        torchrun ``--node-rank`` / position in the hostfile (launcher mode),
        or the rank of the host's lowest global rank otherwise.
    cuda_visible_devices : tuple of int
        ``local_index`` of the GPU running local rank 0, 1, ... on this host.
    global_ranks : tuple of int
        The global ranks this host runs, by local rank.
    """

    host: str
    node_rank: int
    cuda_visible_devices: tuple[int, ...]
    global_ranks: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "node_rank": self.node_rank,
            "cuda_visible_devices": ",".join(map(str, self.cuda_visible_devices)),
            "global_ranks": list(self.global_ranks),
        }


@dataclass(frozen=True)
class Layout:
    """An order plus the device (GPU node id) of every global rank, with its cost."""

    order: str
    assignment: tuple[str, ...]
    cost: CostBreakdown

    def to_dict(self) -> dict[str, Any]:
        return {"order": self.order, "assignment": list(self.assignment), "cost": self.cost.to_dict()}


@dataclass(frozen=True)
class SolveResult:
    """Everything DESIGN §6 asks of a solve.

    Attributes
    ----------
    config : ParallelConfig
        The chosen configuration (its ``order`` is the chosen order).
    layout : Layout
        Chosen order, assignment and cost.
    baseline : Layout
        Default order on the launcher's device order
        (:func:`~rankmap.solver.launch.placement.launcher_device_order`: hosts in
        ``SolveOptions.launch_order``, GPUs by local index), and its cost.
    hosts : tuple of HostPlacement
        In node-rank order.
    status : str
        ``OPTIMAL`` (proved within the searched space: every layout enumerated,
        or the lower bound meets the cost) or ``FEASIBLE``.
    bound_seconds : float
        A valid lower bound on the cost of any layout in the searched space:
        the optimum when every layout was enumerated, else the analytic bound
        (:func:`~rankmap.solver.cost.timemodel.lower_bound`), never the cost of a
        layout found.
    solve_seconds : float
        Wall-clock time of the solve.
    groups : dict of str -> numpy.ndarray
        The Megatron catalogue for the chosen order (global ranks).
    traffic : dict of str -> float
        Bytes per rank per step per class used.
    apply : dict
        How to run it (DESIGN §6): ``order``, ``megatron_args`` (flags for
        Megatron-LM), ``note``, ``hostfile`` (hosts in node-rank order) and
        the launch files of :func:`~rankmap.solver.launch.files.launch_files`:
        ``rendezvous``, ``slurm`` {hostfile per rank, command}, ``torchrun``
        [{host, node_rank, command}], ``mpirun`` {rankfile, command},
        ``kubernetes`` {pod_nodes, cuda_visible_devices, command},
        ``unavailable``, ``gpus_file`` (only when local GPU orders differ).
    mode : str
    orders_searched : tuple of str
    stopped_by : str
        ``"time_limit"`` when the wall-clock limit stopped some part of the
        search before its deterministic work budget completed (the answer may
        then depend on the machine's load, and the status is never OPTIMAL);
        ``""`` when the budget completed.
    nccl : NcclModel or None
        How NCCL ran the collectives in the prediction (recorded in the JSON, so that
        ``rankmap evaluate`` on this document predicts the same way).
    """

    config: ParallelConfig
    layout: Layout
    baseline: Layout
    hosts: tuple[HostPlacement, ...]
    status: str
    bound_seconds: float
    solve_seconds: float
    groups: Mapping[str, np.ndarray]
    traffic: Mapping[str, float]
    apply: Mapping[str, Any]
    mode: str = "launcher"
    orders_searched: tuple[str, ...] = ()
    stopped_by: str = ""
    nccl: Any = None

    @property
    def order(self) -> str:
        return self.layout.order

    @property
    def assignment(self) -> tuple[str, ...]:
        return self.layout.assignment

    @property
    def cost(self) -> CostBreakdown:
        return self.layout.cost

    @property
    def improvement(self) -> float:
        """Fraction of the baseline cost saved (0.25 = 25 % cheaper)."""
        base = self.baseline.cost.total_seconds
        return 0.0 if base <= 0 else 1.0 - self.layout.cost.total_seconds / base

    def to_dict(self) -> dict[str, Any]:
        """The JSON document of ``rankmap solve`` (DESIGN §7)."""
        return {
            "order": self.layout.order,
            "world_size": self.config.world_size,
            "sizes": self.config.sizes,
            "mode": self.mode,
            "assignment": list(self.layout.assignment),
            "hosts": [h.to_dict() for h in self.hosts],
            "cost": self.layout.cost.to_dict(),
            "baseline": self.baseline.to_dict(),
            "improvement": self.improvement,
            "status": self.status,
            "stopped_by": self.stopped_by,
            "bound_seconds": self.bound_seconds,
            "solve_seconds": self.solve_seconds,
            "traffic_bytes": dict(self.traffic),
            # what the traffic was derived from, so `rankmap evaluate --assignment` on this document
            # reproduces the payloads and shapes (None for explicit bytes)
            "traffic_model": (self.traffic.model.to_dict() if getattr(self.traffic, "model", None) is not None
                              else None),
            # classes given as bytes on top of traffic_model ({} without a model: traffic_bytes is all of it)
            "traffic_explicit": (dict(getattr(self.traffic, "explicit", {}) or {})
                                 if getattr(self.traffic, "model", None) is not None else {}),
            "orders_searched": list(self.orders_searched),
            "nccl": self.nccl.to_dict() if self.nccl is not None else None,
            "apply": dict(self.apply),
            "groups": {k: v.tolist() for k, v in self.groups.items()},
        }


class SolveCancelled(Exception):
    """Raised by ``solve`` when its ``cancel`` event is set (deadline or client cancel)."""


def new_cancel_event() -> threading.Event:
    """A fresh event to pass as ``solve(..., cancel=event)``."""
    return threading.Event()

