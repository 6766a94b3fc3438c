"""``rankmap traffic``: bytes per rank per training step of each traffic class.

::

    rankmap traffic --world-size W [--tp N --cp N --ep N --etp N --pp N]
                    [--model NAME | --model-file FILE] [--seq-length N]
                    [--micro-batch-size N] [--global-batch-size N]
                    [--num-micro-batches N] [--dtype bf16] [--traffic tp=4e9,...]
                    [--format json|table]

The model flags are shared with ``rankmap solve`` / ``evaluate`` through
:func:`add_model_arguments` and :func:`traffic_from_args`.  Bad input raises
:class:`~rankmap.solver.errors.InvalidArgumentError`, which the main CLI turns
into exit status 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys

from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.traffic import (
    CLASS_GROUP,
    CLASS_KIND,
    PRESET_RECIPES,
    Traffic,
    bytes_sent_per_rank,
    class_collectives,
    parse_megatron_args,
    DTYPE_BYTES,
    TRAFFIC_CLASSES,
    ModelSpec,
    class_group_size,
    count_parameters,
    format_bytes,
    num_micro_batches,
    params_per_rank,
    preset_names,
)

__all__ = [
    "register",
    "run",
    "add_model_arguments",
    "model_from_args",
    "traffic_from_args",
    "megatron_from_args",
    "apply_megatron_sizes",
    "traffic_document",
    "traffic_table",
]

# Flag -> ModelSpec field for the per-run overrides (the job model's).
from rankmap.solver.job.resolve import MODEL_OVERRIDE_KEYS as _OVERRIDE_FLAGS  # noqa: E402,F401


def _has_option(parser: argparse.ArgumentParser, flag: str) -> bool:
    return flag in getattr(parser, "_option_string_actions", {})


def add_model_arguments(parser: argparse.ArgumentParser, *, traffic: bool = True) -> None:
    """Add the model / traffic flags to a (sub)parser.

    ``--model NAME``, ``--model-file FILE``, ``--seq-length``,
    ``--micro-batch-size``, ``--global-batch-size``, ``--num-micro-batches``,
    ``--dtype`` and (with ``traffic=True``) ``--traffic CLASS=BYTES,...``.  A
    flag the parser already has is left alone, so callers may define
    ``--traffic`` themselves.
    """

    from rankmap.cli import positive_int_arg

    def add(flag, **kw):
        if not _has_option(parser, flag):
            parser.add_argument(flag, **kw)

    add("--model", default=None, metavar="NAME",
        help=f"model preset ({', '.join(preset_names())}); default gpt-24l-4096, the seed's GPT")
    add("--model-file", default=None, metavar="FILE",
        help="YAML model description (ModelSpec fields, optionally 'preset: NAME' plus overrides)")
    add("--seq-length", type=positive_int_arg, default=None, metavar="N", help="override the sequence length s")
    add("--micro-batch-size", type=positive_int_arg, default=None, metavar="N", help="override the micro-batch size b")
    add("--global-batch-size", type=positive_int_arg, default=None, metavar="N",
        help="sequences per step; m = N / (b * dp)")
    add("--num-micro-batches", type=positive_int_arg, default=None, metavar="N",
        help="micro-batches per step m (default: the model's, 8 for presets)")
    add("--dtype", default=None, choices=tuple(DTYPE_BYTES), help="training dtype (default bf16)")
    add("--megatron-args", default=None, metavar="'ARGS'",
        help="Megatron-LM pretrain_gpt.py arguments as one quoted string ('--num-layers 80 --hidden-size 8192 "
             "--sequence-parallel ...'): model, batch, precision and parallel options; the parallel sizes in "
             "them fill in (or must agree with) --tp/--pp/--cp/--ep/--etp; unknown flags are ignored")
    if traffic:
        add("--traffic", default=None, metavar="CLASS=BYTES,...",
            help="explicit payloads in bytes per rank per step, e.g. tp=4e9,dp=1GB; "
                 "on top of the model's when a model flag is given, else alone")


def megatron_from_args(args: argparse.Namespace):
    """The parsed ``--megatron-args`` (cached on ``args``), or None.

    Raises
    ------
    InvalidArgumentError
        For a malformed argument string (see :func:`~rankmap.solver.traffic.parse_megatron_args`).
    """
    text = getattr(args, "megatron_args", None)
    if text is None:
        return None
    cached = getattr(args, "_megatron_parsed", None)
    if cached is None or cached[0] != text:
        cached = (text, parse_megatron_args(text))
        args._megatron_parsed = cached
    return cached[1]


def apply_megatron_sizes(args: argparse.Namespace) -> None:
    """Fill ``--tp/--pp/--cp/--ep/--etp`` (and ``--orders``, where the command has it) from ``--megatron-args``
    (:func:`rankmap.solver.job.resolve.job_megatron_sizes`); the arguments not read are warnings, once.

    Raises
    ------
    InvalidArgumentError
        When a rankmap size flag and the Megatron argument disagree (naming both).
    """
    from rankmap.cli import warn
    from rankmap.solver.job.model import SIZE_KEYS
    from rankmap.solver.job.resolve import job_megatron_sizes

    if getattr(args, "megatron_args", None) is None:
        return
    first = not getattr(args, "_megatron_warned", False)
    args._megatron_warned = True
    filled = job_megatron_sizes(vars(args), warn if first else None)
    for key in SIZE_KEYS:
        setattr(args, key, filled.get(key))
    if hasattr(args, "orders"):
        args.orders = filled.get("orders")


def _model_flags_given(args: argparse.Namespace) -> bool:
    from rankmap.solver.job.resolve import model_keys_given

    return model_keys_given(vars(args))


def model_from_args(args: argparse.Namespace) -> ModelSpec:
    """The model the flags describe: ``--model`` / ``--model-file`` / ``--megatron-args`` (default:
    the seed GPT) with the per-run overrides applied (:func:`rankmap.solver.job.resolve.job_model`).

    Raises
    ------
    InvalidArgumentError
        For several of ``--model``, ``--model-file`` and ``--megatron-args``, an unknown preset, a bad
        file or a bad override.
    """
    from rankmap.solver.job.resolve import job_model

    return job_model(vars(args))


def traffic_from_args(args: argparse.Namespace, cfg) -> Traffic:
    """Payloads per class (bytes per rank per step) from parsed flags.

    The rule of :func:`rankmap.solver.job.model.resolve_traffic`: a model flag given
    (``--model``, ``--model-file``, ``--megatron-args`` or an override such as
    ``--seq-length``): the model's payloads with the classes named in
    ``--traffic`` replaced; only ``--traffic``: exactly those payloads, every
    other class 0; neither: the default model's payloads (DESIGN §3).

    Returns every class of :data:`TRAFFIC_CLASSES`, in that order.
    """
    from rankmap.solver.job.resolve import job_traffic

    return job_traffic(vars(args), cfg)


def _model_section(args: argparse.Namespace, cfg) -> dict | None:
    if getattr(args, "traffic", None) is not None and not _model_flags_given(args):
        return None
    model = model_from_args(args)
    counts = count_parameters(model)
    dense_rank, expert_rank = params_per_rank(model, cfg)
    return {
        "name": model.name,
        "num_micro_batches": num_micro_batches(model, cfg),
        "parameters": {
            **counts.to_dict(),
            "dense_per_rank": dense_rank,
            "expert_per_rank": expert_rank,
        },
        "spec": model.to_dict(),
        # the published recipe's parallel sizes, for a preset (solver.traffic.presets cites each)
        "recipe": dict(PRESET_RECIPES[model.name]) if model.name in PRESET_RECIPES else None,
    }


def traffic_document(traffic: dict, cfg, model: dict | None = None) -> dict:
    """The JSON document of ``rankmap traffic``.

    Per class: its group family and size, the payload ``bytes`` (S, bytes per
    rank per step), ``bytes_sent_per_rank`` (the most bytes one rank puts on
    the wire per step, what papers publish), the ``shape`` (one entry per part:
    kind, payload, subgroup size and stride, pipeline wrap share), the
    ``formula`` and its ``source``.
    """
    sent = bytes_sent_per_rank(traffic, cfg)
    notes = getattr(traffic, "notes", {})
    classes = {}
    for c in TRAFFIC_CLASSES:
        n = class_group_size(c, cfg)
        s = float(traffic.get(c, 0.0))
        parts = class_collectives(traffic, c)
        formula, source = notes.get(c, ("", ""))
        if not formula and s > 0:
            formula, source = "given explicitly", "user input"
        classes[c] = {
            "group": CLASS_GROUP[c],
            "kind": parts[0].kind if parts else CLASS_KIND[c],
            "group_size": n,
            "bytes": s,
            "bytes_sent_per_rank": sent[c],
            "shape": [
                {"kind": p.kind, "bytes": p.payload_bytes, "subgroup_size": p.size or n, "stride": p.stride,
                 **({"wrap": p.wrap} if p.kind == "p2p_chain" else {}), "what": p.what}
                for p in parts
            ],
            "formula": formula,
            "source": source,
        }
    return {
        "world_size": cfg.world_size,
        "sizes": dict(cfg.sizes),
        "model": model,
        "traffic": {c: float(traffic.get(c, 0.0)) for c in TRAFFIC_CLASSES},
        "bytes_sent_per_rank": sent,
        "total_bytes": float(sum(traffic.get(c, 0.0) for c in TRAFFIC_CLASSES)),
        "total_bytes_sent_per_rank": float(sum(sent.values())),
        "classes": classes,
    }


def _count(n: float) -> str:
    """A parameter count in words: ``5.05 billion``, ``631 million``."""
    n = float(n)
    for word, scale in (("trillion", 1e12), ("billion", 1e9), ("million", 1e6), ("thousand", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {word}"
    return f"{n:.3g}"


def traffic_table(doc: dict) -> str:
    """A human-readable table of a :func:`traffic_document`."""
    lines = []
    sizes = "  ".join(f"{k} {v}" for k, v in doc["sizes"].items())
    lines.append(f"world_size {doc['world_size']}  {sizes}")
    model = doc["model"]
    if model is None:
        lines.append("payloads: explicit (--traffic)")
    else:
        p = model["parameters"]
        spec = model["spec"]
        desc = (f"model {model['name']}: {_count(p['total'])} parameters"
                + (f" ({_count(p['active'])} active, {_count(p['expert'])} in experts)" if p["expert"] else "")
                + f"; s {spec['seq_length']}, b {spec['micro_batch_size']}, m {model['num_micro_batches']}, "
                f"{spec['dtype']}" + (f" with FP8 GEMMs ({spec['fp8']})" if spec.get("fp8") else ""))
        lines.append(desc)
        lines.append(f"parameters per rank: {_count(p['dense_per_rank'])} dense, {_count(p['expert_per_rank'])} expert")
        rec = model.get("recipe")
        if rec:
            lines.append("published recipe: " + "  ".join(f"{k} {rec[k]}" for k in ("tp", "pp", "cp", "ep", "vp"))
                         + f"  on {rec['gpus']:,} GPUs (sources in rankmap.solver.traffic.presets)")
    lines.append("")
    header = ["class", "group", "shape", "ranks", "payload S", "sent/rank/step"]
    rows = []
    for c, info in doc["classes"].items():
        shape = " + ".join(
            p["kind"] + (f"[{p['subgroup_size']}]" if p["subgroup_size"] != info["group_size"] else "")
            + (" +wrap" if p.get("wrap") else "") for p in info["shape"]) or info["kind"]
        rows.append([c, info["group"], shape, str(info["group_size"]),
                     format_bytes(info["bytes"]), format_bytes(info["bytes_sent_per_rank"])])
    rows.append(["total", "", "", "", format_bytes(doc["total_bytes"]), format_bytes(doc["total_bytes_sent_per_rank"])])
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    right = {3, 4, 5}

    def fmt(row):
        return "  ".join(x.rjust(w) if i in right else x.ljust(w) for i, (x, w) in enumerate(zip(row, widths))).rstrip()

    lines.append(fmt(header))
    lines.append("  ".join("-" * w for w in widths))
    for r in rows[:-1]:
        lines.append(fmt(r))
    lines.append("  ".join("-" * w for w in widths))
    lines.append(fmt(rows[-1]))
    lines.append("")
    lines.append("bytes: 1 GB = 1e9 B.  sent/rank/step: the most bytes one rank puts on the wire per training step")
    lines.append("(ring all_reduce 2(n-1)/n S, all_gather and all_to_all (n-1)/n S, ring_p2p S, p2p_chain S to "
                 "each neighbour; [k] = over subgroups of k;")
    lines.append("a ring reduce-scatter moves like an all_gather and is listed as one: the distributed optimizer's")
    lines.append("gradient reduce-scatter + parameter all-gather is one all_gather of both payloads).")
    import textwrap

    for c, info in doc["classes"].items():
        if info["bytes"] > 0 and info["formula"]:
            lines.extend(textwrap.wrap(f"{c}: {info['formula']}  [{info['source']}]", width=110,
                                       break_on_hyphens=False, initial_indent="  ", subsequent_indent="      "))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the payloads; returns 0 (bad input raises InvalidArgumentError)."""
    from rankmap.cli import config_from_args

    apply_megatron_sizes(args)
    cfg = config_from_args(args)
    traffic = traffic_from_args(args, cfg)
    doc = traffic_document(traffic, cfg, _model_section(args, cfg))
    if getattr(args, "format", "json") == "table":
        out = traffic_table(doc)
    else:
        out = json.dumps(doc, indent=2)
    sys.stdout.write(out + "\n")
    return 0


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``traffic`` subcommand to the main CLI's subparsers."""
    from rankmap.cli import add_size_arguments

    p = subparsers.add_parser(
        "traffic",
        help="bytes per rank per training step of each traffic class, from a model or explicit",
        description="Payload of each traffic class (bytes per rank per training step), the Megatron "
                    "group it runs in and the bytes between two ranks of such a group (DESIGN §3).",
    )
    add_size_arguments(p, world_size_required=True)
    add_model_arguments(p)
    p.add_argument("--format", choices=("json", "table"), default="json")
    p.set_defaults(func=run)
    return p
