"""Errors on the wire: which request field, which message, and how much of it fits.

:func:`error_fields` gives, for an error raised while a request is parsed or
solved, the *proto path* of the field (``sizes.tp``,
``cluster.links[3].bandwidth_gbps``) and the *argument* (the CLI / Python
spelling, ``tp``, ``cluster.edges``); :func:`error_status` builds the
``google.rpc.Status`` (``BadRequest`` / ``PreconditionFailure`` + ``ErrorInfo``)
the server sends in its trailers, :func:`error_to_proto` the in-stream
``rankmap.v1.Error`` of BatchSolve; on the client side :func:`error_from_rpc` and
:func:`error_from_batch` turn them back into the solver's exceptions (or
:class:`RankmapRpcError` for any other status).  Messages and field paths are truncated
(:func:`clip`) so the trailers stay far below gRPC's metadata limit (8 KiB soft,
16 KiB hard by default) whatever the request held: a 20,000-character device
name quoted in a message must not turn INVALID_ARGUMENT into RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

from typing import Any

import grpc

from rankmap.solver.megatron.config import PARALLEL_SIZE_KEYS
from rankmap.solver.errors import InfeasibleError, InvalidArgumentError, RankmapError
from rankmap.v1 import rankmap_pb2 as pb

__all__ = [
    "SIZE_FIELDS",
    "ERROR_DOMAIN",
    "MAX_MESSAGE_CHARS",
    "MAX_FIELD_CHARS",
    "clip",
    "invalid",
    "proto_field",
    "error_fields",
    "error_to_proto",
    "error_from_proto",
    "error_status",
    "error_from_status",
    "RankmapRpcError",
    "error_from_rpc",
    "error_from_batch",
]

#: Longest error message sent (UTF-8 bytes, before the truncation note).  A
#: message travels up to three times in the trailers (grpc-message, the
#: field violation, nothing else) percent- or base64-encoded: 512 bytes stay
#: under 4 KiB in all.
MAX_MESSAGE_CHARS = 512
#: Longest field path / argument sent.
MAX_FIELD_CHARS = 160

#: Size fields of ``ParallelSizes`` (the solver spells them the same).
SIZE_FIELDS = PARALLEL_SIZE_KEYS


def clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, saying how much was cut."""
    text = str(text)
    raw = text.encode("utf-8", "replace")
    if len(raw) <= limit:
        return text
    head = raw[: max(0, limit - 40)].decode("utf-8", "ignore")
    return f"{head}... [{len(text) - len(head)} more characters]"


def invalid(message: str, path: str, argument: str | None = None) -> InvalidArgumentError:
    """An :class:`InvalidArgumentError` about proto field ``path``.

    ``argument`` is the CLI / Python spelling of the field (default: ``path``).
    """
    err = InvalidArgumentError(message, path)
    err.argument = argument if argument is not None else path  # type: ignore[attr-defined]
    return err


_SIMPLE = {
    "mode": "mode",
    "orders": "orders",
    "constraints": "constraints",
    "exclude_devices": "exclude_devices",
    "exclude_hosts": "exclude_hosts",
    "launch_order": "launch_order.hosts",
    "time_limit_seconds": "time_limit_seconds",
    "time_limit": "time_limit_seconds",
    "seed": "seed",
    "assignment": "assignment",
    "traffic": "traffic",
    "model": "traffic.model.preset",
    "model_file": "traffic.model",
    "cluster": "cluster",
    "cluster.edges": "cluster.links",
    "cluster.nodes": "cluster.devices",
    "rank": "assignment",
    "rank_offset": "sizes",
    "nccl_algo": "nccl.algorithm",
    "nccl_rate": "nccl.rates_gbps",
    "nccl": "nccl",
}


def proto_field(field: str, rpc: str = "Solve") -> str:
    """Map a solver field (``tp``, ``order``, ``traffic.tp``, ``model.seq_length``)
    to the path of the request field it came from, for request type ``rpc``.

    Unknown fields are returned unchanged.
    """
    if not field:
        return ""
    if field in SIZE_FIELDS:
        return f"sizes.{field}"
    if field == "order":
        return "orders.orders" if rpc in ("Solve", "BatchSolve") else "order"
    if field in _SIMPLE:
        return _SIMPLE[field]
    if field.startswith("traffic.") and not field.startswith("traffic.bytes") and not field.startswith("traffic.model"):
        return f"traffic.bytes[{field[len('traffic.'):]}]"
    if field.startswith("model."):
        return f"traffic.model.overrides[{field[len('model.'):]}]"
    if field.startswith("exposure."):
        return f"exposure[{field[len('exposure.'):]}]"
    if field.startswith("nccl_rate."):
        return f"nccl.rates_gbps[{field[len('nccl_rate.'):]}]"
    if field.startswith("cluster.edges"):
        return "cluster.links" + field[len("cluster.edges"):]
    return field


