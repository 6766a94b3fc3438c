"""Channel settings both ends agree on, and the stubs the clients call through.

:data:`MAX_MESSAGE_BYTES` is the clients' send / receive limit and the server's send
limit; :func:`channel_options` the client channel options that carry it.
:func:`service_stub` / :func:`health_stub` wrap a ``grpc.Channel`` or ``grpc.aio.Channel``;
:data:`SERVICE_NAME`, :data:`RPCS` and :func:`rpc_codec` are what the server registers.
"""

from __future__ import annotations

from typing import Any, Callable

from rankmap.v1 import rankmap_pb2 as pb

__all__ = ["MAX_MESSAGE_BYTES", "SERVICE_NAME", "RPCS", "rpc_codec", "channel_options", "service_stub", "health_stub"]

#: Full name of the service (``rankmap.v1.RankmapService``), as reflection lists it.
SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["RankmapService"].full_name

#: RPC name -> (request message, answer message, whether the answer is a stream).
_MESSAGES = {
    "Solve": (pb.SolveRequest, pb.SolveResponse, False),
    "Evaluate": (pb.EvaluateRequest, pb.EvaluateResponse, False),
    "GetGroups": (pb.GetGroupsRequest, pb.GetGroupsResponse, False),
    "BatchSolve": (pb.BatchSolveRequest, pb.BatchSolveResponse, True),
    "ImportCluster": (pb.ImportClusterRequest, pb.ImportClusterResponse, False),
    "Check": (pb.CheckRequest, pb.CheckResponse, False),
    "RecommendAllocation": (pb.RecommendAllocationRequest, pb.RecommendAllocationResponse, False),
    "Repair": (pb.RepairRequest, pb.RepairResponse, False),
    "Compare": (pb.CompareRequest, pb.CompareResponse, False),
}
#: The RPCs of ``rankmap.v1.RankmapService``, name -> whether the answer is a stream.
RPCS: dict[str, bool] = {name: stream for name, (_, _, stream) in _MESSAGES.items()}

#: Client send / receive limit and server send limit, bytes (a GetGroups answer of the
#: largest world is far below it); the server's receive limit is ``Limits.max_request_bytes``.
MAX_MESSAGE_BYTES = 1 << 30


def rpc_codec(name: str) -> tuple[Callable[[bytes], Any], Callable[[Any], bytes], str]:
    """``(parse request bytes, serialize an answer, full name of the request type)`` of RPC
    ``name`` (one of :data:`RPCS`); ``parse`` raises whatever protobuf raises for bytes that
    are not the message (``DecodeError``, a recursion limit ...)."""
    request, answer, _ = _MESSAGES[name]
    return request.FromString, answer.SerializeToString, request.DESCRIPTOR.full_name


def channel_options() -> list[tuple[str, Any]]:
    """gRPC channel options of the client (message limits)."""
    return [
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ]


def service_stub(channel):
    """A ``rankmap.v1.RankmapService`` stub on ``channel`` (sync or asyncio)."""
    from rankmap.v1 import rankmap_pb2_grpc

    return rankmap_pb2_grpc.RankmapServiceStub(channel)


def health_stub(channel):
    """A ``grpc.health.v1.Health`` stub on ``channel`` (sync or asyncio)."""
    from grpc_health.v1 import health_pb2_grpc

    return health_pb2_grpc.HealthStub(channel)
