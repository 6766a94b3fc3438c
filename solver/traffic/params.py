"""Parameter counts of a model and how many one rank holds (Megatron-core's layer structure)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ..errors import InvalidArgumentError
from .model import ModelSpec

__all__ = ["ParameterCount", "count_parameters", "params_per_rank", "num_micro_batches", "check_model_fits"]


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


def check_model_fits(model: ModelSpec, cfg) -> None:
    """Megatron's divisibility requirements between a model and parallel sizes."""
    tp, cp, ep, etp, pp = cfg.tp, cfg.cp, cfg.ep, cfg.etp, cfg.pp
    if model.num_layers < pp:
        raise InvalidArgumentError(
            f"pp={pp} exceeds the model's num_layers={model.num_layers} (every stage needs a layer)", "pp"
        )
    for size, attr in (("cp", "seq_length"), ("tp", "num_attention_heads"), ("tp", "num_query_groups"),
                       ("tp", "ffn_hidden_size")):
        _check_divides(model, attr, cfg, size)
    v = model.virtual_pipeline_model_parallel_size or 1
    if v > 1:
        if pp == 1:
            raise InvalidArgumentError(
                f"model.virtual_pipeline_model_parallel_size={v} needs pp > 1", "model.virtual_pipeline_model_parallel_size"
            )
        if model.num_layers % (pp * v):
            raise InvalidArgumentError(
                f"pp*virtual_pipeline_model_parallel_size={pp}*{v} does not divide the model's "
                f"num_layers={model.num_layers}", "model.virtual_pipeline_model_parallel_size",
            )
    hcp = model.hierarchical_context_parallel_sizes  # set whenever cp_comm_type is a2a+p2p (ModelSpec)
    if hcp and cp > 1 and math.prod(hcp) != cp:  # megatron-core parallel_state asserts it, any cp_comm_type
        raise InvalidArgumentError(
            f"model.hierarchical_context_parallel_sizes={list(hcp)} multiply to {math.prod(hcp)}, not cp={cp}",
            "model.hierarchical_context_parallel_sizes",
        )
    if model.is_moe and tp > 1 and ep > 1 and not model.sequence_parallel:
        raise InvalidArgumentError(
            f"Megatron-LM requires --sequence-parallel with MoE and tp={tp} > 1 (set model.sequence_parallel)",
            "model.sequence_parallel",
        )
    if model.is_moe and model.moe_token_dispatcher_type == "allgather" and etp > 1 and ep > 1:
        raise InvalidArgumentError(
            f"the allgather MoE dispatcher over etp={etp} x ep={ep} is not modelled; use alltoall or flex",
            "model.moe_token_dispatcher_type",
        )
    if model.is_moe:
        _check_divides(model, "num_experts", cfg, "ep")
        _check_divides(model, "moe_ffn_hidden_size", cfg, "etp")


def _check_divides(model: ModelSpec, attr: str, cfg, size: str) -> None:
    """Raise InvalidArgumentError (field ``size``) unless the parallel size ``cfg.<size>`` divides ``model.<attr>``."""
    n, value = getattr(cfg, size), getattr(model, attr)
    if value % n:
        raise InvalidArgumentError(f"{size}={n} does not divide the model's {attr}={value}", size)


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
