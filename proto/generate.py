#!/usr/bin/env python
"""Regenerate the Python code of the ``rankmap.v1`` protobuf contract.

The one command (from the repository root, with grpcio-tools installed)::

    python proto/generate.py

writes ``rankmap_pb2.py``, ``rankmap_pb2.pyi`` and ``rankmap_pb2_grpc.py`` next
to ``proto/rankmap/v1/rankmap.proto``.  It runs ``grpc_tools.protoc`` with
``-I proto``, so the generated gRPC module imports ``from rankmap.v1 import
rankmap_pb2``, which is where the package layout installs it (``proto/rankmap/v1``
-> ``rankmap.v1``).  ``--out DIR`` writes the tree ``DIR/rankmap/v1/...``
elsewhere (``tests/test_proto.py`` uses it to check the committed files are up
to date).  The generated code is committed; regenerate after every change of
the ``.proto`` and commit the result together with it.
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent
PROTO_FILES = ("rankmap/v1/rankmap.proto",)
GENERATED = ("rankmap/v1/rankmap_pb2.py", "rankmap/v1/rankmap_pb2.pyi", "rankmap/v1/rankmap_pb2_grpc.py")


def generate(out_dir: Path | str = PROTO_ROOT) -> list[Path]:
    """Run protoc for every file of :data:`PROTO_FILES`; return the generated paths."""
    from grpc_tools import protoc

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    well_known = str(resources.files("grpc_tools") / "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *(str(PROTO_ROOT / f) for f in PROTO_FILES),
    ]
    rc = protoc.main(args)
    if rc != 0:
        raise SystemExit(f"protoc failed with status {rc}")
    paths = [out / g for g in GENERATED]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise SystemExit(f"protoc did not write {', '.join(missing)}")
    grpc_module = (out / "rankmap/v1/rankmap_pb2_grpc.py").read_text()
    if "from rankmap.v1 import rankmap_pb2" not in grpc_module:
        raise SystemExit("generated gRPC module does not import 'from rankmap.v1 import rankmap_pb2'")
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(PROTO_ROOT), help="output root (default: proto/, in place)")
    args = parser.parse_args(argv)
    for p in generate(args.out):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
