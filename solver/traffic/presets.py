"""Named models (published recipes), overrides and YAML model files."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from ..errors import InvalidArgumentError
from .model import ModelSpec

__all__ = ["PRESETS", "PRESET_ALIASES", "PRESET_RECIPES", "DEFAULT_MODEL", "preset_names", "model_preset",
           "with_overrides", "model_from_mapping", "load_model_file", "MODEL_FIELDS"]

#: ModelSpec field names.
MODEL_FIELDS: tuple[str, ...] = tuple(fl.name for fl in dataclasses.fields(ModelSpec))
_MODEL_FIELDS = MODEL_FIELDS

def _preset(**kw) -> ModelSpec:
    return ModelSpec(**kw)


#: Named models with the training options of a published recipe.  Every
#: number has its source.  The batch is the recipe's ``global_batch_size``
#: (``m = gbs / (b·dp)`` must divide; override ``num_micro_batches`` or
#: ``global_batch_size`` with :func:`model_preset` for another data-parallel
#: size).  The recipe's parallel sizes are in :data:`PRESET_RECIPES` (they are
#: the caller's choice, so a preset does not impose them; the virtual pipeline
#: size, tied to pp, is listed there too).
#:
#: ``gpt-24l-4096`` (aliases ``default``, ``seed-gpt``)
#:     The seed article's example GPT: 24 layers, hidden 4096 (the article:
#:     "以一个 24 层 GPT 模型（hidden_size=4096）为例"); the rest from DESIGN §3:
#:     a 32, f 16384 (4h), V 50304 (GPT-2's 50257 padded to a multiple of 128),
#:     s 2048, b 1, m 8, bf16; Megatron-LM's defaults otherwise (no sequence
#:     parallelism, no distributed optimizer).  Learned absolute positions,
#:     LayerNorm, biases, GeLU MLP, tied embeddings.  5.05 B parameters.
#: ``gpt3-175b``
#:     Brown et al. 2020 (arXiv:2005.14165) Table 2.1: 96 layers, d_model 12288,
#:     96 heads, n_ctx 2048, f = 4 d_model, vocabulary 50257, tied embeddings.
#:     Training as Narayanan et al. SC'21 (arXiv:2104.04473) Table 1 (174.6 B):
#:     t 8, p 16 on 1,024 GPUs, global batch 1536, micro-batch 1; no sequence
#:     parallelism or distributed optimizer (they postdate it).
#: ``llama3-8b``
#:     Model: https://huggingface.co/meta-llama/Meta-Llama-3-8B config.json
#:     (32 layers, hidden 4096, 32 heads, 8 KV heads, intermediate 14336, vocab
#:     128256, untied; RMSNorm, SwiGLU, RoPE, no biases), 8.03 B.  Training: the
#:     NeMo 2.0 recipe ``nemo/collections/llm/recipes/llama3_8b.py``: TP 1, PP 1,
#:     CP 2, seq 8192, global batch 512, micro-batch 1, bf16 with fp32 gradient
#:     reduction, distributed (fused Adam) optimizer.
#: ``llama3-70b``
#:     Model: https://huggingface.co/meta-llama/Meta-Llama-3-70B config.json (80
#:     layers, hidden 8192, 64 heads, 8 KV heads, intermediate 28672), 70.6 B.
#:     Training: NeMo 2.0 ``llama3_70b.py``: TP 4, PP 4, VP 5, CP 2, sequence
#:     parallel, seq 8192, global batch 512, micro-batch 1, ``grad_reduce_in_fp32``,
#:     distributed optimizer (``distributed_fused_adam_with_cosine_annealing``).
#: ``llama3-405b``
#:     Model: https://huggingface.co/meta-llama/Llama-3.1-405B config.json and
#:     arXiv:2407.21783 Table 3 (126 layers, hidden 16384, 128 heads, 8 KV heads,
#:     FFN 53248), 405 B.  Training: arXiv:2407.21783 §3.3.2 and Table 4: TP 8,
#:     CP 1, PP 16, DP 128 on 16,384 GPUs, seq 8192, 16M tokens per batch (2048
#:     sequences), interleaved pipeline, FSDP-style sharded optimizer and
#:     gradients (modelled as the distributed optimizer); sequence parallelism
#:     assumed with TP 8, as Megatron practice.
#: ``mixtral-8x7b``
#:     Model: https://huggingface.co/mistralai/Mixtral-8x7B-v0.1 config.json (32
#:     layers, hidden 4096, 32 heads, 8 KV heads, intermediate 14336, 8 experts,
#:     top-2, vocab 32000, untied, every layer MoE), 46.7 B total / 12.9 B
#:     active (arXiv:2401.04088).  Training: NeMo 2.0 ``mixtral_8x7b.py``: TP 1,
#:     PP 4, VP 8, EP 8, seq 4096, global batch 512, micro-batch 1, all-to-all
#:     token dispatcher, distributed optimizer.
#: ``deepseek-v3``
#:     Model: https://huggingface.co/deepseek-ai/DeepSeek-V3 config.json (61
#:     layers, hidden 7168, 128 heads, dense intermediate 18432, expert 2048, 256
#:     routed experts + 1 shared, top-8, first 3 layers dense, vocab 129280,
#:     untied, MLA q_lora_rank 1536, kv_lora_rank 512, qk 128 + rope 64, v 128),
#:     671 B (the multi-token-prediction module not counted).  Training:
#:     arXiv:2412.19437 §3.2 and §3.3: PP 16, EP 64 over 8 nodes, ZeRO-1 data
#:     parallelism (the distributed optimizer), no TP, seq 4096, micro-batch 1,
#:     batch 15360 sequences (after the ramp), FP8 (E4M3) GEMMs, dispatch in FP8
#:     and combine in BF16, node-limited routing (256 experts in 8 groups, each
#:     token to at most 4 nodes) with DeepEP-style one-copy-per-node transfer
#:     (``flex`` dispatcher).  DualPipe is modelled as 1F1B (same bytes).
PRESETS: dict[str, ModelSpec] = {
    "gpt-24l-4096": _preset(
        name="gpt-24l-4096", num_layers=24, hidden_size=4096, num_attention_heads=32, ffn_hidden_size=16384,
        vocab_size=50304, seq_length=2048, micro_batch_size=1, num_micro_batches=8, dtype="bf16",
    ),
    "gpt3-175b": _preset(
        name="gpt3-175b", num_layers=96, hidden_size=12288, num_attention_heads=96, ffn_hidden_size=49152,
        vocab_size=50257, seq_length=2048, micro_batch_size=1, global_batch_size=1536, dtype="bf16",
    ),
    "llama3-8b": _preset(
        name="llama3-8b", num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=8,
        ffn_hidden_size=14336, vocab_size=128256, seq_length=8192, micro_batch_size=1, global_batch_size=512,
        dtype="bf16", untie_embeddings=True, swiglu=True, normalization="RMSNorm", add_bias_linear=False,
        position_embedding="rope", use_distributed_optimizer=True,
    ),
    "llama3-70b": _preset(
        name="llama3-70b", num_layers=80, hidden_size=8192, num_attention_heads=64, num_query_groups=8,
        ffn_hidden_size=28672, vocab_size=128256, seq_length=8192, micro_batch_size=1, global_batch_size=512,
        dtype="bf16", untie_embeddings=True, swiglu=True, normalization="RMSNorm", add_bias_linear=False,
        position_embedding="rope", sequence_parallel=True, use_distributed_optimizer=True,
    ),
    "llama3-405b": _preset(
        name="llama3-405b", num_layers=126, hidden_size=16384, num_attention_heads=128, num_query_groups=8,
        ffn_hidden_size=53248, vocab_size=128256, seq_length=8192, micro_batch_size=1, global_batch_size=2048,
        dtype="bf16", untie_embeddings=True, swiglu=True, normalization="RMSNorm", add_bias_linear=False,
        position_embedding="rope", sequence_parallel=True, use_distributed_optimizer=True,
    ),
    "mixtral-8x7b": _preset(
        name="mixtral-8x7b", num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=8,
        ffn_hidden_size=14336, vocab_size=32000, seq_length=4096, micro_batch_size=1, global_batch_size=512,
        num_experts=8, moe_router_topk=2, moe_ffn_hidden_size=14336, moe_token_dispatcher_type="alltoall",
        dtype="bf16", untie_embeddings=True, swiglu=True, normalization="RMSNorm", add_bias_linear=False,
        position_embedding="rope", sequence_parallel=True, use_distributed_optimizer=True,
    ),
    "deepseek-v3": _preset(
        name="deepseek-v3", num_layers=61, hidden_size=7168, num_attention_heads=128, num_query_groups=128,
        ffn_hidden_size=18432, vocab_size=129280, seq_length=4096, micro_batch_size=1, global_batch_size=15360,
        num_experts=256, moe_router_topk=8, moe_ffn_hidden_size=2048, moe_shared_expert_intermediate_size=2048,
        num_moe_layers=58, moe_token_dispatcher_type="flex", moe_router_num_groups=8, moe_router_group_topk=4,
        moe_fp8_dispatch=True, fp8="e4m3", sequence_parallel=True, use_distributed_optimizer=True,
        dtype="bf16", untie_embeddings=True, swiglu=True, normalization="RMSNorm", add_bias_linear=False,
        position_embedding="rope", multi_latent_attention=True, q_lora_rank=1536, kv_lora_rank=512,
        qk_head_dim=128, qk_pos_emb_head_dim=64, v_head_dim=128,
    ),
}

#: The parallel sizes of each preset's published recipe (see :data:`PRESETS`
#: for the sources): ``tp pp cp ep vp`` and the GPUs it ran on.
PRESET_RECIPES: dict[str, dict[str, int]] = {
    "gpt3-175b": {"tp": 8, "pp": 16, "cp": 1, "ep": 1, "vp": 1, "gpus": 1024},
    "llama3-8b": {"tp": 1, "pp": 1, "cp": 2, "ep": 1, "vp": 1, "gpus": 8},
    "llama3-70b": {"tp": 4, "pp": 4, "cp": 2, "ep": 1, "vp": 5, "gpus": 32},
    "llama3-405b": {"tp": 8, "pp": 16, "cp": 1, "ep": 1, "vp": 1, "gpus": 16384},
    "mixtral-8x7b": {"tp": 1, "pp": 4, "cp": 1, "ep": 8, "vp": 8, "gpus": 64},
    "deepseek-v3": {"tp": 1, "pp": 16, "cp": 1, "ep": 64, "vp": 1, "gpus": 2048},
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
