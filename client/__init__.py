"""Python client library of the rankmap gRPC service (``rankmap serve``).

:class:`RankmapClient` (blocking) and :class:`AsyncRankmapClient` (asyncio)
take an ``nx.Graph`` and plain values (parallel sizes as keywords or a
:class:`~rankmap.solver.ParallelSizes`) and return the solver's own result types;
see :mod:`rankmap.client.sync`.  Each call is defined once in
:mod:`rankmap.client._calls`; messages are built and read by :mod:`rankmap.wire`
(the client never imports the server).
"""

from rankmap.solver._lazy import lazy_exports
from rankmap.solver.megatron.config import ParallelSizes

#: Names loaded on first use (PEP 562): ``import rankmap.client`` does not import grpc (whose
#: import pulls in the top-level ``grpc_reflection`` package) until a client is used.
_LAZY = {"RankmapClient": "sync", "AsyncRankmapClient": "aio", "RankmapRpcError": "_common"}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())

__all__ = ["RankmapClient", "AsyncRankmapClient", "RankmapRpcError", "ParallelSizes"]
