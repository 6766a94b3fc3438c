"""rankmap's functional core: pure Python over plain domain types.

The modules, one family each:

``ranks``       Megatron's mixed-radix rank arithmetic (RankGenerator).
``catalogue``   the full ``initialize_model_parallel`` group catalogue and validation.
``errors``      the exceptions raised on bad input.
``cluster``     the cluster graph: devices, hosts, widest-path bandwidth domains.
``objective``   the cost of a layout and a lower bound.
``assign``      the CP-SAT assignment model over an ultrametric.
``search``      the search over orders and assignments (``solve``, ``evaluate``).
``types``       options and result types.
"""

from .catalogue import (
    GROUP_NAMES,
    PARALLEL_SIZE_KEYS,
    SIZE_NAMES,
    ParallelConfig,
    ParallelSizes,
    megatron_groups,
    parallel_config,
    rank_coordinates,
    rank_group_positions,
)
from .errors import InfeasibleError, InvalidArgumentError, RankmapError
from .ranks import DEFAULT_ORDER, TOKENS, RankGenerator, masked_orthogonal_groups, parse_order

from ._lazy import lazy_exports

#: Names loaded on first use (PEP 562), so that ``rankmap groups`` and other light
#: users of the catalogue do not import OR-Tools, scipy and networkx: name -> module.
_LAZY = {
    "fat_tree_cluster": "builders",
    "Cluster": "cluster",
    "cluster_from_graph": "cluster",
    "layout_cost": "timemodel",
    "lower_bound": "timemodel",
    "candidate_orders": "search",
    "evaluate": "search",
    "solve": "search",
    "Constraint": "types",
    "CostBreakdown": "types",
    "HostPlacement": "types",
    "Layout": "types",
    "SolveCancelled": "types",
    "SolveOptions": "types",
    "SolveResult": "types",
    "parse_constraint": "types",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())

__all__ = [
    *sorted(_LAZY),
    "DEFAULT_ORDER",
    "GROUP_NAMES",
    "SIZE_NAMES",
    "TOKENS",
    "InfeasibleError",
    "InvalidArgumentError",
    "ParallelConfig",
    "ParallelSizes",
    "PARALLEL_SIZE_KEYS",
    "RankGenerator",
    "RankmapError",
    "masked_orthogonal_groups",
    "megatron_groups",
    "parallel_config",
    "parse_order",
    "rank_coordinates",
    "rank_group_positions",
]
