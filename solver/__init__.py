"""rankmap's functional core: pure Python over plain domain types.

The modules, one family each:

``ranks``       Megatron's mixed-radix rank arithmetic (RankGenerator).
``catalogue``   the full ``initialize_model_parallel`` group catalogue and validation.
``errors``      the exceptions raised on bad input.
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
from .ranks import DEFAULT_ORDER, TOKENS, RankGenerator, masked_orthogonal_groups, parse_order

__all__ = [
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
