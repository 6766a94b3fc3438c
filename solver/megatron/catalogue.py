"""The complete process-group catalogue of Megatron-core's ``initialize_model_parallel``.

Source: ``megatron/core/parallel_state.py`` (megatron-core on PyPI), function
``initialize_model_parallel``.  Megatron builds two :class:`~rankmap.solver.megatron.ranks.RankGenerator`
objects on one order string:

=========  =====  ====  ====  ========================  ====
generator  tp     cp    ep    dp                        pp
=========  =====  ====  ====  ========================  ====
decoder    tp     cp    1     dp  = W / (tp*cp*pp)      pp
expert     etp    1     ep    edp = W / (etp*ep*pp)     pp
=========  =====  ====  ====  ========================  ====

and creates the groups below, in this order, named by their ``group_desc``.
:func:`megatron_groups` returns them in the same order, as numpy arrays of
shape (number of groups, group size).  The differential test in
``tests/test_oracle.py`` checks every group against megatron-core itself.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from ..errors import InvalidArgumentError
from .config import ParallelConfig
from .ranks import masked_orthogonal_groups

__all__ = ["GROUP_NAMES", "megatron_groups", "rank_coordinates", "rank_group_positions"]

#: Group families in Megatron's creation order (hierarchical ones are inserted
#: where Megatron creates them).
GROUP_NAMES: tuple[str, ...] = (
    "DATA_PARALLEL_GROUP_WITH_CP",
    "INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP",
    "DATA_PARALLEL_GROUP",
    "CONTEXT_PARALLEL_GROUP",
    "HIERARCHICAL_CONTEXT_PARALLEL_GROUP_L*",
    "MODEL_PARALLEL_GROUP",
    "TENSOR_MODEL_PARALLEL_GROUP",
    "PIPELINE_MODEL_PARALLEL_GROUP",
    "EMBEDDING_GROUP",
    "POSITION_EMBEDDING_GROUP",
    "TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP",
    "TENSOR_AND_DATA_PARALLEL_GROUP",
    "TENSOR_AND_CONTEXT_PARALLEL_GROUP",
    "EXPERT_MODEL_PARALLEL_GROUP",
    "EXPERT_TENSOR_PARALLEL_GROUP",
    "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP",
    "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP",
    "EXPERT_DATA_PARALLEL_GROUP",
    "HIERARCHICAL_EXPERT_DATA_PARALLEL_GROUP_L0",
    "HIERARCHICAL_EXPERT_DATA_PARALLEL_GROUP_L1",
    "INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP",
)

def _hierarchical_split(groups: np.ndarray, level_sizes: Sequence[int]) -> list[np.ndarray]:
    """Split every row of ``groups`` into hierarchical sub-groups, one array per level.

    Megatron's ``create_hierarchical_groups``: level ``l`` groups the members whose
    positions inside the parent group differ only in the ``l``-th digit of the
    mixed-radix index with radices ``level_sizes`` (first fastest).  Returns one
    array per level of shape (parent groups * sub-groups per parent, level size).
    """
    out = []
    for level in range(len(level_sizes)):
        local = masked_orthogonal_groups(level_sizes, [i == level for i in range(len(level_sizes))])
        sub = groups[:, local]  # (parents, subgroups, size)
        out.append(sub.reshape(-1, local.shape[1]))
    return out


def megatron_groups(cfg: ParallelConfig) -> dict[str, np.ndarray]:
    """Every process group ``initialize_model_parallel`` creates, by group name.

    Parameters
    ----------
    cfg : ParallelConfig

    Returns
    -------
    dict of str -> numpy.ndarray of int64
        Keys in Megatron's creation order (see :data:`GROUP_NAMES`; the
        hierarchical and intra-partial families appear only when used).  Each
        value has shape (number of groups, group size) and lists the groups in
        the order Megatron creates them.

    Notes
    -----
    Embedding groups use Megatron's defaults: first and last rank of each
    pipeline group (just the first when pp == 1); position embedding: the first.
    """
    dec = cfg.decoder()
    exp = cfg.expert()
    inst = cfg.num_distributed_optimizer_instances
    out: dict[str, np.ndarray] = {}

    dp_cp = dec.get_ranks("dp-cp")
    out["DATA_PARALLEL_GROUP_WITH_CP"] = dp_cp
    if inst > 1:
        width = dp_cp.shape[1] // inst
        out["INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP"] = dp_cp.reshape(-1, width)
    out["DATA_PARALLEL_GROUP"] = dec.get_ranks("dp")
    cp_groups = dec.get_ranks("cp")
    out["CONTEXT_PARALLEL_GROUP"] = cp_groups
    if cfg.hierarchical_context_parallel_sizes:
        for level, arr in enumerate(_hierarchical_split(cp_groups, cfg.hierarchical_context_parallel_sizes)):
            out[f"HIERARCHICAL_CONTEXT_PARALLEL_GROUP_L{level}"] = arr
    out["MODEL_PARALLEL_GROUP"] = dec.get_ranks("tp-pp")
    out["TENSOR_MODEL_PARALLEL_GROUP"] = dec.get_ranks("tp")
    pp_groups = dec.get_ranks("pp")
    out["PIPELINE_MODEL_PARALLEL_GROUP"] = pp_groups
    if pp_groups.shape[1] == 1:
        out["EMBEDDING_GROUP"] = pp_groups[:, :1]
    else:
        out["EMBEDDING_GROUP"] = pp_groups[:, [0, -1]]
    out["POSITION_EMBEDDING_GROUP"] = pp_groups[:, :1]
    out["TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP"] = dec.get_ranks("tp-dp-cp")
    out["TENSOR_AND_DATA_PARALLEL_GROUP"] = dec.get_ranks("tp-dp")
    out["TENSOR_AND_CONTEXT_PARALLEL_GROUP"] = dec.get_ranks("tp-cp")
    out["EXPERT_MODEL_PARALLEL_GROUP"] = exp.get_ranks("ep")
    out["EXPERT_TENSOR_PARALLEL_GROUP"] = exp.get_ranks("tp")
    out["EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP"] = exp.get_ranks("tp-ep")
    tep = exp.get_ranks("tp-ep-pp")
    out["EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP"] = tep
    edp = exp.get_ranks("dp")
    out["EXPERT_DATA_PARALLEL_GROUP"] = edp
    if inst > 1:
        l0, l1 = _hierarchical_split(edp, [edp.shape[1] // inst, inst])
        out["HIERARCHICAL_EXPERT_DATA_PARALLEL_GROUP_L0"] = l0
        out["HIERARCHICAL_EXPERT_DATA_PARALLEL_GROUP_L1"] = l1
    # Consecutive tp-ep-pp groups joined: num_groups / instances of them per instance.
    out["INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP"] = tep.reshape(inst, -1)
    return out


def rank_coordinates(cfg: ParallelConfig, ranks: int | Iterable[int]) -> dict[str, np.ndarray]:
    """Coordinates of global rank(s) in both generators.

    Returns
    -------
    dict
        ``tp, cp, dp, pp`` (dense generator) and ``etp, ep, edp`` (expert
        generator) -> coordinate arrays shaped like ``ranks``.

    Raises
    ------
    InvalidArgumentError
        If a rank is outside ``[rank_offset, rank_offset + world_size)``.
    """
    r = np.asarray(ranks, dtype=np.int64)
    lo, hi = cfg.rank_offset, cfg.rank_offset + cfg.world_size
    if r.size and (r.min() < lo or r.max() >= hi):
        bad = r[(r < lo) | (r >= hi)].flat[0]
        raise InvalidArgumentError(f"rank {int(bad)} is outside [{lo}, {hi})", "rank")
    d = cfg.decoder().coordinates(r)
    e = cfg.expert().coordinates(r)
    return {"tp": d["tp"], "cp": d["cp"], "dp": d["dp"], "pp": d["pp"], "etp": e["tp"], "ep": e["ep"], "edp": e["dp"]}


def rank_group_positions(groups: dict[str, np.ndarray], rank: int) -> dict[str, tuple[int, int]]:
    """For one global rank, its (group index, local rank) in every group family.

    Parameters
    ----------
    groups : dict
        Output of :func:`megatron_groups`.
    rank : int
        A global rank.

    Returns
    -------
    dict of str -> (int, int)
        Family name -> (index of the group holding ``rank``, position of
        ``rank`` inside it, i.e. its local rank in that group).  Families whose
        groups do not contain the rank (embedding groups of middle stages) are
        omitted.
    """
    out = {}
    for name, arr in groups.items():
        hit = np.flatnonzero(arr.ravel() == rank)
        if hit.size:
            g, pos = divmod(int(hit[0]), arr.shape[1])
            out[name] = (g, pos)
    return out
