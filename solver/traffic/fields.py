"""The vocabulary of a model's fields (dtypes, choices, limits) and the checks of their values,
for :class:`~.model.ModelSpec`; an error names the field."""

from __future__ import annotations

import math

from ..errors import InvalidArgumentError

__all__ = ["DTYPE_BYTES", "FP8_FORMATS", "MODEL_LIMITS", "CP_COMM_TYPES", "DISPATCHERS", "RECOMPUTE_GRANULARITIES"]

# --------------------------------------------------------------------------- dtypes

#: Bytes per element of each training dtype (activations and the tp/cp/ep/pp
#: payloads).  Aliases accepted by :class:`ModelSpec` are normalised to these keys.
DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}

_DTYPE_ALIASES = {
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16",
    "fp32": "fp32", "float32": "fp32", "float": "fp32",
    "fp8": "fp8", "float8": "fp8",
}

#: Default bytes per parameter in the dp/edp parameter all-gather: Megatron's
#: distributed optimizer gathers the model parameters in ``params_dtype`` (bf16
#: or fp16 -> 2, fp32 -> 4); for fp8 we assume ``--fp8-param-gather`` (1 byte).
_DEFAULT_PARAM_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}

#: Default bytes per gradient in the dp/edp reduce-scatter.  Megatron-LM's
#: ``validate_args`` forces ``accumulate_allreduce_grads_in_fp32 = True`` for
#: bf16 ("bfloat16 requires gradient accumulation and all-reduce to be done in
#: fp32", megatron/training/arguments.py), so the DDP grad buffer is fp32 (4
#: bytes) for bf16, fp32 and fp8 (which runs on bf16 params); fp16 keeps fp16
#: grads (2) unless ``--accumulate-allreduce-grads-in-fp32`` is given.
_DEFAULT_GRAD_BYTES = {"bf16": 4, "fp16": 2, "fp32": 4, "fp8": 4}

_NORMALIZATIONS = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}
_POSITION_EMBEDDINGS = {"learned_absolute": "learned_absolute", "learned": "learned_absolute",
                        "rope": "rope", "none": "none"}


#: FP8 formats (``--fp8-format``).
FP8_FORMATS: tuple[str, ...] = ("e4m3", "hybrid")
#: ``--cp-comm-type`` values (TransformerEngine ``DotProductAttention`` with context parallelism).
CP_COMM_TYPES: tuple[str, ...] = ("p2p", "all_gather", "a2a", "a2a+p2p")
#: ``--moe-token-dispatcher-type`` values.
DISPATCHERS: tuple[str, ...] = ("allgather", "alltoall", "flex")
#: ``--recompute-granularity`` values.
RECOMPUTE_GRANULARITIES: tuple[str, ...] = ("full", "selective")

#: Upper limits on model dimensions (well above any published model), so a
#: request cannot make rankmap allocate per-layer or per-expert structures of
#: unbounded size.  Exceeding one is an error naming the field.
MODEL_LIMITS: dict[str, int] = {
    "num_layers": 10_000,
    "hidden_size": 1_048_576,
    "num_attention_heads": 65_536,
    "ffn_hidden_size": 16_777_216,
    "vocab_size": 100_000_000,
    "seq_length": 1_073_741_824,
    "micro_batch_size": 1_048_576,
    "global_batch_size": 1_073_741_824,
    "num_micro_batches": 1_073_741_824,
    "num_experts": 1_048_576,
    "moe_ffn_hidden_size": 16_777_216,
    "kv_channels": 1_048_576,
    "virtual_pipeline_model_parallel_size": 10_000,
}


def _choice(value, choices, field: str, optional: bool = False):
    if value is None and optional:
        return None
    key = value.strip().lower().replace("-", "_") if isinstance(value, str) else None
    norm = {c.replace("-", "_"): c for c in choices}
    if key not in norm:
        raise InvalidArgumentError(f"{field} {value!r} is not one of {', '.join(choices)}", field)
    return norm[key]


# --------------------------------------------------------------------------- validation helpers

def _is_int(value) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    try:  # numpy integers
        import numpy as np

        return isinstance(value, np.integer)
    except ImportError:  # pragma: no cover
        return False


def _as_int(value, field: str, minimum: int = 1) -> int:
    """An integer >= minimum (integral floats such as 4096.0 are accepted)."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if not _is_int(value):
        kind = "a positive" if minimum == 1 else ("a non-negative" if minimum == 0 else f"an integer >= {minimum},")
        raise InvalidArgumentError(f"{field} must be {kind} integer, got {value!r}", field)
    value = int(value)
    if value < minimum:
        what = "a positive integer" if minimum == 1 else (
            "a non-negative integer" if minimum == 0 else f"an integer >= {minimum}")
        raise InvalidArgumentError(f"{field} must be {what}, got {value}", field)
    return value


def _as_opt_int(value, field: str, minimum: int = 1) -> int | None:
    return None if value is None else _as_int(value, field, minimum)


def _as_bool(value, field: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{field} must be true or false, got {value!r}", field)
    return value


def _as_pos_number(value, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not _is_int(value):
        raise InvalidArgumentError(f"{field} must be a positive number, got {value!r}", field)
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise InvalidArgumentError(f"{field} must be a positive finite number, got {value!r}", field)
    return value
