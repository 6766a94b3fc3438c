"""The model and training options the payloads are derived from (Megatron-LM's arguments).

:class:`ModelSpec` names its fields after Megatron-LM's arguments and checks
each one; an error names the field as ``model.<field>``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgumentError
from ..megatron.config import check_hierarchical_cp_levels
from .fields import (_DEFAULT_GRAD_BYTES, _DEFAULT_PARAM_BYTES, _DTYPE_ALIASES, _NORMALIZATIONS, _POSITION_EMBEDDINGS,
                     CP_COMM_TYPES, DISPATCHERS, DTYPE_BYTES, FP8_FORMATS, MODEL_LIMITS, RECOMPUTE_GRANULARITIES,
                     _as_bool, _as_int, _as_opt_int, _as_pos_number, _choice)

__all__ = ["ModelSpec"]

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
    sequence_parallel : bool
        ``--sequence-parallel`` (Korthikanti et al. 2022 §4.2.2): activations
        outside attention/MLP are split over tp; tp traffic becomes all-gathers
        and reduce-scatters, pipeline and MoE tokens are divided by tp.  No
        effect when tp == 1 (Megatron turns it off).
    virtual_pipeline_model_parallel_size : int or None
        ``v`` model chunks per pipeline stage (interleaved 1F1B, Narayanan et
        al. SC'21 §2.2); ``--num-layers-per-virtual-pipeline-stage N`` gives
        ``v = L / (pp N)``.  None or 1: no interleaving.
    recompute_granularity, recompute_method, recompute_num_layers
        ``--recompute-granularity full|selective`` (None: no recompute),
        ``--recompute-method uniform|block``, ``--recompute-num-layers``.  Full
        recompute repeats each recomputed layer's forward communication in the
        backward pass; selective recomputes core attention (its cp exchange).
    cp_comm_type : str
        ``p2p`` (ring attention, Megatron's default), ``all_gather``, ``a2a``
        (Ulysses) or ``a2a+p2p`` (with ``hierarchical_context_parallel_sizes``).
    use_distributed_optimizer : bool
        ``--use-distributed-optimizer``: gradients reduce-scattered and
        parameters all-gathered over the data-parallel group; without it the
        gradients are all-reduced (Megatron's default).
    num_distributed_optimizer_instances : int
        ``--num-distributed-optimizer-instances``: the optimizer is sharded
        within each of this many slices of the data-parallel group, and the
        slices all-reduce their gradient shards.
    grad_reduce_in_bf16 : bool
        ``--grad-reduce-in-bf16``: with bf16, reduce gradients in bf16 instead
        of fp32 (Megatron's ``validate_args`` otherwise forces fp32).
    moe_token_dispatcher_type : str
        ``allgather`` (Megatron's default), ``alltoall`` or ``flex`` (DeepEP).
    moe_router_num_groups, moe_router_group_topk : int or None
        Node-limited (group-limited) routing: experts in ``G`` groups (nodes),
        each token to at most ``M`` of them (DeepSeek-V3 report §2.1.2: M = 4).
    fp8 : str or None
        ``--fp8-format e4m3|hybrid``: FP8 GEMMs (TransformerEngine).  It
        quantises the inputs that sequence-parallel tp all-gathers in the
        forward pass; every other collective stays in ``dtype``.
    fp8_param_gather : bool
        ``--fp8-param-gather``: the distributed optimizer gathers FP8 parameters (1 byte).
    moe_fp8_dispatch : bool
        MoE dispatch in FP8 and combine in ``dtype`` (DeepSeek-V3 report §3.3.1,
        DeepEP).  Not a Megatron-LM flag.
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
    sequence_parallel: bool = False
    virtual_pipeline_model_parallel_size: int | None = None
    recompute_granularity: str | None = None
    recompute_method: str = "uniform"
    recompute_num_layers: int | None = None
    cp_comm_type: str = "p2p"
    hierarchical_context_parallel_sizes: tuple[int, ...] | None = None
    use_distributed_optimizer: bool = False
    num_distributed_optimizer_instances: int = 1
    grad_reduce_in_bf16: bool = False
    moe_token_dispatcher_type: str = "allgather"
    moe_router_num_groups: int | None = None
    moe_router_group_topk: int | None = None
    fp8: str | None = None
    fp8_param_gather: bool = False
    moe_fp8_dispatch: bool = False

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
        if key == "fp8":
            # FP8 training runs bf16 parameters with FP8 GEMMs (TransformerEngine):
            # ``dtype: fp8`` is bf16 with ``fp8: hybrid`` unless fp8 is given.
            key = "bf16"
            if self.fp8 is None:
                put("fp8", "hybrid")
        put("dtype", key)
        if self.fp8 is not None:
            fmt = str(self.fp8).lower() if isinstance(self.fp8, str) else None
            if fmt not in FP8_FORMATS:
                raise InvalidArgumentError(
                    f"model.fp8 {self.fp8!r} is not one of {', '.join(FP8_FORMATS)}", f("fp8")
                )
            put("fp8", fmt)
        for attr in ("param_bytes", "grad_bytes"):
            value = getattr(self, attr)
            if value is not None:
                put(attr, _as_pos_number(value, f(attr)))

        # Megatron training options
        for attr in ("sequence_parallel", "use_distributed_optimizer", "grad_reduce_in_bf16", "fp8_param_gather",
                     "moe_fp8_dispatch"):
            _as_bool(getattr(self, attr), f(attr))
        put("virtual_pipeline_model_parallel_size",
            _as_opt_int(self.virtual_pipeline_model_parallel_size, f("virtual_pipeline_model_parallel_size")))
        put("recompute_num_layers", _as_opt_int(self.recompute_num_layers, f("recompute_num_layers")))
        put("num_distributed_optimizer_instances",
            _as_int(self.num_distributed_optimizer_instances, f("num_distributed_optimizer_instances")))
        put("moe_router_num_groups", _as_opt_int(self.moe_router_num_groups, f("moe_router_num_groups")))
        put("moe_router_group_topk", _as_opt_int(self.moe_router_group_topk, f("moe_router_group_topk")))
        put("recompute_granularity", _choice(self.recompute_granularity, RECOMPUTE_GRANULARITIES,
                                             f("recompute_granularity"), optional=True))
        put("recompute_method", _choice(self.recompute_method, ("uniform", "block"), f("recompute_method")))
        put("cp_comm_type", _choice(self.cp_comm_type, CP_COMM_TYPES, f("cp_comm_type")))
        put("moe_token_dispatcher_type", _choice(self.moe_token_dispatcher_type, DISPATCHERS,
                                                 f("moe_token_dispatcher_type")))
        hcp = self.hierarchical_context_parallel_sizes
        if hcp is not None:
            if isinstance(hcp, (str, bytes)) or not isinstance(hcp, (list, tuple)) or not hcp:
                raise InvalidArgumentError(
                    f"model.hierarchical_context_parallel_sizes must be a list of positive integers, got {hcp!r}",
                    f("hierarchical_context_parallel_sizes"),
                )
            check_hierarchical_cp_levels(len(hcp), f("hierarchical_context_parallel_sizes"))
            put("hierarchical_context_parallel_sizes",
                tuple(_as_int(x, f("hierarchical_context_parallel_sizes")) for x in hcp))
        if self.cp_comm_type == "a2a+p2p" and self.hierarchical_context_parallel_sizes is None:
            raise InvalidArgumentError(
                "model.cp_comm_type a2a+p2p needs hierarchical_context_parallel_sizes "
                "(Megatron's --hierarchical-context-parallel-sizes)", f("hierarchical_context_parallel_sizes"),
            )
        if (self.moe_router_group_topk is None) != (self.moe_router_num_groups is None):
            raise InvalidArgumentError(
                "model.moe_router_num_groups and moe_router_group_topk go together (node-limited routing)",
                f("moe_router_group_topk"),
            )
        if self.moe_router_num_groups is not None:
            if self.num_experts % self.moe_router_num_groups:
                raise InvalidArgumentError(
                    f"model.moe_router_num_groups={self.moe_router_num_groups} does not divide "
                    f"num_experts={self.num_experts}", f("moe_router_num_groups"),
                )
            if self.moe_router_group_topk > self.moe_router_num_groups:
                raise InvalidArgumentError(
                    f"model.moe_router_group_topk={self.moe_router_group_topk} exceeds "
                    f"moe_router_num_groups={self.moe_router_num_groups}", f("moe_router_group_topk"),
                )
        if self.num_distributed_optimizer_instances > 1 and not self.use_distributed_optimizer:
            raise InvalidArgumentError(
                f"model.num_distributed_optimizer_instances={self.num_distributed_optimizer_instances} needs "
                "use_distributed_optimizer", f("num_distributed_optimizer_instances"),
            )
        for attr, limit in MODEL_LIMITS.items():
            value = getattr(self, attr)
            if isinstance(value, int) and not isinstance(value, bool) and value > limit:
                raise InvalidArgumentError(
                    f"model.{attr}={value} exceeds the limit {limit}", f(attr)
                )

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
