"""Channel settings both ends agree on, and the stubs the clients call through.

:data:`MAX_MESSAGE_BYTES` is the clients' send / receive limit and the server's send
limit; :func:`channel_options` the client channel options that carry it.
:func:`service_stub` / :func:`health_stub` wrap a ``grpc.Channel`` or ``grpc.aio.Channel``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_MESSAGE_BYTES", "channel_options", "service_stub", "health_stub"]

#: Client send / receive limit and server send limit, bytes (a GetGroups answer of the
#: largest world is far below it); the server's receive limit is ``Limits.max_request_bytes``.
MAX_MESSAGE_BYTES = 1 << 30


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
