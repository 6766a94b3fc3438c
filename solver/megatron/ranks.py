"""Megatron's mixed-radix rank arithmetic, vectorised with numpy.

Megatron-core numbers the global ranks of a job as a mixed-radix index over an
*order string* such as ``"tp-cp-ep-dp-pp"``: the first token is the fastest
digit (stride 1), the last the slowest.  For the default order::

    rank = tp_rank + cp_rank*tp + ep_rank*tp*cp + dp_rank*tp*cp*ep
           + pp_rank*tp*cp*ep*dp

(``megatron/core/parallel_state.py``, ``RankGenerator`` and
``generate_masked_orthogonal_rank_groups``).  A process group for the tokens X
is the set of ranks that differ only in their X coordinates; inside a group
ranks are listed with the first X token (in *order* order) fastest, and groups
are listed with the first non-X token fastest.  This module reproduces that
exactly, as integer numpy arrays instead of nested Python lists, so that the
131,072-rank catalogue takes milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ..errors import InvalidArgumentError

__all__ = [
    "TOKENS",
    "DEFAULT_ORDER",
    "parse_order",
    "masked_orthogonal_groups",
    "RankGenerator",
]

#: The tokens Megatron's RankGenerator knows, in the default order.
TOKENS: tuple[str, ...] = ("tp", "cp", "ep", "dp", "pp")

#: Megatron-core's default order (``initialize_model_parallel(order=...)``).
DEFAULT_ORDER = "tp-cp-ep-dp-pp"


def parse_order(order: str, field: str = "order") -> tuple[str, ...]:
    """Split and check an order string, case-insensitively as Megatron does.

    Parameters
    ----------
    order : str
        Tokens joined by ``-``, e.g. ``"tp-cp-ep-dp-pp"`` or ``"PP-TP-DP"``.
    field : str
        Field name used in error messages.

    Returns
    -------
    tuple of str
        The lower-case tokens in the given order (tokens the string omits are
        *not* appended here; see :class:`RankGenerator`).

    Raises
    ------
    InvalidArgumentError
        If the string is empty, or a token is empty, unknown or repeated.
        Megatron itself silently builds wrong groups for a repeated token
        (``tp-tp-dp-pp``); rankmap refuses it.
    """
    if not isinstance(order, str):
        raise InvalidArgumentError(f"{field} must be a string like 'tp-cp-ep-dp-pp', got {order!r}", field)
    if not order.strip():
        raise InvalidArgumentError(f"{field} is empty; expected tokens like 'tp-cp-ep-dp-pp'", field)
    tokens = tuple(t.lower() for t in order.split("-"))
    seen: set[str] = set()
    for t in tokens:
        if t != t.strip():
            raise InvalidArgumentError(f"{field} {order!r} has whitespace around token {t.strip()!r}", field)
        if not t:
            raise InvalidArgumentError(f"{field} {order!r} has an empty token", field)
        if t not in TOKENS:
            raise InvalidArgumentError(
                f"{field} {order!r} has unknown token {t!r}; known tokens: {', '.join(TOKENS)}", field
            )
        if t in seen:
            raise InvalidArgumentError(f"{field} {order!r} repeats token {t!r}", field)
        seen.add(t)
    return tokens


def masked_orthogonal_groups(
    shape: Sequence[int], mask: Sequence[bool], rank_offset: int = 0
) -> np.ndarray:
    """All groups of ranks that differ only in the masked coordinates.

    Vectorised equivalent of Megatron-core's
    ``generate_masked_orthogonal_rank_groups(world_size, parallel_size, mask)``.

    Parameters
    ----------
    shape : sequence of int
        The size of each dimension, fastest first (``parallel_size``).
    mask : sequence of bool
        True for the dimensions that vary inside a group.
    rank_offset : int
        Added to every rank (Megatron's ``RankGenerator(rank_offset=...)``).

    Returns
    -------
    numpy.ndarray of int64, shape (num_groups, group_size)
        ``group_size`` is the product of the masked sizes.  Row ``g`` lists the
        ranks of group ``g``; groups are numbered by the unmasked coordinates
        and members by the masked ones, the first dimension fastest in both.
    """
    shape = [int(s) for s in shape]
    n = len(shape)
    world = int(np.prod(shape, dtype=np.int64)) if n else 1
    grid = np.arange(world, dtype=np.int64).reshape(shape[::-1] if n else ())
    masked = [i for i in range(n) if mask[i]]
    unmasked = [i for i in range(n) if not mask[i]]
    # numpy axis of coordinate i is n-1-i (slowest first); row-major order over
    # the listed axes makes the last one fastest.
    perm = [n - 1 - i for i in reversed(unmasked)] + [n - 1 - i for i in reversed(masked)]
    group_size = int(np.prod([shape[i] for i in masked], dtype=np.int64)) if masked else 1
    groups = grid.transpose(perm).reshape(world // group_size, group_size)
    if rank_offset:
        groups = groups + rank_offset
    return np.ascontiguousarray(groups)


@dataclass(frozen=True)
class RankGenerator:
    """One of Megatron's rank generators: sizes laid out along an order string.

    Mirrors ``megatron.core.parallel_state.RankGenerator``: tokens with size 1
    that the order omits are appended at the end (they do not change any
    group); a token with size > 1 that the order omits is an error.

    Attributes
    ----------
    sizes : Mapping[str, int]
        ``{"tp", "cp", "ep", "dp", "pp"}`` -> size.
    tokens : tuple of str
        The full order, every token present, fastest first.
    rank_offset : int
        Added to every rank.
    """

    sizes: Mapping[str, int]
    tokens: tuple[str, ...]
    rank_offset: int = 0

    @classmethod
    def from_order(
        cls, sizes: Mapping[str, int], order: str | Sequence[str], rank_offset: int = 0
    ) -> "RankGenerator":
        """Build a generator, completing ``order`` with the size-1 tokens it omits.

        Raises
        ------
        InvalidArgumentError
            If the order is malformed (see :func:`parse_order`) or omits a token
            whose size is > 1 (Megatron: "The size of (X) is (N), but you
            haven't specified the order").
        """
        tokens = parse_order(order) if isinstance(order, str) else tuple(order)
        text = order if isinstance(order, str) else "-".join(order)
        full = list(tokens)
        for name in TOKENS:
            if name not in tokens:
                if int(sizes[name]) != 1:
                    raise InvalidArgumentError(
                        f"order {text!r} omits {name!r} but {name} = {int(sizes[name])}; "
                        f"every size > 1 must appear in the order",
                        "order",
                    )
                full.append(name)
        return cls({k: int(sizes[k]) for k in TOKENS}, tuple(full), int(rank_offset))

    @property
    def shape(self) -> tuple[int, ...]:
        """Sizes along :attr:`tokens`, fastest first."""
        return tuple(self.sizes[t] for t in self.tokens)

    @property
    def world_size(self) -> int:
        """Product of all sizes."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def strides(self) -> dict[str, int]:
        """Stride of each token in the global rank (``1`` for the first token)."""
        out, acc = {}, 1
        for t in self.tokens:
            out[t] = acc
            acc *= self.sizes[t]
        return out

    def mask(self, token: str) -> list[bool]:
        """Megatron's ``get_mask``: True for the dimensions named in ``token``."""
        wanted = token.split("-")
        return [t in wanted for t in self.tokens]

    def get_ranks(self, token: str) -> np.ndarray:
        """Groups for ``token`` (e.g. ``"tp"``, ``"dp-cp"``), shape (groups, size).

        Equivalent to Megatron's ``RankGenerator.get_ranks(token)``; member order
        follows the generator's order, not the spelling of ``token``.
        """
        return masked_orthogonal_groups(self.shape, self.mask(token), self.rank_offset)

    def coordinates(self, ranks: np.ndarray | int) -> dict[str, np.ndarray]:
        """The ``tp/cp/ep/dp/pp`` coordinates of global rank(s).

        Parameters
        ----------
        ranks : int or array of int
            Global ranks (including :attr:`rank_offset`).

        Returns
        -------
        dict
            Token -> coordinate array with the shape of ``ranks``.
        """
        r = np.asarray(ranks, dtype=np.int64) - self.rank_offset
        strides = self.strides
        return {t: (r // strides[t]) % self.sizes[t] for t in TOKENS}
