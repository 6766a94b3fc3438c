"""The committed generated code of rankmap.v1 matches the .proto.

Regenerates with ``proto/generate.py`` (the one documented command) into a
temporary directory and compares byte for byte.  If this fails, run
``python proto/generate.py`` and commit the result with the .proto change.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GENERATE = ROOT / "proto" / "generate.py"


def _generate_module():
    spec = importlib.util.spec_from_file_location("rankmap_proto_generate", GENERATE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_generated_code_is_up_to_date(tmp_path):
    pytest.importorskip("grpc_tools", reason="grpcio-tools (the [test] extra) regenerates the code")
    gen = _generate_module()
    # protoc runs in a fresh interpreter: in-process it can abort once grpc and
    # the generated module are already loaded (other test modules import them)
    proc = subprocess.run(
        [sys.executable, str(GENERATE), "--out", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    stale = []
    for rel in gen.GENERATED:
        fresh = (tmp_path / rel).read_bytes()
        committed = (ROOT / "proto" / rel).read_bytes()
        if fresh != committed:
            stale.append(rel)
    assert not stale, (
        f"generated files out of date: {', '.join(stale)}; run `python proto/generate.py` "
        f"(with the grpcio-tools version pinned in pyproject.toml) and commit them"
    )


def test_grpc_module_imports_the_installed_package():
    text = (ROOT / "proto" / "rankmap" / "v1" / "rankmap_pb2_grpc.py").read_text()
    assert "from rankmap.v1 import rankmap_pb2" in text


def test_contract_shape():
    from rankmap.v1 import rankmap_pb2 as pb

    service = pb.DESCRIPTOR.services_by_name["RankmapService"]
    assert service.full_name == "rankmap.v1.RankmapService"
    methods = {m.name: m for m in service.methods}
    assert set(methods) == {"Solve", "Evaluate", "GetGroups", "BatchSolve"}
    assert methods["BatchSolve"].server_streaming and not methods["BatchSolve"].client_streaming
    for m in ("Solve", "Evaluate", "GetGroups"):
        assert not methods[m].server_streaming
    # every enum has *_UNSPECIFIED = 0
    for enum in pb.DESCRIPTOR.enum_types_by_name.values():
        assert enum.values_by_number[0].name.endswith("_UNSPECIFIED"), enum.name
    assert [v.name for v in pb.OrderPolicy.DESCRIPTOR.values] == [
        "ORDER_POLICY_UNSPECIFIED", "ORDER_POLICY_DEFAULT", "ORDER_POLICY_MEGATRON_CLI", "ORDER_POLICY_ALL"
    ]
    assert [v.name for v in pb.Mode.DESCRIPTOR.values] == ["MODE_UNSPECIFIED", "MODE_LAUNCHER", "MODE_FREE", "MODE_FIXED"]
    assert [v.name for v in pb.Status.DESCRIPTOR.values] == ["STATUS_UNSPECIFIED", "STATUS_OPTIMAL", "STATUS_FEASIBLE"]
    link = pb.Link.DESCRIPTOR.fields_by_name
    assert "bandwidth_gbps" in link and "latency_us" in link
    cost = pb.Cost.DESCRIPTOR.fields_by_name
    assert {"total_seconds", "by_class_seconds", "time_by_class_seconds"} <= set(cost)
