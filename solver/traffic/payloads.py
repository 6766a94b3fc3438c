"""Payload and shape of every traffic class, derived from a model as Megatron sends it (DESIGN §3).

Notation (per training step, per rank): ``L_s = L/pp`` layers per stage (an
average when pp does not divide L), ``L_moe,s`` MoE layers and ``L_d,s`` dense
layers per stage, ``m`` micro-batches (:func:`~.params.num_micro_batches`),
``e`` bytes per element of ``dtype``, ``X = b·(s/cp)·h`` elements of one
micro-batch's hidden states on a context-parallel rank, ``t = tp``.  Recompute
adds ``r`` forward passes of each layer's communication (full: 1 for the
recomputed share of layers; selective: core attention only, so cp only).

Each formula names its source: Narayanan et al., "Efficient Large-Scale
Language Model Training on GPU Clusters Using Megatron-LM" (SC'21);
Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
Models" (MLSys'23, arXiv:2205.05198); TransformerEngine's context-parallel
attention (``transformer_engine/pytorch/attention/dot_product_attention/
context_parallel.py``: ``AttnFuncWithCPAndKVP2P``, ``AttnFuncWithCPAndKVAllGather``,
``AttnFuncWithCPAndQKVOA2A``); Megatron-core's ``tensor_parallel/layers.py``
(``LinearWithGradAccumulationAndAsyncCommunication``), ``transformer/moe/
token_dispatcher.py`` (``MoEAllGatherTokenDispatcher``,
``MoEAlltoAllTokenDispatcher``, ``MoEFlexTokenDispatcher``),
``distributed/distributed_data_parallel.py`` and ``optimizer/distrib_optimizer.py``,
``pipeline_parallel/schedules.py`` and ``p2p_communication.py``; the
DeepSeek-V3 Technical Report (arXiv:2412.19437) §2.1.2 and §3.3.
"""

from __future__ import annotations

from .classes import TRAFFIC_CLASSES, Collective, Traffic, class_group_size
from .fields import DTYPE_BYTES
from .model import ModelSpec
from .params import check_model_fits, num_micro_batches, params_per_rank
from ..errors import InvalidArgumentError

__all__ = ["traffic_from_model", "zero_traffic", "recompute_share", "grad_bytes", "param_bytes"]

_SRC_TP = ("Narayanan et al. SC'21 §3.3 (4 all-reduces per layer); Korthikanti et al. 2022 §4.2.2 "
           "(sequence parallel: all-gather + reduce-scatter); Megatron-core tensor_parallel/layers.py "
           "LinearWithGradAccumulationAndAsyncCommunication (input re-gather for the weight gradient)")
_SRC_CP = {
    "p2p": "TransformerEngine context_parallel.py AttnFuncWithCPAndKVP2P (KV to the ring successor, cp-1 "
           "steps forward; KV and dKV backward)",
    "all_gather": "TransformerEngine context_parallel.py AttnFuncWithCPAndKVAllGather (all-gather KV forward; "
                  "re-gather KV and reduce-scatter dKV backward)",
    "a2a": "TransformerEngine context_parallel.py AttnFuncWithCPAndQKVOA2A (all-to-all of Q, K, V and O, "
           "forward and backward; DeepSpeed-Ulysses)",
    "a2a+p2p": "TransformerEngine context_parallel.py (a2a inside the first hierarchical level, P2P ring "
               "across the second); Megatron-core parallel_state.create_hierarchical_groups",
}
_SRC_EP = {
    "alltoall": "Megatron-core moe/token_dispatcher.py MoEAlltoAllTokenDispatcher (dispatch and combine "
                "all-to-all of top-k token copies, forward and backward)",
    "allgather": "Megatron-core moe/token_dispatcher.py MoEAllGatherTokenDispatcher (all-gather tokens, "
                 "reduce-scatter outputs, forward and backward)",
    "flex": "Megatron-core MoEFlexTokenDispatcher with DeepEP; DeepSeek-V3 report §2.1.2 (node-limited "
            "routing) and §3.2.2 (one inter-node copy per node, NVLink forwarding)",
}
_SRC_ETP = ("Megatron-core MoEAlltoAllTokenDispatcher: gather_from_sequence_parallel_region over the expert "
            "tensor-parallel group after dispatch, reduce_scatter before combine")
