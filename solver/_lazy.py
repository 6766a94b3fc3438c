"""Lazily exported names for a package's ``__init__`` (PEP 562), shared by ``rankmap.solver``
and ``rankmap.solver.formats``: light users (``rankmap groups``) import only what they touch."""

from __future__ import annotations

import importlib
from typing import Callable, Mapping


def lazy_exports(package: str, table: Mapping[str, str], namespace: dict) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for ``package`` whose ``table`` maps name -> submodule.

    The first access of a name imports ``package.submodule`` and caches the value in
    ``namespace`` (the package's ``globals()``), so later accesses cost nothing.

    Raises
    ------
    AttributeError
        (from ``__getattr__``) for a name neither defined nor in ``table``.
    """

    def __getattr__(name: str):
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def __dir__():
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
