"""Generic values and traffic on the wire: ``rankmap.v1.Value``, ``ModelSpec`` and ``Traffic``.

:func:`traffic_to_proto` (client side) sends explicit payloads, a model (preset,
overrides or a whole ``ModelSpec``) or Megatron-LM arguments; :func:`traffic_from_proto`
(server side) turns them into the payloads and shapes ``rankmap solve`` would use.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any, Mapping

import numpy as np

from rankmap.solver.megatron.config import ParallelConfig
from rankmap.solver.errors import InvalidArgumentError
from rankmap.v1 import rankmap_pb2 as pb
from rankmap.wire.costs import _class_order

__all__ = [
    "value_to_proto",
    "value_from_proto",
    "model_to_proto",
    "model_from_proto",
    "traffic_to_proto",
    "traffic_from_proto",
    "sizes_with_megatron",
]

# --------------------------------------------------------------------------- generic values


def value_to_proto(value: Any) -> "pb.Value":
    """A JSON-like Python value as ``rankmap.v1.Value`` (ints stay ints)."""
    out = pb.Value()
    if value is None:
        out.null_value = True
    elif isinstance(value, (bool, np.bool_)):
        out.bool_value = bool(value)
    elif isinstance(value, numbers.Integral):
        iv = int(value)
        if -(2**63) <= iv < 2**63:
            out.int_value = iv
        else:
            out.double_value = float(iv)
    elif isinstance(value, numbers.Real):
        out.double_value = float(value)
    elif isinstance(value, str):
        out.string_value = value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            out.map_value.entries.add(key=str(k), value=value_to_proto(v))
    elif isinstance(value, (list, tuple, np.ndarray)):
        items = value.tolist() if isinstance(value, np.ndarray) else value
        out.list_value.values.extend(value_to_proto(v) for v in items)
    else:
        out.string_value = str(value)
    return out


def value_from_proto(value: "pb.Value", tuples: bool = False) -> Any:
    """The Python value of a ``rankmap.v1.Value`` (lists, or tuples if ``tuples``)."""
    kind = value.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return None
    if kind == "list_value":
        items = [value_from_proto(v, tuples) for v in value.list_value.values]
        return tuple(items) if tuples else items
    if kind == "map_value":
        return {e.key: value_from_proto(e.value, tuples) for e in value.map_value.entries}
    return getattr(value, kind)


# --------------------------------------------------------------------------- traffic


def model_to_proto(model) -> "pb.ModelSpec":
    """A ``ModelSpec`` from a preset name, a mapping (``preset`` plus field overrides) or a
    whole :class:`~rankmap.solver.traffic.ModelSpec` (every field, ``None`` included).

    Raises
    ------
    InvalidArgumentError
        Another type, or a preset name that is not a string (field ``model``).
    """
    out = pb.ModelSpec()
    if model is None:
        return out
    if isinstance(model, str):
        out.preset = model
        return out
    if dataclasses.is_dataclass(model) and not isinstance(model, type):
        # a full ModelSpec: every field, None included (see traffic_from_proto)
        for f in dataclasses.fields(model):
            out.overrides[f.name].CopyFrom(value_to_proto(getattr(model, f.name)))
        return out
    if isinstance(model, Mapping):
        d = dict(model)
        if len(d) == 1 and isinstance(d.get("model"), Mapping):
            d = dict(d["model"])
        preset = d.pop("preset", None)
        if preset is not None:
            if not isinstance(preset, str):
                raise InvalidArgumentError(f"model preset name must be a string, got {preset!r}", "model")
            out.preset = preset
        for k, v in d.items():
            out.overrides[str(k).strip().replace("-", "_")].CopyFrom(value_to_proto(v))
        return out
    raise InvalidArgumentError(
        f"model must be a preset name, a mapping of model fields or a ModelSpec, got {type(model).__name__}", "model"
    )


def traffic_to_proto(traffic=None, model=None) -> "pb.Traffic":
    """``Traffic`` from explicit payloads and/or a model.

    Parameters
    ----------
    traffic : mapping class -> bytes, or str ``"tp=4e9,dp=1GB"``, or None
        Validated here with the solver's parser (same messages as the CLI).
    model : str preset name, mapping (``preset`` plus ModelSpec fields),
        ``ModelSpec``, Megatron-LM arguments, or None.
        Megatron-LM arguments are a string with ``--`` flags
        (``"--num-layers 80 --hidden-size 8192 ..."``, a ``torchrun ...
        pretrain_gpt.py`` prefix allowed) or a
        :class:`~rankmap.solver.traffic.MegatronArgs`; they travel as
        ``Traffic.megatron_args`` and are read on the server.
    """
    from rankmap.solver.traffic import parse_traffic, traffic_from_mapping

    out = pb.Traffic()
    if traffic is not None:
        explicit = parse_traffic(traffic) if isinstance(traffic, str) else traffic_from_mapping(traffic)
        for cls, b in explicit.items():
            out.bytes[cls] = float(b)
        if not explicit and model is None:
            # an empty mapping still means "explicit, no traffic" (not "default model")
            out.bytes["tp"] = 0.0
    if model is not None:
        from rankmap.solver.traffic import MegatronArgs, parse_megatron_args

        if isinstance(model, MegatronArgs):
            model = model.text
        if isinstance(model, str) and "--" in model:
            parse_megatron_args(model)  # same messages as the CLI, before anything is sent
            out.megatron_args = model
        else:
            out.model.CopyFrom(model_to_proto(model))
    return out


def model_from_proto(msg: "pb.ModelSpec"):
    """The :class:`~rankmap.solver.traffic.ModelSpec` of a ``ModelSpec`` message: the preset
    (``default`` when empty) with the overrides applied; unknown fields raise the solver's error."""
    from rankmap.solver.traffic import model_preset, with_overrides

    overrides = {k: value_from_proto(v, tuples=True) for k, v in sorted(msg.overrides.items())}
    present = {k: v for k, v in overrides.items() if v is not None}
    nulls = {k: None for k, v in overrides.items() if v is None}
    model = with_overrides(model_preset(msg.preset or "default"), **present)
    if nulls:
        known = {f.name for f in dataclasses.fields(model)}
        unknown = {k: 1 for k in nulls if k not in known}
        if unknown:
            with_overrides(model, **unknown)  # raises the solver's "unknown model field" error
        model = dataclasses.replace(model, **nulls)
    return model


