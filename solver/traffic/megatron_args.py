"""Megatron-LM's own command-line arguments as the traffic input (``--megatron-args "..."``).

:func:`parse_megatron_args` reads the model, batch, precision and parallel flags
of ``pretrain_gpt.py`` from one shell-quoted string and returns the
:class:`~.model.ModelSpec` and the parallel sizes it implies.  Defaults are
Megatron-LM's (``megatron/training/arguments.py``): no ``--bf16``/``--fp16``
means fp32; ``--ffn-hidden-size`` defaults to ``4h`` (with ``--swiglu``,
``int(8h/3/64)·64``); ``--num-query-groups`` counts only with
``--group-query-attention``; the vocabulary is padded to a multiple of
``--make-vocab-size-divisible-by`` (128) × tp (``_vocab_size_with_padding``);
``--expert-tensor-parallel-size`` defaults to tp; the MoE dispatcher to
``allgather``; ``--cp-comm-type`` to ``p2p``.  rankmap cannot read a
tokenizer, so without ``--vocab-size`` the GPT-2 BPE vocabulary (50257, the
default tokenizer's) is used.

Unknown flags (training flags such as ``--lr``) are skipped together with
their values; a malformed value of a known flag is an error naming the flag.
"""

from __future__ import annotations

import ast
import shlex
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import InvalidArgumentError
from .model import ModelSpec

__all__ = ["MegatronArgs", "parse_megatron_args", "MEGATRON_FLAGS", "MAX_MEGATRON_ARGS_CHARS"]

#: Longest accepted argument string (a real command line is a few KB).
MAX_MEGATRON_ARGS_CHARS = 65_536

_FIELD = "megatron_args"


def _int(flag: str, text: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise InvalidArgumentError(f"Megatron argument {flag} takes a positive integer, got {text!r}", _FIELD)
    value = int(text)
    if value < 1 and flag not in ("--recompute-num-layers",):
        raise InvalidArgumentError(f"Megatron argument {flag} takes a positive integer, got {text!r}", _FIELD)
    return value


def _choice(*choices: str) -> Callable[[str, str], str]:
    def parse(flag: str, text: str) -> str:
        if text not in choices:
            raise InvalidArgumentError(
                f"Megatron argument {flag} takes one of {', '.join(choices)}, got {text!r}", _FIELD
            )
        return text
    return parse


def _int_list(flag: str, text: str) -> tuple[int, ...]:
    return tuple(_int(flag, t) for t in text.split())


#: The longest ``--moe-layer-freq`` list accepted (entries).
MAX_LAYER_FREQ_ENTRIES = 100_000


def _freq_value(node, flag: str, text: str):
    """Evaluate a ``--moe-layer-freq`` list expression node: lists/tuples of small integers,
    ``+`` of lists or integers and ``*`` of a list by an integer.  Every list's length is
    checked *before* it is built (at most :data:`MAX_LAYER_FREQ_ENTRIES`), so no expression
    allocates more than that."""
    def bad(why: str):
        return InvalidArgumentError(
            f"Megatron argument {flag} takes an integer or a list such as ([0]*3+[1]*58), got {text[:120]!r}: {why}",
            _FIELD)

    if isinstance(node, ast.Expression):
        return _freq_value(node.body, flag, text)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int) or not 0 <= node.value <= 100_000:
            raise bad("numbers must be integers 0..100000")
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        if len(node.elts) > MAX_LAYER_FREQ_ENTRIES:
            raise bad(f"more than {MAX_LAYER_FREQ_ENTRIES} entries")
        items = [_freq_value(e, flag, text) for e in node.elts]
        if any(isinstance(x, list) for x in items):
            raise bad("nested lists")
        return items
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
        a, b = _freq_value(node.left, flag, text), _freq_value(node.right, flag, text)
        if isinstance(node.op, ast.Add):
            if isinstance(a, list) != isinstance(b, list):
                raise bad("+ joins two lists or two integers")
            if isinstance(a, list) and len(a) + len(b) > MAX_LAYER_FREQ_ENTRIES:
                raise bad(f"more than {MAX_LAYER_FREQ_ENTRIES} entries")
            out = a + b
            if not isinstance(out, list) and out > 10**6:
                raise bad("numbers must be small")
            return out
        if isinstance(a, int) and isinstance(b, list):
            a, b = b, a
        if isinstance(a, list) and isinstance(b, int):
            if len(a) * b > MAX_LAYER_FREQ_ENTRIES:
                raise bad(f"more than {MAX_LAYER_FREQ_ENTRIES} entries")
            return a * b
        if isinstance(a, int) and isinstance(b, int):
            if a * b > 10**6:
                raise bad("numbers must be small")
            return a * b
        raise bad("* repeats a list by an integer")
    raise bad("only lists of integers, + and * are allowed")


