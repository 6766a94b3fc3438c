"""The wire: ``rankmap.v1`` messages <-> plain domain types, shared by the client and the server.

The only package (with the generated ``rankmap.v1``) that touches protobuf messages; both
sides of the wire use it, so they agree by construction:

* the client builds requests with :func:`solve_request`, :func:`evaluate_request`,
  :func:`get_groups_request`, :func:`import_cluster_request` (:mod:`rankmap.wire.requests`)
  from an ``nx.Graph`` and plain Python values, and decodes answers with
  :func:`result_from_proto`, :func:`evaluate_cost`, :func:`groups_and_config`,
  :func:`import_cluster_graph` (:mod:`rankmap.wire.results`) and failures with
  :func:`error_from_rpc` / :func:`error_from_batch` (:mod:`rankmap.wire.errors`);
* the server reads requests with :func:`parse_solve_request`,
  :func:`parse_evaluate_request` and :func:`parse_get_groups_request`
  (:mod:`rankmap.wire.parse`) into the arguments of :func:`rankmap.solver.solve` /
  ``evaluate`` / ``megatron_groups``, and encodes answers with :func:`result_to_proto`,
  :func:`evaluate_response` and :func:`get_groups_response`, errors with
  :func:`error_status` / :func:`error_to_proto`.

The pieces by topic: :mod:`~rankmap.wire.graph` (the cluster), :mod:`~rankmap.wire.sizes`
(parallel sizes and configurations), :mod:`~rankmap.wire.traffic` (values, models, traffic),
:mod:`~rankmap.wire.options` (search options), :mod:`~rankmap.wire.costs` (costs, groups,
layouts), :mod:`~rankmap.wire.channel` (message limits, stubs), :mod:`~rankmap.wire.repair`
(``Repair`` and ``Compare``).  Loading this package loads
neither the server (``rankmap.server``, ``grpc_reflection``) nor OR-Tools.

Errors
------
Invalid input raises :class:`~rankmap.solver.errors.InvalidArgumentError`.  Two
spellings of "which field" exist: the *proto path* of the request field
(``sizes.tp``, ``cluster.links[3].bandwidth_gbps``, ``traffic.bytes[tp]``,
``exposure[dp]``), which goes into the ``google.rpc.BadRequest`` field
violation, and the *argument*, the command-line / Python spelling the solver
uses (``tp``, ``cluster.edges``, ``traffic.tp``, ``exposure.dp``).
:func:`error_fields` gives both for any error raised while a request is
parsed or solved; the client raises errors whose ``field`` is the
argument (as an in-process call would) and whose ``proto_field`` is the path.
The message is always the solver's, i.e. the line the CLI prints.

Node ids travel as strings (the solver reports assignments as strings too).
"""

from __future__ import annotations

# dependency order: each module imports only those above it
from rankmap.wire.errors import *  # noqa: F401,F403
from rankmap.wire.errors import __all__ as _errors
from rankmap.wire.channel import *  # noqa: F401,F403
from rankmap.wire.channel import __all__ as _channel
from rankmap.wire.costs import *  # noqa: F401,F403
from rankmap.wire.costs import __all__ as _costs
from rankmap.wire.graph import *  # noqa: F401,F403
from rankmap.wire.graph import __all__ as _graph
from rankmap.wire.measured import *  # noqa: F401,F403
from rankmap.wire.measured import __all__ as _measured
from rankmap.wire.sizes import *  # noqa: F401,F403
from rankmap.wire.sizes import __all__ as _sizes
from rankmap.wire.options import *  # noqa: F401,F403
from rankmap.wire.options import __all__ as _options
from rankmap.wire.traffic import *  # noqa: F401,F403
from rankmap.wire.traffic import __all__ as _traffic
from rankmap.wire.requests import *  # noqa: F401,F403
from rankmap.wire.requests import __all__ as _requests
from rankmap.wire.parse import *  # noqa: F401,F403
from rankmap.wire.parse import __all__ as _parse
from rankmap.wire.results import *  # noqa: F401,F403
from rankmap.wire.results import __all__ as _results
from rankmap.wire.allocation import *  # noqa: F401,F403
from rankmap.wire.allocation import __all__ as _allocation

from rankmap.wire.repair import *  # noqa: F401,F403
from rankmap.wire.repair import __all__ as _repair

__all__ = [*_errors, *_channel, *_costs, *_graph, *_measured, *_sizes, *_options, *_traffic, *_requests, *_parse,
           *_results, *_allocation, *_repair]
