"""Megatron rank orders to search (DESIGN §5): policies, equivalence, priorities."""

from __future__ import annotations

import itertools
from typing import Sequence

from .config import ParallelConfig
from ..errors import InvalidArgumentError
from .ranks import DEFAULT_ORDER, TOKENS

__all__ = ["MEGATRON_CLI_ORDERS", "candidate_orders", "order_priority", "same_groups_as"]

#: The two orders stock Megatron-LM reaches (``--use-tp-pp-dp-mapping`` selects the second).
MEGATRON_CLI_ORDERS = (DEFAULT_ORDER, "tp-cp-ep-pp-dp")
_REL_TOL = 1e-9


def _equivalence_key(cfg: ParallelConfig) -> tuple:
    dec, exp = cfg.decoder(), cfg.expert()
    return (
        tuple(t for t in dec.tokens if dec.sizes[t] > 1),
        tuple(t for t in exp.tokens if exp.sizes[t] > 1),
    )


def candidate_orders(cfg: ParallelConfig, policy: str | Sequence[str]) -> list[ParallelConfig]:
    """The distinct configurations to search for an order policy.

    Parameters
    ----------
    cfg : ParallelConfig
        Sizes (its own order is ignored).
    policy : str or sequence of str
        ``"default"``, ``"megatron-cli"``, ``"all"``, a comma-separated list or a
        sequence of orders.

    Returns
    -------
    list of ParallelConfig
        In priority order (default first, then ``tp-cp-ep-pp-dp``, then the
        rest); orders giving identical groups appear once.

    Raises
    ------
    InvalidArgumentError
        If an explicitly listed order is malformed or rejected for these sizes.
    """
    explicit = False
    if isinstance(policy, str):
        p = policy.strip().lower()
        if p == "default":
            names = [DEFAULT_ORDER]
        elif p == "megatron-cli":
            names = list(MEGATRON_CLI_ORDERS)
        elif p == "all":
            names = list(MEGATRON_CLI_ORDERS) + ["-".join(t) for t in itertools.permutations(TOKENS)]
        else:
            names = [o.strip() for o in policy.split(",")]
            explicit = True
    else:
        names = list(policy)
        explicit = True
    if not names or any(not n for n in names):
        raise InvalidArgumentError(f"orders {policy!r} lists an empty order", "orders")
    out: list[ParallelConfig] = []
    seen = set()
    for name in names:
        try:
            c = cfg.with_order(name)
        except InvalidArgumentError as exc:
            if explicit:
                raise InvalidArgumentError(f"order {name!r} in orders: {exc.message}", "orders") from None
            continue
        key = _equivalence_key(c)
        if key in seen:
            continue
        seen.add(key)
        out.append(c)
    return out


def order_priority(order: str) -> int:
    return MEGATRON_CLI_ORDERS.index(order) if order in MEGATRON_CLI_ORDERS else 2




def same_groups_as(cfg: ParallelConfig, order: str) -> bool:
    """Whether ``cfg`` builds the same groups as ``order`` (False if ``order`` is invalid for its sizes)."""
    try:
        return _equivalence_key(cfg) == _equivalence_key(cfg.with_order(order))
    except InvalidArgumentError:
        return False

