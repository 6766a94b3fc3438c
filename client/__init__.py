"""Python client library of the rankmap gRPC service (``rankmap serve``).

:class:`RankmapClient` (blocking) and :class:`AsyncRankmapClient` (asyncio)
take an ``nx.Graph`` and plain values and return the solver's own result types;
see :mod:`rankmap.client.sync`.
"""

from ._common import RankmapRpcError
from .aio import AsyncRankmapClient
from .sync import RankmapClient

__all__ = ["RankmapClient", "AsyncRankmapClient", "RankmapRpcError"]
