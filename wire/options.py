"""Search options on the wire: mode, orders, constraints, exclusions, limits, exposure, launch order, NCCL."""

from __future__ import annotations

import numbers
from typing import Any, Iterable, Mapping

from rankmap.wire.costs import _class_order
from rankmap.wire.errors import invalid
from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.types import MODES, Constraint, SolveOptions, check_exposure, parse_constraint
from rankmap.v1 import rankmap_pb2 as pb

__all__ = [
    "MODE_TO_PROTO",
    "MODE_FROM_PROTO",
    "POLICY_TO_PROTO",
    "POLICY_FROM_PROTO",
    "enum_name",
    "exposure_to_proto",
    "exposure_from_proto",
    "options_to_proto",
    "options_from_proto",
    "launch_order_to_proto",
    "launch_order_from_proto",
    "LAUNCH_POLICY_TO_PROTO",
    "NCCL_ALGORITHM_TO_PROTO",
    "NCCL_ALGORITHM_FROM_PROTO",
    "nccl_to_proto",
    "nccl_from_proto",
]

MODE_TO_PROTO = {"launcher": pb.MODE_LAUNCHER, "free": pb.MODE_FREE, "fixed": pb.MODE_FIXED}
MODE_FROM_PROTO = {v: k for k, v in MODE_TO_PROTO.items()}
MODE_FROM_PROTO[pb.MODE_UNSPECIFIED] = "launcher"
POLICY_TO_PROTO = {
    "default": pb.ORDER_POLICY_DEFAULT,
    "megatron-cli": pb.ORDER_POLICY_MEGATRON_CLI,
    "all": pb.ORDER_POLICY_ALL,
}
POLICY_FROM_PROTO = {v: k for k, v in POLICY_TO_PROTO.items()}
LAUNCH_POLICY_TO_PROTO = {"sorted": pb.LAUNCH_ORDER_POLICY_SORTED, "listed": pb.LAUNCH_ORDER_POLICY_LISTED}
_LAUNCH_POLICY_FROM_PROTO = {v: k for k, v in LAUNCH_POLICY_TO_PROTO.items()}
_LAUNCH_POLICY_FROM_PROTO[pb.LAUNCH_ORDER_POLICY_UNSPECIFIED] = "sorted"
#: ``NcclModel.algorithm`` <-> ``rankmap.v1.NcclAlgorithm`` (``auto`` is UNSPECIFIED).
NCCL_ALGORITHM_TO_PROTO = {
    "auto": pb.NCCL_ALGORITHM_UNSPECIFIED,
    "ring": pb.NCCL_ALGORITHM_RING,
    "tree": pb.NCCL_ALGORITHM_TREE,
    "nvls": pb.NCCL_ALGORITHM_NVLS,
    "nvlstree": pb.NCCL_ALGORITHM_NVLSTREE,
}
NCCL_ALGORITHM_FROM_PROTO = {v: k for k, v in NCCL_ALGORITHM_TO_PROTO.items()}


def nccl_to_proto(target: "pb.NcclOptions", nccl) -> None:
    """Fill an ``NcclOptions`` from an :class:`~rankmap.solver.NcclModel` or a mapping of its fields
    (``algorithm``, ``pxn``, ``rates``, ``latency``); None leaves it unset (NCCL's defaults).

    Raises
    ------
    InvalidArgumentError
        What :class:`~rankmap.solver.NcclModel` refuses (an unknown algorithm or rate key, a rate
        that is not a finite number > 0; fields ``nccl_algo``, ``nccl_rate.KEY``), or a value that
        is neither (field ``nccl``).
    """
    from rankmap.solver.fabric.rates import NcclModel

    if nccl is None:
        return
    if isinstance(nccl, Mapping):
        unknown = sorted(set(nccl) - {"algorithm", "pxn", "rates", "latency"})
        if unknown:
            raise InvalidArgumentError(f"nccl has unknown field {unknown[0]!r}; known: algorithm, pxn, rates, latency",
                                       "nccl")
        nccl = NcclModel(**nccl)
    if not isinstance(nccl, NcclModel):
        raise InvalidArgumentError(f"nccl must be an NcclModel or a mapping of its fields, got {nccl!r}", "nccl")
    target.algorithm = NCCL_ALGORITHM_TO_PROTO[nccl.algorithm]
    target.disable_pxn = not nccl.pxn
    target.disable_latency = not nccl.latency
    for k, v in nccl.rates.items():
        target.rates_gbps[k] = float(v)


