"""Python client library of the rankmap gRPC service (``rankmap serve``).

:class:`RankmapClient` (blocking) and :class:`AsyncRankmapClient` (asyncio)
take an ``nx.Graph`` and plain values (parallel sizes as keywords or a
:class:`~rankmap.solver.ParallelSizes`) and return the solver's own result types;
see :mod:`rankmap.client.sync`.  Each call is defined once in
:mod:`rankmap.client._calls`; messages are built and read by :mod:`rankmap.wire`
(the client never imports the server).
"""

from rankmap.solver.megatron.config import ParallelSizes

from ._common import RankmapRpcError
from .aio import AsyncRankmapClient
from .sync import RankmapClient

__all__ = ["RankmapClient", "AsyncRankmapClient", "RankmapRpcError", "ParallelSizes"]
