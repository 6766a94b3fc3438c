"""Registering :class:`~rankmap.server.servicer.RankmapServicer` on a gRPC server (split from ``servicer``).

The handlers are those of the generated ``add_RankmapServiceServicer_to_server`` except that the
request deserializer never raises: bytes that are not the request message reach the servicer as
:class:`BadMessage` and are answered INVALID_ARGUMENT instead of gRPC's INTERNAL.
"""

from __future__ import annotations

from typing import Any, Callable

import grpc

from rankmap import wire
from rankmap.solver.errors import InvalidArgumentError
from rankmap.wire.errors import invalid

__all__ = ["BadMessage", "add_to_server"]


class BadMessage:
    """What the request deserializer returns for bytes that are not the request message."""

    def __init__(self, type_name: str, exc: BaseException):
        self.type_name = type_name
        self.reason = " ".join(str(exc).split()) or type(exc).__name__

    def error(self) -> InvalidArgumentError:
        """The INVALID_ARGUMENT to answer with."""
        return invalid(f"the request is not a valid {self.type_name}: {self.reason}", "", "request")


def _deserializer(parse: Callable[[bytes], Any], type_name: str) -> Callable[[bytes], Any]:
    def read(data: bytes):
        try:
            return parse(data)
        except Exception as exc:  # noqa: BLE001 - DecodeError, recursion limit: bad input, not a bug
            return BadMessage(type_name, exc)

    return read


def add_to_server(servicer, server: grpc.Server) -> None:
    """Register ``servicer`` like the generated ``add_RankmapServiceServicer_to_server``,
    except that undecodable request bytes reach the servicer (as :class:`BadMessage`)
    and are answered INVALID_ARGUMENT instead of gRPC's INTERNAL."""
    handlers = {}
    for name, stream in wire.RPCS.items():
        parse, serialize, type_name = wire.rpc_codec(name)
        make = grpc.unary_stream_rpc_method_handler if stream else grpc.unary_unary_rpc_method_handler
        handlers[name] = make(getattr(servicer, name), _deserializer(parse, type_name), serialize)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(wire.SERVICE_NAME, handlers),))
    if hasattr(server, "add_registered_method_handlers"):
        server.add_registered_method_handlers(wire.SERVICE_NAME, handlers)
