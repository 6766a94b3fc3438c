"""Traffic classes and their payloads: bytes per rank per training step (DESIGN §3).

A *traffic class* is one kind of communication of a Megatron training step.  It
runs inside the groups of one Megatron process-group family, as one collective
kind:

=========  ==========================================  ==========
class      group (``group_desc`` in Megatron-core)      kind
=========  ==========================================  ==========
tp         TENSOR_MODEL_PARALLEL_GROUP                 all_reduce
cp         CONTEXT_PARALLEL_GROUP                      all_gather
ep         EXPERT_MODEL_PARALLEL_GROUP                 all_to_all
etp        EXPERT_TENSOR_PARALLEL_GROUP                all_reduce
dp         DATA_PARALLEL_GROUP_WITH_CP                 all_gather
edp        EXPERT_DATA_PARALLEL_GROUP                  all_gather
pp         PIPELINE_MODEL_PARALLEL_GROUP               p2p_chain
embedding  EMBEDDING_GROUP                             all_reduce
=========  ==========================================  ==========

Each class has a *payload* ``S``: the bytes of the full buffer of its
collective, per rank, per training step (one optimizer step, all micro-batches).
:func:`pair_bytes_factor` turns it into bytes between two ranks of a group.
Payloads come either explicitly (:func:`parse_traffic`,
:func:`traffic_from_mapping`) or from a model (:class:`ModelSpec`,
:func:`traffic_from_model`, :data:`PRESETS`, :func:`load_model_file`).

Everything here is pure Python; no numpy array is built.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

from .errors import InvalidArgumentError

__all__ = [
    "TRAFFIC_CLASSES",
    "CLASS_GROUP",
    "CLASS_KIND",
    "COLLECTIVE_KINDS",
    "DTYPE_BYTES",
    "pair_bytes_factor",
    "class_group_size",
    "ModelSpec",
    "ParameterCount",
    "count_parameters",
    "params_per_rank",
    "num_micro_batches",
    "traffic_from_model",
    "zero_traffic",
    "parse_bytes",
    "parse_traffic",
    "traffic_from_mapping",
    "format_bytes",
    "PRESETS",
    "PRESET_ALIASES",
    "DEFAULT_MODEL",
    "preset_names",
    "model_preset",
    "with_overrides",
    "model_from_mapping",
    "load_model_file",
]

# --------------------------------------------------------------------------- classes

#: The traffic classes, in report order.
TRAFFIC_CLASSES: tuple[str, ...] = ("tp", "cp", "ep", "etp", "dp", "edp", "pp", "embedding")

#: Class -> the Megatron process-group family (``group_desc``) it runs in (DESIGN §3).
CLASS_GROUP: dict[str, str] = {
    "tp": "TENSOR_MODEL_PARALLEL_GROUP",
    "cp": "CONTEXT_PARALLEL_GROUP",
    "ep": "EXPERT_MODEL_PARALLEL_GROUP",
    "etp": "EXPERT_TENSOR_PARALLEL_GROUP",
    "dp": "DATA_PARALLEL_GROUP_WITH_CP",
    "edp": "EXPERT_DATA_PARALLEL_GROUP",
    "pp": "PIPELINE_MODEL_PARALLEL_GROUP",
    "embedding": "EMBEDDING_GROUP",
}

#: The collective kinds :func:`pair_bytes_factor` knows.
COLLECTIVE_KINDS: tuple[str, ...] = ("all_reduce", "all_gather", "all_to_all", "p2p_chain")

#: Class -> collective kind (DESIGN §3).  ``dp``/``edp`` are a reduce-scatter of
#: the gradients plus an all-gather of the parameters (Megatron's distributed
#: optimizer); both move ``S/n`` per pair, so the pair is modelled as one
#: all-gather of the combined payload.
CLASS_KIND: dict[str, str] = {
    "tp": "all_reduce",
    "cp": "all_gather",
    "ep": "all_to_all",
    "etp": "all_reduce",
    "dp": "all_gather",
    "edp": "all_gather",
    "pp": "p2p_chain",
    "embedding": "all_reduce",
}


def pair_bytes_factor(kind: str, n: int) -> float:
    """Per-pair bytes multiplier of a collective over a group of ``n`` ranks.

    For a payload ``S`` (bytes per rank: the full buffer of the collective), the
    bytes rank ``i`` sends to rank ``j`` (``i != j``, both in the group) are
    ``pair_bytes_factor(kind, n) * S``:

    ``all_reduce``  ``2/n``.  A ring all-reduce is a reduce-scatter then an
                    all-gather; each moves ``(n-1)/n * S`` out of every rank,
                    ``2(n-1)/n * S`` in all, spread evenly over the ``n-1``
                    peers: ``2S/n`` per pair.
    ``all_gather``  ``1/n``.  Every rank receives the ``n-1`` shards of size
    ``all_to_all``  ``S/n`` it lacks, one from each peer (a reduce-scatter is
                    the same volume); an all-to-all of an ``S``-byte buffer
                    sends ``S/n`` to each peer.
    ``p2p_chain``   ``1``, but *only between consecutive members* of the group
                    (positions ``p`` and ``p+1`` in group order, no wrap-around),
                    in each direction (activations forward, their gradients
                    backward).  Non-consecutive pairs exchange nothing; the
                    caller applies that rule, this factor is the consecutive
                    pairs' one.

    A group of one rank has no pairs: the factor is ``0`` for ``n == 1``.

    Parameters
    ----------
    kind : str
        One of :data:`COLLECTIVE_KINDS`.
    n : int
        Group size, >= 1.

    Returns
    -------
    float

    Raises
    ------
    InvalidArgumentError
        For an unknown kind or a group size below 1.
    """
    if kind not in COLLECTIVE_KINDS:
        raise InvalidArgumentError(
            f"unknown collective kind {kind!r}; known: {', '.join(COLLECTIVE_KINDS)}", "kind"
        )
    if not _is_int(n) or n < 1:
        raise InvalidArgumentError(f"group size must be a positive integer, got {n!r}", "n")
    n = int(n)
    if n == 1:
        return 0.0
    if kind == "all_reduce":
        return 2.0 / n
    if kind in ("all_gather", "all_to_all"):
        return 1.0 / n
    return 1.0  # p2p_chain, consecutive members only


def class_group_size(cls: str, cfg) -> int:
    """Size of one group of the family a class runs in, for a ParallelConfig.

    tp -> tp; cp -> cp; ep -> ep; etp -> etp; dp -> dp*cp (the group is
    DATA_PARALLEL_GROUP_WITH_CP); edp -> edp; pp -> pp; embedding -> 2 when
    pp > 1 (first and last stage), else 1.
    """
    if cls not in CLASS_GROUP:
        raise InvalidArgumentError(
            f"unknown traffic class {cls!r}; known: {', '.join(TRAFFIC_CLASSES)}", "traffic"
        )
    if cls == "dp":
        return cfg.dp * cfg.cp
    if cls == "embedding":
        return 2 if cfg.pp > 1 else 1
    return int(getattr(cfg, cls))


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


# --------------------------------------------------------------------------- model

@dataclass(frozen=True)
class ModelSpec:
    """A transformer language model and its training batch, Megatron-LM style.

    Field names follow Megatron-LM's arguments.  Sizes that default to another
    field (``num_query_groups``, ``ffn_hidden_size``, ``kv_channels``,
    ``moe_ffn_hidden_size``) are resolved at construction; dtype-dependent byte
    counts and ``max_position_embeddings`` are resolved lazily (properties
    :attr:`element_bytes`, :attr:`param_element_bytes`,
    :attr:`grad_element_bytes`, :attr:`max_positions`) so that overriding
    ``dtype`` or ``seq_length`` carries through.  Every field is validated; an
    error names the field as ``model.<field>``.

    Attributes
    ----------
    name : str
        Label (preset name, or ``"custom"``).
    num_layers : int
        Transformer layers ``L``.
    hidden_size : int
        ``h``.
    num_attention_heads : int
        ``a``.
    num_query_groups : int
        ``k`` (GQA key/value heads); default ``a`` (multi-head attention).
        Must divide ``a``.
    ffn_hidden_size : int
        ``f``, the dense MLP's inner size; default ``4h``.
    vocab_size : int
        ``V``, taken as given (pass Megatron's padded vocabulary for its exact
        padding: a multiple of ``make_vocab_size_divisible_by * tp``).
    seq_length : int
        ``s``.
    micro_batch_size : int
        ``b``, default 1.
    global_batch_size : int or None
        Sequences per optimizer step; with it, ``m = gbs / (b * dp)``.
    num_micro_batches : int or None
        ``m`` per pipeline per step.  When neither this nor
        ``global_batch_size`` is given, ``m = 1`` (Megatron's default
        ``global_batch_size = b * dp``).  When both are, they must agree.
    num_experts : int
        ``E`` routed experts; 0 = dense model.
    moe_router_topk : int
        ``K`` experts per token (ignored for dense models), default 2.
    moe_ffn_hidden_size : int
        Inner size of one routed expert; default ``f``.
    moe_shared_expert_intermediate_size : int
        Total inner size of the shared expert(s) of each MoE layer (Megatron's
        argument of the same name); 0 = none.
    moe_layer_freq : int or tuple of int
        Megatron semantics: an int ``N`` makes layer ``i`` (0-based) MoE iff
        ``i % N == 0``; a tuple of 0/1 of length ``L`` is the pattern itself.
    num_moe_layers : int or None
        Alternative to ``moe_layer_freq``: the *last* ``n`` layers are MoE and the
        first ``L - n`` dense (DeepSeek's ``first_k_dense_replace = L - n``).
    dtype : str
        ``"bf16"``, ``"fp16"``, ``"fp32"`` or ``"fp8"`` (aliases such as
        ``"bfloat16"`` accepted): bytes per activation element (2, 2, 4, 1).
    param_bytes, grad_bytes : float or None
        Bytes per parameter in the dp/edp parameter all-gather and gradient
        reduce-scatter.  Defaults by dtype: params bf16/fp16 2, fp32 4, fp8 1
        (``--fp8-param-gather``); grads 4 except fp16 2 — Megatron forces fp32
        gradient accumulation and reduction for bf16 (``validate_args``:
        "bfloat16 requires gradient accumulation and all-reduce to be done in
        fp32").
    untie_embeddings : bool
        Megatron's ``untie_embeddings_and_output_weights``: a separate output
        layer (``V*h`` more parameters, and no EMBEDDING_GROUP all-reduce).
    swiglu : bool
        Gated linear unit MLP: 3 weight matrices instead of 2.
    normalization : str
        ``"LayerNorm"`` (weight + bias, ``2h``) or ``"RMSNorm"`` (``h``).
    add_bias_linear : bool
        Biases on every linear layer (Megatron default True; False for Llama,
        Mixtral, DeepSeek).
    add_qkv_bias : bool
        Bias on the QKV projection only (used when ``add_bias_linear`` is False).
    position_embedding : str
        ``"learned_absolute"`` (GPT: ``max_positions * h`` parameters),
        ``"rope"`` or ``"none"`` (no parameters).
    max_position_embeddings : int or None
        Size of a learned position table; default ``seq_length``.
    kv_channels : int
        Head dimension ``d``; default ``h / a`` (then ``a`` must divide ``h``).
    multi_latent_attention : bool
        DeepSeek's MLA instead of standard attention (Megatron's
        ``MLATransformerConfig``), with ``q_lora_rank`` (None = no query
        compression), ``kv_lora_rank``, ``qk_head_dim`` (the no-RoPE part),
        ``qk_pos_emb_head_dim`` (the RoPE part) and ``v_head_dim``; defaults are
        Megatron's (512, 512, 128, 64, 128).
    """

    name: str = "custom"
    num_layers: int = 24
    hidden_size: int = 4096
    num_attention_heads: int = 32
    num_query_groups: int | None = None
    ffn_hidden_size: int | None = None
    vocab_size: int = 50304
    seq_length: int = 2048
    micro_batch_size: int = 1
    global_batch_size: int | None = None
    num_micro_batches: int | None = None
    num_experts: int = 0
    moe_router_topk: int = 2
    moe_ffn_hidden_size: int | None = None
    moe_shared_expert_intermediate_size: int = 0
    moe_layer_freq: int | tuple[int, ...] = 1
    num_moe_layers: int | None = None
    dtype: str = "bf16"
    param_bytes: float | None = None
    grad_bytes: float | None = None
    untie_embeddings: bool = False
    swiglu: bool = False
    normalization: str = "LayerNorm"
    add_bias_linear: bool = True
    add_qkv_bias: bool = False
    position_embedding: str = "learned_absolute"
    max_position_embeddings: int | None = None
    kv_channels: int | None = None
    multi_latent_attention: bool = False
    q_lora_rank: int | None = 512
    kv_lora_rank: int = 512
    qk_head_dim: int = 128
    qk_pos_emb_head_dim: int = 64
    v_head_dim: int = 128

    def __post_init__(self) -> None:  # noqa: C901 - one check per field
        def put(attr, value):
            object.__setattr__(self, attr, value)

        def f(attr):
            return f"model.{attr}"

        if not isinstance(self.name, str) or not self.name.strip():
            raise InvalidArgumentError(f"model.name must be a non-empty string, got {self.name!r}", "model.name")
        for attr in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size", "seq_length",
                     "micro_batch_size", "kv_lora_rank", "qk_head_dim", "v_head_dim"):
            put(attr, _as_int(getattr(self, attr), f(attr)))
        put("qk_pos_emb_head_dim", _as_int(self.qk_pos_emb_head_dim, f("qk_pos_emb_head_dim"), 0))
        for attr in ("num_query_groups", "ffn_hidden_size", "global_batch_size", "num_micro_batches",
                     "moe_ffn_hidden_size", "max_position_embeddings", "kv_channels", "q_lora_rank"):
            put(attr, _as_opt_int(getattr(self, attr), f(attr)))
        put("num_experts", _as_int(self.num_experts, f("num_experts"), 0))
        put("moe_router_topk", _as_int(self.moe_router_topk, f("moe_router_topk")))
        put("moe_shared_expert_intermediate_size",
            _as_int(self.moe_shared_expert_intermediate_size, f("moe_shared_expert_intermediate_size"), 0))
        put("num_moe_layers", _as_opt_int(self.num_moe_layers, f("num_moe_layers"), 0))
        for attr in ("untie_embeddings", "swiglu", "add_bias_linear", "add_qkv_bias", "multi_latent_attention"):
            _as_bool(getattr(self, attr), f(attr))

        L, h, a = self.num_layers, self.hidden_size, self.num_attention_heads
        # attention shape
        if self.num_query_groups is None:
            put("num_query_groups", a)
        if a % self.num_query_groups:
            raise InvalidArgumentError(
                f"model.num_query_groups={self.num_query_groups} does not divide num_attention_heads={a}",
                f("num_query_groups"),
            )
        if self.kv_channels is None:
            if h % a:
                raise InvalidArgumentError(
                    f"model.hidden_size={h} is not divisible by num_attention_heads={a}; set kv_channels",
                    f("hidden_size"),
                )
            put("kv_channels", h // a)
        if self.ffn_hidden_size is None:
            put("ffn_hidden_size", 4 * h)
        if self.moe_ffn_hidden_size is None:
            put("moe_ffn_hidden_size", self.ffn_hidden_size)

        # batch
        if self.global_batch_size is not None and self.global_batch_size % self.micro_batch_size:
            raise InvalidArgumentError(
                f"model.global_batch_size={self.global_batch_size} is not divisible by "
                f"micro_batch_size={self.micro_batch_size}",
                f("global_batch_size"),
            )

        # MoE layout
        freq = self.moe_layer_freq
        if isinstance(freq, (list, tuple)):
            pattern = []
            for i, x in enumerate(freq):
                if isinstance(x, bool) or x not in (0, 1):
                    raise InvalidArgumentError(
                        f"model.moe_layer_freq[{i}] must be 0 or 1, got {x!r}", f("moe_layer_freq")
                    )
                pattern.append(int(x))
            if len(pattern) != L:
                raise InvalidArgumentError(
                    f"model.moe_layer_freq has {len(pattern)} entries, expected num_layers={L}",
                    f("moe_layer_freq"),
                )
            put("moe_layer_freq", tuple(pattern))
        else:
            put("moe_layer_freq", _as_int(freq, f("moe_layer_freq")))
        if self.num_moe_layers is not None:
            if self.moe_layer_freq != 1:
                raise InvalidArgumentError(
                    f"model.num_moe_layers={self.num_moe_layers} and moe_layer_freq={self.moe_layer_freq!r} "
                    "are alternatives; give one",
                    f("num_moe_layers"),
                )
            if self.num_moe_layers > L:
                raise InvalidArgumentError(
                    f"model.num_moe_layers={self.num_moe_layers} exceeds num_layers={L}", f("num_moe_layers")
                )
        if self.num_experts == 0:
            if self.num_moe_layers:
                raise InvalidArgumentError(
                    f"model.num_moe_layers={self.num_moe_layers} needs num_experts > 0", f("num_moe_layers")
                )
            if self.moe_shared_expert_intermediate_size:
                raise InvalidArgumentError(
                    f"model.moe_shared_expert_intermediate_size={self.moe_shared_expert_intermediate_size} "
                    "needs num_experts > 0",
                    f("moe_shared_expert_intermediate_size"),
                )
        elif self.moe_router_topk > self.num_experts:
            raise InvalidArgumentError(
                f"model.moe_router_topk={self.moe_router_topk} exceeds num_experts={self.num_experts}",
                f("moe_router_topk"),
            )

        # dtype and bytes
        dtype = self.dtype
        key = _DTYPE_ALIASES.get(dtype.lower()) if isinstance(dtype, str) else None
        if key is None:
            raise InvalidArgumentError(
                f"model.dtype {dtype!r} is not one of {', '.join(DTYPE_BYTES)}", f("dtype")
            )
        put("dtype", key)
        for attr in ("param_bytes", "grad_bytes"):
            value = getattr(self, attr)
            if value is not None:
                put(attr, _as_pos_number(value, f(attr)))

        # layer choices
        norm = _NORMALIZATIONS.get(str(self.normalization).lower()) if isinstance(self.normalization, str) else None
        if norm is None:
            raise InvalidArgumentError(
                f"model.normalization {self.normalization!r} is not LayerNorm or RMSNorm", f("normalization")
            )
        put("normalization", norm)
        pos = (_POSITION_EMBEDDINGS.get(self.position_embedding.lower())
               if isinstance(self.position_embedding, str) else None)
        if pos is None:
            raise InvalidArgumentError(
                f"model.position_embedding {self.position_embedding!r} is not learned_absolute, rope or none",
                f("position_embedding"),
            )
        put("position_embedding", pos)
        if (pos == "learned_absolute" and self.max_position_embeddings is not None
                and self.max_position_embeddings < self.seq_length):
            raise InvalidArgumentError(
                f"model.seq_length={self.seq_length} exceeds max_position_embeddings="
                f"{self.max_position_embeddings}",
                f("seq_length"),
            )

    # -- resolved values -------------------------------------------------

    @property
    def element_bytes(self) -> int:
        """Bytes per activation element (the ``bytes`` of DESIGN §3)."""
        return DTYPE_BYTES[self.dtype]

    @property
    def param_element_bytes(self) -> float:
        """Bytes per parameter in the parameter all-gather (``param_bytes`` or the dtype default)."""
        return float(self.param_bytes) if self.param_bytes is not None else float(_DEFAULT_PARAM_BYTES[self.dtype])

    @property
    def grad_element_bytes(self) -> float:
        """Bytes per gradient in the gradient reduce-scatter (``grad_bytes`` or the dtype default)."""
        return float(self.grad_bytes) if self.grad_bytes is not None else float(_DEFAULT_GRAD_BYTES[self.dtype])

    @property
    def max_positions(self) -> int:
        """Rows of a learned position table: ``max_position_embeddings`` or ``seq_length``."""
        return self.max_position_embeddings if self.max_position_embeddings is not None else self.seq_length

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def moe_layer_pattern(self) -> tuple[bool, ...]:
        """Per layer (0-based), whether it is an MoE layer."""
        L = self.num_layers
        if not self.is_moe:
            return (False,) * L
        if self.num_moe_layers is not None:
            n = self.num_moe_layers
            return (False,) * (L - n) + (True,) * n
        if isinstance(self.moe_layer_freq, tuple):
            return tuple(bool(x) for x in self.moe_layer_freq)
        return tuple(i % self.moe_layer_freq == 0 for i in range(L))

    @property
    def num_moe_layers_resolved(self) -> int:
        """``L_moe``: how many layers are MoE layers."""
        return sum(self.moe_layer_pattern())

    def to_dict(self) -> dict[str, Any]:
        """Plain fields (JSON/YAML-friendly), tuples as lists."""
        d = dataclasses.asdict(self)
        if isinstance(d["moe_layer_freq"], tuple):
            d["moe_layer_freq"] = list(d["moe_layer_freq"])
        return d


_MODEL_FIELDS: tuple[str, ...] = tuple(fl.name for fl in dataclasses.fields(ModelSpec))


# --------------------------------------------------------------------------- parameter counting

@dataclass(frozen=True)
class ParameterCount:
    """Parameter counts of a :class:`ModelSpec` (elements, not bytes).

    Attributes
    ----------
    total : int
        Every parameter, counted once (a tied embedding once).
    dense : int
        Non-expert parameters: embeddings, attention, norms, dense MLPs, and in
        MoE layers the router and the shared experts (Megatron reduces all of
        these over DATA_PARALLEL_GROUP_WITH_CP).
    expert : int
        Routed-expert parameters (reduced over EXPERT_DATA_PARALLEL_GROUP).
    active : int
        Parameters one token uses: ``dense + L_moe * K * expert_mlp``.
    embedding : int
        Word embedding, output layer when untied, learned position table.
    attention_per_layer, mlp_per_layer, expert_mlp, moe_overhead_per_layer : int
        Building blocks: one layer's attention (with its norm), a dense layer's
        MLP (with its norm), one routed expert's MLP, and an MoE layer's router
        plus shared experts plus norm.
    num_moe_layers : int
        ``L_moe``.
    """

    total: int
    dense: int
    expert: int
    active: int
    embedding: int
    attention_per_layer: int
    mlp_per_layer: int
    expert_mlp: int
    moe_overhead_per_layer: int
    num_moe_layers: int

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def _mlp_params(model: ModelSpec, inner: int) -> int:
    """One MLP of inner size ``inner``: ``(3 if swiglu else 2) * h * inner`` weights.

    With SwiGLU, Megatron's ``linear_fc1`` has ``2*inner`` outputs (gate and up
    fused) and ``linear_fc2`` ``inner`` inputs.  Biases with ``add_bias_linear``:
    fc1 ``inner`` (``2*inner`` gated) plus fc2 ``h``.
    """
    h = model.hidden_size
    n_in = 2 * inner if model.swiglu else inner
    weights = h * n_in + inner * h
    bias = (n_in + h) if model.add_bias_linear else 0
    return weights + bias


def _norm_params(model: ModelSpec, width: int) -> int:
    return 2 * width if model.normalization == "LayerNorm" else width


def _attention_params(model: ModelSpec) -> int:
    """One layer's self-attention, without its norm.

    Standard (GQA) attention, Megatron's ``SelfAttention``: ``linear_qkv`` is
    ``h x (a + 2k) d`` and ``linear_proj`` ``a d x h``; biases ``(a + 2k) d + h``
    with ``add_bias_linear`` (``(a + 2k) d`` with ``add_qkv_bias`` only).

    Multi-latent attention, Megatron's ``MLASelfAttention`` (DeepSeek-V2/V3,
    arXiv:2405.04434 §2.1): with ``r_q = q_lora_rank``, ``r_kv = kv_lora_rank``,
    ``d_n = qk_head_dim``, ``d_r = qk_pos_emb_head_dim``, ``d_v = v_head_dim``:
    ``linear_q_down_proj h x r_q`` + ``q_layernorm r_q`` + ``linear_q_up_proj
    r_q x a(d_n + d_r)`` (or ``h x a(d_n + d_r)`` without query compression),
    ``linear_kv_down_proj h x (r_kv + d_r)`` + ``kv_layernorm r_kv`` +
    ``linear_kv_up_proj r_kv x a(d_n + d_v)``, ``linear_proj a d_v x h``.
    """
    h, a, k, d = model.hidden_size, model.num_attention_heads, model.num_query_groups, model.kv_channels
    if not model.multi_latent_attention:
        weights = h * (a + 2 * k) * d + a * d * h
        if model.add_bias_linear:
            bias = (a + 2 * k) * d + h
        elif model.add_qkv_bias:
            bias = (a + 2 * k) * d
        else:
            bias = 0
        return weights + bias
    rq, rkv = model.q_lora_rank, model.kv_lora_rank
    dn, dr, dv = model.qk_head_dim, model.qk_pos_emb_head_dim, model.v_head_dim
    bias_on = model.add_bias_linear
    if rq is not None:
        q = h * rq + _norm_params(model, rq) + rq * a * (dn + dr)
        q += (rq + a * (dn + dr)) if bias_on else 0
    else:
        q = h * a * (dn + dr) + (a * (dn + dr) if bias_on else 0)
    kv = h * (rkv + dr) + _norm_params(model, rkv) + rkv * a * (dn + dv)
    kv += (rkv + dr + a * (dn + dv)) if bias_on else 0
    o = a * dv * h + (h if bias_on else 0)
    return q + kv + o


def count_parameters(model: ModelSpec) -> ParameterCount:
    """Count the parameters of a GPT / Llama / MoE (GQA, SwiGLU, MLA) model.

    Per layer, exactly as Megatron-core builds it (``TransformerLayer`` with
    ``input_layernorm``, attention, ``pre_mlp_layernorm``, MLP or MoE):

    * attention: see :func:`_attention_params` — for MHA/GQA without biases
      ``2 h^2 (1 + k/a)`` when ``d = h/a``;
    * norms: 2 per layer plus the final one, ``2h`` each for LayerNorm (weight
      and bias), ``h`` for RMSNorm;
    * dense MLP: ``2 h f`` (``3 h f`` with SwiGLU) plus biases;
    * MoE layer: router ``E h`` (no bias), ``E`` routed experts of ``2|3 h f_moe``
      and the shared experts, one MLP of inner size
      ``moe_shared_expert_intermediate_size``;
    * embeddings: ``V h`` (once if tied), ``+ V h`` output layer if untied,
      ``+ max_positions h`` for learned absolute positions.

    This is the closed form of Megatron-LM's
    ``compute_weight_and_optimizer_memory`` (megatron/training/
    theoretical_memory_usage.py: ``2 L h^2 ((1 + k/a) d a / h + (f/h) E g + 2/h
    + 1/(L h)) + V h (x2 untied)`` with ``g = 3/2`` for SwiGLU) made exact: it
    adds the biases, the position table and the router, and separates dense
    from MoE layers and shared from routed experts.  For a GPT without GQA it
    reduces to Narayanan et al. 2021 ("Efficient Large-Scale Language Model
    Training on GPU Clusters Using Megatron-LM", SC'21, §5.1):
    ``P = 12 L h^2 (1 + 13/(12 h) + (V + s)/(12 L h))``.

    Returns
    -------
    ParameterCount
    """
    h, L = model.hidden_size, model.num_layers
    norm = _norm_params(model, h)
    attention = _attention_params(model) + norm
    mlp = _mlp_params(model, model.ffn_hidden_size) + norm
    L_moe = model.num_moe_layers_resolved
    L_dense = L - L_moe
    if model.is_moe:
        expert_mlp = _mlp_params(model, model.moe_ffn_hidden_size)
        shared = (_mlp_params(model, model.moe_shared_expert_intermediate_size)
                  if model.moe_shared_expert_intermediate_size else 0)
        moe_overhead = model.num_experts * h + shared + norm
    else:
        expert_mlp = 0
        moe_overhead = 0
    embedding = model.vocab_size * h * (2 if model.untie_embeddings else 1)
    if model.position_embedding == "learned_absolute":
        embedding += model.max_positions * h
    dense = L * attention + L_dense * mlp + L_moe * moe_overhead + norm + embedding
    expert = L_moe * model.num_experts * expert_mlp
    active = dense + L_moe * model.moe_router_topk * expert_mlp
    return ParameterCount(
        total=dense + expert,
        dense=dense,
        expert=expert,
        active=active,
        embedding=embedding,
        attention_per_layer=attention,
        mlp_per_layer=mlp,
        expert_mlp=expert_mlp,
        moe_overhead_per_layer=moe_overhead,
        num_moe_layers=L_moe,
    )


def _check_model_fits(model: ModelSpec, cfg) -> None:
    """Megatron's divisibility requirements between a model and parallel sizes."""
    tp, cp, ep, etp, pp = cfg.tp, cfg.cp, cfg.ep, cfg.etp, cfg.pp
    if model.num_layers < pp:
        raise InvalidArgumentError(
            f"pp={pp} exceeds the model's num_layers={model.num_layers} (every stage needs a layer)", "pp"
        )
    if model.seq_length % cp:
        raise InvalidArgumentError(
            f"cp={cp} does not divide the model's seq_length={model.seq_length}", "cp"
        )
    if model.num_attention_heads % tp:
        raise InvalidArgumentError(
            f"tp={tp} does not divide the model's num_attention_heads={model.num_attention_heads}", "tp"
        )
    if model.num_query_groups % tp:
        raise InvalidArgumentError(
            f"tp={tp} does not divide the model's num_query_groups={model.num_query_groups}", "tp"
        )
    if model.ffn_hidden_size % tp:
        raise InvalidArgumentError(
            f"tp={tp} does not divide the model's ffn_hidden_size={model.ffn_hidden_size}", "tp"
        )
    if model.is_moe:
        if model.num_experts % ep:
            raise InvalidArgumentError(
                f"ep={ep} does not divide the model's num_experts={model.num_experts}", "ep"
            )
        if model.moe_ffn_hidden_size % etp:
            raise InvalidArgumentError(
                f"etp={etp} does not divide the model's moe_ffn_hidden_size={model.moe_ffn_hidden_size}", "etp"
            )


def params_per_rank(model: ModelSpec, cfg) -> tuple[float, float]:
    """Parameters one rank holds: ``(dense / (tp*pp), expert / (etp*ep*pp))``.

    Averages over pipeline stages (a stage with the embedding holds more).  CP
    and DP replicate, so they do not divide.
    """
    counts = count_parameters(model)
    return counts.dense / (cfg.tp * cfg.pp), counts.expert / (cfg.etp * cfg.ep * cfg.pp)


def num_micro_batches(model: ModelSpec, cfg) -> int:
    """``m``, micro-batches per pipeline per optimizer step.

    ``num_micro_batches`` when given; otherwise ``global_batch_size / (b * dp)``
    (Megatron's ``get_num_microbatches``; ``dp`` excludes cp), which must divide;
    otherwise 1.  Both given: they must agree.
    """
    b, dp = model.micro_batch_size, cfg.dp
    gbs = model.global_batch_size
    if gbs is not None:
        if gbs % (b * dp):
            raise InvalidArgumentError(
                f"model.global_batch_size={gbs} is not divisible by micro_batch_size*dp={b}*{dp}={b * dp}",
                "model.global_batch_size",
            )
        m = gbs // (b * dp)
        if model.num_micro_batches is not None and model.num_micro_batches != m:
            raise InvalidArgumentError(
                f"model.num_micro_batches={model.num_micro_batches} disagrees with global_batch_size={gbs} "
                f"/ (micro_batch_size*dp={b * dp}) = {m}",
                "model.num_micro_batches",
            )
        return m
    return model.num_micro_batches if model.num_micro_batches is not None else 1


def zero_traffic() -> dict[str, float]:
    """Every class with payload 0.0, in :data:`TRAFFIC_CLASSES` order."""
    return {c: 0.0 for c in TRAFFIC_CLASSES}


def traffic_from_model(model: ModelSpec, cfg) -> dict[str, float]:
    """Payloads (bytes per rank per training step) derived from a model (DESIGN §3).

    With ``L_s = L/pp`` layers per stage (an average when ``pp`` does not divide
    ``L``, as with an uneven first/last stage), ``L_moe_s = L_moe/pp``,
    ``m`` from :func:`num_micro_batches`, ``bytes`` = :attr:`ModelSpec.element_bytes`
    and ``act = b * (s/cp) * h * bytes`` (one micro-batch's hidden states on one
    rank):

    ``tp = 4 L_s m act``
        Megatron TP (Shoeybi et al. 2019, Korthikanti et al. 2022): per layer,
        the forward pass all-reduces the outputs of attention (``linear_proj``)
        and MLP (``linear_fc2``), the backward pass the input gradients of
        ``linear_qkv`` and ``linear_fc1``: 4 all-reduces of ``act`` each.  With
        sequence parallelism they become all-gather + reduce-scatter pairs of
        the same volume.
    ``cp = 4 L_s m b s (k/tp) d bytes``, ``d = h/a``
        Ring/all-gather context parallelism: per layer the forward pass gathers
        K and V of the whole sequence (``2 b s (k/tp) d`` elements, the local
        heads), the backward pass reduce-scatters dK and dV: ``2 x 2``.  ``d``
        is ``kv_channels`` (``h/a`` unless set otherwise).  For
        multi-latent attention the K and V that are exchanged are the
        up-projected heads, so ``2 k d`` is replaced by ``(a/tp)(qk_head_dim +
        qk_pos_emb_head_dim + v_head_dim)``; the rest of the formula is DESIGN's.
    ``ep = 4 L_moe_s m act K``
        Token dispatch and combine all-to-alls, forward and backward (4 per MoE
        layer); every token goes to ``K`` experts.
    ``etp = 2 L_moe_s m act K``
        Expert tensor parallelism: per MoE layer one all-reduce (reduce-scatter)
        of the experts' output forward and one of their input gradients
        backward, over ``K`` copies of each token.
    ``pp = m act``
        One activation tensor per micro-batch to the next stage (forward) and
        its gradient to the previous one (backward); :func:`pair_bytes_factor`
        counts ``S`` in each direction between consecutive stages.
    ``dp = (param_bytes + grad_bytes) * dense / (tp pp)``
        Megatron's distributed optimizer: a reduce-scatter of the gradients
        (``grad_bytes`` each) and an all-gather of the updated parameters
        (``param_bytes`` each) over DATA_PARALLEL_GROUP_WITH_CP, once per step,
        for the dense (non-expert) parameters this rank holds.
    ``edp = (param_bytes + grad_bytes) * expert / (etp ep pp)``
        The same over EXPERT_DATA_PARALLEL_GROUP for the routed experts' parameters.
    ``embedding = V h / tp * grad_bytes``
        The all-reduce of the word-embedding gradient between the first and the
        last stage (``_allreduce_word_embedding_grads``), only with tied
        embeddings (Megatron skips it when ``untie_embeddings``).

    A class whose group has one rank is 0: tp when tp == 1, cp when cp == 1, ep
    when ep == 1, etp when etp == 1, dp when dp*cp == 1, edp when edp == 1, pp
    and embedding when pp == 1.  ep/etp/edp are 0 for a dense model.

    Parameters
    ----------
    model : ModelSpec
    cfg : ParallelConfig
        From :func:`rankmap.solver.parallel_config`.

    Returns
    -------
    dict of str -> float
        Every class of :data:`TRAFFIC_CLASSES`, in that order.

    Raises
    ------
    InvalidArgumentError
        When the sizes do not fit the model (``pp > L``; cp not dividing ``s``;
        tp not dividing ``a``, ``k`` or ``f``; ep not dividing ``E`` or etp not
        dividing the expert ``f`` of an MoE model), or ``m`` cannot be derived.
    """
    if not isinstance(model, ModelSpec):
        raise InvalidArgumentError(f"expected a ModelSpec, got {type(model).__name__}", "model")
    _check_model_fits(model, cfg)
    tp, cp, pp = cfg.tp, cfg.cp, cfg.pp
    m = num_micro_batches(model, cfg)
    nbytes = model.element_bytes
    L_s = model.num_layers / pp
    L_moe_s = model.num_moe_layers_resolved / pp
    b, s, h, a = model.micro_batch_size, model.seq_length, model.hidden_size, model.num_attention_heads
    act = b * (s / cp) * h * nbytes

    out = zero_traffic()
    out["tp"] = 4 * L_s * m * act
    if model.multi_latent_attention:
        kv_width = (a / tp) * (model.qk_head_dim + model.qk_pos_emb_head_dim + model.v_head_dim) / 2
    else:
        kv_width = (model.num_query_groups / tp) * model.kv_channels
    out["cp"] = 4 * L_s * m * b * s * kv_width * nbytes
    if model.is_moe:
        out["ep"] = 4 * L_moe_s * m * act * model.moe_router_topk
        out["etp"] = 2 * L_moe_s * m * act * model.moe_router_topk
    out["pp"] = m * act
    dense_rank, expert_rank = params_per_rank(model, cfg)
    per_param = model.param_element_bytes + model.grad_element_bytes
    out["dp"] = per_param * dense_rank
    out["edp"] = per_param * expert_rank
    if not model.untie_embeddings:
        out["embedding"] = model.vocab_size * h / tp * model.grad_element_bytes
    for cls in TRAFFIC_CLASSES:
        if class_group_size(cls, cfg) == 1:
            out[cls] = 0.0
        else:
            out[cls] = float(out[cls])
    return out


# --------------------------------------------------------------------------- explicit payloads

_UNITS: dict[str, float] = {
    "": 1.0, "b": 1.0,
    "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12, "p": 1e15, "pb": 1e15,
    "ki": 2.0**10, "kib": 2.0**10, "mi": 2.0**20, "mib": 2.0**20, "gi": 2.0**30, "gib": 2.0**30,
    "ti": 2.0**40, "tib": 2.0**40, "pi": 2.0**50, "pib": 2.0**50,
}
_BYTES_RE = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*([A-Za-z]*)\s*$")


def parse_bytes(text, field: str = "traffic") -> float:
    """A byte count: a number or a string such as ``"4e9"``, ``"4GB"``, ``"512MiB"``.

    Units (case-insensitive, all bytes): none or ``B``; decimal ``K/KB``,
    ``M/MB``, ``G/GB``, ``T/TB``, ``P/PB`` (powers of 1000, as DESIGN's GB/s);
    binary ``KiB``, ``MiB``, ``GiB``, ``TiB``, ``PiB`` (powers of 1024).

    Raises
    ------
    InvalidArgumentError
        For anything else, a negative or a non-finite value, naming it and ``field``.
    """
    if isinstance(text, bool):
        raise InvalidArgumentError(f"{field} must be a byte count, got {text!r}", field)
    if isinstance(text, (int, float)) or _is_int(text):
        value = float(text)
    elif isinstance(text, str):
        match = _BYTES_RE.match(text)
        if not match:
            try:
                value = float(text)  # 'inf', 'nan' and friends: reported below
            except ValueError:
                raise InvalidArgumentError(
                    f"{field}: {text!r} is not a byte count (e.g. 4e9, 4GB, 512MiB)", field
                ) from None
        else:
            unit = match.group(2).lower()
            if unit not in _UNITS:
                raise InvalidArgumentError(
                    f"{field}: unknown unit {match.group(2)!r} in {text!r} (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)",
                    field,
                )
            value = float(match.group(1)) * _UNITS[unit]
    else:
        raise InvalidArgumentError(f"{field} must be a byte count, got {text!r}", field)
    if not math.isfinite(value):
        raise InvalidArgumentError(f"{field}: byte count {text!r} is not finite", field)
    if value < 0:
        raise InvalidArgumentError(f"{field}: byte count {text!r} is negative", field)
    return value


def _check_class(name, seen: set, original) -> str:
    cls = str(name).strip().lower()
    if cls not in CLASS_GROUP:
        raise InvalidArgumentError(
            f"unknown traffic class {str(name).strip()!r} in {original!r}; known: {', '.join(TRAFFIC_CLASSES)}",
            "traffic",
        )
    if cls in seen:
        raise InvalidArgumentError(f"traffic class {cls!r} given twice in {original!r}", f"traffic.{cls}")
    seen.add(cls)
    return cls


def parse_traffic(text: str) -> dict[str, float]:
    """Parse ``"tp=4e9,dp=1GB,pp=512MiB"`` into ``{class: bytes}``.

    Only the named classes are returned (in :data:`TRAFFIC_CLASSES` order), so
    the result can override a model's payloads.  Class names are
    case-insensitive; spaces around items are ignored; byte counts as in
    :func:`parse_bytes`.

    Raises
    ------
    InvalidArgumentError
        For an empty string or item, an item without ``=``, an unknown or
        repeated class, a bad, negative or non-finite byte count — naming it
        (field ``traffic`` or ``traffic.<class>``).
    """
    if not isinstance(text, str):
        raise InvalidArgumentError(f"traffic must be a string like 'tp=4e9,dp=1e9', got {text!r}", "traffic")
    if not text.strip():
        raise InvalidArgumentError("traffic is empty; expected e.g. 'tp=4e9,dp=1e9'", "traffic")
    seen: set[str] = set()
    values: dict[str, float] = {}
    for item in text.split(","):
        if not item.strip():
            raise InvalidArgumentError(f"empty item in traffic {text!r}", "traffic")
        if "=" not in item:
            raise InvalidArgumentError(
                f"traffic item {item.strip()!r} is not CLASS=BYTES (e.g. tp=4e9)", "traffic"
            )
        name, _, value = item.partition("=")
        cls = _check_class(name, seen, text)
        values[cls] = parse_bytes(value.strip(), f"traffic.{cls}")
    return {c: values[c] for c in TRAFFIC_CLASSES if c in values}


def traffic_from_mapping(d: Mapping | None) -> dict[str, float]:
    """Payloads from a mapping (e.g. a YAML ``traffic:`` section) of class -> bytes.

    Values are numbers or strings as in :func:`parse_bytes`.  ``None`` or an
    empty mapping gives ``{}``; only the named classes are returned.

    Raises
    ------
    InvalidArgumentError
        When ``d`` is not a mapping, or for an unknown class or a bad value, naming it.
    """
    if d is None:
        return {}
    if not isinstance(d, Mapping):
        raise InvalidArgumentError(
            f"traffic must be a mapping of class to bytes, got {type(d).__name__}", "traffic"
        )
    seen: set[str] = set()
    values: dict[str, float] = {}
    for name, value in d.items():
        if not isinstance(name, str):
            raise InvalidArgumentError(
                f"unknown traffic class {name!r}; known: {', '.join(TRAFFIC_CLASSES)}", "traffic"
            )
        cls = _check_class(name, seen, dict(d))
        values[cls] = parse_bytes(value, f"traffic.{cls}")
    return {c: values[c] for c in TRAFFIC_CLASSES if c in values}


def format_bytes(value: float) -> str:
    """Human-readable decimal bytes: ``3.22 GB``, ``134 MB``, ``0 B``."""
    value = float(value)
    if value == 0:
        return "0 B"
    for unit, scale in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g} B"


