"""What one request may ask of the server: sizes, bytes, batch length, search time.

Every limit has a default (documented in the README and in ``rankmap serve
--help``) and a ``rankmap serve`` flag.  A request over a limit is refused
before any work is done:

* request bytes: gRPC itself refuses the message with RESOURCE_EXHAUSTED
  (``Received message larger than max (N vs. LIMIT)``), before parsing it;
* everything else: INVALID_ARGUMENT with a ``BadRequest`` field violation naming
  the field, the value and the limit (``sizes.world_size: world_size 4194304
  exceeds this server's limit of 262144 ranks (rankmap serve --max-world-size)``).

The checks read only counts and scalars of the request message, so they cost
nothing whatever the request holds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from rankmap.wire.errors import invalid
from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.megatron.config import MAX_HIERARCHICAL_CP_LEVELS, check_hierarchical_cp_levels
from rankmap.solver.types import MAX_TIME_LIMIT_SECONDS, SolveOptions
from rankmap.wire.parse import request_extent

__all__ = [
    "Limits",
    "DEFAULT_MAX_WORLD_SIZE",
    "DEFAULT_MAX_REQUEST_BYTES",
    "DEFAULT_MAX_BATCH_LENGTH",
    "DEFAULT_MAX_TIME_LIMIT",
    "MAX_HIERARCHICAL_CP_LEVELS",
    "check_request",
    "cap_time_limit",
]

#: Ranks (GPUs) of one request: 2x the largest benchmarked solve (131,072 GPUs,
#: 18 s / 708 MiB); a GetGroups answer of that size is ~15 MB.
DEFAULT_MAX_WORLD_SIZE = 262_144
#: Serialized request bytes (a 131,072-GPU cluster is ~10 MB).
DEFAULT_MAX_REQUEST_BYTES = 64 << 20
#: Requests in one BatchSolve stream.
DEFAULT_MAX_BATCH_LENGTH = 1024
#: Largest ``time_limit_seconds`` a client may ask for (the CLI's default is 30 s).
DEFAULT_MAX_TIME_LIMIT = 600.0


@dataclass(frozen=True)
class Limits:
    """The per-request limits of one server (see the module docstring)."""

    max_world_size: int = DEFAULT_MAX_WORLD_SIZE
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_batch_length: int = DEFAULT_MAX_BATCH_LENGTH
    max_time_limit: float = DEFAULT_MAX_TIME_LIMIT

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value != value:
                raise ValueError(f"{f.name} must be a positive number, got {value!r}")
        if self.max_time_limit > MAX_TIME_LIMIT_SECONDS:
            raise ValueError(f"max_time_limit {self.max_time_limit:g} exceeds the solver's limit of "
                             f"{MAX_TIME_LIMIT_SECONDS:g} s (MAX_TIME_LIMIT_SECONDS)")


def _over(value, limit, what: str, path: str, argument: str, flag: str) -> None:
    if value > limit:
        raise invalid(
            f"{argument} {value:g} exceeds this server's limit of {limit:g} {what} (rankmap serve {flag})"
            if isinstance(value, float)
            else f"{argument} {value} exceeds this server's limit of {limit} {what} (rankmap serve {flag})",
            path,
            argument,
        )


def check_request(request, limits: Limits) -> None:
    """Refuse a Solve / Evaluate / GetGroups / BatchSolve request over ``limits``
    (what it asks for read by :func:`rankmap.wire.request_extent`).

    Raises
    ------
    InvalidArgumentError
        Naming the field (proto path), the value and the limit.  Request bytes
        are checked by gRPC before this is called.
    """
    ext = request_extent(request)
    if ext.batch_length is not None:
        _over(ext.batch_length, limits.max_batch_length, "requests", "requests", "requests", "--max-batch-length")
        return  # each item is checked when it is solved (its error is that item's answer)
    if ext.world_size is not None:
        _over(ext.world_size, limits.max_world_size, "ranks", "sizes.world_size", "world_size", "--max-world-size")
    if ext.hierarchical_cp_levels > MAX_HIERARCHICAL_CP_LEVELS:
        try:
            check_hierarchical_cp_levels(ext.hierarchical_cp_levels)
        except InvalidArgumentError as exc:
            raise invalid(exc.message, "sizes.hierarchical_context_parallel_sizes",
                          "hierarchical_context_parallel_sizes") from None
    if ext.devices is not None:
        _over(ext.devices, limits.max_world_size, "GPUs", "cluster.devices", "cluster.nodes", "--max-world-size")
    if ext.assignment is not None:
        _over(ext.assignment, limits.max_world_size, "ranks", "assignment", "assignment", "--max-world-size")
    t = ext.time_limit_seconds
    if t is not None and t == t and t > limits.max_time_limit:  # NaN is the solver's to reject
        _over(float(t), float(limits.max_time_limit), "seconds", "time_limit_seconds", "time_limit_seconds",
              "--max-time-limit")


def cap_time_limit(options: SolveOptions, explicit: bool, limits: Limits) -> SolveOptions:
    """``options`` with the default search time cut to the server's cap (an explicit one was checked)."""
    if not explicit and options.time_limit_seconds > limits.max_time_limit:
        return dataclasses.replace(options, time_limit_seconds=float(limits.max_time_limit))
    return options