_SRC_PP = ("Narayanan et al. SC'21 §2.2 (1F1B and interleaved schedules); Megatron-core p2p_communication.py "
           "(next rank = (rank+1) mod pp: the last stage sends to the first with interleaving)")
_SRC_DP = ("Megatron-core distributed_data_parallel.py / distrib_optimizer.py (reduce-scatter of gradients, "
           "all-gather of parameters with --use-distributed-optimizer; all-reduce without); "
           "megatron/training/arguments.py validate_args (bf16 reduces gradients in fp32 unless "
           "--grad-reduce-in-bf16); parallel_state intra/inter distributed-optimizer instance groups")
_SRC_EMB = "Megatron-core finalize_model_grads._allreduce_word_embedding_grads (tied embeddings only)"


def zero_traffic() -> dict[str, float]:
    """Every class with payload 0.0, in :data:`TRAFFIC_CLASSES` order."""
    return {c: 0.0 for c in TRAFFIC_CLASSES}


def recompute_share(model: ModelSpec, cfg) -> tuple[float, float]:
    """``(r_layer, r_attention)``: extra forward passes of a layer's / core attention's communication.

    ``--recompute-granularity full`` with ``--recompute-method uniform``
    recomputes every layer (1, 1); ``block`` recomputes ``recompute_num_layers``
    of the ``L/(pp·v)`` layers of each model chunk (that share); ``selective``
    recomputes core attention only (0, 1) — Megatron-core
    ``TransformerBlock._checkpointed_forward`` and ``recompute_modules=["core_attn"]``.
    """
    g = model.recompute_granularity
    if g is None:
        return 0.0, 0.0
    if g == "selective":
        return 0.0, 1.0
    if model.recompute_method == "block" and model.recompute_num_layers is not None:
        v = model.virtual_pipeline_model_parallel_size or 1
        per_chunk = model.num_layers / (cfg.pp * v)
        share = min(1.0, model.recompute_num_layers / per_chunk) if per_chunk > 0 else 0.0
        return share, share
    return 1.0, 1.0


def grad_bytes(model: ModelSpec) -> float:
    """Bytes per gradient element in the data-parallel reduction.

    ``grad_bytes`` when given; bf16: 4 (Megatron's ``validate_args`` sets
    ``accumulate_allreduce_grads_in_fp32`` for bf16) or 2 with
    ``--grad-reduce-in-bf16``; fp16: 2; fp32: 4.
    """
    if model.grad_bytes is not None:
        return float(model.grad_bytes)
    if model.dtype == "bf16":
        return 2.0 if model.grad_reduce_in_bf16 else 4.0
    return float(DTYPE_BYTES[model.dtype])


def param_bytes(model: ModelSpec) -> float:
    """Bytes per parameter in the distributed optimizer's all-gather.

    ``param_bytes`` when given; 1 with ``--fp8-param-gather``; else the
    parameter dtype (bf16/fp16 2, fp32 4).
    """
    if model.param_bytes is not None:
        return float(model.param_bytes)
    if model.fp8_param_gather:
        return 1.0
    return float(DTYPE_BYTES[model.dtype])


def _fmt(x: float) -> str:
    return f"{x:g}"