# --------------------------------------------------------------------------- presets

def _preset(**kw) -> ModelSpec:
    return ModelSpec(**kw)


#: Named models.  Every number has its source; ``num_micro_batches = 8`` (the
#: seed's m) is a workload choice, not a model property — override it, or give
#: ``global_batch_size``, with :func:`model_preset`.
#:
#: ``gpt-24l-4096`` (aliases ``default``, ``seed-gpt``)
#:     The seed article's example GPT: 24 layers, hidden 4096 (the article:
#:     "以一个 24 层 GPT 模型（hidden_size=4096）为例"); the rest from DESIGN §3:
#:     a 32, f 16384 (4h), V 50304 (GPT-2's 50257 padded to a multiple of 128),
#:     s 2048, b 1, m 8, bf16.  A Megatron GPT: learned absolute positions,
#:     LayerNorm, biases, GeLU MLP, tied embeddings.  5.05 B parameters.
#: ``gpt3-175b``
#:     Brown et al. 2020, "Language Models are Few-Shot Learners"
#:     (arXiv:2005.14165), Table 2.1: n_layers 96, d_model 12288, n_heads 96,
#:     d_head 128, n_ctx 2048, f = 4 d_model; GPT-2 BPE vocabulary 50257
#:     (Radford et al. 2019); learned positions, tied embeddings.  Narayanan et
#:     al. 2021 (arXiv:2104.04473) Table 1 lists it as 174.6 B (global batch 1536).
#: ``llama3-8b``
#:     https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json:
#:     num_hidden_layers 32, hidden_size 4096, num_attention_heads 32,
#:     num_key_value_heads 8, intermediate_size 14336, vocab_size 128256,
#:     max_position_embeddings 8192 (s), tie_word_embeddings false; RMSNorm,
#:     SwiGLU, RoPE, no biases.  Dubey et al. 2024, "The Llama 3 Herd of Models"
#:     (arXiv:2407.21783) Table 3.  8.03 B.
#: ``llama3-70b``
#:     https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json:
#:     80 layers, hidden 8192, 64 heads, 8 KV heads, intermediate 28672, vocab
#:     128256, s 8192.  70.6 B.
#: ``llama3-405b``
#:     https://huggingface.co/meta-llama/Llama-3.1-405B/blob/main/config.json
#:     and arXiv:2407.21783 Table 3: 126 layers, hidden 16384, 128 heads, 8 KV
#:     heads, FFN 53248, vocab 128256, pre-training sequence 8192.  405 B.
#: ``mixtral-8x7b``
#:     https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json:
#:     32 layers, hidden 4096, 32 heads, 8 KV heads, intermediate 14336,
#:     num_local_experts 8, num_experts_per_tok 2, vocab 32000, untied, every
#:     layer MoE, no biases.  Jiang et al. 2024, "Mixtral of Experts"
#:     (arXiv:2401.04088): 46.7 B total, 12.9 B active, context 32768 (s).
#: ``deepseek-v3``
#:     https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json:
#:     num_hidden_layers 61, hidden_size 7168, num_attention_heads 128
#:     (num_key_value_heads 128), intermediate_size 18432 (dense layers),
#:     moe_intermediate_size 2048, n_routed_experts 256, n_shared_experts 1,
#:     num_experts_per_tok 8, first_k_dense_replace 3 (so 58 MoE layers),
#:     vocab_size 129280, untied; MLA with q_lora_rank 1536, kv_lora_rank 512,
#:     qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128 (modelled
#:     exactly as MLA: Megatron's ``MLATransformerConfig`` names).
#:     DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" (arXiv:2412.19437):
#:     671 B total, 37 B activated, pre-training sequence 4096 (s).  The
#:     multi-token-prediction module (14 B more in the released checkpoint) is
#:     not counted, as in the 671 B.  ``kv_channels`` (= h/a = 56) only feeds the
#:     standard-attention path, unused here.
PRESETS: dict[str, ModelSpec] = {
    "gpt-24l-4096": _preset(
        name="gpt-24l-4096", num_layers=24, hidden_size=4096, num_attention_heads=32, ffn_hidden_size=16384,
        vocab_size=50304, seq_length=2048, micro_batch_size=1, num_micro_batches=8, dtype="bf16",
    ),
    "gpt3-175b": _preset(
        name="gpt3-175b", num_layers=96, hidden_size=12288, num_attention_heads=96, ffn_hidden_size=49152,
        vocab_size=50257, seq_length=2048, micro_batch_size=1, num_micro_batches=8, dtype="bf16",
    ),
    "llama3-8b": _preset(
        name="llama3-8b", num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=8,
        ffn_hidden_size=14336, vocab_size=128256, seq_length=8192, micro_batch_size=1, num_micro_batches=8,
        dtype="bf16", untie_embeddings=True, swiglu=True, normalization="RMSNorm", add_bias_linear=False,
        position_embedding="rope",
    ),
    "llama3-70b": _preset(
        name="llama3-70b", num_layers=80, hidden_size=8192, num_attention_heads=64, num_query_groups=8,
        ffn_hidden_size=28672, vocab_size=128256, seq_length=8192, micro_batch_size=1, num_micro_batches=8,
        dtype="bf16", untie_embeddings=True, swiglu=True, normalization="RMSNorm", add_bias_linear=False,
        position_embedding="rope",
    ),
    "llama3-405b": _preset(
        name="llama3-405b", num_layers=126, hidden_size=16384, num_attention_heads=128, num_query_groups=8,
        ffn_hidden_size=53248, vocab_size=128256, seq_length=8192, micro_batch_size=1, num_micro_batches=8,
        dtype="bf16", untie_embeddings=True, swiglu=True, normalization="RMSNorm", add_bias_linear=False,
        position_embedding="rope",
    ),
    "mixtral-8x7b": _preset(
        name="mixtral-8x7b", num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=8,
        ffn_hidden_size=14336, vocab_size=32000, seq_length=32768, micro_batch_size=1, num_micro_batches=8,
        num_experts=8, moe_router_topk=2, moe_ffn_hidden_size=14336,
        dtype="bf16", untie_embeddings=True, swiglu=True, normalization="RMSNorm", add_bias_linear=False,
        position_embedding="rope",
    ),
    "deepseek-v3": _preset(
        name="deepseek-v3", num_layers=61, hidden_size=7168, num_attention_heads=128, num_query_groups=128,
        ffn_hidden_size=18432, vocab_size=129280, seq_length=4096, micro_batch_size=1, num_micro_batches=8,
        num_experts=256, moe_router_topk=8, moe_ffn_hidden_size=2048, moe_shared_expert_intermediate_size=2048,
        num_moe_layers=58,
        dtype="bf16", untie_embeddings=True, swiglu=True, normalization="RMSNorm", add_bias_linear=False,
        position_embedding="rope", multi_latent_attention=True, q_lora_rank=1536, kv_lora_rank=512,
        qk_head_dim=128, qk_pos_emb_head_dim=64, v_head_dim=128,
    ),
}

