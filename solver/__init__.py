"""rankmap's functional core: pure Python over plain domain types.

The subpackages, one concern each (imports run one way, top to bottom):

``job``       the job model: keys, defaults, job files; a job dict -> ``solve()``'s arguments.
``search``    the orchestrator (``solve``, ``evaluate``) and one module per search strategy.
``launch``    the launcher's device order (the baseline), host placements, launch files.
``bound``     lower bounds on the objective.
``cost``      the objective: predicted communication time per collective and class.
``formats``   real inputs -> cluster graph.
``types``, ``results``  a solve's options and constraints; its costs and result.
``fabric``    the cluster graph: links, routes, link loads, bandwidth domains, builders.
``traffic``   traffic classes, models, payloads, presets, Megatron arguments.
``megatron``  Megatron's rank arithmetic, group catalogue and orders.
``errors``    the exceptions raised on bad input.
"""

from .megatron.catalogue import GROUP_NAMES, megatron_groups, rank_coordinates, rank_group_positions
from .megatron.config import PARALLEL_SIZE_KEYS, SIZE_NAMES, ParallelConfig, ParallelSizes, parallel_config
from .errors import InfeasibleError, InvalidArgumentError, RankmapError
from .megatron.ranks import DEFAULT_ORDER, TOKENS, RankGenerator, masked_orthogonal_groups, parse_order

from ._lazy import lazy_exports

#: Names loaded on first use (PEP 562), so that ``rankmap groups`` and other light
#: users of the catalogue do not import OR-Tools, scipy and networkx: name -> module.
_LAZY = {
    "fat_tree_cluster": "fabric.builders",
    "Cluster": "fabric.cluster",
    "cluster_from_graph": "fabric.cluster",
    "layout_cost": "cost.timemodel",
    "NcclModel": "fabric.rates",
    "lower_bound": "bound.analytic",
    "candidate_orders": "megatron.orders",
    "evaluate": "search.evaluate",
    "solve": "search.solve",
    "Constraint": "types",
    "CostBreakdown": "results",
    "HostPlacement": "results",
    "Layout": "results",
    "SolveCancelled": "types",
    "SolveOptions": "types",
    "SolveResult": "results",
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
