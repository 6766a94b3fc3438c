"""Plain domain types of a solve's answer: costs per class, bottlenecks, host placements, the result.

These are what the CLI, the gRPC conversion module and the Python client
exchange with :func:`rankmap.solver.solve`.  Units are in the names: bytes,
seconds, GB/s (1e9 bytes per second).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from .megatron.config import ParallelConfig

__all__ = ["Bottleneck", "ClassCost", "CostBreakdown", "HostPlacement", "Layout", "SolveResult"]


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
        The latency term included in ``seconds``: NCCL's latency model (:func:`rankmap.solver.cost.nccl.latency_seconds`)
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
        (:func:`~rankmap.solver.bound.analytic.lower_bound`), never the cost of a
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
        ``"deadline"`` when the caller's deadline (a gRPC deadline shorter than
        the time limit) stopped it: the best layout found by then;
        ``""`` when the budget completed.
    nccl : NcclModel or None
        How NCCL ran the collectives in the prediction (recorded in the JSON, so that
        ``rankmap evaluate`` on this document predicts the same way).
    measured_links : tuple of dict
        The links with a measured rate (issue 27, ``measured_gbps`` on the graph) that the
        chosen layout's flows cross: ``link`` [from, to], ``measured_gbps``, ``line_gbps``
        (GB/s), ``source``, ``classes``.  Empty without measurements; in the JSON under
        ``measured.links`` only when there are measured links in the cluster.
    warnings : tuple of str
        Notes on the request a server answered with (a measurement naming an unknown host);
        in the JSON under ``measured.warnings`` when any.
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
    measured_links: tuple = ()
    warnings: tuple = ()

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
            **({"measured": {"links": [dict(x) for x in self.measured_links],
                             **({"warnings": list(self.warnings)} if self.warnings else {})}}
               if self.measured_links or self.warnings else {}),
            "apply": dict(self.apply),
            "groups": {k: v.tolist() for k, v in self.groups.items()},
        }