def _data_parallel(cls: str, n: int, params: float, model: ModelSpec) -> tuple[tuple[Collective, ...], str]:
    gb, pb = grad_bytes(model), param_bytes(model)
    N = model.num_distributed_optimizer_instances
    if not model.use_distributed_optimizer:
        return (Collective("all_reduce", gb * params, what="gradient all-reduce"),), (
            f"all-reduce of {_fmt(gb)}-byte gradients of the {params:,.0f} parameters this rank holds")
    if N > 1 and n % N:
        raise InvalidArgumentError(
            f"num_distributed_optimizer_instances={N} does not divide the {cls} group size {n}",
            "model.num_distributed_optimizer_instances",
        )
    inner = n // N if N > 1 else 0
    parts = [Collective("all_gather", (gb + pb) * params, size=inner,
                        what="gradient reduce-scatter + parameter all-gather")]
    text = (f"reduce-scatter of {_fmt(gb)}-byte gradients + all-gather of {_fmt(pb)}-byte parameters "
            f"({params:,.0f} parameters per rank)")
    if N > 1:
        parts.append(Collective("all_reduce", gb * params / inner, size=N, stride=inner,
                                what="all-reduce of gradient shards across optimizer instances"))
        text += f" within each of {N} optimizer instances, then an all-reduce of the shards across them"
    return tuple(parts), text


def _with_config_options(model: ModelSpec, cfg) -> ModelSpec:
    """Take the distributed-optimizer instances and hierarchical cp sizes of the parallel
    configuration (Megatron's ``initialize_model_parallel`` arguments) when the model leaves them unset.

    Raises InvalidArgumentError when both set them differently.
    """
    import dataclasses

    changes = {}
    n_cfg = int(getattr(cfg, "num_distributed_optimizer_instances", 1) or 1)
    if n_cfg > 1:
        if model.num_distributed_optimizer_instances not in (1, n_cfg):
            raise InvalidArgumentError(
                f"model.num_distributed_optimizer_instances={model.num_distributed_optimizer_instances} "
                f"disagrees with the parallel configuration's {n_cfg}", "model.num_distributed_optimizer_instances",
            )
        if model.use_distributed_optimizer:
            changes["num_distributed_optimizer_instances"] = n_cfg
    h_cfg = tuple(getattr(cfg, "hierarchical_context_parallel_sizes", ()) or ())
    if h_cfg:
        if model.hierarchical_context_parallel_sizes not in (None, h_cfg):
            raise InvalidArgumentError(
                f"model.hierarchical_context_parallel_sizes={list(model.hierarchical_context_parallel_sizes)} "
                f"disagrees with the parallel configuration's {list(h_cfg)}",
                "model.hierarchical_context_parallel_sizes",
            )
        changes["hierarchical_context_parallel_sizes"] = h_cfg
    return dataclasses.replace(model, **changes) if changes else model