def nccl_from_proto(msg: "pb.NcclOptions"):
    """The :class:`~rankmap.solver.NcclModel` of a request's ``nccl`` (unset: NCCL's defaults).

    Raises
    ------
    InvalidArgumentError
        An algorithm that is not an ``NcclAlgorithm`` (proto path ``nccl.algorithm``, argument
        ``nccl_algo``); an unknown rate key or a rate that is not a finite number > 0 (proto path
        ``nccl.rates_gbps[KEY]``, argument ``nccl_rate.KEY``).
    """
    from rankmap.solver.fabric.rates import DEFAULT_NCCL, NcclModel

    if msg.algorithm not in NCCL_ALGORITHM_FROM_PROTO:
        raise invalid(f"nccl.algorithm {msg.algorithm} is not an NcclAlgorithm (one of "
                      f"{', '.join(pb.NcclAlgorithm.keys())})", "nccl.algorithm", "nccl_algo")
    rates = {}
    for k in sorted(msg.rates_gbps):
        v = msg.rates_gbps[k]
        try:
            NcclModel(rates={k: v})
        except InvalidArgumentError as exc:
            raise invalid(exc.message, f"nccl.rates_gbps[{k}]", f"nccl_rate.{k}") from None
        if k.strip().lower() in rates:
            raise invalid(f"NCCL rate {k.strip().lower()} is given twice (keys are case-insensitive)",
                          f"nccl.rates_gbps[{k}]", f"nccl_rate.{k}")
        rates[k.strip().lower()] = v
    model = NcclModel(algorithm=NCCL_ALGORITHM_FROM_PROTO[msg.algorithm], pxn=not msg.disable_pxn, rates=rates,
                      latency=not msg.disable_latency)
    return DEFAULT_NCCL if model == DEFAULT_NCCL else model


def launch_order_to_proto(target: "pb.LaunchOrder", launch_order) -> None:
    """Fill a ``LaunchOrder`` from ``"sorted"``, ``"listed"`` or a sequence of host names (None: leave unset).

    Raises
    ------
    InvalidArgumentError
        Another string, or a sequence holding something that is not a host name (field ``launch_order``).
    """
    if launch_order is None:
        return
    if isinstance(launch_order, str):
        if launch_order not in LAUNCH_POLICY_TO_PROTO:
            raise InvalidArgumentError(
                f"launch_order {launch_order!r} is not one of sorted, listed or a list of hosts", "launch_order"
            )
        target.policy = LAUNCH_POLICY_TO_PROTO[launch_order]
        return
    hosts = list(launch_order)
    if not all(isinstance(h, str) for h in hosts):
        raise InvalidArgumentError(f"launch_order hosts must be strings, got {hosts[:4]!r}", "launch_order")
    target.hosts.extend(hosts)


def launch_order_from_proto(msg: "pb.LaunchOrder"):
    """``"sorted"``, ``"listed"`` or a tuple of host names (validated against the cluster by the solver).

    Raises
    ------
    InvalidArgumentError
        An unknown policy, or a policy together with hosts (field ``launch_order.policy``).
    """
    if msg.policy not in _LAUNCH_POLICY_FROM_PROTO:
        raise invalid(f"launch_order.policy {msg.policy} is not a LaunchOrderPolicy", "launch_order.policy",
                      "launch_order")
    if msg.hosts:
        if msg.policy != pb.LAUNCH_ORDER_POLICY_UNSPECIFIED:
            raise invalid(
                f"launch_order gives both policy {enum_name(pb.LaunchOrderPolicy, msg.policy)} and "
                f"{len(msg.hosts)} hosts; give one", "launch_order.policy", "launch_order",
            )
        return tuple(msg.hosts)
    return _LAUNCH_POLICY_FROM_PROTO[msg.policy]


