"""``rankmap solve`` and ``rankmap evaluate`` (DESIGN §7), and declarative job files.

``rankmap solve CLUSTER`` takes a cluster graph file (node-link JSON or
GraphML), or a job file (``.yaml``/``.yml``) naming the cluster, the sizes,
the traffic, constraints, mode, orders and solver options.  Every flag has a
job-file key (the flag's long name with ``_`` for ``-``); flags override the
file; an unknown key is an error naming it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Mapping

from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.formats.safe import dump_json, load_json, strict_float, strict_int
from rankmap.cli_launch import check_emit, launch_order_from_value, write_launch_files
from rankmap.solve_report import LAUNCHERS, cost_table, solve_table  # the table output (re-exported here)

__all__ = [
    "register",
    "JOB_KEYS",
    "load_job_file",
    "normalize_job",
    "merge_job",
    "prepare_args",
    "solve_from_args",
    "parse_exposure",
    "exposure_from_value",
    "cost_table",
    "solve_table",
]

# The job model (keys, aliases, job files; the default world size and the traffic rule) is
# rankmap.solver.job, shared with batch and the server; re-exported here.
from rankmap.solver.job import (JOB_CLUSTER_FILES as _JOB_CLUSTER_FILES, JOB_KEY_ALIASES,  # noqa: E402,F401
                                JOB_KEYS, load_job_file, normalize_job)


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
    from rankmap.solver.types import check_exposure

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
    from rankmap.solver.types import check_exposure

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


#: Job keys holding an integer (ASCII digits when written as a string; never a bool or a float).
_JOB_INT_KEYS = ("world_size", "tp", "cp", "ep", "etp", "pp", "num_distributed_optimizer_instances", "seq_length",
                 "micro_batch_size", "global_batch_size", "num_micro_batches", "gpus_per_node", "seed")


def merge_job(args: argparse.Namespace, job: dict[str, Any]) -> None:
    """Fill every flag left unset on the command line from the job file."""
    from rankmap.solver.traffic import model_from_mapping, traffic_from_mapping

    for key, value in job.items():
        if key == "model_mapping":
            if getattr(args, "model", None) is None and getattr(args, "model_file", None) is None:
                args._model_spec = model_from_mapping(value, source="job model")
            continue
        if key == "traffic":
            if isinstance(value, dict):
                if args.traffic is None:
                    mapping = traffic_from_mapping(value)  # validates; names the bad key
                    args.traffic = ",".join(f"{k}={v!r}" for k, v in mapping.items())
                continue
        if key == "exposure":
            if getattr(args, "exposure", None) is None:
                args.exposure = exposure_from_value(value)  # validates; names the bad class
            continue
        if key in ("constraint", "exclude_host", "exclude_device", "rate"):
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(v, (str, int)) for v in value):
                raise InvalidArgumentError(
                    f"job key {key!r} must be a string or a list of strings, got {value!r}", key
                )
            if not getattr(args, key):
                setattr(args, key, [str(v) for v in value])
            continue
        if key == "launch_order":
            if isinstance(value, list):
                if not value or not all(isinstance(v, str) and v for v in value):
                    raise InvalidArgumentError(
                        f"job key 'launch_order' must be sorted, listed, a host list file or a list of host names, "
                        f"got {value!r}", key)
                value = tuple(value)
            elif not isinstance(value, str):
                raise InvalidArgumentError(
                    f"job key 'launch_order' must be sorted, listed, a host list file or a list of host names, "
                    f"got {value!r}", key)
        if key == "hierarchical_cp_sizes":
            items = value.split(",") if isinstance(value, str) else value
            if not isinstance(items, list):
                raise InvalidArgumentError(f"job key {key!r} must be a list of integers, got {value!r}", key)
            value = [strict_int(x, f"job key {key!r}", key) for x in items]
        if key in _JOB_INT_KEYS and value is not None:
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
        if key in ("cluster", "host_topology", "fabric", "nodelist", "model_file", "gpu", "mode", "format",
                   "server", "topology_name", "dtype", "megatron_args", "block_links", *_JOB_CLUSTER_FILES) \
                and value is not None and not isinstance(value, str):
            raise InvalidArgumentError(f"job key {key!r} must be a string, got {value!r}", key)
        if key == "server" and value is not None:
            from rankmap.cli import server_arg

            try:
                value = server_arg(value)  # the same check as --server
            except argparse.ArgumentTypeError as exc:
                raise InvalidArgumentError(f"job key 'server': {exc}", key) from None
        dest = key
        if getattr(args, dest, None) is None:
            setattr(args, dest, value)


def _load_cluster(args: argparse.Namespace):
    """The cluster graph from CLUSTER or --host-topology/--fabric/--nodelist."""
    from rankmap.cli_cluster import cluster_flags_given

    if args.cluster and (cluster_flags_given(args) or getattr(args, "gpu", None)
                         or getattr(args, "rate", None) or getattr(args, "topology_name", None)
                         or getattr(args, "gpus_per_node", None)):
        raise InvalidArgumentError(
            "give either a CLUSTER file or the --host-topology/--fabric/--nodelist/--gpu/--rate flags, not both",
            "cluster",
        )
    if args.cluster:
        from rankmap.solver.formats.graphfile import load_graph

        return load_graph(args.cluster)
    if cluster_flags_given(args):
        from rankmap.cli_cluster import cluster_from_args

        return cluster_from_args(args)
    raise InvalidArgumentError("no cluster given: pass a CLUSTER file or --host-topology/--fabric/--nodelist",
                               "cluster")


def _options(args: argparse.Namespace):
    from rankmap.solver.types import SolveOptions, parse_constraint

    orders = args.orders if args.orders is not None else "default"
    if not isinstance(orders, str):
        raise InvalidArgumentError(f"orders must be a string or a list of orders, got {orders!r}", "orders")
    if not orders.strip():
        raise InvalidArgumentError("orders is empty; use default, megatron-cli, all or a list of orders", "orders")
    try:
        time_limit = float(args.time_limit) if args.time_limit is not None else 30.0
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"time_limit {args.time_limit!r} is not a number of seconds", "time_limit") from None
    seed = args.seed if args.seed is not None else 0
    if isinstance(seed, str):
        seed = strict_int(seed, "seed", "seed")
    exposure = exposure_from_value(getattr(args, "exposure", None))
    return SolveOptions(
        launch_order=launch_order_from_value(getattr(args, "launch_order", None)),
        mode=(args.mode or "launcher"),
        orders=orders,
        constraints=tuple(parse_constraint(c) for c in (args.constraint or [])),
        exclude_devices=tuple(str(x) for x in (args.exclude_device or [])),
        exclude_hosts=tuple(str(x) for x in (args.exclude_host or [])),
        time_limit_seconds=time_limit,
        seed=seed,
        exposure=exposure,
    )


def _usable_gpus(graph, options) -> int:
    excl_d = set(options.exclude_devices)
    excl_h = set(options.exclude_hosts)
    n = 0
    for node, d in graph.nodes(data=True):
        if d.get("kind", "gpu") == "gpu" and str(node) not in excl_d and str(d.get("host", node)) not in excl_h:
            n += 1
    return n


def _traffic(args: argparse.Namespace, cfg):
    """Payloads per class: the model's (preset, file, or a job file's model mapping),
    with the classes named by --traffic replaced; --traffic alone gives just those."""
    from rankmap.cli_traffic import _OVERRIDE_FLAGS, traffic_from_args
    from rankmap.solver.traffic import parse_traffic, traffic_from_model, with_overrides

    spec = getattr(args, "_model_spec", None)
    if spec is None or getattr(args, "megatron_args", None) is not None:
        return traffic_from_args(args, cfg)
    spec = with_overrides(spec, **{f: getattr(args, a, None) for a, f in _OVERRIDE_FLAGS.items()})
    out = traffic_from_model(spec, cfg)
    return out.replace(parse_traffic(args.traffic) if args.traffic is not None else {})


def prepare_args(args: argparse.Namespace):
    """Resolve a job file, the cluster, the config, traffic and options."""
    from rankmap.cli import config_from_args

    if args.cluster and str(args.cluster).lower().endswith((".yaml", ".yml")):
        job = load_job_file(args.cluster)
        args.cluster = None
        merge_job(args, job)
    from rankmap.cli_traffic import apply_megatron_sizes

    apply_megatron_sizes(args)
    graph = _load_cluster(args)
    options = _options(args)
    gpus = _usable_gpus(graph, options)
    if gpus == 0:
        raise InvalidArgumentError(
            "the cluster has no usable GPUs (no node of kind 'gpu', or all excluded)", "cluster"
        )
    ws = args.world_size if args.world_size is not None else gpus
    cfg = config_from_args(args, world_size=ws, order="tp-cp-ep-dp-pp")
    traffic = _traffic(args, cfg)
    return graph, cfg, traffic, options


def solve_from_args(args: argparse.Namespace):
    """Run the solve described by parsed arguments (in process or via --server)."""
    graph, cfg, traffic, options = prepare_args(args)
    if getattr(args, "server", None):
        from rankmap.client import RankmapClient
        from rankmap.solver.cluster import cluster_from_graph

        # validate the cluster here as an in-process solve would (local_index, bandwidth
        # ranges, ...): bad input is exit 2 before anything is sent, whatever the server says
        cluster_from_graph(graph)
        with RankmapClient(args.server, tls_ca=getattr(args, "tls_ca", None),
                           token_file=getattr(args, "token_file", None)) as client:
            result = client.solve_config(graph, cfg, traffic, options)
        import dataclasses

        # the same bytes, with the model they came from (the JSON's traffic_model, for evaluate)
        return dataclasses.replace(result, traffic=traffic)
    from rankmap.progress import SolveProgress, progress_enabled
    from rankmap.solver import solve

    with SolveProgress(progress_enabled(getattr(args, "progress", False))) as bar:
        return solve(graph, cfg, traffic, options, progress=bar)


def _cmd_solve(args: argparse.Namespace) -> int:
    check_emit(args)
    result = solve_from_args(args)
    fmt = args.format or "json"
    if fmt not in ("json", "table"):
        raise InvalidArgumentError(f"format {fmt!r} is not json or table", "format")
    result, written = write_launch_files(args, result)
    if fmt == "table":
        launcher = LAUNCHERS.get(args.emit or "slurm-hostfile", "slurm")
        sys.stdout.write(solve_table(result, launcher, written, getattr(args, "launch_order", None)) + "\n")
    else:
        doc = result.to_dict()
        if written:
            doc["written"] = sorted(written)
        sys.stdout.write(dump_json(doc) + "\n")
    return 0


def _read_assignment(path: str) -> tuple[list[str], str | None, dict]:
    """An assignment file: JSON list, a ``rankmap solve`` JSON result (its ``assignment``
    and ``order``), or one GPU id per line.  Returns (assignment, order or None, the
    result document or ``{}``)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise InvalidArgumentError(f"assignment file {path!r} does not exist", "assignment") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(f"cannot read assignment file {path!r}: {exc}", "assignment") from None
    order = None
    stripped = text.strip()
    if stripped.startswith(("[", "{")):
        doc = load_json(stripped, f"assignment file {path}", "assignment")  # depth, size, duplicate keys
        result: dict = {}
        if isinstance(doc, dict):
            result = doc
            order = doc.get("order") if isinstance(doc.get("order"), str) else None
            doc = doc.get("assignment")
        if not isinstance(doc, list):
            raise InvalidArgumentError(f"assignment file {path}: expected a list of GPU ids", "assignment")
        return [str(x) for x in doc], order, result
    lines = [line.strip() for line in stripped.splitlines() if line.strip() and not line.startswith("#")]
    if not lines:
        raise InvalidArgumentError(f"assignment file {path} is empty", "assignment")
    return lines, order, {}


