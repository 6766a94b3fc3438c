"""The job model shared by the command line, batch and the gRPC server (issue 14).

One place decides what a job means, whatever it came from (flags, a job file, a
batch entry, a ``SolveRequest``):

* :func:`usable_gpus`: the default world size (GPUs not excluded);
* :func:`megatron_sizes`: the parallel sizes Megatron-LM arguments spell out,
  checked against the ones given;
* :func:`resolve_traffic`: the traffic rule of DESIGN §3 — a model (a preset, a
  model file or mapping, Megatron-LM arguments; the seed's GPT when none is
  given) with explicit byte counts replacing its classes, or explicit bytes
  alone.

Pure Python over plain types: no argparse, no protobuf.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import networkx as nx

from .errors import InvalidArgumentError

__all__ = [
    "SIZE_KEYS",
    "usable_gpus",
    "megatron_sizes",
    "resolve_traffic",
]

#: The parallel sizes Megatron-LM arguments can set.
SIZE_KEYS = ("tp", "pp", "cp", "ep", "etp")

def usable_gpus(graph: nx.Graph, exclude_devices: Iterable[str] = (), exclude_hosts: Iterable[str] = ()) -> int:
    """GPUs of ``graph`` that are not excluded: the default world size.

    A GPU is a node of ``kind`` ``"gpu"`` (the default, DESIGN §2); its host is
    its ``host`` attribute, or itself when absent or empty.  O(nodes).
    """
    devs = {str(d) for d in exclude_devices}
    hosts = {str(h) for h in exclude_hosts}
    n = 0
    for node, data in graph.nodes(data=True):
        if data.get("kind", "gpu") != "gpu":
            continue
        host = data.get("host")
        host = str(node) if host is None or host == "" else str(host)
        if str(node) not in devs and host not in hosts:
            n += 1
    return n


def megatron_sizes(meg, given: Mapping[str, int | None],
                   conflict: Callable[[str, int, int], InvalidArgumentError]) -> dict[str, int | None]:
    """The parallel sizes after reading Megatron-LM arguments.

    Only the sizes the arguments spell out (``--tensor-model-parallel-size``
    ...) count: a model-only argument string stands in for a model file, and
    the sizes then come from ``given`` (rankmap's flags or the request).

    Parameters
    ----------
    meg : MegatronArgs
    given : mapping of ``tp pp cp ep etp`` -> int or None (not given)
    conflict : callable(key, given value, Megatron's value) -> InvalidArgumentError
        The error to raise when both give a size and they differ (the CLI and
        the server name the fields their own way).

    Returns
    -------
    dict
        ``given`` with the sizes the arguments spell out filled in.
    """
    out = dict(given)
    for key in SIZE_KEYS:
        if key not in meg.sizes:
            continue
        value = int(meg.sizes[key])
        if out.get(key) is None:
            out[key] = value
        elif int(out[key]) != value:
            raise conflict(key, int(out[key]), value)
    return out


def resolve_traffic(cfg, explicit: Mapping[str, float] | None = None, model=None, megatron=None,
                    overrides: Mapping[str, Any] | None = None, fill: bool = True):
    """Payloads and shapes of every class (DESIGN §3), as every entry point computes them.

    Parameters
    ----------
    cfg : ParallelConfig
    explicit : mapping class -> bytes per rank per step, optional
        Replaces the model's payload of those classes (default shape).
    model : ModelSpec, optional
        A preset, model file or mapping already read.
    megatron : MegatronArgs, optional
        Megatron-LM arguments (exclusive with ``model``); the model is taken at
        ``cfg``'s tp and pp (:meth:`~rankmap.solver.traffic.MegatronArgs.model_for`).
    overrides : mapping of ModelSpec field -> value, optional
        Per-run overrides (``seq_length``, ``global_batch_size`` ...); ``None``
        values are ignored.
    fill : bool
        With explicit bytes alone: every class (the others 0) when True, only
        the given classes when False (a client's dict reaches the solver as is).

    The rule: a model, Megatron arguments or an override given → the model's
    payloads (the seed's GPT when only overrides are given) with ``explicit``
    classes replaced; only ``explicit`` → exactly those bytes; nothing → the
    default model (DESIGN §3).

    Returns
    -------
    Traffic

    Raises
    ------
    InvalidArgumentError
        Both ``model`` and ``megatron``; a model that does not fit ``cfg``.
    """
    from .traffic import DEFAULT_MODEL, Traffic, traffic_from_model, with_overrides, zero_traffic

    over = {k: v for k, v in (overrides or {}).items() if v is not None}
    if model is not None and megatron is not None:
        raise InvalidArgumentError("give a model or Megatron-LM arguments, not both", "model")
    if megatron is not None:
        model = megatron.model_for(cfg.tp, cfg.pp)
    if model is None and not over and explicit is not None:
        return Traffic(zero_traffic() if fill else {}).replace(explicit)
    base = with_overrides(model if model is not None else DEFAULT_MODEL, **over)
    return traffic_from_model(base, cfg).replace(dict(explicit or {}))
