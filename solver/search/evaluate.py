"""The predicted communication time of a given layout (DESIGN §4): ``rankmap evaluate``."""

from __future__ import annotations

from typing import Mapping, Sequence

import networkx as nx
import numpy as np

from ..cost.timemodel import layout_cost
from ..errors import InvalidArgumentError
from ..fabric.cluster import Cluster, cluster_from_graph
from ..megatron.config import ParallelConfig
from ..results import CostBreakdown
from ..types import check_exposure
from .problem import check_traffic

__all__ = ["evaluate"]


def evaluate(
    graph: nx.Graph | Cluster,
    cfg: ParallelConfig,
    assignment: Sequence[str],
    traffic: Mapping[str, float],
    exposure: Mapping[str, float] | None = None,
    nccl=None,
) -> CostBreakdown:
    """Predicted communication time of a given layout (DESIGN §4).

    ``assignment[r]`` is the GPU node id running global rank r; ``exposure``
    gives x_c per class (missing classes: 1); ``nccl`` (:class:`~rankmap.solver.fabric.rates.NcclModel`)
    how NCCL runs the collectives (default NCCL's defaults; ignored when ``graph`` is a
    :class:`Cluster`, which carries its own).

    Raises
    ------
    InvalidArgumentError
        If the assignment's length differs from the world size, names an
        unknown or non-GPU node, or uses a GPU twice; on a bad exposure.
    """
    exposure = check_exposure(exposure)
    cluster = graph if isinstance(graph, Cluster) else cluster_from_graph(graph, nccl=nccl)
    traffic = check_traffic(traffic)
    assignment = list(assignment)
    if len(assignment) != cfg.world_size:
        raise InvalidArgumentError(
            f"assignment has {len(assignment)} entries but world_size is {cfg.world_size}", "assignment"
        )
    index = {str(d): i for i, d in enumerate(cluster.devices)}
    dev = np.empty(len(assignment), dtype=np.int64)
    used: dict[int, int] = {}
    for r, a in enumerate(assignment):
        i = index.get(str(a))
        if i is None:
            raise InvalidArgumentError(f"assignment[{r}] = {a!r} is not a GPU of the cluster", f"assignment[{r}]")
        if i in used:
            raise InvalidArgumentError(
                f"assignment[{r}] = {a!r} is already used by rank {used[i]}", f"assignment[{r}]"
            )
        used[i] = r
        dev[r] = i
    return layout_cost(cluster, cfg, dev, traffic, exposure=exposure)

