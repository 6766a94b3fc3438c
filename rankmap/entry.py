"""The ``rankmap`` console script and ``python -m rankmap``: BLAS threads capped, then the CLI.

Kept apart from :mod:`rankmap.cli` because :func:`rankmap.cpus.cap_blas_threads` must run before
numpy is imported, and the CLI module imports the solver (and so numpy) at once.
"""

from __future__ import annotations

from typing import Sequence

from rankmap.cpus import cap_blas_threads

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Cap BLAS threads at the CPUs this process may use (unless set), then run ``rankmap`` (exit status)."""
    cap_blas_threads()
    from rankmap.cli import main as cli_main

    return cli_main(argv)