def enum_name(enum, value: int) -> str:
    """The name of ``value`` in a protobuf enum, or the number itself when the value is unknown."""
    try:
        return enum.Name(value)
    except ValueError:
        return str(int(value))


def _orders_to_proto(orders) -> "pb.OrderSearch":
    out = pb.OrderSearch()
    if orders is None:
        return out
    if isinstance(orders, str):
        key = orders.strip().lower()
        if key in POLICY_TO_PROTO:
            out.policy = POLICY_TO_PROTO[key]
            return out
        out.orders.extend(o.strip() for o in orders.split(","))
        return out
    if isinstance(orders, Iterable):
        items = list(orders)
        if len(items) == 1 and isinstance(items[0], str) and items[0].strip().lower() in POLICY_TO_PROTO:
            out.policy = POLICY_TO_PROTO[items[0].strip().lower()]
            return out
        for o in items:
            if not isinstance(o, str):
                raise InvalidArgumentError(f"orders must be order strings like 'tp-cp-ep-dp-pp', got {o!r}", "orders")
            out.orders.append(o)
        return out
    raise InvalidArgumentError(f"orders must be a policy name or a list of orders, got {orders!r}", "orders")


def _orders_from_proto(msg: "pb.OrderSearch"):
    if msg.orders:
        if msg.policy != pb.ORDER_POLICY_UNSPECIFIED:
            raise invalid(
                f"give an order policy ({enum_name(pb.OrderPolicy, msg.policy)}) or explicit orders, not both",
                "orders.policy",
                "orders",
            )
        return tuple(msg.orders)
    if msg.policy == pb.ORDER_POLICY_UNSPECIFIED:
        return "default"
    if msg.policy not in POLICY_FROM_PROTO:
        raise invalid(f"unknown order policy {msg.policy}", "orders.policy", "orders")
    return POLICY_FROM_PROTO[msg.policy]


def _constraint(c) -> Constraint:
    if isinstance(c, Constraint):
        return c
    if isinstance(c, str):
        return parse_constraint(c)
    if isinstance(c, (tuple, list)) and len(c) == 2:
        return parse_constraint(f"{c[0]} within {c[1]}")
    raise InvalidArgumentError(f"constraint {c!r} is not of the form 'CLASS within LEVEL' (e.g. 'tp within host')", "constraints")


def exposure_to_proto(target, exposure: Mapping[str, float] | None) -> None:
    """Write exposure ``x_c`` per class into a request's ``exposure`` map.

    Validated first with :func:`~rankmap.solver.types.check_exposure` (the
    solver's messages; field ``exposure.CLASS``).  ``None`` or an empty mapping
    writes nothing (every class 1).
    """
    if exposure is None:
        return
    if not isinstance(exposure, Mapping):
        raise InvalidArgumentError(
            f"exposure must be a mapping of traffic class -> x in [0, 1] (e.g. {{'dp': 0.2}}), got {exposure!r}",
            "exposure",
        )
    for k, v in check_exposure(exposure).items():
        target[k] = v


def exposure_from_proto(source) -> dict[str, float]:
    """Exposure per class of a request's ``exposure`` map, validated, in report order.

    Raises
    ------
    InvalidArgumentError
        Field ``exposure.CLASS`` (proto path ``exposure[CLASS]``) for an unknown
        class or a value outside [0, 1] (NaN included).
    """
    raw = dict(source)
    return check_exposure({k: raw[k] for k in _class_order(raw)})


