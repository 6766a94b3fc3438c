"""The job model shared by the command line, batch and the gRPC server (issue 14).

One place decides what a job means, whatever it came from (flags, a job file, a
batch entry, a ``SolveRequest``):

* :data:`JOB_KEYS` / :data:`JOB_KEY_ALIASES`, :func:`normalize_job` and
  :func:`load_job_file`: the declarative job file (YAML through the strict
  loader of :mod:`~rankmap.solver.formats.safe`), paths relative to the file;
* :data:`JOB_SIZE_KEYS` / :func:`job_sizes`: the parallel sizes of a job as a
  :class:`~rankmap.solver.ParallelSizes`;
* :func:`usable_gpus`: the default world size (GPUs not excluded);
* :func:`megatron_sizes`: the parallel sizes Megatron-LM arguments spell out,
  checked against the ones given;
* :data:`JOB_DEFAULTS`: the value of a job key left unset (the solve options'
  defaults; the command line's flags default to "unset" and take these);
* :func:`resolve_traffic`: the traffic rule of DESIGN §3 — a model (a preset, a
  model file or mapping, Megatron-LM arguments; the seed's GPT when none is
  given) with explicit byte counts replacing its classes, or explicit bytes
  alone.

:mod:`rankmap.solver.job.resolve` turns a whole job dict into the solver's
arguments (``rankmap solve`` and ``rankmap batch``).

Pure Python over plain types: no argparse, no protobuf.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from ..megatron.config import PARALLEL_SIZE_KEYS, ParallelSizes
from ..errors import InvalidArgumentError
from ..types import SolveOptions

if TYPE_CHECKING:  # only annotations: importing the job model loads no networkx
    import networkx as nx

__all__ = [
    "JOB_KEYS",
    "JOB_SIZE_KEYS",
    "JOB_KEY_ALIASES",
    "JOB_DEFAULTS",
    "job_sizes",
    "JOB_CLUSTER_FILES",
    "normalize_job",
    "load_job_file",
    "SIZE_KEYS",
    "usable_gpus",
    "megatron_sizes",
    "fill_sizes",
    "resolve_traffic",
]

#: Job keys of the parallel sizes: :data:`~rankmap.solver.PARALLEL_SIZE_KEYS` with hierarchical
#: CP spelt as its CLI flag (``--hierarchical-cp-sizes``); :func:`job_sizes` reads them.
JOB_SIZE_KEYS = (*PARALLEL_SIZE_KEYS[:-1], "hierarchical_cp_sizes")

#: Job-file keys (= the CLI flags without the leading dashes, ``-`` → ``_``).
JOB_KEYS = (
    "cluster",
    "host_topology",
    "gpu",
    "fabric",
    "nodelist",
    "topology_name",
    "gpus_per_node",
    "rate",
    "kubernetes_nodes",
    "topology_labels",
    "kueue_topology",
    "volcano_hypernodes",
    "topograph_model",
    "ibnetdiscover",
    "nvlink_domains",
    "nvlink_domain_rate",
    "block_links",
    "measured",
    "exclude_slow",
    *JOB_SIZE_KEYS,
    "traffic",
    "model",
    "model_file",
    "megatron_args",
    "seq_length",
    "micro_batch_size",
    "global_batch_size",
    "num_micro_batches",
    "dtype",
    "exposure",
    "mode",
    "launch_order",
    "orders",
    "constraint",
    "exclude_host",
    "exclude_device",
    "time_limit",
    "seed",
    "nccl_algo",
    "nccl_rate",
    "pxn",
    "nccl_latency",
    "format",
    "server",
)


#: The value of each job key with a default that a job (or the command line) leaves unset: the
#: :class:`~rankmap.solver.types.SolveOptions` defaults under their job-key names, the output format
#: and what Slurm topology/block blocks are.  (World size: the usable GPUs, :func:`usable_gpus`;
#: traffic: the seed's GPT, :func:`resolve_traffic`; sizes: :class:`~rankmap.solver.ParallelSizes`.)
JOB_DEFAULTS: Mapping[str, Any] = {
    **{key: SolveOptions.__dataclass_fields__[name].default
       for key, name in (("mode", "mode"), ("orders", "orders"), ("launch_order", "launch_order"),
                         ("time_limit", "time_limit_seconds"), ("seed", "seed"))},
    "format": "json",
    "block_links": "nvlink",
    # how NCCL runs the collectives (NcclModel's defaults: NCCL's own)
    "nccl_algo": "auto",
    "pxn": True,
    "nccl_latency": True,
}

#: Job keys naming a topology file (relative paths are resolved against the job file's directory).
JOB_CLUSTER_FILES = ("kubernetes_nodes", "kueue_topology", "volcano_hypernodes", "topograph_model", "ibnetdiscover",
                     "nvlink_domains")

#: Launch-order policies that are not file names (:func:`rankmap.solver.launch.placement.launcher_host_order`).
_LAUNCH_POLICIES = ("sorted", "listed")


def load_job_file(path: str) -> dict[str, Any]:
    """Read a job YAML file into a dict of :data:`JOB_KEYS`.

    Relative paths inside it (cluster, host_topology, fabric, model_file) are
    resolved against the file's folder.

    Raises
    ------
    InvalidArgumentError
        Missing file, malformed YAML (with line), a non-mapping document, or an
        unknown key (named).
    """
    from ..formats.safe import MAX_YAML_BYTES, load_yaml

    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read(MAX_YAML_BYTES + 1)  # load_yaml refuses anything longer
    except FileNotFoundError:
        raise InvalidArgumentError(f"job file {path!r} does not exist", "job") from None
    except (UnicodeDecodeError, IsADirectoryError, PermissionError) as exc:
        raise InvalidArgumentError(f"cannot read job file {path!r}: {exc}", "job") from None
    # depth, size, alias expansion, duplicate keys, ASCII decimal integers (safe.py)
    doc = load_yaml(text, f"job file {path}", "job")
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise InvalidArgumentError(f"job file {path}: expected a mapping of keys, got {type(doc).__name__}", "job")
    return normalize_job(doc, os.path.dirname(os.path.abspath(path)), f"job file {path}")


#: Alternative spellings accepted in job files (the protobuf/solver names).
JOB_KEY_ALIASES = {
    "constraints": "constraint",
    "exclude_hosts": "exclude_host",
    "exclude_devices": "exclude_device",
    "time_limit_seconds": "time_limit",
    "hierarchical_context_parallel_sizes": "hierarchical_cp_sizes",
}


def normalize_job(doc: dict, base_dir: str, where: str, extra_known: tuple[str, ...] = ()) -> dict[str, Any]:
    """Job keys to :data:`JOB_KEYS` spelling, relative paths resolved against ``base_dir``.

    ``-`` and ``_`` are interchangeable; :data:`JOB_KEY_ALIASES` apply; a model
    given as a mapping becomes ``model_mapping``.  ``extra_known`` keys (named
    in the error only) are left to the caller.

    Raises
    ------
    InvalidArgumentError
        An unknown key, named with ``where``.
    """
    out: dict[str, Any] = {}
    for key, value in doc.items():
        k = str(key).replace("-", "_")
        k = JOB_KEY_ALIASES.get(k, k)
        if k not in JOB_KEYS:
            import difflib

            close = difflib.get_close_matches(k, list(extra_known) + list(JOB_KEYS) + list(JOB_KEY_ALIASES), n=1)
            hint = f" (did you mean {JOB_KEY_ALIASES.get(close[0], close[0])!r}?)" if close else ""
            known = ", ".join(extra_known + JOB_KEYS)
            raise InvalidArgumentError(f"{where}: unknown key {key!r}{hint}; known keys: {known}", str(key))
        if k == "launch_order" and isinstance(value, str) and value not in _LAUNCH_POLICIES:
            value = value if os.path.isabs(value) else os.path.join(base_dir, value)  # a host list file
        if k == "host_topology" and isinstance(value, (str, list)):  # FILE or HOSTLIST=FILE (issue 27)
            from ..formats.measured import absolute_spec

            value = ([absolute_spec(v, base_dir) if isinstance(v, str) else v for v in value]
                     if isinstance(value, list) else absolute_spec(value, base_dir))
        elif k in ("cluster", "fabric", "model_file", *JOB_CLUSTER_FILES) and isinstance(value, str):
            value = value if os.path.isabs(value) else os.path.join(base_dir, value)
        if k == "measured":
            from ..formats.measured import absolute_spec

            items = value if isinstance(value, list) else [value]
            value = [absolute_spec(v, base_dir) if isinstance(v, str) else v for v in items]
        if k == "model" and isinstance(value, dict):
            k = "model_mapping"
        if k in out or (k in ("model", "model_mapping") and ({"model", "model_mapping"} & set(out))):
            raise InvalidArgumentError(f"{where}: key {key!r} given twice (spellings of one key)", str(key))
        out[k] = value
    return out


#: The parallel sizes Megatron-LM arguments can set.
SIZE_KEYS = ("tp", "pp", "cp", "ep", "etp")

def job_sizes(job: Mapping[str, Any]) -> ParallelSizes:
    """The parallel sizes of a job, parsed flags or normalized job file (:data:`JOB_SIZE_KEYS`;
    other keys are ignored, a missing or ``None`` size is not given)."""
    values = {k: job.get(k) for k in JOB_SIZE_KEYS[:-1]}
    return ParallelSizes(**values, hierarchical_context_parallel_sizes=job.get("hierarchical_cp_sizes"))


def usable_gpus(graph: nx.Graph, exclude_devices: Iterable[str] = (), exclude_hosts: Iterable[str] = ()) -> int:
    """GPUs of ``graph`` that are not excluded: the default world size.

    A GPU is a node of ``kind`` ``"gpu"`` (the default, DESIGN §2); its host is
    its ``host`` attribute, else the one :func:`~rankmap.solver.fabric.hostinfer.infer_hosts`
    finds, else itself.  O(nodes + edges).
    """
    devs = {str(d) for d in exclude_devices}
    hosts = {str(h) for h in exclude_hosts}
    if hosts:
        from ..fabric.hostinfer import infer_hosts

        graph = infer_hosts(graph)  # an excluded host may be an inferred one
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
    return fill_sizes(given, meg.sizes, conflict)


def fill_sizes(given: Mapping[str, int | None], spelled: Mapping[str, Any],
               conflict: Callable[[str, int, int], InvalidArgumentError]) -> dict[str, int | None]:
    """``given`` (``tp pp cp ep etp`` -> int or None) with the sizes ``spelled`` out elsewhere
    (Megatron arguments, a result file) filled in where not given; integer entries only.

    Raises
    ------
    InvalidArgumentError
        ``conflict(key, given value, spelled value)`` when both give a size and they differ.
    """
    out = dict(given)
    for key in SIZE_KEYS:
        value = spelled.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            continue
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
    from ..traffic import DEFAULT_MODEL, Traffic, traffic_from_model, with_overrides, zero_traffic

    over = {k: v for k, v in (overrides or {}).items() if v is not None}
    if model is not None and megatron is not None:
        raise InvalidArgumentError("give a model or Megatron-LM arguments, not both", "model")
    if megatron is not None:
        model = megatron.model_for(cfg.tp, cfg.pp)
    if model is None and not over and explicit is not None:
        return Traffic(zero_traffic() if fill else {}).replace(explicit)
    base = with_overrides(model if model is not None else DEFAULT_MODEL, **over)
    return traffic_from_model(base, cfg).replace(dict(explicit or {}))
