"""Plain domain types of a solve's input: options and constraints (its costs and result: :mod:`.results`).

These are what the CLI, the gRPC conversion module and the Python client
exchange with :func:`rankmap.solver.solve`.  Units are in the names: bytes,
seconds, GB/s (1e9 bytes per second).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from .errors import InvalidArgumentError

__all__ = [
    "MODES",
    "ORDER_POLICIES",
    "LAUNCH_ORDER_POLICIES",
    "DOMAIN_LEVELS",
    "Constraint",
    "SolveOptions",
    "SolveCancelled",
    "check_exposure",
    "parse_constraint",
    "MAX_TIME_LIMIT_SECONDS",
]

#: Largest ``time_limit_seconds`` of a solve (one day), the one limit of the CLI, job files, batch
#: entries, the Python API and the service (whose ``--max-time-limit``, default 600, may only lower it):
#: the work budgets are counts sized from the limit, and a limit of 1e308 s overflowed them.
MAX_TIME_LIMIT_SECONDS = 86_400.0

#: Assignment modes (DESIGN §5).
MODES = ("launcher", "free", "fixed")
#: Named order policies; anything else is a comma-separated list of orders.
ORDER_POLICIES = ("default", "megatron-cli", "all")
#: Named launch orders (DESIGN §5 baseline); anything else is a sequence of host names.
LAUNCH_ORDER_POLICIES = ("sorted", "listed")
#: Named domain levels a constraint can refer to.  ``nvlink`` is the finest
#: bandwidth level, ``host`` the ``host`` attribute, ``leaf``/``spine``/``core``
#: the first/second/third bandwidth level coarser than a host; ``level:N`` is
#: the N-th bandwidth level counted from the finest (0); ``host_type`` the hosts of one type (the
#: same GPU count; a ``host_type`` attribute on the GPUs, e.g. from ``--host-topology HOSTLIST=FILE``,
#: tells types of one count apart): ``tp within host_type`` keeps TP groups off hosts of different sizes.
DOMAIN_LEVELS = ("nvlink", "host", "leaf", "spine", "core", "host_type")


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
    """Parse ``"tp within host"`` (also ``"tp:host"``, ``"tp=host"``, ``"tp=level:2"``).

    Raises
    ------
    InvalidArgumentError
        On an unknown class or level, naming it.
    """
    from .traffic import TRAFFIC_CLASSES

    raw = text.strip()
    if "within" in raw:
        parts = raw.split()
    else:  # CLASS:LEVEL or CLASS=LEVEL: split at the first separator only (the level may be level:N)
        cut = min((i for i in (raw.find(":"), raw.find("=")) if i >= 0), default=-1)
        parts = raw.split() if cut < 0 else [raw[:cut].strip(), "within", raw[cut + 1:].strip()]
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
        Wall-clock limit of the whole solve, seconds, in (0, ``MAX_TIME_LIMIT_SECONDS``] (cluster model, orders,
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
        How NCCL runs the collectives (:mod:`rankmap.solver.fabric.rates`): algorithm (``NCCL_ALGO``),
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
        if self.time_limit_seconds > MAX_TIME_LIMIT_SECONDS:
            raise InvalidArgumentError(
                f"time_limit_seconds {self.time_limit_seconds:g} exceeds the limit of {MAX_TIME_LIMIT_SECONDS:g} s "
                "(MAX_TIME_LIMIT_SECONDS, one day)", "time_limit_seconds")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or not 0 <= self.seed < 2**31:
            raise InvalidArgumentError(
                f"seed must be an integer in [0, 2147483647] (CP-SAT's random_seed is 32-bit), got {self.seed!r}",
                "seed",
            )


class SolveCancelled(Exception):
    """Raised by ``solve`` when its ``cancel`` event is set (deadline or client cancel)."""


def new_cancel_event() -> threading.Event:
    """A fresh event to pass as ``solve(..., cancel=event)``."""
    return threading.Event()

