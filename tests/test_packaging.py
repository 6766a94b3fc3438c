"""The distribution ships every package: each folder with an ``__init__.py`` under a mapped
package directory is listed in pyproject's ``packages`` (a wheel built without it lacks the
subpackage although the editable install works)."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_listed():
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    missing = []
    for pkg, folder in cfg["package-dir"].items():
        root = REPO / folder
        for init in root.rglob("__init__.py"):
            rel = init.parent.relative_to(root)
            name = ".".join([pkg, *rel.parts]) if rel.parts else pkg
            if "__pycache__" not in rel.parts and name not in listed:
                missing.append(name)
    assert not missing, f"add to [tool.setuptools] packages: {sorted(missing)}"
