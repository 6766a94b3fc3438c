"""A Megatron parallel configuration: the sizes of a job as given (:class:`ParallelSizes`), validated
into a :class:`ParallelConfig` (world size, tp, cp, ep, etp, pp, derived dp and edp, order) by
:func:`parallel_config` with Megatron-core's own rules; the groups it makes are in :mod:`.catalogue`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import InvalidArgumentError
from .ranks import DEFAULT_ORDER, TOKENS, RankGenerator, parse_order

__all__ = ["ParallelConfig", "ParallelSizes", "PARALLEL_SIZE_KEYS", "parallel_config", "SIZE_NAMES",
           "MAX_WORLD_SIZE", "MAX_HIERARCHICAL_CP_LEVELS", "check_hierarchical_cp_levels"]

#: Largest world size accepted (4,194,304 ranks; the catalogue then takes ~1 GB of int64).
MAX_WORLD_SIZE = 1 << 22

#: Most levels of ``hierarchical_context_parallel_sizes``, the one limit of the CLI, job files,
#: batch entries, the traffic model and the gRPC service (Megatron's ``a2a+p2p`` context
#: parallelism uses 2; each level is one dimension of the catalogue's arrays, which numpy caps at 64).
MAX_HIERARCHICAL_CP_LEVELS = 8


def check_hierarchical_cp_levels(levels: int, field: str = "hierarchical_context_parallel_sizes") -> None:
    """Refuse more than :data:`MAX_HIERARCHICAL_CP_LEVELS` levels of hierarchical CP.

    Raises
    ------
    InvalidArgumentError
        ``hierarchical_context_parallel_sizes has 100 levels; at most 8 are supported
        (MAX_HIERARCHICAL_CP_LEVELS)``, on ``field``.
    """
    if levels > MAX_HIERARCHICAL_CP_LEVELS:
        raise InvalidArgumentError(
            f"hierarchical_context_parallel_sizes has {levels} levels; at most {MAX_HIERARCHICAL_CP_LEVELS} are "
            "supported (MAX_HIERARCHICAL_CP_LEVELS)", field)

#: The size keys reported for a configuration (``sizes`` in the JSON output).
SIZE_NAMES: tuple[str, ...] = ("tp", "cp", "ep", "etp", "dp", "edp", "pp")


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise InvalidArgumentError(f"{name} must be a positive integer, got {value!r}", name)
    value = int(value)
    if value < 1:
        raise InvalidArgumentError(f"{name} must be a positive integer, got {value}", name)
    return value


@dataclass(frozen=True)
class ParallelConfig:
    """A validated Megatron parallel configuration.

    Build it with :func:`parallel_config`, which applies Megatron's rules.

    Attributes
    ----------
    world_size : int
        Number of ranks (GPUs).
    tp, cp, ep, etp, pp : int
        Tensor, context, expert, expert-tensor and pipeline parallel sizes.
    dp : int
        Dense data-parallel size, ``world_size / (tp*cp*pp)``.
    edp : int
        Expert data-parallel size, ``world_size / (etp*ep*pp)``.
    order : str
        The order string as given, lower-cased (e.g. ``"tp-cp-ep-dp-pp"``).
    tokens : tuple of str
        The parsed order tokens.
    num_distributed_optimizer_instances : int
    hierarchical_context_parallel_sizes : tuple of int
        Empty when hierarchical CP is not used.
    rank_offset : int
        Added to every rank of every group.
    """

    world_size: int
    tp: int
    cp: int
    ep: int
    etp: int
    pp: int
    dp: int
    edp: int
    order: str = DEFAULT_ORDER
    tokens: tuple[str, ...] = TOKENS
    num_distributed_optimizer_instances: int = 1
    hierarchical_context_parallel_sizes: tuple[int, ...] = field(default_factory=tuple)
    rank_offset: int = 0

    @property
    def sizes(self) -> dict[str, int]:
        """``{"tp", "cp", "ep", "etp", "dp", "edp", "pp"}`` -> size."""
        return {k: getattr(self, k) for k in SIZE_NAMES}

    def decoder(self) -> RankGenerator:
        """Megatron's ``decoder_rank_generator`` (dense layers)."""
        return RankGenerator.from_order(
            {"tp": self.tp, "cp": self.cp, "ep": 1, "dp": self.dp, "pp": self.pp},
            self.tokens,
            self.rank_offset,
        )

    def expert(self) -> RankGenerator:
        """Megatron's ``expert_decoder_rank_generator`` (MoE layers)."""
        return RankGenerator.from_order(
            {"tp": self.etp, "cp": 1, "ep": self.ep, "dp": self.edp, "pp": self.pp},
            self.tokens,
            self.rank_offset,
        )

    def with_order(self, order: str) -> "ParallelConfig":
        """The same sizes under another order (validated again)."""
        return ParallelSizes.of(self).to_config(order, rank_offset=self.rank_offset)


