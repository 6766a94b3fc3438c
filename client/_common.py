"""Shared by the sync and asyncio clients: errors, retries, request building."""

from __future__ import annotations

import os
import random
from typing import Any, Iterable, Mapping

import grpc
from grpc_status import rpc_status

from rankmap.server import convert
from rankmap.solver.errors import InfeasibleError, InvalidArgumentError, RankmapError

__all__ = [
    "RankmapRpcError",
    "DEFAULT_TIMEOUT",
    "DEFAULT_RETRIES",
    "error_from_rpc",
    "error_from_batch",
    "backoff_delays",
    "solve_kwargs_request",
    "chunk_requests",
    "channel_credentials",
    "auth_metadata",
    "import_cluster_request",
    "import_cluster_graph",
    "TOPOLOGY_FORMATS",
]

#: Default per-call deadline, seconds.
DEFAULT_TIMEOUT = 300.0
#: Default retries on UNAVAILABLE (so up to DEFAULT_RETRIES + 1 attempts).
DEFAULT_RETRIES = 4
#: A BatchSolve stream carries at most this many request bytes (split beyond).
MAX_BATCH_BYTES = 256 << 20


class RankmapRpcError(Exception):
    """A call failed with a status other than INVALID_ARGUMENT / FAILED_PRECONDITION.

    Attributes
    ----------
    code : grpc.StatusCode
    details : str
    """

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


def _code_from_int(value: int) -> grpc.StatusCode:
    for c in grpc.StatusCode:
        if c.value[0] == value:
            return c
    return grpc.StatusCode.UNKNOWN


def _domain_error(cls, message: str, argument: str, path: str) -> RankmapError:
    err = cls(message, argument)
    err.proto_field = path  # type: ignore[attr-defined]
    return err


def error_from_rpc(err: grpc.RpcError | Any) -> Exception:
    """The exception to raise for a failed call.

    INVALID_ARGUMENT -> :class:`InvalidArgumentError`, FAILED_PRECONDITION ->
    :class:`InfeasibleError`, with the server's message (the CLI's), ``field``
    the CLI / Python spelling and ``proto_field`` the request path; anything
    else -> :class:`RankmapRpcError`.
    """
    code = err.code() if callable(getattr(err, "code", None)) else grpc.StatusCode.UNKNOWN
    details = (err.details() if callable(getattr(err, "details", None)) else str(err)) or ""
    if code not in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION):
        return RankmapRpcError(code, details)
    try:
        status = rpc_status.from_call(err)
    except Exception:  # noqa: BLE001 - malformed trailers: keep the plain details
        status = None
    message, argument, path = convert.error_from_status(status, details)
    cls = InvalidArgumentError if code == grpc.StatusCode.INVALID_ARGUMENT else InfeasibleError
    return _domain_error(cls, message, argument or path, path)


def error_from_batch(err) -> Exception:
    """The exception for one failed item of a BatchSolve stream (a ``rankmap.v1.Error``)."""
    code_value, message, argument, path = convert.error_from_proto(err)
    code = _code_from_int(code_value)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return _domain_error(InvalidArgumentError, message, argument, path)
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        return _domain_error(InfeasibleError, message, argument, path)
    return RankmapRpcError(code, message)


def backoff_delays(retries: int, initial: float, maximum: float, multiplier: float = 2.0) -> Iterable[float]:
    """Exponential backoff with full jitter: ``retries`` delays in seconds."""
    delay = initial
    for _ in range(retries):
        yield random.uniform(0.5 * delay, delay)
        delay = min(maximum, delay * multiplier)


_SOLVE_KEYS = (
    "world_size",
    "tp",
    "cp",
    "ep",
    "etp",
    "pp",
    "num_distributed_optimizer_instances",
    "hierarchical_context_parallel_sizes",
    "traffic",
    "model",
    "mode",
    "orders",
    "constraints",
    "exclude_devices",
    "exclude_hosts",
    "time_limit_seconds",
    "seed",
    "omit_groups",
    "exposure",
    "launch_order",
)