def _layer_freq(flag: str, text: str) -> Any:
    """``--moe-layer-freq``: an int, or a Python list expression such as ``([0]*3+[1]*58)``
    (Megatron-LM evaluates it; here a bounded evaluator of lists, ``+`` and ``*`` only)."""
    t = text.strip()
    if t.isascii() and t.isdigit():
        return _int(flag, t)
    if len(t) > 4096:
        raise InvalidArgumentError(f"Megatron argument {flag} is too long ({len(t)} characters)", _FIELD)
    try:
        tree = ast.parse(t, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise InvalidArgumentError(
            f"Megatron argument {flag} takes an integer or a list such as ([0]*3+[1]*58), got {t[:120]!r}: {exc}",
            _FIELD,
        ) from None
    try:
        value = _freq_value(tree, flag, t)
    except RecursionError:
        raise InvalidArgumentError(f"Megatron argument {flag} is nested too deeply", _FIELD) from None
    if not isinstance(value, list):
        raise InvalidArgumentError(f"Megatron argument {flag} must be an integer or a list, got {t[:120]!r}", _FIELD)
    return tuple(value)


#: Known flag -> (key, parser); parser None = a store_true flag.  Keys are
#: ModelSpec fields, parallel sizes (``tp pp cp ep etp``) or internal ones (``_...``).
MEGATRON_FLAGS: dict[str, tuple[str, Any]] = {
    "--num-layers": ("num_layers", _int),
    "--hidden-size": ("hidden_size", _int),
    "--ffn-hidden-size": ("ffn_hidden_size", _int),
    "--num-attention-heads": ("num_attention_heads", _int),
    "--group-query-attention": ("_gqa", None),
    "--num-query-groups": ("_num_query_groups", _int),
    "--kv-channels": ("kv_channels", _int),
    "--seq-length": ("seq_length", _int),
    "--max-position-embeddings": ("max_position_embeddings", _int),
    "--micro-batch-size": ("micro_batch_size", _int),
    "--global-batch-size": ("global_batch_size", _int),
    "--vocab-size": ("_vocab_size", _int),
    "--make-vocab-size-divisible-by": ("_divisible_by", _int),
    "--swiglu": ("swiglu", None),
    "--untie-embeddings-and-output-weights": ("untie_embeddings", None),
    "--normalization": ("normalization", _choice("LayerNorm", "RMSNorm")),
    "--disable-bias-linear": ("_disable_bias", None),
    "--add-qkv-bias": ("add_qkv_bias", None),
    "--position-embedding-type": ("position_embedding", _choice("learned_absolute", "rope", "none", "mrope")),
    "--tensor-model-parallel-size": ("tp", _int),
    "--pipeline-model-parallel-size": ("pp", _int),
    "--context-parallel-size": ("cp", _int),
    "--expert-model-parallel-size": ("ep", _int),
    "--expert-tensor-parallel-size": ("etp", _int),
    "--num-layers-per-virtual-pipeline-stage": ("_layers_per_vp_stage", _int),
    "--virtual-pipeline-model-parallel-size": ("virtual_pipeline_model_parallel_size", _int),
    "--sequence-parallel": ("sequence_parallel", None),
    "--use-distributed-optimizer": ("use_distributed_optimizer", None),
    "--num-distributed-optimizer-instances": ("num_distributed_optimizer_instances", _int),
    "--grad-reduce-in-bf16": ("grad_reduce_in_bf16", None),
    "--num-experts": ("num_experts", _int),
    "--moe-router-topk": ("moe_router_topk", _int),
    "--moe-ffn-hidden-size": ("moe_ffn_hidden_size", _int),
    "--moe-shared-expert-intermediate-size": ("moe_shared_expert_intermediate_size", _int),
    "--moe-layer-freq": ("moe_layer_freq", _layer_freq),
    "--moe-token-dispatcher-type": ("moe_token_dispatcher_type", _choice("allgather", "alltoall", "flex")),
    "--moe-router-num-groups": ("moe_router_num_groups", _int),
    "--moe-router-group-topk": ("moe_router_group_topk", _int),
    "--bf16": ("_bf16", None),
    "--fp16": ("_fp16", None),
    "--fp8-format": ("fp8", _choice("e4m3", "hybrid")),
    "--fp8-param-gather": ("fp8_param_gather", None),
    "--recompute-granularity": ("recompute_granularity", _choice("full", "selective")),
    "--recompute-method": ("recompute_method", _choice("uniform", "block")),
    "--recompute-num-layers": ("recompute_num_layers", _int),
    "--cp-comm-type": ("cp_comm_type", _choice("p2p", "all_gather", "a2a", "a2a+p2p")),
    "--hierarchical-context-parallel-sizes": ("hierarchical_context_parallel_sizes", _int_list),
    "--multi-latent-attention": ("multi_latent_attention", None),
    "--q-lora-rank": ("q_lora_rank", _int),
    "--kv-lora-rank": ("kv_lora_rank", _int),
    "--qk-head-dim": ("qk_head_dim", _int),
    "--qk-pos-emb-head-dim": ("qk_pos_emb_head_dim", _int),
    "--v-head-dim": ("v_head_dim", _int),
    # the rank order Megatron-LM builds its groups in (megatron/training/initialize.py:
    # order = "tp-cp-ep-pp-dp" if use_tp_pp_dp_mapping else "tp-cp-ep-dp-pp")
    "--use-tp-pp-dp-mapping": ("_tp_pp_dp", None),
}

#: Megatron-LM flags that make the pipeline split uneven (then num_layers need not divide by pp).
_UNEVEN_PIPELINE_FLAGS = ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
                          "--pipeline-model-parallel-layout", "--account-for-embedding-in-pipeline-split",
                          "--account-for-loss-in-pipeline-split")