def options_to_proto(
    req: "pb.SolveRequest",
    mode: str | None = None,
    orders=None,
    constraints: Iterable = (),
    exclude_devices: Iterable = (),
    exclude_hosts: Iterable = (),
    time_limit_seconds: float | None = None,
    seed: int | None = None,
    exposure: Mapping[str, float] | None = None,
    launch_order=None,
    nccl=None,
) -> None:
    """Fill the search fields of ``req`` (mode, orders, constraints, exclusions, limits, exposure, launch order,
    NCCL: :func:`nccl_to_proto`, left unset for NCCL's defaults)."""
    if mode is not None:
        key = mode.strip().lower() if isinstance(mode, str) else mode
        if key not in MODE_TO_PROTO:
            raise InvalidArgumentError(f"mode {mode!r} is not one of {', '.join(MODES)}", "mode")
        req.mode = MODE_TO_PROTO[key]
    if orders is not None:  # left unset, the server may take the order the Megatron arguments select
        req.orders.CopyFrom(_orders_to_proto(orders))
    if isinstance(constraints, (str, Constraint)):
        constraints = [constraints]
    for c in constraints or ():
        c = _constraint(c)
        req.constraints.add(traffic_class=c.traffic_class, level=c.level)
    req.exclude_devices.extend(str(d) for d in (exclude_devices or ()))
    req.exclude_hosts.extend(str(h) for h in (exclude_hosts or ()))
    if time_limit_seconds is not None:
        if isinstance(time_limit_seconds, bool) or not isinstance(time_limit_seconds, numbers.Real):
            raise InvalidArgumentError(
                f"time_limit_seconds must be a positive number, got {time_limit_seconds!r}", "time_limit_seconds"
            )
        req.time_limit_seconds = float(time_limit_seconds)
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise InvalidArgumentError(f"seed must be a non-negative integer, got {seed!r}", "seed")
        req.seed = int(seed)
    exposure_to_proto(req.exposure, exposure)
    if launch_order is not None and launch_order != "sorted":
        launch_order_to_proto(req.launch_order, launch_order)
    _nccl_field_to_proto(req, nccl)


def _nccl_field_to_proto(req, nccl) -> None:
    """``req.nccl`` from ``nccl``; left unset when it is None or NCCL's defaults (older servers then see
    the request they always saw)."""
    msg = pb.NcclOptions()
    nccl_to_proto(msg, nccl)
    if msg.ByteSize():
        req.nccl.CopyFrom(msg)


def options_from_proto(req: "pb.SolveRequest") -> SolveOptions:
    """``SolveOptions`` of a request (validated by ``SolveOptions`` itself)."""
    if req.mode not in MODE_FROM_PROTO:
        raise invalid(f"mode {req.mode} is not one of {', '.join(MODES)}", "mode", "mode")
    constraints = []
    for i, c in enumerate(req.constraints):
        try:
            constraints.append(parse_constraint(f"{c.traffic_class} within {c.level}"))
        except InvalidArgumentError as exc:
            raise invalid(exc.message, f"constraints[{i}]", "constraints") from None
    kw: dict[str, Any] = {}
    if req.HasField("time_limit_seconds"):
        kw["time_limit_seconds"] = float(req.time_limit_seconds)
    exposure = exposure_from_proto(req.exposure)
    launch_order = launch_order_from_proto(req.launch_order)
    try:
        SolveOptions(launch_order=launch_order)
    except InvalidArgumentError as exc:
        raise invalid(exc.message, "launch_order.hosts", "launch_order") from None
    return SolveOptions(
        launch_order=launch_order,
        mode=MODE_FROM_PROTO[req.mode],
        orders=_orders_from_proto(req.orders),
        constraints=tuple(constraints),
        exclude_devices=tuple(req.exclude_devices),
        exclude_hosts=tuple(req.exclude_hosts),
        seed=int(req.seed),
        exposure=exposure,
        nccl=nccl_from_proto(req.nccl),
        **kw,
    )