def solve_kwargs_request(item) -> "convert.pb.SolveRequest":
    """A SolveRequest from one batch item: a ``SolveRequest`` or a mapping with
    ``graph`` (an ``nx.Graph``) and the keyword arguments of ``solve``."""
    if isinstance(item, convert.pb.SolveRequest):
        return item
    if not isinstance(item, Mapping):
        raise InvalidArgumentError(
            f"a batch item must be a mapping with 'graph' and solve arguments, got {type(item).__name__}", "requests"
        )
    kw = dict(item)
    graph = kw.pop("graph", None)
    if graph is None:
        raise InvalidArgumentError("a batch item needs a 'graph'", "cluster")
    unknown = sorted(set(kw) - set(_SOLVE_KEYS))
    if unknown:
        raise InvalidArgumentError(
            f"unknown solve argument {unknown[0]!r}; known: graph, {', '.join(_SOLVE_KEYS)}", unknown[0]
        )
    return convert.solve_request(graph, **kw)


def chunk_requests(items: list[tuple[int, "convert.pb.SolveRequest"]], max_bytes: int = MAX_BATCH_BYTES):
    """Split (index, request) pairs into lists whose serialized size stays under ``max_bytes``."""
    chunk: list[tuple[int, Any]] = []
    size = 0
    for index, req in items:
        n = req.ByteSize() + 8
        if chunk and size + n > max_bytes:
            yield chunk
            chunk, size = [], 0
        chunk.append((index, req))
        size += n
    if chunk:
        yield chunk


def _pem_bytes(value, what: str) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    with open(value, "rb") as fh:
        data = fh.read()
    if b"-----BEGIN " not in data:
        raise InvalidArgumentError(f"{what} {os.fspath(value)!r} is not a PEM file", "tls_ca")
    return data


def channel_credentials(
    tls: bool | None = None, tls_ca=None, tls_cert=None, tls_key=None
) -> grpc.ChannelCredentials | None:
    """TLS credentials of a client channel, or None for plaintext.

    TLS is used when ``tls`` is true or any of the files is given: ``tls_ca``
    (path or PEM bytes) is the CA that signed the server's certificate (default:
    the system's roots); ``tls_cert`` / ``tls_key`` a client certificate for
    mutual TLS.
    """
    if not (tls or tls_ca is not None or tls_cert is not None or tls_key is not None):
        return None
    if (tls_cert is None) != (tls_key is None):
        raise InvalidArgumentError("a client certificate needs its key (tls_cert and tls_key)", "tls_key")
    return grpc.ssl_channel_credentials(
        root_certificates=_pem_bytes(tls_ca, "TLS CA"),
        private_key=_pem_bytes(tls_key, "TLS key"),
        certificate_chain=_pem_bytes(tls_cert, "TLS certificate"),
    )


def auth_metadata(token: str | None = None, token_file=None) -> tuple[tuple[str, str], ...] | None:
    """``(("authorization", "Bearer TOKEN"),)`` from a token or the first token of a file; None without."""
    if token is None and token_file is not None:
        with open(token_file, encoding="utf-8") as fh:
            lines = [line.strip() for line in fh if line.strip()]
        if not lines:
            raise InvalidArgumentError(f"token file {os.fspath(token_file)!r} holds no token", "token_file")
        token = lines[0]
    if token is None:
        return None
    token = token.strip()
    if not token or any(ch.isspace() for ch in token):
        raise InvalidArgumentError("an auth token must be non-empty and without whitespace", "token")
    return (("authorization", f"Bearer {token}"),)


#: ``import_cluster(format=...)`` spellings -> ``rankmap.v1.TopologyFormat`` names (the CLI flag names).
TOPOLOGY_FORMATS = {
    "slurm": "TOPOLOGY_FORMAT_SLURM_TOPOLOGY_CONF",
    "topology.conf": "TOPOLOGY_FORMAT_SLURM_TOPOLOGY_CONF",
    "topology.yaml": "TOPOLOGY_FORMAT_SLURM_TOPOLOGY_YAML",
    "kubernetes-nodes": "TOPOLOGY_FORMAT_KUBERNETES_NODES",
    "volcano-hypernodes": "TOPOLOGY_FORMAT_VOLCANO_HYPERNODES",
    "topograph-model": "TOPOLOGY_FORMAT_TOPOGRAPH_MODEL",
    "ibnetdiscover": "TOPOLOGY_FORMAT_IBNETDISCOVER",
    "host-topology": "TOPOLOGY_FORMAT_HOST_TOPOLOGY",
}


