"""A solve result records how NCCL ran its collectives, and `rankmap evaluate` on it predicts the same way."""

from __future__ import annotations

import json

from cli_helpers import run


def test_evaluate_reads_the_nccl_settings_of_a_result(tmp_path, capsys):
    """1 host x 8 H100, tp8 all-reduce of 4 GB: solved with NCCL_ALGO=ring, evaluated again from the result.

    Ring on one NVSwitch host: 2·7/8·4e9 = 7e9 bytes per GPU at 18 × 20.6 = 370.8 GB/s = 18.878 ms, plus NCCL's
    ring latency, Simple: 8.4 + 14 × 3.4 = 56 us.  NVLS (the default) would be 7e9 / 490.28 GB/s + 25 us.
    """
    cluster = tmp_path / "h100.json"
    code, out, _err = run(capsys, "cluster", "--gpus-per-node", "8", "--gpu", "h100")
    assert code == 0
    cluster.write_text(out)
    code, out, _err = run(capsys, "solve", str(cluster), "--tp", "8", "--traffic", "tp=4e9", "--nccl-algo", "ring")
    assert code == 0
    result = json.loads(out)
    assert result["nccl"] == {"algorithm": "ring", "pxn": True, "rates": {}, "latency": True}
    ring = 7e9 / 370.8e9 + 56e-6
    assert abs(result["cost"]["total_seconds"] / ring - 1) < 1e-9
    path = tmp_path / "result.json"
    path.write_text(out)
    code, out, _err = run(capsys, "evaluate", str(cluster), "--assignment", str(path))
    assert code == 0
    again = json.loads(out)["cost"]
    assert again["classes"]["tp"]["algorithm"] == "ring"
    assert abs(again["total_seconds"] / ring - 1) < 1e-9
    # a flag given on the command line wins over the document
    code, out, _err = run(capsys, "evaluate", str(cluster), "--assignment", str(path), "--nccl-algo", "auto")
    assert code == 0
    nvls = json.loads(out)["cost"]
    assert nvls["classes"]["tp"]["algorithm"] == "nvls"
    assert abs(nvls["total_seconds"] / (7e9 / (2 * 0.85 * 370.8e9 * 7 / 9) + 25e-6) - 1) < 1e-9