_REQUIRED = ("--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length")
_LIST_FLAGS = {"--hierarchical-context-parallel-sizes"}


@dataclass(frozen=True)
class MegatronArgs:
    """What a Megatron-LM command line says: the model and the parallel sizes.

    Attributes
    ----------
    model : ModelSpec
        The model at the sizes the arguments give (:meth:`model_for` at
        ``tp``/``pp`` of :attr:`sizes`, 1 when absent).
    sizes : dict of str -> int
        ``tp pp cp ep etp`` given on the command line (Megatron's defaults, 1
        and etp = tp, are filled in by :meth:`sizes_with_defaults`).
    ignored : tuple of str
        Flags rankmap does not read (training flags such as ``--lr``).
    vocab_size : int
        ``--vocab-size`` before padding (default 50257, GPT-2's tokenizer).
    divisible_by : int
        ``--make-vocab-size-divisible-by`` (default 128).
    layers_per_vp_stage : int or None
        ``--num-layers-per-virtual-pipeline-stage``.
    text : str
        The argument string as given.
    order : str
        The rank order Megatron-LM builds its groups in: ``tp-cp-ep-pp-dp``
        with ``--use-tp-pp-dp-mapping``, else the default ``tp-cp-ep-dp-pp``.
    uneven_pipeline : bool
        A flag splits the pipeline stages unevenly (num_layers need not divide by pp).
    """

    model: ModelSpec
    sizes: dict
    ignored: tuple
    vocab_size: int = 50257
    divisible_by: int = 128
    layers_per_vp_stage: int | None = None
    text: str = ""
    order: str = "tp-cp-ep-dp-pp"
    uneven_pipeline: bool = False

    def suggestions(self) -> list[str]:
        """``"--flag (did you mean --known-flag?)"`` for each ignored flag close to one rankmap reads
        (``difflib`` ratio >= 0.85): a misspelt flag that would change the bytes."""
        import difflib

        out = []
        for flag in self.ignored:
            close = difflib.get_close_matches(flag, list(MEGATRON_FLAGS), n=1, cutoff=0.85)
            if close and close[0] != flag:
                out.append(f"{flag} (did you mean {close[0]}?)")
        return out

    def sizes_with_defaults(self) -> dict[str, int]:
        """``tp pp cp ep etp`` with Megatron's defaults (1; etp = tp)."""
        out = {k: int(self.sizes.get(k, 1)) for k in ("tp", "pp", "cp", "ep")}
        out["etp"] = int(self.sizes.get("etp", out["tp"]))
        return out

    def model_for(self, tp: int, pp: int) -> ModelSpec:
        """The model as Megatron builds it at tensor-parallel size ``tp`` and pipeline size ``pp``.

        Two model quantities depend on the sizes: the padded vocabulary
        (Megatron-LM ``_vocab_size_with_padding``: ``vocab_size`` rounded up to
        a multiple of ``make_vocab_size_divisible_by · tp``) and the virtual
        pipeline size from ``--num-layers-per-virtual-pipeline-stage``
        (``num_layers / pp / layers_per_stage``, ``validate_args``).

        Raises
        ------
        InvalidArgumentError
            When ``--num-layers-per-virtual-pipeline-stage`` does not divide
            ``num_layers / pp``.
        """
        import dataclasses

        div = self.divisible_by * int(tp)
        changes: dict[str, Any] = {"vocab_size": -(-self.vocab_size // div) * div}
        L = self.model.num_layers
        if L % pp and not self.uneven_pipeline:
            raise InvalidArgumentError(
                f"--num-layers {L} is not divisible by the pipeline size {pp} (Megatron-LM asserts it unless "
                f"--decoder-first/last-pipeline-num-layers split the stages unevenly)", _FIELD,
            )
        lpvs = self.layers_per_vp_stage
        if lpvs is not None:
            L = self.model.num_layers
            if L % pp or (L // pp) % lpvs:
                raise InvalidArgumentError(
                    f"--num-layers-per-virtual-pipeline-stage {lpvs} does not divide num_layers/pp = {L}/{pp}",
                    _FIELD,
                )
            changes["virtual_pipeline_model_parallel_size"] = L // pp // lpvs
        return dataclasses.replace(self.model, **changes)


def _tokens(text: str) -> list[str]:
    if not isinstance(text, str):
        raise InvalidArgumentError(f"megatron_args must be a string, got {type(text).__name__}", _FIELD)
    if len(text) > MAX_MEGATRON_ARGS_CHARS:
        raise InvalidArgumentError(
            f"megatron_args has {len(text)} characters; at most {MAX_MEGATRON_ARGS_CHARS} are accepted", _FIELD
        )
    try:
        return shlex.split(text.replace("\\\n", " "), comments=False)
    except ValueError as exc:
        raise InvalidArgumentError(f"megatron_args cannot be split like a shell line: {exc}", _FIELD) from None


def parse_megatron_args(text: str, name: str = "megatron-args") -> MegatronArgs:
    """Read Megatron-LM ``pretrain_gpt.py`` arguments (one shell-quoted string).

    ``--flag=value`` and ``--flag value`` are both accepted; a command prefix
    (``torchrun ... pretrain_gpt.py``) is skipped up to the first ``--`` flag.

    Returns
    -------
    MegatronArgs

    Raises
    ------
    InvalidArgumentError
        For a malformed value of a known flag (naming it) (a flag given twice
        takes its last value, as Megatron-LM's argparse does),
        a missing required flag (``--num-layers``, ``--hidden-size``,
        ``--num-attention-heads``, ``--seq-length``) or an invalid model; the
        field is ``megatron_args`` or ``model.<field>``.
    """
    toks = _tokens(text)
    values: dict[str, Any] = {}
    ignored: list[str] = []
    i = 0
    while i < len(toks) and not toks[i].startswith("--"):
        i += 1
    while i < len(toks):
        tok = toks[i]
        i += 1
        if not tok.startswith("--"):
            continue  # a value of an unknown flag
        flag, eq, inline = tok.partition("=")
        spec = MEGATRON_FLAGS.get(flag)
        if spec is None:
            ignored.append(flag)
            if not eq:
                while i < len(toks) and not toks[i].startswith("--"):
                    i += 1
            continue
        key, parse = spec
        # given twice: the last value wins, as with Megatron-LM's argparse (appending overrides is common)
        if parse is None:
            if eq:
                raise InvalidArgumentError(f"Megatron argument {flag} takes no value, got {inline!r}", _FIELD)
            values[key] = True
            continue
        if eq:
            raw = inline
        elif flag in _LIST_FLAGS:
            items = []
            while i < len(toks) and not toks[i].startswith("--"):
                items.append(toks[i])
                i += 1
            raw = " ".join(items)
        else:
            if i >= len(toks) or toks[i].startswith("--"):
                raise InvalidArgumentError(f"Megatron argument {flag} needs a value", _FIELD)
            raw = toks[i]
            i += 1
        if raw == "":
            raise InvalidArgumentError(f"Megatron argument {flag} needs a value", _FIELD)
        values[key] = parse(flag, raw)
    missing = [f for f in _REQUIRED if MEGATRON_FLAGS[f][0] not in values]
    if missing:
        raise InvalidArgumentError(
            f"megatron_args lacks {', '.join(missing)} (Megatron-LM requires them)", _FIELD
        )
    import dataclasses

    order = "tp-cp-ep-pp-dp" if values.pop("_tp_pp_dp", False) else "tp-cp-ep-dp-pp"
    uneven = any(f in ignored for f in _UNEVEN_PIPELINE_FLAGS)
    return dataclasses.replace(_build(values, tuple(dict.fromkeys(ignored)), name), text=text, order=order,
                               uneven_pipeline=uneven)


def _build(values: dict[str, Any], ignored: tuple, name: str) -> MegatronArgs:
    sizes = {k: values.pop(k) for k in ("tp", "pp", "cp", "ep", "etp") if k in values}
    tp = sizes.get("tp", 1)
    bf16, fp16 = values.pop("_bf16", False), values.pop("_fp16", False)
    if bf16 and fp16:
        raise InvalidArgumentError("Megatron arguments --bf16 and --fp16 exclude each other", _FIELD)
    fields: dict[str, Any] = {"name": name, "dtype": "bf16" if bf16 else ("fp16" if fp16 else "fp32")}
    gqa = values.pop("_gqa", False)
    nqg = values.pop("_num_query_groups", None)
    if gqa and nqg is not None:
        fields["num_query_groups"] = nqg
    if values.pop("_disable_bias", False):
        fields["add_bias_linear"] = False
    vocab = values.pop("_vocab_size", 50257)
    div0 = values.pop("_divisible_by", 128)
    div = div0 * tp
    fields["vocab_size"] = -(-vocab // div) * div
    lpvs = values.pop("_layers_per_vp_stage", None)
    pe = values.get("position_embedding")
    if pe == "mrope":
        values["position_embedding"] = "rope"
    if values.get("swiglu") and "ffn_hidden_size" not in values:
        fields["ffn_hidden_size"] = int((4 * values["hidden_size"] * 2 / 3) / 64) * 64
    fields.update(values)
    if lpvs is not None:
        pp = sizes.get("pp", 1)
        L = fields["num_layers"]
        if L % pp or (L // pp) % lpvs:
            raise InvalidArgumentError(
                f"--num-layers-per-virtual-pipeline-stage {lpvs} does not divide num_layers/pp = {L}/{pp}", _FIELD
            )
        if "virtual_pipeline_model_parallel_size" in fields:
            raise InvalidArgumentError(
                "Megatron arguments --num-layers-per-virtual-pipeline-stage and "
                "--virtual-pipeline-model-parallel-size exclude each other", _FIELD
            )
        fields["virtual_pipeline_model_parallel_size"] = L // pp // lpvs
    fields.setdefault("micro_batch_size", 1)
    return MegatronArgs(model=ModelSpec(**fields), sizes=sizes, ignored=ignored, vocab_size=vocab,
                        divisible_by=div0, layers_per_vp_stage=lpvs)
