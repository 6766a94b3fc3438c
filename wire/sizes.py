"""Parallel sizes on the wire: ``rankmap.v1.ParallelSizes`` / ``ParallelConfig`` <-> :class:`ParallelConfig`."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rankmap.wire.errors import invalid
from rankmap.solver.catalogue import ParallelConfig, parallel_config
from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.ranks import DEFAULT_ORDER
from rankmap.v1 import rankmap_pb2 as pb

__all__ = ["sizes_to_proto", "config_from_proto", "config_to_proto", "config_from_resolved"]

def _check_size(value, name: str) -> int:
    """The client-side type check of a size (same message as ``parallel_config``)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise InvalidArgumentError(f"{name} must be a positive integer, got {value!r}", name)
    return int(value)


def sizes_to_proto(
    world_size: int | None = None,
    tp: int | None = None,
    cp: int | None = None,
    ep: int | None = None,
    etp: int | None = None,
    pp: int | None = None,
    num_distributed_optimizer_instances: int | None = None,
    hierarchical_context_parallel_sizes: Sequence[int] | None = None,
) -> "pb.ParallelSizes":
    """``ParallelSizes`` with the given (non-None) sizes set."""
    out = pb.ParallelSizes()
    values = dict(
        world_size=world_size,
        tp=tp,
        cp=cp,
        ep=ep,
        etp=etp,
        pp=pp,
        num_distributed_optimizer_instances=num_distributed_optimizer_instances,
    )
    for name, value in values.items():
        if value is not None:
            setattr(out, name, _check_size(value, name))
    if hierarchical_context_parallel_sizes:
        out.hierarchical_context_parallel_sizes.extend(
            _check_size(v, "hierarchical_context_parallel_sizes") for v in hierarchical_context_parallel_sizes
        )
    return out


def config_from_proto(
    sizes: "pb.ParallelSizes", order: str = DEFAULT_ORDER, default_world_size: int | None = None, rpc: str = "Solve"
) -> ParallelConfig:
    """Validate ``ParallelSizes`` (+ order) with :func:`~rankmap.solver.parallel_config`.

    Errors keep the solver's field (``tp``); :func:`error_fields` maps it to
    the proto path.
    """
    if sizes.HasField("world_size"):
        ws = sizes.world_size
    elif default_world_size is not None:
        ws = default_world_size
    else:
        raise invalid("world_size is required", "sizes.world_size", "world_size")

    def get(name, default):
        return getattr(sizes, name) if sizes.HasField(name) else default

    return parallel_config(
        int(ws),
        tp=get("tp", 1),
        cp=get("cp", 1),
        ep=get("ep", 1),
        etp=get("etp", None),
        pp=get("pp", 1),
        order=order or DEFAULT_ORDER,
        num_distributed_optimizer_instances=get("num_distributed_optimizer_instances", 1),
        hierarchical_context_parallel_sizes=list(sizes.hierarchical_context_parallel_sizes) or None,
    )


def config_to_proto(cfg: ParallelConfig) -> "pb.ParallelConfig":
    """A validated configuration, as reported back."""
    return pb.ParallelConfig(
        world_size=cfg.world_size,
        tp=cfg.tp,
        cp=cfg.cp,
        ep=cfg.ep,
        etp=cfg.etp,
        dp=cfg.dp,
        edp=cfg.edp,
        pp=cfg.pp,
        order=cfg.order,
        num_distributed_optimizer_instances=cfg.num_distributed_optimizer_instances,
        hierarchical_context_parallel_sizes=list(cfg.hierarchical_context_parallel_sizes),
        rank_offset=cfg.rank_offset,
    )


def config_from_resolved(msg: "pb.ParallelConfig") -> ParallelConfig:
    """The :class:`ParallelConfig` of a reported ``rankmap.v1.ParallelConfig``."""
    return parallel_config(
        int(msg.world_size),
        tp=int(msg.tp),
        cp=int(msg.cp),
        ep=int(msg.ep),
        etp=int(msg.etp),
        pp=int(msg.pp),
        order=msg.order or DEFAULT_ORDER,
        num_distributed_optimizer_instances=int(msg.num_distributed_optimizer_instances) or 1,
        hierarchical_context_parallel_sizes=list(msg.hierarchical_context_parallel_sizes) or None,
        rank_offset=int(msg.rank_offset),
    )