def _sizes_from_result(args: argparse.Namespace, result: dict, path: str) -> None:
    """Size flags left unset take the result document's sizes; a flag that disagrees is an error
    naming both (evaluating a layout with other sizes than it was solved for is a different job)."""
    from rankmap.solver.job import SIZE_KEYS, fill_sizes

    sizes = result.get("sizes")
    if not isinstance(sizes, dict):
        return

    def conflict(key, given, value):
        return InvalidArgumentError(
            f"--{key} {given} disagrees with {key} {value} in {path} (the sizes it was solved for)", key)

    for key, value in fill_sizes({k: getattr(args, k, None) for k in SIZE_KEYS}, sizes, conflict).items():
        setattr(args, key, value)


def _traffic_from_result(args: argparse.Namespace, result: dict, cfg, path: str):
    """The result document's traffic (its model and explicit classes, else its bytes), or None when
    the command line gives traffic flags or the document has none."""
    from rankmap.cli_traffic import _model_flags_given
    from rankmap.solver.job import resolve_traffic
    from rankmap.solver.traffic import model_from_mapping, traffic_from_mapping

    if getattr(args, "traffic", None) is not None or _model_flags_given(args) or getattr(args, "_model_spec", None):
        return None
    model = result.get("traffic_model")
    explicit = result.get("traffic_explicit") or None
    if isinstance(model, dict):
        spec = model_from_mapping(model, source=f"{path} traffic_model")
        return resolve_traffic(cfg, traffic_from_mapping(explicit) if explicit else None, model=spec)
    if isinstance(result.get("traffic_bytes"), dict):
        return resolve_traffic(cfg, traffic_from_mapping(result["traffic_bytes"]))
    return None


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from rankmap.cli import config_from_args
    from rankmap.solver import evaluate

    from rankmap.cli_traffic import apply_megatron_sizes

    exposure = exposure_from_value(args.exposure)
    apply_megatron_sizes(args)
    graph = _load_cluster(args)
    assignment, file_order, result = _read_assignment(args.assignment)
    _sizes_from_result(args, result, args.assignment)
    from rankmap.cli_traffic import megatron_from_args

    meg = megatron_from_args(args)
    order = args.order if args.order is not None else (file_order or (meg.order if meg else "tp-cp-ep-dp-pp"))
    if args.world_size is None:
        gpus = sum(1 for _, d in graph.nodes(data=True) if d.get("kind", "gpu") == "gpu")
        if len(assignment) != gpus:
            raise InvalidArgumentError(
                f"assignment file {args.assignment} has {len(assignment)} entries but the cluster has {gpus} GPUs; "
                f"pass --world-size to evaluate a job on part of the cluster",
                "assignment",
            )
    ws = args.world_size if args.world_size is not None else len(assignment)
    try:
        cfg = config_from_args(args, world_size=ws, order=order)
    except InvalidArgumentError as exc:
        if args.world_size is None:
            raise InvalidArgumentError(
                f"assignment file {args.assignment} has {len(assignment)} entries (the world size): {exc.message}",
                exc.field,
            ) from None
        raise
    traffic = _traffic_from_result(args, result, cfg, args.assignment)
    if traffic is None:
        traffic = _traffic(args, cfg)
    cost = evaluate(graph, cfg, assignment, traffic, exposure=exposure)
    doc = {"order": cfg.order, "world_size": cfg.world_size, "sizes": cfg.sizes, "traffic_bytes": dict(traffic),
           "cost": cost.to_dict()}
    if args.format == "table":
        lines = [f"order {cfg.order}  world_size {cfg.world_size}", ""]
        lines.extend(cost_table(cost, traffic))
        sys.stdout.write("\n".join(lines) + "\n")
    else:
        sys.stdout.write(dump_json(doc) + "\n")
    return 0