#: Other names accepted by :func:`model_preset`.
PRESET_ALIASES: dict[str, str] = {"default": "gpt-24l-4096", "seed-gpt": "gpt-24l-4096"}

#: The model used when none is given (DESIGN §3).
DEFAULT_MODEL: ModelSpec = PRESETS["gpt-24l-4096"]


def preset_names() -> list[str]:
    """Preset names and aliases, for messages and ``--help``."""
    return list(PRESETS) + list(PRESET_ALIASES)


_BATCH_LINKED = ("global_batch_size", "num_micro_batches")


def with_overrides(model: ModelSpec, **overrides) -> ModelSpec:
    """A copy of ``model`` with some fields replaced (``None`` values are ignored).

    Overriding ``global_batch_size`` alone drops the model's
    ``num_micro_batches`` (m is then derived from it) and vice versa.

    Raises
    ------
    InvalidArgumentError
        For an unknown field (naming it) or an invalid value.
    """
    changes = {k: v for k, v in overrides.items() if v is not None}
    for key in changes:
        if key not in _MODEL_FIELDS:
            raise InvalidArgumentError(
                f"unknown model field {key!r}; known: {', '.join(_MODEL_FIELDS)}", f"model.{key}"
            )
    if "global_batch_size" in changes and "num_micro_batches" not in changes:
        changes["num_micro_batches"] = None
    elif "num_micro_batches" in changes and "global_batch_size" not in changes:
        changes["global_batch_size"] = None
    if not changes:
        return model
    fields = {fl.name: getattr(model, fl.name) for fl in dataclasses.fields(ModelSpec)}
    fields.update(changes)
    return ModelSpec(**fields)