#: The parallel-size arguments of a job, as job files, requests, the CLI and the clients name them.
PARALLEL_SIZE_KEYS: tuple[str, ...] = (
    "world_size",
    "tp",
    "cp",
    "ep",
    "etp",
    "pp",
    "num_distributed_optimizer_instances",
    "hierarchical_context_parallel_sizes",
)


@dataclass(frozen=True)
class ParallelSizes:
    """The parallel sizes of a job as given, before validation; ``None`` = not given.

    The one spelling of the eight size arguments (:data:`PARALLEL_SIZE_KEYS`) that job
    files, the wire and the clients pass around.  Nothing is checked on construction (a
    client sends what it was given and the server answers with the field at fault);
    :meth:`to_config` validates with :func:`parallel_config`, whose defaults fill what
    is not given (tp, cp, ep, pp and the optimizer instances 1, etp = tp, no
    hierarchical CP).

    Attributes
    ----------
    world_size, tp, cp, ep, etp, pp, num_distributed_optimizer_instances : int or None
    hierarchical_context_parallel_sizes : tuple of int or None
        A list given is kept as a tuple; empty means not given.
    """

    world_size: int | None = None
    tp: int | None = None
    cp: int | None = None
    ep: int | None = None
    etp: int | None = None
    pp: int | None = None
    num_distributed_optimizer_instances: int | None = None
    hierarchical_context_parallel_sizes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        hcp = self.hierarchical_context_parallel_sizes
        if isinstance(hcp, (list, tuple, np.ndarray)):
            object.__setattr__(self, "hierarchical_context_parallel_sizes", tuple(hcp) or None)

    @classmethod
    def of(cls, cfg: ParallelConfig) -> "ParallelSizes":
        """The sizes of a validated configuration (all given; no hierarchical CP -> None)."""
        return cls(**{k: getattr(cfg, k) for k in PARALLEL_SIZE_KEYS})

    @classmethod
    def from_mapping(cls, sizes: "ParallelSizes | Mapping[str, Any] | None" = None, **given: Any) -> "ParallelSizes":
        """``sizes`` (a ``ParallelSizes`` or a mapping of size keys) with the ``given`` keyword
        sizes added; ``None`` values count as not given.

        Raises
        ------
        TypeError
            A key that is not one of :data:`PARALLEL_SIZE_KEYS` (as for an unknown keyword).
        InvalidArgumentError
            A size both in ``sizes`` and in ``given``, with different values (field: its key).
        """
        base = dict(sizes.as_kwargs() if isinstance(sizes, ParallelSizes) else (sizes or {}))
        unknown = sorted(k for k in (*base, *given) if k not in PARALLEL_SIZE_KEYS)
        if unknown:
            raise TypeError(f"unknown parallel size {unknown[0]!r} (known: {', '.join(PARALLEL_SIZE_KEYS)})")
        for key, value in given.items():
            if value is None:
                continue
            if base.get(key) is not None and base[key] != value:
                raise InvalidArgumentError(f"{key} is given twice: {base[key]!r} in sizes and {value!r}", key)
            base[key] = value
        return cls(**{k: v for k, v in base.items() if v is not None})

    def as_kwargs(self) -> dict[str, Any]:
        """The sizes given, as keyword arguments (``{"tp": 2, "pp": 4}``); not-given ones left out."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def replace(self, **changes: Any) -> "ParallelSizes":
        """A copy with some sizes changed (``None``: no longer given)."""
        return replace(self, **changes)

    def to_config(
        self, order: str = DEFAULT_ORDER, *, world_size: int | None = None, rank_offset: int = 0
    ) -> ParallelConfig:
        """Validate with :func:`parallel_config` under ``order``.

        ``world_size`` is used when the sizes give none (e.g. the cluster's usable GPU count).

        Raises
        ------
        InvalidArgumentError
            No world size at all (field ``world_size``), or whatever :func:`parallel_config`
            refuses.
        """
        ws = self.world_size if self.world_size is not None else world_size
        if ws is None:
            raise InvalidArgumentError("world_size is required", "world_size")

        def given(value, default):
            return default if value is None else value

        return parallel_config(
            ws,
            tp=given(self.tp, 1),
            cp=given(self.cp, 1),
            ep=given(self.ep, 1),
            etp=self.etp,
            pp=given(self.pp, 1),
            order=order,
            num_distributed_optimizer_instances=given(self.num_distributed_optimizer_instances, 1),
            hierarchical_context_parallel_sizes=self.hierarchical_context_parallel_sizes or None,
            rank_offset=rank_offset,
        )


def parallel_config(
    world_size: int,
    tp: int = 1,
    cp: int = 1,
    ep: int = 1,
    etp: int | None = None,
    pp: int = 1,
    order: str = DEFAULT_ORDER,
    num_distributed_optimizer_instances: int = 1,
    hierarchical_context_parallel_sizes: Sequence[int] | None = None,
    rank_offset: int = 0,
) -> ParallelConfig:
    """Validate sizes and an order the way Megatron does, and stricter.

    Parameters
    ----------
    world_size : int
        Number of ranks.
    tp, cp, ep, pp : int
        Parallel sizes (Megatron's ``tensor_model_parallel_size`` ...).
    etp : int or None
        ``expert_tensor_parallel_size``; ``None`` defaults to ``tp`` as in Megatron.
    order : str
        Order string, case-insensitive, tokens from ``tp cp ep dp pp``.
    num_distributed_optimizer_instances : int
    hierarchical_context_parallel_sizes : sequence of int or None
    rank_offset : int
        Non-negative offset added to all ranks.

    Returns
    -------
    ParallelConfig

    Raises
    ------
    InvalidArgumentError
        With a message naming the value, for: a non-positive size; a malformed
        order (empty, unknown or repeated token); a size > 1 missing from the
        order; ``tp*cp*pp`` or ``etp*ep*pp`` not dividing ``world_size`` (the
        message says when etp only fails because it defaulted to tp);
        ``dp*cp`` or ``edp`` not divisible by the optimizer instances;
        hierarchical CP sizes whose product is not ``cp``; pipeline groups that
        differ between the dense and the expert generator; a non-pp-last order
        with pp > 1 and ``edp != dp``.
    """
    world_size = _positive_int(world_size, "world_size")
    if world_size > MAX_WORLD_SIZE:
        raise InvalidArgumentError(
            f"world_size {world_size} is larger than the supported maximum {MAX_WORLD_SIZE}", "world_size"
        )
    tp = _positive_int(tp, "tp")
    cp = _positive_int(cp, "cp")
    ep = _positive_int(ep, "ep")
    pp = _positive_int(pp, "pp")
    etp_defaulted = etp is None
    etp = tp if etp is None else _positive_int(etp, "etp")
    instances = _positive_int(num_distributed_optimizer_instances, "num_distributed_optimizer_instances")
    if isinstance(rank_offset, bool) or not isinstance(rank_offset, (int, np.integer)) or rank_offset < 0:
        raise InvalidArgumentError(f"rank_offset must be a non-negative integer, got {rank_offset!r}", "rank_offset")
    tokens = parse_order(order)
    order_text = "-".join(tokens)

    model = tp * cp * pp
    if world_size % model:
        raise InvalidArgumentError(
            f"world_size {world_size} is not divisible by tp*cp*pp = {tp}*{cp}*{pp} = {model}", "world_size"
        )
    dp = world_size // model
    expert_model = etp * ep * pp
    if world_size % expert_model:
        hint = (
            f" (etp was not given and defaulted to tp = {tp}; pass etp explicitly, e.g. etp 1)"
            if etp_defaulted
            else ""
        )
        raise InvalidArgumentError(
            f"world_size {world_size} is not divisible by etp*ep*pp = {etp}*{ep}*{pp} = {expert_model}{hint}",
            "etp" if etp_defaulted else "ep",
        )
    edp = world_size // expert_model

    sizes = {"tp": tp, "cp": cp, "ep": ep, "dp": dp, "pp": pp}
    expert_sizes = {"tp": etp, "cp": 1, "ep": ep, "dp": edp, "pp": pp}
    for name in TOKENS:
        if name not in tokens and (sizes[name] != 1 or expert_sizes[name] != 1):
            size = sizes[name] if sizes[name] != 1 else expert_sizes[name]
            label = {"dp": "dp" if sizes["dp"] != 1 else "edp", "tp": "tp" if sizes["tp"] != 1 else "etp"}.get(name, name)
            raise InvalidArgumentError(
                f"order {order!r} omits {name!r} but {label} = {size}; every size > 1 must appear in the order",
                "order",
            )

    if (dp * cp) % instances:
        raise InvalidArgumentError(
            f"num_distributed_optimizer_instances {instances} does not divide dp*cp = {dp}*{cp} = {dp * cp}",
            "num_distributed_optimizer_instances",
        )
    if edp % instances:
        raise InvalidArgumentError(
            f"num_distributed_optimizer_instances {instances} does not divide the expert data-parallel "
            f"size edp = {edp}",
            "num_distributed_optimizer_instances",
        )
    hcp: tuple[int, ...] = ()
    if hierarchical_context_parallel_sizes:
        check_hierarchical_cp_levels(len(hierarchical_context_parallel_sizes))
        hcp = tuple(
            _positive_int(v, "hierarchical_context_parallel_sizes") for v in hierarchical_context_parallel_sizes
        )
        product = math.prod(hcp)  # Python integers: np.prod wraps around at 2**63
        if product != cp:
            raise InvalidArgumentError(
                f"hierarchical_context_parallel_sizes {','.join(map(str, hcp))} multiply to "
                f"{product}, not cp = {cp}",
                "hierarchical_context_parallel_sizes",
            )

    cfg = ParallelConfig(
        world_size=world_size,
        tp=tp,
        cp=cp,
        ep=ep,
        etp=etp,
        pp=pp,
        dp=dp,
        edp=edp,
        order=order_text,
        tokens=tokens,
        num_distributed_optimizer_instances=instances,
        hierarchical_context_parallel_sizes=hcp,
        rank_offset=int(rank_offset),
    )
    # Megatron: assert order.endswith("pp") or pp == 1 or edp == dp
    if tokens[-1] != "pp" and pp > 1 and edp != dp:
        raise InvalidArgumentError(
            f"order {order!r} does not end with pp while pp = {pp} and the expert data-parallel size "
            f"edp = {edp} differs from dp = {dp}; Megatron requires pp last in that case",
            "order",
        )
    # Megatron: the pipeline groups of the dense and expert generators must be equal.
    if pp > 1:
        dec, exp = cfg.decoder(), cfg.expert()
        if dec.strides["pp"] != exp.strides["pp"] or not np.array_equal(dec.get_ranks("pp"), exp.get_ranks("pp")):
            raise InvalidArgumentError(
                f"order {order!r} gives different pipeline groups for dense layers (pp stride "
                f"{dec.strides['pp']}) and expert layers (pp stride {exp.strides['pp']}); Megatron "
                f"requires them equal",
                "order",
            )
    return cfg
