"""A job dict resolved into the solver's arguments: ``(graph, cfg, traffic, options)`` (issue 14).

The one resolution of a job for ``rankmap solve`` (its flags and job file) and
``rankmap batch`` / :func:`rankmap.batch.solve_many` (job entries):

* :func:`~.values.fill_job`: a job dict's values checked (the types a job file may
  spell them in) and filled in where ``given`` (values already typed: the
  command line's flags) leaves them unset;
* :func:`resolve_job`: that, plus the job file a ``cluster`` ending in
  ``.yaml``/``.yml`` names, then the cluster graph, the parallel config (world
  size: the usable GPUs), the traffic (:func:`~rankmap.solver.job.model.resolve_traffic`)
  and the :class:`~rankmap.solver.types.SolveOptions`, the defaults being
  :data:`~rankmap.solver.job.model.JOB_DEFAULTS`;
* the value parsers they share with the command line are in :mod:`.values`.

The gRPC server reads a ``SolveRequest`` instead (:mod:`rankmap.wire`), with
the same traffic rule and default world size (:mod:`rankmap.solver.job.model`).
Pure Python over plain types: no argparse, no protobuf.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from ..errors import InvalidArgumentError
from ..formats.safe import strict_int
from ..megatron.ranks import DEFAULT_ORDER
from .model import JOB_DEFAULTS, SIZE_KEYS, job_sizes, load_job_file, megatron_sizes, usable_gpus
from .values import exposure_from_value, fill_job, job_nccl, launch_order_from_value, parse_rates

__all__ = [
    "ResolvedJob",
    "resolve_job",
    "job_graph",
    "job_model",
    "job_traffic",
    "job_cluster",
    "build_job_cluster",
    "cluster_keys_given",
    "job_options",
    "job_measured",
    "job_megatron_sizes",
    "model_keys_given",
    "MODEL_OVERRIDE_KEYS",
    "CLUSTER_SOURCE_KEYS",
]

#: Job key -> ModelSpec field of the per-run model overrides.
MODEL_OVERRIDE_KEYS = {
    "seq_length": "seq_length",
    "micro_batch_size": "micro_batch_size",
    "global_batch_size": "global_batch_size",
    "num_micro_batches": "num_micro_batches",
    "dtype": "dtype",
}

#: Cluster keys beyond the Slurm ones (``host_topology``, ``fabric``, ``nodelist``).
CLUSTER_SOURCE_KEYS = ("kubernetes_nodes", "topology_labels", "kueue_topology", "volcano_hypernodes",
                       "topograph_model", "ibnetdiscover", "nvlink_domains", "nvlink_domain_rate")

#: rankmap size key -> the Megatron-LM flag that sets it.
_MEGATRON_SIZE_FLAGS = {
    "tp": "--tensor-model-parallel-size",
    "pp": "--pipeline-model-parallel-size",
    "cp": "--context-parallel-size",
    "ep": "--expert-model-parallel-size",
    "etp": "--expert-tensor-parallel-size",
}

Warn = Callable[[str], None]


# --------------------------------------------------------------------------- the parts


def _megatron(job: Mapping[str, Any]):
    from ..traffic import parse_megatron_args

    text = job.get("megatron_args")
    return None if text is None else parse_megatron_args(text)


def job_megatron_sizes(job: Mapping[str, Any], warn: Warn | None = None) -> dict[str, Any]:
    """``job`` with the parallel sizes its ``megatron_args`` spell out filled in (and their group
    order as ``orders`` when unset); the arguments rankmap does not read go to ``warn``.

    Raises
    ------
    InvalidArgumentError
        A size given both ways with different values (naming both).
    """
    meg = _megatron(job)
    if meg is None:
        return dict(job)

    def conflict(key, given, value):
        return InvalidArgumentError(
            f"--{key} {given} disagrees with {_MEGATRON_SIZE_FLAGS[key]} {value} in --megatron-args", key)

    out = {**job, **megatron_sizes(meg, {k: job.get(k) for k in SIZE_KEYS}, conflict)}
    # --use-tp-pp-dp-mapping: Megatron builds its groups in that order, so search it unless told otherwise
    # (job_options makes it the baseline's order too)
    if meg.order != "tp-cp-ep-dp-pp" and out.get("orders") is None:
        out["orders"] = meg.order
    for hint in meg.suggestions() if warn is not None else ():
        warn(f"Megatron argument {hint} is not read")
    return out


def model_keys_given(job: Mapping[str, Any]) -> bool:
    """True when ``job`` names a model: ``model``, ``model_file``, ``megatron_args`` or an override."""
    if job.get("model") is not None or job.get("model_file") is not None or job.get("megatron_args") is not None:
        return True
    return any(job.get(key) is not None for key in MODEL_OVERRIDE_KEYS)


def job_model(job: Mapping[str, Any]):
    """The model ``job`` describes: ``model`` / ``model_file`` / ``megatron_args`` (default: the seed
    GPT) with the per-run overrides applied.

    Raises
    ------
    InvalidArgumentError
        For several of ``model``, ``model_file`` and ``megatron_args``, an unknown preset, a bad file
        or a bad override.
    """
    from ..traffic import DEFAULT_MODEL, load_model_file, model_preset, with_overrides

    name, path = job.get("model"), job.get("model_file")
    meg = _megatron(job)
    given = [f for f, v in (("--model", name), ("--model-file", path), ("--megatron-args", meg)) if v is not None]
    if len(given) > 1:
        raise InvalidArgumentError(f"give one of {' and '.join(given)}, not several", "model")
    if meg is not None:
        base = meg.model_for(job.get("tp") or 1, job.get("pp") or 1)
    elif path is not None:
        base = load_model_file(path)
    elif name is not None:
        base = model_preset(name)
    else:
        base = DEFAULT_MODEL
    return with_overrides(base, **{f: job.get(key) for key, f in MODEL_OVERRIDE_KEYS.items()})


def job_traffic(job: Mapping[str, Any], cfg):
    """Payloads per class (:func:`~rankmap.solver.job.model.resolve_traffic`): the model of ``job`` (a
    ``model_mapping`` unless ``megatron_args`` are given) with the classes of ``traffic`` (a
    mapping or ``CLASS=BYTES,...``) replaced; ``traffic`` alone gives just those classes."""
    from .model import resolve_traffic
    from ..traffic import parse_traffic

    text = job.get("traffic")
    explicit = None if text is None else (dict(text) if isinstance(text, Mapping) else parse_traffic(text))
    spec = job.get("model_mapping")
    if spec is not None and job.get("megatron_args") is None:
        return resolve_traffic(cfg, explicit, model=spec,
                               overrides={f: job.get(key) for key, f in MODEL_OVERRIDE_KEYS.items()})
    return resolve_traffic(cfg, explicit, model=job_model(job) if model_keys_given(job) else None)


def cluster_keys_given(job: Mapping[str, Any]) -> bool:
    """True when any cluster key other than a ``cluster`` graph file is set."""
    return bool(job.get("host_topology") or job.get("fabric") or job.get("nodelist")
                or any(job.get(k) for k in CLUSTER_SOURCE_KEYS))


def job_cluster(job: Mapping[str, Any], warn: Warn | None = None):
    """The cluster graph of ``job``: its ``cluster`` graph file, or built from the cluster keys
    (:func:`~rankmap.solver.formats.build_cluster`; the importers' guesses go to ``warn``).

    Raises
    ------
    InvalidArgumentError
        Both a graph file and cluster keys, neither, a bad file, or a link rate out of range.
    """
    if job.get("cluster") and (cluster_keys_given(job) or job.get("gpu") or job.get("rate")
                               or job.get("topology_name") or job.get("gpus_per_node")):
        raise InvalidArgumentError(
            "give either a CLUSTER file or the --host-topology/--fabric/--nodelist/--gpu/--rate flags, not both",
            "cluster",
        )
    if job.get("cluster"):
        from ..fabric.hostinfer import NOTE_KEY, infer_hosts
        from ..formats.graphfile import KIND_WARNINGS_KEY, load_graph

        G = infer_hosts(load_graph(job["cluster"]))  # GPUs without host: their machines, or an error
        if warn is not None and G.graph.get(NOTE_KEY):
            warn(str(G.graph[NOTE_KEY]))
        for w in (G.graph.get(KIND_WARNINGS_KEY, ()) or ()) if warn is not None else ():
            warn(str(w))  # a node kind that looks like a typo of a known one ('gpuu')
        return G
    if not cluster_keys_given(job):
        raise InvalidArgumentError("no cluster given: pass a CLUSTER file or --host-topology/--fabric/--nodelist",
                                   "cluster")
    return build_job_cluster(job, warn)


def build_job_cluster(job: Mapping[str, Any], warn: Warn | None = None):
    """The cluster graph built from the cluster keys of ``job`` (``rankmap cluster``'s flags).

    The importers' guesses (a GPU generation assumed from an NVLink count, a synthetic NIC,
    ...) are in the graph's ``warnings`` and also go to ``warn``: a silently wrong bandwidth
    would choose the layout.

    Raises
    ------
    InvalidArgumentError
        Bad input, or a link whose rate is out of the range ``rankmap solve`` accepts.
    """
    from ..fabric.graph import MAX_BANDWIDTH_GBPS, MIN_BANDWIDTH_GBPS
    from ..formats import build_cluster

    from functools import partial

    from ..formats.host_types import build_mixed_cluster

    build = partial(
        build_cluster,
        gpu=job.get("gpu"),
        fabric=job.get("fabric"),
        nodelist=job.get("nodelist"),
        topology_name=job.get("topology_name"),
        gpus_per_node=job.get("gpus_per_node"),
        oversubscription=job.get("oversubscription"),
        **{k: job.get(k) for k in CLUSTER_SOURCE_KEYS},
        block_links=job.get("block_links") or JOB_DEFAULTS["block_links"],
        **parse_rates(job.get("rate")),
    )
    # --host-topology FILE, or several: HOSTLIST=FILE (hosts of other topologies, issue 27)
    G = build_mixed_cluster(job.get("host_topology"), lambda ht: build(host_topology=ht), gpu=job.get("gpu"),
                            **parse_rates(job.get("rate")))
    # a graph `rankmap solve` would refuse is not written (a rate flag out of range)
    for u, v, d in G.edges(data=True):
        bw = d.get("bandwidth")
        if isinstance(bw, (int, float)) and not MIN_BANDWIDTH_GBPS <= bw <= MAX_BANDWIDTH_GBPS:
            raise InvalidArgumentError(
                f"link {u!r}-{v!r} would have bandwidth {bw:g} GB/s, outside {MIN_BANDWIDTH_GBPS:g}.."
                f"{MAX_BANDWIDTH_GBPS:g} GB/s: check --nvlink-domain-rate, --rate and --oversubscription",
                "cluster.edges")
    for w in (G.graph.get("warnings", ()) or ()) if warn is not None else ():
        warn(str(w))
    return G


def job_measured(job: Mapping[str, Any], graph, warn: Warn | None = None, drop_slow: bool = False):
    """The measured rates of ``job`` (``measured``, ``exclude_slow``) applied to ``graph``
    (:func:`~rankmap.solver.fabric.measured.apply_measured`): a
    :class:`~rankmap.solver.fabric.measured.MeasuredGraph` whose graph carries the caps.

    Measurements naming an unknown host or GPU go to ``warn`` (not an error), and so does each
    host ``exclude_slow`` drops; with ``drop_slow`` those hosts' nodes are removed from the graph
    (``rankmap cluster``; a solve excludes them instead).

    Raises
    ------
    InvalidArgumentError
        A bad measurement file or value, ``exclude_slow`` without ``measured`` or out of (0, 1].
    """
    from ..fabric.measured import MeasuredGraph, apply_measured, check_exclude_slow
    from ..formats.measured import measurements_from_value

    slow = check_exclude_slow(job.get("exclude_slow"))
    ms = measurements_from_value(job.get("measured"))
    if slow is not None and not ms:
        raise InvalidArgumentError("exclude_slow needs measured rates (--measured FILE)", "exclude_slow")
    if not ms:
        return MeasuredGraph(graph)
    mg = apply_measured(graph, ms, job_nccl(job), slow)
    for w in mg.warnings if warn is not None else ():
        warn(w)
    if mg.slow_hosts and warn is not None:
        shown = ", ".join(mg.slow_hosts[:8]) + (" ..." if len(mg.slow_hosts) > 8 else "")
        warn(f"--exclude-slow {slow:g}: {len(mg.slow_hosts)} host(s) measured below {slow:g} x the model's rate "
             f"left out: {shown}")
    if drop_slow and mg.slow_hosts:
        gone = set(mg.slow_hosts)
        mg.graph.remove_nodes_from([n for n, d in mg.graph.nodes(data=True)
                                    if str(d.get("host", n if d.get("kind", "gpu") == "gpu" else "")) in gone])
    return mg


def job_options(job: Mapping[str, Any]):
    """The :class:`~rankmap.solver.types.SolveOptions` of ``job`` (unset keys: :data:`JOB_DEFAULTS`;
    ``baseline_order`` from ``megatron_args``: ``--use-tp-pp-dp-mapping`` selects ``tp-cp-ep-pp-dp``)."""
    from ..types import SolveOptions, parse_constraint

    orders = job.get("orders") if job.get("orders") is not None else JOB_DEFAULTS["orders"]
    if not isinstance(orders, str):
        raise InvalidArgumentError(f"orders must be a string or a list of orders, got {orders!r}", "orders")
    if not orders.strip():
        raise InvalidArgumentError("orders is empty; use default, megatron-cli, all or a list of orders", "orders")
    limit = job.get("time_limit")
    try:
        time_limit = float(limit) if limit is not None else JOB_DEFAULTS["time_limit"]
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"time_limit {limit!r} is not a number of seconds", "time_limit") from None
    seed = job.get("seed") if job.get("seed") is not None else JOB_DEFAULTS["seed"]
    if isinstance(seed, str):
        seed = strict_int(seed, "seed", "seed")
    return SolveOptions(
        launch_order=launch_order_from_value(job.get("launch_order")),
        mode=(lambda m: m.strip().lower() if isinstance(m, str) else m)(job.get("mode") or JOB_DEFAULTS["mode"]),
        orders=orders,
        constraints=tuple(parse_constraint(c) for c in (job.get("constraint") or [])),
        exclude_devices=tuple(str(x) for x in (job.get("exclude_device") or [])),
        exclude_hosts=tuple(str(x) for x in (job.get("exclude_host") or [])),
        time_limit_seconds=time_limit,
        seed=seed,
        exposure=exposure_from_value(job.get("exposure")),
        # without rankmap Megatron builds its groups in the order its arguments select (the baseline)
        baseline_order=_megatron(job).order if job.get("megatron_args") is not None else "tp-cp-ep-dp-pp",
        nccl=job_nccl(job),
    )


# --------------------------------------------------------------------------- the whole job


@dataclass
class ResolvedJob:
    """What :func:`resolve_job` gives: the solver's arguments, and the job they came from.

    Unpacks as ``graph, cfg, traffic, options = resolve_job(...)``.
    """

    graph: Any
    cfg: Any
    traffic: Any
    options: Any
    job: dict[str, Any] = field(default_factory=dict, repr=False)
    """The job filled in (given values, the job's, its job file's, the Megatron sizes)."""
    measured: Any = None
    """The :class:`~rankmap.solver.fabric.measured.MeasuredGraph` of the job's measured rates (None: none)."""

    def __iter__(self) -> Iterator[Any]:
        return iter((self.graph, self.cfg, self.traffic, self.options))


def job_graph(job: Mapping[str, Any], given: Mapping[str, Any] | None = None, warn: Warn | None = None):
    """A job's keys filled, its cluster graph with the measured rates applied, and its options:
    ``(filled keys, graph, SolveOptions, MeasuredGraph)`` (the part of :func:`resolve_job` before the
    world size; ``rankmap compare`` shares it).  Hosts ``exclude_slow`` drops are excluded in the options.

    Raises
    ------
    InvalidArgumentError
        A bad value, named by its key.
    OSError
        A file that cannot be read.
    """
    filled = fill_job(job, given)
    cluster = filled.get("cluster")
    if cluster and str(cluster).lower().endswith((".yaml", ".yml")):
        filled = fill_job(load_job_file(cluster), {**filled, "cluster": None})
    filled = job_megatron_sizes(filled, warn)
    graph = job_cluster(filled, warn)
    measured = job_measured(filled, graph, warn)
    graph = measured.graph
    options = job_options(filled)
    if measured.slow_hosts:
        import dataclasses

        options = dataclasses.replace(options, exclude_hosts=tuple(dict.fromkeys(
            (*options.exclude_hosts, *measured.slow_hosts))))
    return filled, graph, options, measured


def resolve_job(job: Mapping[str, Any], given: Mapping[str, Any] | None = None,
                warn: Warn | None = None) -> ResolvedJob:
    """``solve(graph, cfg, traffic, options)``'s arguments for a job, as ``rankmap solve`` reads them.

    Parameters
    ----------
    job : mapping
        Job keys (:data:`~rankmap.solver.job.model.JOB_KEYS`, normalized: a job file
        or batch entry), checked by :func:`fill_job`; ``oversubscription``
        (``--oversubscription``) is read too.
    given : mapping, optional
        Values that win over ``job``'s (the command line's flags, already typed).
    warn : callable(str), optional
        Receives the importers' guesses and the Megatron arguments not read.

    A ``cluster`` ending in ``.yaml``/``.yml`` is a job file: it fills the
    keys still unset.  The world size defaults to the GPUs not excluded
    (:func:`~rankmap.solver.job.model.usable_gpus`), the traffic to the seed's GPT,
    the options to :data:`~rankmap.solver.job.model.JOB_DEFAULTS`.

    Raises
    ------
    InvalidArgumentError
        A bad value (named by its key), a cluster without usable GPUs, sizes that do not fit.
    OSError
        A file that cannot be read.
    """
    filled, graph, options, measured = job_graph(job, given, warn)
    gpus = usable_gpus(graph, options.exclude_devices, options.exclude_hosts)
    if gpus == 0:
        raise InvalidArgumentError("the cluster has no usable GPUs (no node of kind 'gpu', or all excluded)",
                                   "cluster")
    sizes = job_sizes(filled)
    if sizes.world_size is not None:
        cfg = sizes.to_config(DEFAULT_ORDER)
    else:  # the world size is the usable GPUs: say so when they do not fit the sizes
        try:
            cfg = sizes.replace(world_size=gpus).to_config(DEFAULT_ORDER)
        except InvalidArgumentError as exc:
            if "world_size" not in exc.message:  # not about the world size (e.g. a level limit): as it is
                raise
            excluded = len(options.exclude_devices) + len(options.exclude_hosts)
            note = (f"world_size defaults to the {gpus} usable GPUs"
                    + (" (after the exclusions)" if excluded else "") + "; give --world-size to use fewer: ")
            raise InvalidArgumentError(note + exc.message, exc.field) from None
    return ResolvedJob(graph, cfg, job_traffic(filled, cfg), options, filled, measured)