def model_preset(name: str, **overrides) -> ModelSpec:
    """A preset by name (case-insensitive; aliases ``default``, ``seed-gpt``), with overrides.

    Typical overrides: ``seq_length``, ``micro_batch_size``, ``global_batch_size``,
    ``num_micro_batches``, ``dtype`` (any :class:`ModelSpec` field is
    accepted; ``None`` values are ignored, see :func:`with_overrides`).

    Raises
    ------
    InvalidArgumentError
        For an unknown name (listing the known ones, field ``model``) or override.
    """
    if not isinstance(name, str):
        raise InvalidArgumentError(f"model preset name must be a string, got {name!r}", "model")
    key = name.strip().lower()
    key = PRESET_ALIASES.get(key, key)
    if key not in PRESETS:
        raise InvalidArgumentError(
            f"unknown model preset {name!r}; known: {', '.join(preset_names())}", "model"
        )
    return with_overrides(PRESETS[key], **overrides)


# --------------------------------------------------------------------------- YAML model files

def model_from_mapping(d: Mapping, source: str = "model") -> ModelSpec:
    """A :class:`ModelSpec` from a mapping of its fields.

    Keys are :class:`ModelSpec` field names (``-`` may stand for ``_``), plus
    ``preset: NAME`` to start from a preset whose fields the other keys
    override.  A top-level ``model:`` mapping is unwrapped.

    Raises
    ------
    InvalidArgumentError
        For a non-mapping, an unknown key (naming it), or an invalid value.
    """
    if not isinstance(d, Mapping):
        raise InvalidArgumentError(
            f"{source}: expected a mapping of model fields, got {type(d).__name__}", "model"
        )
    if len(d) == 1 and "model" in d and isinstance(d["model"], Mapping):
        d = d["model"]
    fields: dict[str, Any] = {}
    preset = None
    for raw_key, value in d.items():
        key = str(raw_key).strip().replace("-", "_")
        if key == "preset":
            preset = value
            continue
        if key not in _MODEL_FIELDS:
            raise InvalidArgumentError(
                f"{source}: unknown model key {raw_key!r}; known: preset, {', '.join(_MODEL_FIELDS)}",
                f"model.{raw_key}",
            )
        if key in fields:
            raise InvalidArgumentError(f"{source}: model key {raw_key!r} given twice", f"model.{key}")
        if isinstance(value, list):
            value = tuple(value)
        fields[key] = value
    if preset is not None:
        base = model_preset(preset)
        if "name" not in fields:
            fields["name"] = base.name
        return with_overrides(base, **fields) if fields else base
    return ModelSpec(**fields)


