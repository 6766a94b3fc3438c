"""A job dict resolved into the solver's arguments: ``(graph, cfg, traffic, options)`` (issue 14).

The one resolution of a job for ``rankmap solve`` (its flags and job file) and
``rankmap batch`` / :func:`rankmap.batch.solve_many` (job entries):

* :func:`fill_job`: a job dict's values checked (the types a job file may
  spell them in) and filled in where ``given`` (values already typed: the
  command line's flags) leaves them unset;
* :func:`resolve_job`: that, plus the job file a ``cluster`` ending in
  ``.yaml``/``.yml`` names, then the cluster graph, the parallel config (world
  size: the usable GPUs), the traffic (:func:`~rankmap.solver.job.model.resolve_traffic`)
  and the :class:`~rankmap.solver.types.SolveOptions`, the defaults being
  :data:`~rankmap.solver.job.model.JOB_DEFAULTS`;
* the value parsers they share with the command line (:func:`parse_exposure`,
  :func:`exposure_from_value`, :func:`launch_order_from_value`,
  :func:`parse_rates`, :func:`server_address`).

The gRPC server reads a ``SolveRequest`` instead (:mod:`rankmap.wire`), with
the same traffic rule and default world size (:mod:`rankmap.solver.job.model`).
Pure Python over plain types: no argparse, no protobuf.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from ..errors import InvalidArgumentError
from ..formats.safe import strict_float, strict_int
from ..megatron.ranks import DEFAULT_ORDER
from .model import JOB_CLUSTER_FILES, JOB_DEFAULTS, SIZE_KEYS, job_sizes, load_job_file, megatron_sizes, usable_gpus

__all__ = [
    "ResolvedJob",
    "resolve_job",
    "fill_job",
    "job_model",
    "job_traffic",
    "job_cluster",
    "build_job_cluster",
    "cluster_keys_given",
    "job_options",
    "job_megatron_sizes",
    "model_keys_given",
    "MODEL_OVERRIDE_KEYS",
    "CLUSTER_SOURCE_KEYS",
    "parse_exposure",
    "exposure_from_value",
    "launch_order_from_value",
    "parse_rates",
    "nccl_rates_from_value",
    "job_nccl",
    "NCCL_KEYS",
    "server_address",
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

#: Job keys holding an integer (ASCII digits when written as a string; never a bool or a float).
_INT_KEYS = ("world_size", "tp", "cp", "ep", "etp", "pp", "num_distributed_optimizer_instances", "seq_length",
             "micro_batch_size", "global_batch_size", "num_micro_batches", "gpus_per_node", "seed")
#: Job keys holding a list of strings (a single string is a list of one).
_LIST_KEYS = ("constraint", "exclude_host", "exclude_device", "rate")
#: Job keys holding a string.
_STR_KEYS = ("cluster", "host_topology", "fabric", "nodelist", "model_file", "gpu", "mode", "format", "server",
             "topology_name", "dtype", "megatron_args", "block_links", "nccl_algo", *JOB_CLUSTER_FILES)

#: Job keys of how NCCL runs the collectives (``--nccl-algo``, ``--nccl-rate``, ``--no-pxn``,
#: ``--no-nccl-latency``): :func:`job_nccl`.
NCCL_KEYS = ("nccl_algo", "nccl_rate", "pxn", "nccl_latency")
#: Job keys holding true or false (a ``--no-...`` flag sets them false).
_BOOL_KEYS = ("pxn", "nccl_latency")

Warn = Callable[[str], None]


# --------------------------------------------------------------------------- values


def parse_exposure(text: str) -> dict[str, float]:
    """Parse ``"tp=0.5,dp=0.2"`` into ``{class: x_c}``, each in [0, 1].

    Class names are case-insensitive; spaces around items are ignored.

    Raises
    ------
    InvalidArgumentError
        For an empty string or item, an item without ``=``, a repeated class
        (field ``exposure``/``exposure.CLASS``), and, through
        :func:`~rankmap.solver.types.check_exposure`, an unknown class or a
        value that is not a number in [0, 1] (field ``exposure.CLASS``).
    """
    from ..types import check_exposure

    if not isinstance(text, str):
        raise InvalidArgumentError(f"exposure must be a string like 'tp=0.5,dp=0.2', got {text!r}", "exposure")
    if not text.strip():
        raise InvalidArgumentError("exposure is empty; expected e.g. 'tp=0.5,dp=0.2'", "exposure")
    values: dict[str, Any] = {}
    for item in text.split(","):
        if not item.strip():
            raise InvalidArgumentError(f"empty item in exposure {text!r}", "exposure")
        if "=" not in item:
            raise InvalidArgumentError(f"exposure item {item.strip()!r} is not CLASS=X (e.g. dp=0.2)", "exposure")
        name, _, value = item.partition("=")
        cls = name.strip().lower()
        if cls in values:
            raise InvalidArgumentError(f"exposure class {cls!r} given twice in {text!r}", f"exposure.{cls}")
        value = value.strip()
        try:
            values[cls] = float(value)
        except ValueError:
            values[cls] = value  # check_exposure names it: "... is not a number"
    return check_exposure(values)


def exposure_from_value(value: Any) -> dict[str, float]:
    """Exposure from ``--exposure`` (a string) or a job file's ``exposure:`` (a mapping or a string).

    ``None`` gives ``{}`` (every class 1).  Mapping keys are case-insensitive
    like the flag's.

    Raises
    ------
    InvalidArgumentError
        As :func:`parse_exposure`; also for a value that is neither a mapping nor a string.
    """
    from ..types import check_exposure

    if value is None:
        return {}
    if isinstance(value, str):
        return parse_exposure(value)
    if isinstance(value, Mapping):
        values: dict[str, Any] = {}
        for k, v in value.items():
            cls = str(k).strip().lower()
            if cls in values:
                raise InvalidArgumentError(f"exposure class {cls!r} given twice", f"exposure.{cls}")
            values[cls] = v
        return check_exposure(values)
    raise InvalidArgumentError(
        f"exposure must be a mapping of traffic class to a number in [0, 1] or a string like 'tp=0.5,dp=0.2', "
        f"got {value!r}",
        "exposure",
    )


def launch_order_from_value(value: Any) -> str | tuple[str, ...]:
    """``--launch-order`` / job key ``launch_order``: ``sorted`` (default), ``listed``, a host list file
    (:func:`~rankmap.solver.launch.placement.parse_host_list`: one host or hostlist expression per line, e.g.
    ``scontrol show hostnames`` output or an MPI hostfile) or a list of host names.

    Raises
    ------
    InvalidArgumentError
        A file that does not exist or cannot be read, or one without hosts (field ``launch_order``).
    """
    from ..formats.safe import MAX_YAML_BYTES
    from ..launch.placement import parse_host_list
    from ..types import LAUNCH_ORDER_POLICIES

    if value is None:
        return JOB_DEFAULTS["launch_order"]
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    if value in LAUNCH_ORDER_POLICIES:
        return value
    try:
        with open(value, encoding="utf-8") as fh:
            text = fh.read(MAX_YAML_BYTES + 1)
    except FileNotFoundError:
        raise InvalidArgumentError(
            f"launch order {value!r} is neither sorted, listed nor an existing host list file", "launch_order"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(f"cannot read launch order file {value!r}: {exc}", "launch_order") from None
    if len(text) > MAX_YAML_BYTES:
        raise InvalidArgumentError(f"launch order file {value!r} is larger than {MAX_YAML_BYTES} bytes",
                                   "launch_order")
    return parse_host_list(text, f"launch order file {value}")


def parse_rates(items: list[str] | None) -> dict[str, float]:
    """``--rate`` / job key ``rate``: ``["nic=50", "sys=22,pcie=63"]`` -> ``{"nic": 50.0, "sys": 22.0, "pcie": 63.0}``."""
    from ..formats import RATE_KEYS

    out: dict[str, float] = {}
    for item in items or []:
        for part in str(item).split(","):
            part = part.strip()
            if not part:
                continue
            key, sep, value = part.partition("=")
            key = key.strip().lower()
            if not sep or not key:
                raise InvalidArgumentError(f"--rate {part!r} is not KEY=GBPS (keys: {', '.join(RATE_KEYS)})", "rate")
            try:
                out[key] = strict_float(value.strip(), "rate")
            except InvalidArgumentError:
                raise InvalidArgumentError(f"--rate {part!r}: {value!r} is not a finite number", f"rate.{key}") from None
    return out


def nccl_rates_from_value(value: Any) -> dict[str, float]:
    """``--nccl-rate`` / job key ``nccl_rate``: GB/s NCCL achieves per NIC port (``nic``) or per
    NVLink port (``nvlink``), :class:`~rankmap.solver.fabric.rates.NcclModel` ``rates``.

    ``value``: None (no override), ``"nic=45"`` or ``"nic=45,nvlink=20"``, a list of such
    strings (the repeated flag), or a mapping ``{nic: 45}``.  Keys are case-insensitive.

    Raises
    ------
    InvalidArgumentError
        An item that is not KEY=GBPS, an unknown key, a key given twice, or a rate that is
        not a finite number > 0 (field ``nccl_rate`` / ``nccl_rate.KEY``), naming the item.
    """
    from ..fabric.rates import NCCL_RATE_KEYS

    keys = ", ".join(NCCL_RATE_KEYS)
    if value is None:
        return {}
    pairs: list[tuple[str, Any, str]] = []  # (key, value, the item as written)
    if isinstance(value, Mapping):
        pairs = [(str(k), v, f"{k}={v}") for k, v in value.items()]
    elif isinstance(value, (str, list, tuple)):
        items = [value] if isinstance(value, str) else list(value)
        for item in items:
            if not isinstance(item, str):
                raise InvalidArgumentError(
                    f"nccl_rate must be KEY=GBPS strings or a mapping of {keys} to GB/s, got {item!r}", "nccl_rate")
            for part in item.split(","):
                part = part.strip()
                key, sep, rate = part.partition("=")
                if not sep or not key.strip() or not rate.strip():
                    raise InvalidArgumentError(f"--nccl-rate {part!r} is not KEY=GBPS (keys: {keys}; e.g. nic=45)",
                                               "nccl_rate")
                pairs.append((key, rate.strip(), part))
    else:
        raise InvalidArgumentError(
            f"nccl_rate must be KEY=GBPS (e.g. nic=45), a list of them or a mapping of {keys} to GB/s, got {value!r}",
            "nccl_rate")
    out: dict[str, float] = {}
    for key, rate, item in pairs:
        k = key.strip().lower()
        if k not in NCCL_RATE_KEYS:
            raise InvalidArgumentError(f"--nccl-rate {item!r}: unknown key {key.strip()!r}; keys: {keys}",
                                       f"nccl_rate.{k}")
        if k in out:
            raise InvalidArgumentError(f"--nccl-rate {item!r}: {k} given twice", f"nccl_rate.{k}")
        try:
            gbps = strict_float(rate, "rate")
        except InvalidArgumentError:
            raise InvalidArgumentError(f"--nccl-rate {item!r}: {rate!r} is not a finite number of GB/s",
                                       f"nccl_rate.{k}") from None
        if not gbps > 0:
            raise InvalidArgumentError(f"--nccl-rate {item!r}: the rate must be > 0 GB/s", f"nccl_rate.{k}")
        out[k] = gbps
    return out


def _nccl_bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"job key {key!r} must be true or false, got {value!r}", key)
    return value


def job_nccl(job: Mapping[str, Any]):
    """The :class:`~rankmap.solver.fabric.rates.NcclModel` of ``job`` (parsed flags or job keys):
    ``nccl_algo`` (``NCCL_ALGO``: auto, ring, tree, nvls, nvlstree; case-insensitive),
    ``nccl_rate`` (:func:`nccl_rates_from_value`), ``pxn`` and ``nccl_latency`` (true or false);
    unset keys take :data:`~rankmap.solver.job.model.JOB_DEFAULTS` (NCCL's defaults).

    Raises
    ------
    InvalidArgumentError
        An unknown algorithm (field ``nccl_algo``), a bad rate (``nccl_rate.KEY``), a
        ``pxn`` / ``nccl_latency`` that is not a bool.
    """
    from ..fabric.rates import DEFAULT_NCCL, NcclModel

    algo = job.get("nccl_algo")
    if algo is not None and not isinstance(algo, str):
        raise InvalidArgumentError(f"job key 'nccl_algo' must be a string, got {algo!r}", "nccl_algo")
    pxn, latency = job.get("pxn"), job.get("nccl_latency")
    model = NcclModel(
        algorithm=algo if algo is not None else JOB_DEFAULTS["nccl_algo"],
        pxn=_nccl_bool("pxn", pxn) if pxn is not None else JOB_DEFAULTS["pxn"],
        rates=nccl_rates_from_value(job.get("nccl_rate")),
        latency=_nccl_bool("nccl_latency", latency) if latency is not None else JOB_DEFAULTS["nccl_latency"],
    )
    return DEFAULT_NCCL if model == DEFAULT_NCCL else model


def server_address(text: str) -> str:
    """``HOST:PORT`` of a rankmap server (port 1..65535, ASCII digits), stripped.

    Raises
    ------
    ValueError
        Anything else (the message says what is wrong).
    """
    from ..formats.safe import is_strict_int_text

    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port or any(ch.isspace() for ch in host):
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    port = port.strip()
    if not is_strict_int_text(port):
        raise ValueError(f"expected HOST:PORT with a numeric port, got {text!r}")
    p = int(port)
    if not 1 <= p <= 65535:
        raise ValueError(f"port {p} in {text!r} is outside 1..65535")
    return text.strip()


def _check_value(key: str, value: Any) -> Any:
    """One job-file value in the type the resolution reads (as the matching flag would give it)."""
    from ..traffic import traffic_from_mapping

    if key == "traffic" and isinstance(value, dict):
        return traffic_from_mapping(value)  # validates; names the bad key
    if key == "exposure":
        return exposure_from_value(value)  # validates; names the bad class
    if key in _LIST_KEYS:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, (str, int)) for v in value):
            raise InvalidArgumentError(f"job key {key!r} must be a string or a list of strings, got {value!r}", key)
        return [str(v) for v in value]
    if key == "launch_order":
        if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
            return tuple(value)
        if not isinstance(value, str):
            raise InvalidArgumentError(
                f"job key 'launch_order' must be sorted, listed, a host list file or a list of host names, "
                f"got {value!r}", key)
    if key == "hierarchical_cp_sizes":
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list):
            raise InvalidArgumentError(f"job key {key!r} must be a list of integers, got {value!r}", key)
        value = [strict_int(x, f"job key {key!r}", key) for x in items]
    if key in _INT_KEYS and value is not None:
        value = strict_int(value, f"job key {key!r}", key)
    if key == "time_limit" and value is not None:
        value = strict_float(value, f"job key {key!r}", key)
    if key == "orders":
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = ",".join(value)
        elif not isinstance(value, str):
            raise InvalidArgumentError(
                f"job key 'orders' must be default, megatron-cli, all or a list of orders, got {value!r}", "orders"
            )
    if key == "nccl_rate" and value is not None:
        value = nccl_rates_from_value(value)  # validates; names the bad item
    if key in _BOOL_KEYS and value is not None:
        value = _nccl_bool(key, value)
    if key in _STR_KEYS and value is not None and not isinstance(value, str):
        raise InvalidArgumentError(f"job key {key!r} must be a string, got {value!r}", key)
    if key == "server" and value is not None:
        try:
            value = server_address(value)  # the same check as --server
        except ValueError as exc:
            raise InvalidArgumentError(f"job key 'server': {exc}", key) from None
    return value


def fill_job(job: Mapping[str, Any], given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``given`` with every key of ``job`` it leaves unset, checked.

    Parameters
    ----------
    job : mapping
        A job (:func:`~rankmap.solver.job.model.normalize_job` spelling: a job file, a
        batch entry); its values are checked and brought to the types the
        flags have (a list of one for a single constraint, an integer for
        ``"8"``...).
    given : mapping, optional
        Values already checked (``rankmap solve``'s flags) that win over the
        job's; a ``None`` or empty list is unset.  A job's ``model`` mapping
        (``model_mapping``) counts only when neither ``model`` nor
        ``model_file`` is given.

    Raises
    ------
    InvalidArgumentError
        A value of the wrong type, named by its key.
    """
    from ..traffic import model_from_mapping

    out = dict(given or {})
    for key, value in job.items():
        if key == "model_mapping":
            if out.get("model") is None and out.get("model_file") is None and out.get(key) is None:
                out[key] = model_from_mapping(value, source="job model")
            continue
        unset = not out.get(key) if key in _LIST_KEYS else out.get(key) is None
        if not unset and key in ("traffic", "exposure", "nccl_rate"):
            continue  # the given value stands; the job's is not read
        value = _check_value(key, value)
        if unset:
            out[key] = value
    return out


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
        from ..formats.graphfile import load_graph

        return load_graph(job["cluster"])
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
    from ..fabric.cluster import MAX_BANDWIDTH_GBPS, MIN_BANDWIDTH_GBPS
    from ..formats import build_cluster

    G = build_cluster(
        host_topology=job.get("host_topology"),
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

    def __iter__(self) -> Iterator[Any]:
        return iter((self.graph, self.cfg, self.traffic, self.options))


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
    filled = fill_job(job, given)
    cluster = filled.get("cluster")
    if cluster and str(cluster).lower().endswith((".yaml", ".yml")):
        filled = fill_job(load_job_file(cluster), {**filled, "cluster": None})
    filled = job_megatron_sizes(filled, warn)
    graph = job_cluster(filled, warn)
    options = job_options(filled)
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
            excluded = len(options.exclude_devices) + len(options.exclude_hosts)
            note = (f"world_size defaults to the {gpus} usable GPUs"
                    + (" (after the exclusions)" if excluded else "") + "; give --world-size to use fewer: ")
            raise InvalidArgumentError(note + exc.message, exc.field) from None
    return ResolvedJob(graph, cfg, job_traffic(filled, cfg), options, filled)