def _text(value, what: str) -> str:
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidArgumentError(f"{what} is not UTF-8 text (byte {exc.start})", what) from None
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{what} must be text (str or UTF-8 bytes), got {type(value).__name__}", what)
    return value


def import_cluster_request(text, format: str, *, source_name: str | None = None, host_topology=None,
                           kubernetes_nodes=None, topology_labels=None, kueue_topology=None, nvlink_domains=None,
                           nvlink_domain_rate: float | None = None, gpu: str | None = None,
                           gpus_per_node: int | None = None, nodelist: str | None = None,
                           topology_name: str | None = None, rates: Mapping[str, float] | None = None,
                           oversubscription=None, block_links: str | None = None):
    """A ``rankmap.v1.ImportClusterRequest`` from the arguments of ``import_cluster``.

    ``format``: one of :data:`TOPOLOGY_FORMATS` (``"kubernetes-nodes"``, ``"volcano-hypernodes"``,
    ``"topograph-model"``, ``"ibnetdiscover"``, ``"topology.conf"``, ``"topology.yaml"``,
    ``"host-topology"``) or a ``TopologyFormat`` name; texts are ``str`` or UTF-8 ``bytes``;
    ``oversubscription`` a number, ``"2,1"`` or a list (leaf first); ``block_links``
    ``"nvlink"`` or ``"network"``.

    Raises
    ------
    InvalidArgumentError
        An unknown format or block_links, a text that is not text.
    """
    pb = convert.pb
    key = str(format).strip()
    name = TOPOLOGY_FORMATS.get(key.lower(), key.upper())
    if name not in pb.TopologyFormat.keys() or name == "TOPOLOGY_FORMAT_UNSPECIFIED":
        raise InvalidArgumentError(f"unknown topology format {format!r} (known: {', '.join(TOPOLOGY_FORMATS)})",
                                   "format")
    req = pb.ImportClusterRequest(format=pb.TopologyFormat.Value(name), text=_text(text, "text"))
    if source_name:
        req.source_name = str(source_name)
    req.host_topology = _text(host_topology, "host_topology")
    req.kubernetes_nodes = _text(kubernetes_nodes, "kubernetes_nodes")
    req.kueue_topology = _text(kueue_topology, "kueue_topology")
    req.nvlink_domains = _text(nvlink_domains, "nvlink_domains")
    if topology_labels:
        req.topology_labels.extend(topology_labels.split(",") if isinstance(topology_labels, str)
                                   else [str(x) for x in topology_labels])
    if nvlink_domain_rate is not None:
        req.nvlink_domain_rate_gbps = float(nvlink_domain_rate)
    if gpu is not None:
        req.gpu = str(gpu)
    if gpus_per_node is not None:
        req.gpus_per_node = int(gpus_per_node)
    if nodelist:
        req.nodelist = nodelist if isinstance(nodelist, str) else ",".join(nodelist)
    if topology_name:
        req.topology_name = str(topology_name)
    for k, v in (rates or {}).items():
        req.rates_gbps[str(k)] = float(v)
    if oversubscription is not None:
        from rankmap.solver.formats.compose import parse_oversubscription

        req.oversubscription.extend(parse_oversubscription(oversubscription))
    if block_links is not None:
        if block_links not in ("nvlink", "network"):
            raise InvalidArgumentError(f"block_links {block_links!r} must be 'nvlink' or 'network'", "block_links")
        req.block_links = pb.BLOCK_LINKS_NVLINK if block_links == "nvlink" else pb.BLOCK_LINKS_NETWORK
    return req


def import_cluster_graph(resp):
    """The ``nx.Graph`` of an ``ImportClusterResponse``; ``graph`` attributes ``name``, ``gpu``,
    ``warnings`` (list) and, when built, ``nvlink_domains`` / ``nvlink_domain_rate_gbps``."""
    from rankmap.server.graph import graph_from_proto

    G = graph_from_proto(resp.cluster)
    G.graph["name"] = resp.name
    G.graph["gpu"] = resp.gpu
    G.graph["warnings"] = list(resp.warnings)
    if resp.nvlink_domains:
        G.graph["nvlink_domains"] = int(resp.nvlink_domains)
        G.graph["nvlink_domain_rate_gbps"] = float(resp.nvlink_domain_rate_gbps)
    return G
