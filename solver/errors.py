"""Errors raised by the rankmap solver.

Every error names the offending value and, where it comes from a request field,
the field (``field`` uses the command-line / YAML / protobuf spelling, e.g.
``"tp"``, ``"order"``, ``"cluster.edges[3].bandwidth"``).  Adapters turn them into
their own conventions: the CLI prints ``str(err)`` on one line and exits 2, the
gRPC service answers ``INVALID_ARGUMENT`` (or ``FAILED_PRECONDITION`` for
:class:`InfeasibleError`) with a ``google.rpc.BadRequest`` field violation.
"""

from __future__ import annotations

__all__ = ["RankmapError", "InvalidArgumentError", "InfeasibleError"]


class RankmapError(ValueError):
    """Base class of every error rankmap raises on bad input.

    Attributes
    ----------
    field : str
        The request field the error is about ("" when it concerns the request as
        a whole).
    message : str
        One line, naming the offending value.
    """

    def __init__(self, message: str, field: str = "") -> None:
        message = " ".join(str(message).split())  # always a single line
        super().__init__(message)
        self.message = message
        self.field = field

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.message


class InvalidArgumentError(RankmapError):
    """The request itself is invalid (sizes, order, graph, traffic, file syntax)."""


class InfeasibleError(RankmapError):
    """The request is well formed but its constraints admit no layout."""
