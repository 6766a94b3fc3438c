"""Free-mode layouts that fill the hosts along another axis order (grid permutations).

A launcher places rank ``r`` of an order on the ``r``-th GPU of its device order, so a
host holds a block of consecutive ranks: the order's first axes.  Megatron fixes which
orders are legal (pp last when edp ≠ dp, ep inside the expert grid), but free mode may
put any rank on any GPU, so it can fill hosts along *any* axis order: rank ``r`` with
coordinates ``x`` in the order's grid goes to GPU ``device_order[lin_π(x)]``, where
``lin_π`` is the mixed-radix index of ``x`` with the axes taken in the order ``π``
(first axis fastest).  One such layout per permutation ``π`` of the grid's axes of
size > 1.

Why (DESIGN §3, NCCL's channels): a group with several members on each of several
hosts runs one channel per rail, so a data-parallel group of 4 spread 2 + 2 over two
hosts with 8 NICs each is faster than the same group inside one host behind one PCIe
switch — the legal order ``tp-cp-dp-pp`` puts that group inside one host, the
permutation ``tp-cp-pp-dp`` spreads it (``nvpairs-2x8``, tp2 cp2 pp2: 372 → 289 ms).  A
single swap of two ranks cannot reach that layout (it breaks the 2 + 2 split on the way),
and the surrogate models weigh a cross-host ring edge at its full bytes, so these
layouts are proposed directly, scored with the real objective and handed to the descent.

The dense grid (``tp cp dp pp``, :meth:`~rankmap.solver.megatron.config.ParallelConfig.decoder`)
is permuted for every order; the expert grid (``etp ep edp pp``) too when ep > 1.  For a
configuration without experts every order gives the same layouts up to a renumbering of
the ranks, so only the first order is used.  At most ``4! = 24`` layouts per grid and order.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..megatron.config import ParallelConfig
from ..megatron.ranks import RankGenerator

__all__ = ["grid_permutation_layouts"]


def _layouts(gen: RankGenerator, device_order: np.ndarray, skip_identity: bool):
    W = gen.world_size
    ranks = np.arange(W, dtype=np.int64) + gen.rank_offset
    coords = gen.coordinates(ranks)
    axes = [t for t in gen.tokens if gen.sizes[t] > 1]
    for perm in itertools.permutations(axes):
        if skip_identity and list(perm) == axes:
            continue  # the launcher layout of the order itself
        lin = np.zeros(W, dtype=np.int64)
        stride = 1
        for t in perm:
            lin += coords[t] * stride
            stride *= gen.sizes[t]
        yield "-".join(perm), device_order[lin]


def grid_permutation_layouts(cfg: ParallelConfig, device_order: np.ndarray):
    """Free-mode layouts of ``cfg`` filling ``device_order`` along each axis permutation (module doc).

    Parameters
    ----------
    cfg : ParallelConfig
        Sizes and order (the rank numbering of the layouts).
    device_order : numpy.ndarray of int, shape (world_size,)
        The launcher's device order (rank ``r`` of a launcher layout runs on
        ``device_order[r]``).

    Yields
    ------
    (name, dev)
        ``name``: ``"dense:<axes>"`` or ``"expert:<axes>"``, the permutation, fastest
        axis first; ``dev``: numpy.ndarray of int, shape (world_size,), the device of each
        rank.  The order's own launcher layout is not repeated.

    Raises
    ------
    ValueError
        If ``device_order`` does not hold ``world_size`` devices.
    """
    device_order = np.asarray(device_order, dtype=np.int64)
    if device_order.shape != (cfg.world_size,):
        raise ValueError(f"device_order has shape {device_order.shape}, expected ({cfg.world_size},)")
    for name, dev in _layouts(cfg.decoder(), device_order, True):
        yield f"dense:{name}", dev
    if cfg.ep > 1:
        for name, dev in _layouts(cfg.expert(), device_order, True):
            yield f"expert:{name}", dev