_EXPOSURE_HELP = (
    "share x of each class's time not overlapped with compute, in [0, 1], e.g. tp=0.5,dp=0.2 "
    "(classes not named: 1); the objective is the predicted communication time per step, sum of x*T per class"
)


def register(subparsers) -> None:
    """Add the ``solve`` and ``evaluate`` subcommands."""
    from rankmap.cli import add_size_arguments, float_arg, int_at_least, server_arg
    from rankmap.cli_cluster import add_cluster_arguments
    from rankmap.cli_traffic import add_model_arguments

    s = subparsers.add_parser(
        "solve",
        help="find the order and rank-to-GPU assignment that minimise the predicted communication time",
        description="CLUSTER is a node-link JSON / GraphML cluster graph, or a job YAML file.",
    )
    s.add_argument("cluster", nargs="?", default=None, help="cluster graph file or job YAML")
    add_cluster_arguments(s)
    add_size_arguments(s, world_size_required=False)
    add_model_arguments(s)
    s.add_argument("--exposure", default=None, metavar="CLASS=X,...", help=_EXPOSURE_HELP)
    s.add_argument("--mode", choices=("launcher", "free", "fixed"), default=None,
                   help="launcher (default: contiguous blocks of ranks per host, as torchrun/Slurm), "
                        "free (any bijection) or fixed (only the order is chosen)")
    s.add_argument("--launch-order", default=None, metavar="sorted|listed|FILE",
                   help="how the launcher numbers the hosts without rankmap, the baseline: sorted (default: "
                        "natural-sorted names, as srun/torchrun), listed (cluster file order) or FILE, a host list "
                        "in launch order (scontrol show hostnames, an MPI hostfile)")
    s.add_argument("--emit", default=None, metavar="KIND",
                   help="write a launch file: slurm-hostfile (SLURM_HOSTFILE for srun --distribution=arbitrary), "
                        "torchrun (a script run on every host), rankfile (Open MPI), kubernetes (node per pod "
                        "index); needs -o FILE")
    s.add_argument("-o", "--output", default=None, metavar="FILE", help="the file --emit writes")
    s.add_argument("--orders", default=None,
                   help="orders to search: default (tp-cp-ep-dp-pp only; the default) | megatron-cli "
                        "(+ tp-cp-ep-pp-dp) | all | O1,O2,...")
    s.add_argument("--constraint", action="append", default=None,
                   help="e.g. 'tp within host', 'ep within leaf' (repeatable)")
    s.add_argument("--exclude-host", action="append", default=None, help="host not to use (repeatable)")
    s.add_argument("--exclude-device", action="append", default=None, help="GPU node id not to use (repeatable)")
    s.add_argument("--time-limit", type=float_arg, default=None, help="search budget, seconds (default 30)")
    s.add_argument("--seed", type=int_at_least(0), default=None, help="CP-SAT random seed (default 0)")
    s.add_argument("--format", choices=("json", "table"), default=None, help="json (default) or table")
    s.add_argument("--server", type=server_arg, default=None, metavar="HOST:PORT",
                   help="solve on a rankmap server instead of in process")
    s.add_argument("--tls-ca", default=None, metavar="FILE",
                   help="--server speaks TLS; FILE is the PEM CA that signed its certificate")
    s.add_argument("--token-file", default=None, metavar="FILE",
                   help="bearer token for --server (first line of FILE)")
    s.add_argument("--progress", action="store_true",
                   help="phase and best time so far on stderr for solves over ~1 s, even when stderr is not "
                        "a terminal (default: only on a terminal)")
    s.set_defaults(func=_cmd_solve)

    e = subparsers.add_parser("evaluate", help="predicted communication time of a given order and assignment")
    e.add_argument("cluster", nargs="?", default=None, help="cluster graph file")
    add_cluster_arguments(e)
    e.add_argument("--order", default=None,
                   help="order of the layout (default: the 'order' of a solve result file, else tp-cp-ep-dp-pp)")
    e.add_argument("--assignment", required=True,
                   help="GPU id per global rank: a JSON list, a 'rankmap solve' JSON result, or one id per line")
    add_size_arguments(e, world_size_required=False)
    add_model_arguments(e)
    e.add_argument("--exposure", default=None, metavar="CLASS=X,...", help=_EXPOSURE_HELP)
    e.add_argument("--format", choices=("json", "table"), default="json")
    e.set_defaults(func=_cmd_evaluate)