def error_fields(exc: RankmapError, rpc: str = "Solve") -> tuple[str, str]:
    """``(proto path, argument)`` of an error raised while parsing or solving a request."""
    argument = getattr(exc, "argument", None)
    if argument is not None:
        return exc.field, argument
    return proto_field(exc.field, rpc), exc.field


def error_to_proto(exc: BaseException, code: int, rpc: str = "Solve") -> "pb.Error":
    """A ``rankmap.v1.Error`` (BatchSolve) for an exception and a ``grpc.StatusCode`` value."""
    if isinstance(exc, RankmapError):
        path, argument = error_fields(exc, rpc)
        return pb.Error(
            code=code,
            message=clip(exc.message),
            field=clip(path, MAX_FIELD_CHARS),
            argument=clip(argument, MAX_FIELD_CHARS),
        )
    return pb.Error(code=code, message=clip(" ".join(str(exc).split()) or type(exc).__name__))


def error_from_proto(err: "pb.Error") -> tuple[int, str, str, str]:
    """``(code, message, argument, proto path)`` of a ``rankmap.v1.Error``."""
    return int(err.code), err.message, err.argument or err.field, err.field


#: ``google.rpc.ErrorInfo.domain`` of rankmap's errors.
ERROR_DOMAIN = "rankmap.v1"


def error_status(code: int, exc: RankmapError, rpc: str = "Solve"):
    """A ``google.rpc.Status`` for an invalid or infeasible request.

    INVALID_ARGUMENT carries a ``BadRequest`` field violation (field = proto
    path, description = the CLI's message); FAILED_PRECONDITION a
    ``PreconditionFailure`` (subject = proto path); both an ``ErrorInfo`` whose
    metadata ``argument`` is the CLI / Python spelling of the field.
    """
    from google.protobuf import any_pb2
    from google.rpc import error_details_pb2, status_pb2

    path, argument = error_fields(exc, rpc)
    path, argument = clip(path, MAX_FIELD_CHARS), clip(argument, MAX_FIELD_CHARS)
    message = clip(exc.message)
    infeasible = isinstance(exc, InfeasibleError)
    info = error_details_pb2.ErrorInfo(
        reason="INFEASIBLE" if infeasible else "INVALID_ARGUMENT",
        domain=ERROR_DOMAIN,
        metadata={"argument": argument, "field": path},
    )
    if infeasible:
        detail = error_details_pb2.PreconditionFailure(
            violations=[
                error_details_pb2.PreconditionFailure.Violation(type="INFEASIBLE", subject=path, description=message)
            ]
        )
    else:
        detail = error_details_pb2.BadRequest(
            field_violations=[error_details_pb2.BadRequest.FieldViolation(field=path, description=message)]
        )
    details = []
    for m in (detail, info):
        a = any_pb2.Any()
        a.Pack(m)
        details.append(a)
    return status_pb2.Status(code=int(code), message=message, details=details)


def error_from_status(status, default_message: str = "") -> tuple[str, str, str]:
    """``(message, argument, proto path)`` from a ``google.rpc.Status`` built by :func:`error_status`."""
    from google.rpc import error_details_pb2

    message = (status.message if status is not None else "") or default_message
    path = argument = ""
    # the violation details error_status writes: (message type, its list of violations, the path field)
    violations = (
        (error_details_pb2.BadRequest, "field_violations", "field"),
        (error_details_pb2.PreconditionFailure, "violations", "subject"),
    )
    for d in status.details if status is not None else ():
        found = next((v for v in violations if d.Is(v[0].DESCRIPTOR)), None)
        if found is not None:
            cls, items, key = found
            detail = cls()
            d.Unpack(detail)
            listed = getattr(detail, items)
            if listed:
                path = getattr(listed[0], key)
                message = listed[0].description or message
        elif d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            d.Unpack(info)
            argument = info.metadata.get("argument", "")
            path = path or info.metadata.get("field", "")
    return message, argument or path, path


# --------------------------------------------------------------------------- client side


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
    from grpc_status import rpc_status

    try:
        status = rpc_status.from_call(err)
    except Exception:  # noqa: BLE001 - malformed trailers: keep the plain details
        status = None
    message, argument, path = error_from_status(status, details)
    cls = InvalidArgumentError if code == grpc.StatusCode.INVALID_ARGUMENT else InfeasibleError
    return _domain_error(cls, message, argument or path, path)


def error_from_batch(err) -> Exception:
    """The exception for one failed item of a BatchSolve stream (a ``rankmap.v1.Error``)."""
    code_value, message, argument, path = error_from_proto(err)
    code = _code_from_int(code_value)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return _domain_error(InvalidArgumentError, message, argument, path)
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        return _domain_error(InfeasibleError, message, argument, path)
    return RankmapRpcError(code, message)