def traffic_from_proto(msg: "pb.Traffic", cfg: ParallelConfig, has_traffic: bool = True) -> dict[str, float]:
    """Payloads per class (bytes per rank per step), as ``rankmap solve`` computes them.

    * ``model`` set: the model's payloads (every class), classes in ``bytes``
      replaced;
    * only ``bytes``: exactly those classes (the solver counts the others as
      0), so a client's ``traffic`` dict reaches ``solve`` unchanged;
    * neither: the default model's payloads (DESIGN §3).

    Classes come in report order.
    """
    from rankmap.solver.job.model import SIZE_KEYS, megatron_sizes, resolve_traffic
    from rankmap.solver.traffic import Traffic, parse_megatron_args, traffic_from_mapping

    explicit = traffic_from_mapping(dict(msg.bytes)) if (has_traffic and msg.bytes) else None
    model = meg = over = None
    if has_traffic and msg.megatron_args:
        meg = parse_megatron_args(msg.megatron_args)

        def conflict(key, given, value):
            return InvalidArgumentError(f"sizes.{key}={given} disagrees with {key}={value} in traffic.megatron_args",
                                        "traffic.megatron_args")

        # the sizes the arguments spell out must match the request's (filled in when it left them out)
        megatron_sizes(meg, {k: int(getattr(cfg, k)) for k in SIZE_KEYS}, conflict)
        if msg.HasField("model"):
            if msg.model.preset:
                raise InvalidArgumentError(
                    "give traffic.model.preset or traffic.megatron_args, not both", "traffic.model.preset"
                )
            over = {k: value_from_proto(v, tuples=True) for k, v in sorted(msg.model.overrides.items())}
    elif has_traffic and msg.HasField("model"):
        model = model_from_proto(msg.model)
    out = resolve_traffic(cfg, explicit, model=model, megatron=meg, overrides=over, fill=False)
    order = _class_order(out)
    return Traffic({c: float(out[c]) for c in order}, out.collectives, out.notes, out.model, out.explicit)


def sizes_with_megatron(sizes: "pb.ParallelSizes", traffic: "pb.Traffic", has_traffic: bool) -> "pb.ParallelSizes":
    """``sizes`` with the parallel sizes of ``traffic.megatron_args`` filled in where the request
    leaves them out (as ``rankmap solve --megatron-args`` fills ``--tp`` ...)."""
    if not (has_traffic and traffic.megatron_args):
        return sizes
    from rankmap.solver.traffic import parse_megatron_args

    meg = parse_megatron_args(traffic.megatron_args)
    out = pb.ParallelSizes()
    out.CopyFrom(sizes)
    for key, value in meg.sizes.items():
        if not out.HasField(key):
            setattr(out, key, int(value))
    return out
