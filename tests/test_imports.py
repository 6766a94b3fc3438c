"""What each entry point imports (issue 14): structural checks in a fresh interpreter, no timing.

``rankmap groups`` must not pay for OR-Tools, scipy, networkx or gRPC (its start-up is measured
by ``benchmarks/bench_catalogue.py``); ``import rankmap.solver`` loads no gRPC or protobuf; ``import rankmap.client`` loads
neither the server nor server reflection (client and server share only ``rankmap.wire``).
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("ortools", "scipy", "networkx", "grpc", "google", "pandas", "yaml", "ray", "tqdm")


def _loaded_after(code: str) -> list[str]:
    probe = (f"import sys, json\n{code}\n"
             f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({list(HEAVY)!r}))))")
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_rankmap_groups_imports_no_heavy_package():
    code = ("import io, contextlib\nfrom rankmap.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as buf:\n"
            "    assert main(['groups', '--world-size', '16', '--tp', '2', '--pp', '2']) == 0\n"
            "assert '\"TENSOR_MODEL_PARALLEL_GROUP\"' in buf.getvalue()")
    assert _loaded_after(code) == []


def test_import_solver_loads_no_grpc_or_protobuf():
    loaded = _loaded_after("import rankmap.solver\nfrom rankmap.solver import megatron_groups, parallel_config")
    assert not {"grpc", "google"} & set(loaded)


def _modules_after(code: str) -> set[str]:
    probe = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def test_import_client_loads_no_server():
    loaded = _modules_after("import rankmap.client\nfrom rankmap.client import AsyncRankmapClient, RankmapClient")
    assert not {m for m in loaded if m == "rankmap.server" or m.startswith("rankmap.server.")}
    # ``import grpc`` itself aliases the (empty) top-level grpc_reflection package as
    # grpc.reflection; the reflection service and its descriptors live below it
    assert not {m for m in loaded if m.startswith("grpc_reflection.")}
    assert "rankmap.wire" in loaded


def test_import_client_alone_loads_no_grpc():
    """``import rankmap.client`` is light: grpc (and the grpc_reflection package its import pulls in)
    loads when a client class is first used."""
    loaded = _modules_after("import rankmap.client")
    assert "grpc" not in loaded
    assert not {m for m in loaded if m == "grpc_reflection" or m.startswith("grpc_reflection.")}
    loaded = _modules_after("import rankmap.client\nrankmap.client.RankmapClient")
    assert "grpc" in loaded and "rankmap.client.sync" in loaded


def test_lazy_solver_names_resolve():
    """Every lazily exported name of rankmap.solver and rankmap.solver.formats resolves."""
    import rankmap.solver as solver
    import rankmap.solver.formats as formats

    for mod in (solver, formats):
        for name in mod._LAZY:
            assert getattr(mod, name) is not None, name
        assert set(mod._LAZY) <= set(dir(mod))
        for name in mod.__all__:  # ``from ... import *`` works (formats once listed a name it could not load)
            assert getattr(mod, name) is not None, name
