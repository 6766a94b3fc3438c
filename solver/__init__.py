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
    SIZE_NAMES,
    ParallelConfig,
    megatron_groups,
    parallel_config,
    rank_coordinates,
    rank_group_positions,
)
from .errors import InfeasibleError, InvalidArgumentError, RankmapError
from .builders import fat_tree_cluster
from .cluster import Cluster, cluster_from_graph
from .timemodel import layout_cost, lower_bound
from .search import candidate_orders, evaluate, solve
from .types import (
    Constraint,
    CostBreakdown,
    HostPlacement,
    Layout,
    SolveCancelled,
    SolveOptions,
    SolveResult,
    parse_constraint,
)
from .ranks import DEFAULT_ORDER, TOKENS, RankGenerator, masked_orthogonal_groups, parse_order

__all__ = [
    "Cluster",
    "Constraint",
    "CostBreakdown",
    "HostPlacement",
    "Layout",
    "SolveCancelled",
    "SolveOptions",
    "SolveResult",
    "candidate_orders",
    "cluster_from_graph",
    "evaluate",
    "fat_tree_cluster",
    "layout_cost",
    "lower_bound",
    "parse_constraint",
    "solve",
    "DEFAULT_ORDER",
    "GROUP_NAMES",
    "SIZE_NAMES",
    "TOKENS",
    "InfeasibleError",
    "InvalidArgumentError",
    "ParallelConfig",
    "RankGenerator",
    "RankmapError",
    "masked_orthogonal_groups",
    "megatron_groups",
    "parallel_config",
    "parse_order",
    "rank_coordinates",
    "rank_group_positions",
]
