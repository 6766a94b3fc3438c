"""rankmap: place the ranks of a Megatron-style training job onto a real cluster.

Subpackages
-----------
rankmap.solver
    Pure-Python core: Megatron's rank catalogue, the cluster model, the traffic
    model, the objective and the CP-SAT search.  Knows nothing of gRPC.
rankmap.wire
    ``rankmap.v1`` messages <-> the solver's types, shared by the server and the client
    (the only code besides ``rankmap.v1`` that touches protobuf messages).
rankmap.server
    The gRPC service (``rankmap serve``), a thin adapter over the solver.
rankmap.client
    Python client library for the service (imports ``rankmap.wire``, never the server).
rankmap.v1
    Generated protobuf / gRPC code for the ``rankmap.v1`` contract.
"""

__version__ = "0.1.0"