def _yaml_loader():
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        """SafeLoader that rejects a key repeated in one mapping."""

        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    hash(key)
                except TypeError:
                    continue
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"found duplicate key {key!r}", key_node.start_mark,
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return yaml, UniqueKeyLoader


def load_model_file(path) -> ModelSpec:
    """Read a YAML (or JSON) model description.

    Example::

        preset: llama3-8b        # optional base
        seq_length: 4096
        num_micro_batches: 16

    or every field spelled out (``num_layers``, ``hidden_size``, ...).

    Raises
    ------
    InvalidArgumentError
        When the file cannot be read, is malformed YAML (message with the line
        and column), repeats a key, is not a mapping, has an unknown key (named)
        or an invalid value.  The field is ``model_file`` or ``model.<key>``.
    """
    yaml, loader = _yaml_loader()
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise InvalidArgumentError(
            f"cannot read model file {str(path)!r}: {exc.strerror or exc}", "model_file"
        ) from None
    except UnicodeDecodeError as exc:
        raise InvalidArgumentError(f"model file {str(path)!r} is not UTF-8 text: {exc.reason}", "model_file") from None
    try:
        data = yaml.load(text, Loader=loader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        raise InvalidArgumentError(f"model file {str(path)!r}{where}: {problem}", "model_file") from None
    if data is None:
        raise InvalidArgumentError(f"model file {str(path)!r} is empty", "model_file")
    return model_from_mapping(data, source=f"model file {str(path)!r}")
