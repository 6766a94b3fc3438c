"""A job's values checked, in the types a job file may spell them in (issue 14): exposure, launch
order, rates, server address, and :func:`fill_job` (a job dict filled in from values already
typed, the command line's flags).  Errors name the job key.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import InvalidArgumentError
from ..formats.safe import strict_float, strict_int
from .model import JOB_CLUSTER_FILES, JOB_DEFAULTS

__all__ = ["fill_job", "parse_exposure", "exposure_from_value", "launch_order_from_value", "parse_rates",
           "nccl_rates_from_value", "job_nccl", "NCCL_KEYS", "server_address"]

#: Job keys holding an integer (ASCII digits when written as a string; never a bool or a float).
_INT_KEYS = ("world_size", "tp", "cp", "ep", "etp", "pp", "num_distributed_optimizer_instances", "seq_length",
             "micro_batch_size", "global_batch_size", "num_micro_batches", "gpus_per_node", "seed")
#: Job keys holding a list of strings (a single string is a list of one).
_LIST_KEYS = ("constraint", "exclude_host", "exclude_device", "rate", "measured")
#: Job keys holding a string.
_STR_KEYS = ("cluster", "fabric", "nodelist", "model_file", "gpu", "mode", "format", "server",
             "topology_name", "dtype", "megatron_args", "block_links", "nccl_algo", *JOB_CLUSTER_FILES)
#: Job keys of how NCCL runs the collectives (``--nccl-algo``, ``--nccl-rate``, ``--no-pxn``,
#: ``--no-nccl-latency``): :func:`job_nccl`.
NCCL_KEYS = ("nccl_algo", "nccl_rate", "pxn", "nccl_latency")
#: Job keys holding true or false (a ``--no-...`` flag sets them false).
_BOOL_KEYS = ("pxn", "nccl_latency")


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
    if key in _LIST_KEYS and key != "measured":  # measured: FILE strings or {a, b, gbps} mappings
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, (str, int)) for v in value):
            raise InvalidArgumentError(f"job key {key!r} must be a string or a list of strings, got {value!r}", key)
        return [str(v) for v in value]
    if key == "measured":
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(v, (str, dict)) for v in items):
            raise InvalidArgumentError(f"job key 'measured' must be FILE, A,B=FILE, HOST=FILE, a mapping "
                                       f"{{a, b, gbps}} or a list of those, got {value!r:.80}", key)
        return list(items)
    if key == "host_topology" and value is not None:
        items = value if isinstance(value, list) else [value]
        if not items or not all(isinstance(v, str) and v for v in items):
            raise InvalidArgumentError(f"job key 'host_topology' must be FILE, HOSTLIST=FILE or a list of those, "
                                       f"got {value!r:.80}", key)
        return value if isinstance(value, str) or len(items) > 1 else items[0]
    if key == "exclude_slow" and value is not None:
        from ..fabric.measured import check_exclude_slow

        return check_exclude_slow(value)
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
