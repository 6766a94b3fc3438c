"""The command line contract (DESIGN §7): output shapes, job files, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

from rankmap.cli import main
from rankmap.solver import fat_tree_cluster

DATA = Path(__file__).parent / "data"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture()
def cluster_file(tmp_path):
    g = fat_tree_cluster(2, 8, intra_bandwidth_gbps=450, nic_bandwidth_gbps=50)
    path = tmp_path / "two-hosts.json"
    path.write_text(json.dumps(nx.node_link_data(g, edges="edges")))
    return path


def test_groups_json_reproduces_seed(capsys):
    code, out, err = run(capsys, "groups", "--world-size", "16", "--tp", "2", "--pp", "4")
    assert code == 0 and err == ""
    doc = json.loads(out)
    want = json.loads((DATA / "seed-16gpu-tp2-pp4-dp2.json").read_text())
    assert doc["order"] == "tp-cp-ep-dp-pp" and doc["world_size"] == 16
    assert doc["sizes"] == {"tp": 2, "cp": 1, "ep": 1, "etp": 2, "dp": 2, "edp": 2, "pp": 4}
    assert doc["groups"] == want["groups"]


def test_groups_table_shows_tp_striding(capsys):
    code, out, _ = run(capsys, "groups", "--world-size", "16", "--tp", "8", "--pp", "2", "--order", "pp-tp-dp",
                       "--format", "table")
    assert code == 0
    assert "g0 g2 g4 g6 g8 g10 g12 g14 ←TP→" in out
    assert "g1 g3 g5 g7 g9 g11 g13 g15 ←TP→" in out
    code, out, _ = run(capsys, "groups", "--world-size", "16", "--tp", "8", "--pp", "2", "--format", "table")
    assert "g0 g1 g2 g3 g4 g5 g6 g7 ←TP→" in out


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["groups", "--world-size", "4", "--tp", "4", "--ep", "4"], "defaulted to tp = 4"),
        (["groups", "--world-size", "8", "--order", "tp-tp-dp-pp"], "repeats token 'tp'"),
        (["groups", "--world-size", "8", "--tp", "x"], "expected an integer, got 'x'"),
        (["groups", "--world-size", "6", "--tp", "4"], "world_size 6 is not divisible by tp*cp*pp"),
        (["groups"], "--world-size"),
    ],
)
def test_errors_exit_2_one_line(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and needle in err


def test_solve_json_contract(capsys, cluster_file):
    code, out, err = run(capsys, "solve", str(cluster_file), "--tp", "4", "--pp", "2", "--traffic",
                         "tp=4e9,dp=1e8,pp=8e9", "--orders", "megatron-cli")
    assert code == 0, err
    doc = json.loads(out)
    for key in ("order", "assignment", "hosts", "cost", "baseline", "status", "bound_seconds", "solve_seconds",
                "groups"):
        assert key in doc
    assert doc["order"] == "tp-cp-ep-pp-dp"
    assert set(doc["cost"]) >= {"total_seconds", "by_class"}
    assert set(doc["baseline"]) == {"order", "assignment", "cost"}
    assert doc["apply"]["megatron_args"] == ["--use-tp-pp-dp-mapping"]
    assert len(doc["assignment"]) == 16 and len(set(doc["assignment"])) == 16
    code, out2, _ = run(capsys, "groups", "--world-size", "16", "--tp", "4", "--pp", "2", "--order", doc["order"])
    assert json.loads(out2)["groups"] == doc["groups"]


def test_solve_table_is_readable(capsys, cluster_file):
    code, out, err = run(capsys, "solve", str(cluster_file), "--tp", "4", "--pp", "2", "--traffic",
                         "tp=4e9,dp=1e8,pp=8e9", "--orders", "megatron-cli", "--format", "table")
    assert code == 0, err
    assert "chosen order  tp-cp-ep-pp-dp" in out
    assert "CUDA_VISIBLE_DEVICES" in out and "improvement" in out and "status OPTIMAL" in out


def test_job_file_flags_override_and_unknown_keys(capsys, cluster_file, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(
        f"cluster: {cluster_file.name}\ntp: 4\npp: 2\ntraffic: {{tp: 4e9, dp: 1e8, pp: 8e9}}\n"
        "orders: megatron-cli\nmode: launcher\ntime_limit: 10\nseed: 1\n"
    )
    code, out, err = run(capsys, "solve", str(job))
    assert code == 0, err
    assert json.loads(out)["order"] == "tp-cp-ep-pp-dp"
    code, out, err = run(capsys, "solve", str(job), "--orders", "default")
    assert json.loads(out)["order"] == "tp-cp-ep-dp-pp"  # the flag wins over the file
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"cluster: {cluster_file.name}\ntp: 4\ntensor_parallel: 2\n")
    code, out, err = run(capsys, "solve", str(bad))
    assert code == 2 and out == "" and "unknown key 'tensor_parallel'" in err


def test_evaluate_matches_solve(capsys, cluster_file, tmp_path):
    code, out, _ = run(capsys, "solve", str(cluster_file), "--tp", "4", "--pp", "2", "--traffic",
                       "tp=4e9,dp=1e8,pp=8e9", "--orders", "megatron-cli")
    doc = json.loads(out)
    asg = tmp_path / "solve.json"
    asg.write_text(out)
    code, out, err = run(capsys, "evaluate", str(cluster_file), "--order", doc["order"], "--assignment", str(asg),
                         "--tp", "4", "--pp", "2", "--traffic", "tp=4e9,dp=1e8,pp=8e9")
    assert code == 0, err
    assert json.loads(out)["cost"]["total_seconds"] == pytest.approx(doc["cost"]["total_seconds"], rel=1e-12)


def test_solve_bad_cluster_is_one_line(capsys, tmp_path):
    g = nx.Graph()
    g.add_node("a", kind="gpu", host="h", local_index=0)
    g.add_node("b", kind="gpu", host="h", local_index=1)
    g.add_edge("a", "b", bandwidth=-3)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(nx.node_link_data(g, edges="edges")))
    code, out, err = run(capsys, "solve", str(p), "--traffic", "dp=1e9")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "edge ('a', 'b') has bandwidth -3" in err


def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "rankmap", "groups", "--world-size", "8", "--tp", "2", "--cp", "2"],
                         capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout)
    want = json.loads((DATA / "seed-8gpu-tp2-cp2-dp2.json").read_text())
    assert doc["groups"] == want["groups"]
