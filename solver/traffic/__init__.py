"""Traffic classes and their payloads: bytes per rank per training step (DESIGN §3).

The package follows its own seams:

* :mod:`.classes` — the one registry of classes (name, Megatron group, default
  shape), collective kinds, :class:`Collective` parts and the :class:`Traffic`
  container, bytes sent per rank;
* :mod:`.model` — :class:`ModelSpec`, the model and Megatron training options (:mod:`.fields`:
  the vocabulary and value checks of its fields);
* :mod:`.params` — parameter counting and what one rank holds;
* :mod:`.payloads` — payload and shape of each class as Megatron sends it;
* :mod:`.explicit` — byte counts given by the user;
* :mod:`.presets` — published recipes, overrides, YAML model files;
* :mod:`.megatron_args` — Megatron-LM's own command-line arguments as input.

Everything here is pure Python; no numpy array is built except for subgroup views.
"""

from .classes import (
    CLASS_GROUP,
    CLASS_KIND,
    COLLECTIVE_KINDS,
    REGISTRY,
    TRAFFIC_CLASSES,
    Collective,
    Traffic,
    TrafficClass,
    bytes_sent_per_rank,
    class_collectives,
    class_group_size,
    collective_bytes_per_rank,
    pair_bytes_factor,
    subgroups,
)
from .explicit import format_bytes, parse_bytes, parse_traffic, traffic_from_mapping
from .megatron_args import MegatronArgs, parse_megatron_args
from .fields import CP_COMM_TYPES, DISPATCHERS, DTYPE_BYTES, FP8_FORMATS, MODEL_LIMITS
from .model import ModelSpec
from .params import ParameterCount, count_parameters, num_micro_batches, params_per_rank
from .payloads import grad_bytes, param_bytes, recompute_share, traffic_from_model, zero_traffic
from .presets import (
    DEFAULT_MODEL,
    MODEL_FIELDS,
    PRESET_ALIASES,
    PRESET_RECIPES,
    PRESETS,
    load_model_file,
    model_from_mapping,
    model_preset,
    preset_names,
    with_overrides,
)

__all__ = [
    "TRAFFIC_CLASSES", "CLASS_GROUP", "CLASS_KIND", "COLLECTIVE_KINDS", "REGISTRY", "TrafficClass",
    "Collective", "Traffic", "class_collectives", "subgroups", "collective_bytes_per_rank",
    "bytes_sent_per_rank", "DTYPE_BYTES", "FP8_FORMATS", "CP_COMM_TYPES", "DISPATCHERS", "MODEL_LIMITS",
    "pair_bytes_factor", "class_group_size", "ModelSpec", "ParameterCount", "count_parameters",
    "params_per_rank", "num_micro_batches", "traffic_from_model", "zero_traffic", "recompute_share",
    "grad_bytes", "param_bytes", "parse_bytes", "parse_traffic", "traffic_from_mapping", "format_bytes",
    "PRESETS", "PRESET_ALIASES", "PRESET_RECIPES", "DEFAULT_MODEL", "MODEL_FIELDS", "preset_names",
    "model_preset", "with_overrides", "model_from_mapping", "load_model_file", "MegatronArgs",
    "parse_megatron_args",
]