def traffic_from_model(model: ModelSpec, cfg) -> Traffic:
    """Payloads and shapes (bytes per rank per training step) of every class, from a model.

    Per class, with the notation of the module docstring:

    ``tp`` (t > 1), per micro-batch and per half-layer (attention; the MLP
    of a dense layer; the shared expert of an MoE layer — an MoE layer's
    routed experts use etp instead): without sequence parallelism a ring
    all-reduce of ``X·e`` in the forward pass and one in the backward pass
    (Narayanan et al. §3.3: 4 per layer, ``8bsh(t−1)/t`` elements sent); with
    it 3 all-gathers and 2 reduce-scatters of ``X·e`` (Korthikanti et al.
    §4.2.2: forward all-gather + reduce-scatter; backward all-gather,
    reduce-scatter and the weight-gradient re-gather: 6 + 4 per layer).  With
    FP8 the forward all-gathers carry 1-byte elements.  Recompute repeats the
    forward collectives.
    ``cp`` (cp > 1), with ``KV = b·(s/cp)·(2k/t)·d·e`` (MLA: ``(a/t)(d_qk +
    d_rope + d_v)`` instead of ``2kd/t``): ``p2p`` sends ``(3 + r)(cp−1)·KV``
    to the ring successor per layer and micro-batch (KV forward, KV and dKV
    backward); ``all_gather`` a ring all-gather/reduce-scatter of ``cp·KV``
    ``3 + r`` times; ``a2a`` an all-to-all of Q, K, V, O of
    ``b(s/cp)(2a + 2k)d/t·e`` ``2 + r`` times; ``a2a+p2p`` the all-to-all over
    the first hierarchical level and the ring over the second.
    ``ep`` (ep > 1, MoE layers), ``Y = b·s/(cp·t_sp)·h`` elements of the tokens
    of a rank (``t_sp = t`` with sequence parallelism): ``alltoall`` an
    all-to-all of ``K·Y`` per dispatch and per combine, forward and backward
    (``4 + 2r`` per MoE layer; FP8 dispatch: forward dispatch 1 byte);
    ``allgather`` a ring all-gather / reduce-scatter of ``ep·Y``; ``flex``
    with node-limited routing over ``G`` groups, ``M`` per token: an
    all-to-all of ``M·Y`` between groups (one copy per node, DeepEP) and of
    ``K·Y`` inside a group.
    ``etp`` (etp > 1): ring all-gather / reduce-scatter of ``etp·K·Y`` around
    the experts, ``4 + 2r`` per MoE layer.
    ``pp`` (pp > 1): ``m·v·b(s/cp)h/t_sp·e`` to each neighbouring stage and
    back (interleaving with v chunks: the last stage also sends ``(v−1)/v`` of
    that to the first).
    ``dp`` / ``edp``: the dense / expert parameters one rank holds
    (:func:`~.params.params_per_rank`): distributed optimizer
    reduce-scatter of gradients + all-gather of parameters, else an all-reduce
    of gradients (:func:`grad_bytes`, :func:`param_bytes`); with ``N``
    optimizer instances the ring runs within instances and an all-reduce of
    the shards across them.
    ``embedding`` (pp > 1, tied embeddings): all-reduce of ``V·h/t`` gradients.

    A class whose group has one rank is 0.

    Returns
    -------
    Traffic
        ``class -> bytes`` (the sum of the class's payloads) with the
        :class:`Collective` parts and ``notes[class] = (formula, source)``.

    Raises
    ------
    InvalidArgumentError
        When the sizes do not fit the model (see :func:`~.params.check_model_fits`).
    """
    if not isinstance(model, ModelSpec):
        raise InvalidArgumentError(f"expected a ModelSpec, got {type(model).__name__}", "model")
    model = _with_config_options(model, cfg)
    check_model_fits(model, cfg)
    tp, cp, pp, ep, etp = cfg.tp, cfg.cp, cfg.pp, cfg.ep, cfg.etp
    m = num_micro_batches(model, cfg)
    e = float(model.element_bytes)
    sp = bool(model.sequence_parallel) and tp > 1
    v = model.virtual_pipeline_model_parallel_size or 1
    r_layer, r_attn = recompute_share(model, cfg)
    b, s, h = model.micro_batch_size, model.seq_length, model.hidden_size
    a, k = model.num_attention_heads, model.num_query_groups
    L_s = model.num_layers / pp
    L_moe_s = model.num_moe_layers_resolved / pp
    L_dense_s = L_s - L_moe_s
    X = b * (s / cp) * h
    K = model.moe_router_topk
    parts: dict[str, tuple[Collective, ...]] = {}
    notes: dict[str, tuple[str, str]] = {}

    # tp
    shared = 1 if model.moe_shared_expert_intermediate_size else 0
    halves = 2 * L_dense_s + L_moe_s * (1 + shared)
    if tp > 1:
        if sp:
            e_ag = 1.0 if model.fp8 else e
            per_half = (1 + r_layer) * (e_ag + e) + 3 * e
            parts["tp"] = (Collective("all_gather", m * halves * X * per_half,
                                      what="all-gathers and reduce-scatters (sequence parallel)"),)
            notes["tp"] = (f"per micro-batch and half-layer: (1+r)(AG + RS) forward + 2 AG + 1 RS backward of "
                           f"X = b(s/cp)h elements; {_fmt(halves)} half-layers per stage, m = {m}"
                           + (", forward all-gathers in FP8" if model.fp8 else ""), _SRC_TP)
        else:
            parts["tp"] = (Collective("all_reduce", m * halves * X * e * (2 + r_layer),
                                      what="all-reduces of activations and their gradients"),)
            notes["tp"] = (f"per micro-batch and half-layer: (2+r) ring all-reduces of X = b(s/cp)h elements; "
                           f"{_fmt(halves)} half-layers per stage, m = {m}", _SRC_TP)

    # cp
    if cp > 1:
        if model.multi_latent_attention:
            kv_el = (a / tp) * (model.qk_head_dim + model.qk_pos_emb_head_dim + model.v_head_dim)
            qkvo_el = (a / tp) * (2 * (model.qk_head_dim + model.qk_pos_emb_head_dim) + 2 * model.v_head_dim)
        else:
            d = model.kv_channels
            kv_el = 2 * (k / tp) * d
            qkvo_el = (2 * a + 2 * k) / tp * d
        KV = b * (s / cp) * kv_el * e
        QKVO = b * (s / cp) * qkvo_el * e
        ctype = model.cp_comm_type
        if ctype == "p2p":
            parts["cp"] = (Collective("ring_p2p", m * L_s * (3 + r_attn) * (cp - 1) * KV,
                                      what="KV chunks to the ring successor"),)
            notes["cp"] = ("per layer and micro-batch (3+r)(cp-1) sends of KV = b(s/cp)(2k/t)d·e "
                           "to the ring successor", _SRC_CP[ctype])
        elif ctype == "all_gather":
            parts["cp"] = (Collective("all_gather", m * L_s * (3 + r_attn) * cp * KV,
                                      what="KV all-gather and dKV reduce-scatter"),)
            notes["cp"] = ("per layer and micro-batch (3+r) ring all-gathers/reduce-scatters of cp·KV", _SRC_CP[ctype])
        elif ctype == "a2a":
            parts["cp"] = (Collective("all_to_all", m * L_s * (2 + r_attn) * QKVO, what="Q, K, V, O all-to-all"),)
            notes["cp"] = ("per layer and micro-batch (2+r) all-to-alls of b(s/cp)(2a+2k)d/t·e", _SRC_CP[ctype])
        else:
            sizes = model.hierarchical_context_parallel_sizes
            if len(sizes) != 2:
                raise InvalidArgumentError(
                    f"cp_comm_type a2a+p2p takes two hierarchical levels, got {list(sizes)}",
                    "model.hierarchical_context_parallel_sizes",
                )
            h0, h1 = sizes
            parts["cp"] = (
                Collective("all_to_all", m * L_s * (2 + r_attn) * QKVO, size=h0, stride=1,
                           what=f"Q, K, V, O all-to-all within groups of {h0}"),
                Collective("ring_p2p", m * L_s * (3 + r_attn) * (h1 - 1) * KV, size=h1, stride=h0,
                           what=f"KV ring across {h1} groups"),
            )
            notes["cp"] = (f"all-to-all over the first level ({h0}) + ring of (3+r)(h1-1)·KV over the second ({h1})",
                           _SRC_CP[ctype])

    # ep / etp
    if model.is_moe:
        Y = b * s / cp / (tp if sp else 1) * h
        disp = model.moe_token_dispatcher_type
        e_disp = 1.0 if model.moe_fp8_dispatch else e
        a2a_bytes = (1 + r_layer) * (e_disp + e) + 2 * e  # dispatch + combine, forward (+recompute) and backward
        if ep > 1:
            if disp == "allgather":
                parts["ep"] = (Collective("all_gather", m * L_moe_s * ep * Y * e * (4 + 2 * r_layer),
                                          what="token all-gather and output reduce-scatter"),)
                notes["ep"] = ("per MoE layer and micro-batch (4+2r) ring all-gathers/reduce-scatters of ep·Y",
                               _SRC_EP[disp])
            else:
                G, M = model.moe_router_num_groups, model.moe_router_group_topk
                if disp == "flex" and G and G > 1 and ep % G == 0:
                    blk = ep // G
                    between = Collective("all_to_all", m * L_moe_s * M * Y * a2a_bytes, size=G, stride=blk,
                                         what=f"one copy per selected node (at most {M} of {G})")
                    inside = Collective("all_to_all", m * L_moe_s * K * Y * a2a_bytes, size=blk, stride=1,
                                        what="forwarding to the experts inside a node")
                    # one rank per group: nothing is forwarded inside it
                    parts["ep"] = (between, inside) if blk > 1 else (between,)
                    notes["ep"] = (f"per MoE layer and micro-batch: all-to-all of M·Y = {M}·Y between the {G} "
                                   f"node groups and of K·Y = {K}·Y inside each, dispatch + combine forward and "
                                   "backward" + (" (dispatch in FP8)" if model.moe_fp8_dispatch else ""),
                                   _SRC_EP["flex"])
                else:
                    parts["ep"] = (Collective("all_to_all", m * L_moe_s * K * Y * a2a_bytes,
                                              what="token dispatch and combine"),)
                    notes["ep"] = (f"per MoE layer and micro-batch: all-to-all of K·Y = {K}·Y, dispatch + combine "
                                   "forward (+recompute) and backward"
                                   + (" (dispatch in FP8)" if model.moe_fp8_dispatch else ""),
                                   _SRC_EP["alltoall" if disp == "flex" else disp])
        if etp > 1:
            parts["etp"] = (Collective("all_gather", m * L_moe_s * etp * K * Y * e * (4 + 2 * r_layer),
                                       what="expert-TP all-gather / reduce-scatter of dispatched tokens"),)
            notes["etp"] = ("per MoE layer and micro-batch (4+2r) ring all-gathers/reduce-scatters of etp·K·Y",
                            _SRC_ETP)

    # pp
    if pp > 1:
        P = b * (s / cp) * h * e / (tp if sp else 1)
        parts["pp"] = (Collective("p2p_chain", m * v * P, wrap=(v - 1) / v,
                                  what="activations forward, gradients backward"),)
        notes["pp"] = ("m·v·b(s/cp)h/" + ("t" if sp else "1") + "·e to each neighbouring stage, each way"
                       + (f"; last → first {v - 1}/{v} of it (interleaved, v = {v})" if v > 1 else ""), _SRC_PP)

    # dp / edp
    dense_rank, expert_rank = params_per_rank(model, cfg)
    if cfg.dp * cp > 1:
        parts["dp"], text = _data_parallel("dp", cfg.dp * cp, dense_rank, model)
        notes["dp"] = (text, _SRC_DP)
    if model.is_moe and cfg.edp > 1:
        parts["edp"], text = _data_parallel("edp", cfg.edp, expert_rank, model)
        notes["edp"] = (text.replace("parameters this rank", "expert parameters this rank"), _SRC_DP)

    # embedding
    if pp > 1 and not model.untie_embeddings:
        parts["embedding"] = (Collective("all_reduce", model.vocab_size * h / tp * grad_bytes(model),
                                         what="word-embedding gradient all-reduce"),)
        notes["embedding"] = ("all-reduce of V·h/t gradients between the first and the last stage", _SRC_EMB)

    payloads = zero_traffic()
    kept = {}
    for c in TRAFFIC_CLASSES:
        if c in parts and class_group_size(c, cfg) > 1:
            payloads[c] = float(sum(p.payload_bytes for p in parts[c]))
            kept[c] = parts[c]
    return Traffic(payloads, kept, {c: notes[c] for c in kept if c in notes}, model=model)
