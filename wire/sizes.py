"""Parallel sizes on the wire: ``rankmap.v1.ParallelSizes`` <-> :class:`~rankmap.solver.megatron.config.ParallelSizes`,
``rankmap.v1.ParallelConfig`` <-> :class:`~rankmap.solver.megatron.config.ParallelConfig`."""

from __future__ import annotations

import numpy as np

from rankmap.wire.errors import invalid
from rankmap.solver.megatron.config import PARALLEL_SIZE_KEYS, ParallelConfig, ParallelSizes
from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.megatron.ranks import DEFAULT_ORDER
from rankmap.v1 import rankmap_pb2 as pb

__all__ = ["sizes_to_proto", "sizes_from_proto", "config_from_proto", "config_to_proto", "config_from_resolved"]

def _check_size(value, name: str) -> int:
    """The client-side type check of a size (same message as ``parallel_config``)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise InvalidArgumentError(f"{name} must be a positive integer, got {value!r}", name)
    return int(value)


def sizes_to_proto(sizes: ParallelSizes | None = None, **given) -> "pb.ParallelSizes":
    """``ParallelSizes`` message with the given sizes set: ``sizes`` and/or the size keywords
    (``tp=2, pp=4``; see :meth:`ParallelSizes.from_mapping`).

    Only the type is checked here (a positive integer or an integral float); values reach
    the server as given and are validated there.

    Raises
    ------
    InvalidArgumentError
        A size that is not an integer (field: the size's name).
    TypeError
        An unknown size keyword.
    """
    sizes = ParallelSizes.from_mapping(sizes, **given)
    out = pb.ParallelSizes()
    for name, value in sizes.as_kwargs().items():
        if name == "hierarchical_context_parallel_sizes":
            out.hierarchical_context_parallel_sizes.extend(_check_size(v, name) for v in value)
        else:
            setattr(out, name, _check_size(value, name))
    return out


def sizes_from_proto(msg: "pb.ParallelSizes") -> ParallelSizes:
    """The sizes a ``ParallelSizes`` message gives (unset fields are not given)."""
    values = {k: getattr(msg, k) for k in PARALLEL_SIZE_KEYS[:-1] if msg.HasField(k)}
    return ParallelSizes(**values, hierarchical_context_parallel_sizes=list(msg.hierarchical_context_parallel_sizes))


def config_from_proto(
    sizes: "pb.ParallelSizes", order: str = DEFAULT_ORDER, default_world_size: int | None = None, rpc: str = "Solve"
) -> ParallelConfig:
    """Validate ``ParallelSizes`` (+ order) with :func:`~rankmap.solver.parallel_config`.

    ``default_world_size`` stands in for an unset ``world_size`` (None: it is required).
    Errors keep the solver's field (``tp``); :func:`error_fields` maps it to
    the proto path.
    """
    if not sizes.HasField("world_size") and default_world_size is None:
        raise invalid("world_size is required", "sizes.world_size", "world_size")
    return sizes_from_proto(sizes).to_config(order or DEFAULT_ORDER, world_size=default_world_size)


def config_to_proto(cfg: ParallelConfig) -> "pb.ParallelConfig":
    """A validated configuration, as reported back."""
    return pb.ParallelConfig(
        **{k: getattr(cfg, k) for k in (*PARALLEL_SIZE_KEYS[:-1], "dp", "edp", "order", "rank_offset")},
        hierarchical_context_parallel_sizes=list(cfg.hierarchical_context_parallel_sizes),
    )


def config_from_resolved(msg: "pb.ParallelConfig") -> ParallelConfig:
    """The :class:`ParallelConfig` of a reported ``rankmap.v1.ParallelConfig``."""
    sizes = ParallelSizes(
        **{k: int(getattr(msg, k)) for k in PARALLEL_SIZE_KEYS[:-1]},
        hierarchical_context_parallel_sizes=list(msg.hierarchical_context_parallel_sizes),
    )
    if not sizes.num_distributed_optimizer_instances:
        sizes = sizes.replace(num_distributed_optimizer_instances=1)
    return sizes.to_config(msg.order or DEFAULT_ORDER, rank_offset=int(msg.rank_offset))
