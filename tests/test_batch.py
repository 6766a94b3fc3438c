"""``rankmap batch``: folder / YAML list / JSONL inputs, in process and via BatchSolve."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rankmap.cli import main
from rankmap.server.service import serve
from rankmap.solver.formats.graphfile import node_link_text

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from test_service import make_cluster  # noqa: E402


@pytest.fixture()
def inputs(tmp_path):
    (tmp_path / "clusters").mkdir()
    (tmp_path / "clusters" / "c8.json").write_text(node_link_text(make_cluster(2, 4)))
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "a.yaml").write_text("cluster: ../clusters/c8.json\ntp: 2\npp: 2\ntime_limit: 5\n")
    (jobs / "b.yaml").write_text("name: bad-tp\ncluster: ../clusters/c8.json\ntp: 3\n")
    (jobs / "c.yaml").write_text(
        "cluster: ../clusters/c8.json\ntp: 2\nmodel: {preset: llama3-8b, seq_length: 4096}\nmode: free\n"
        "orders: megatron-cli\nconstraints: [tp within host]\ntime_limit: 5\n"
    )
    (jobs / "d.yaml").write_text("cluster: ../clusters/c8.json\ntpp: 2\n")
    (jobs / "notes.txt").write_text("ignored")
    (tmp_path / "list.yaml").write_text(
        "- {name: one, cluster: clusters/c8.json, tp: 2, traffic: {tp: 4e9, dp: 1GB}, time_limit: 5}\n"
        "- {name: two, cluster: clusters/c8.json, tp: 4, model: llama3-8b, time_limit: 5}\n"
        "- {name: missing, cluster: clusters/nope.json, tp: 4}\n"
        "- {name: infeasible, cluster: clusters/c8.json, tp: 8, constraints: [tp within host]}\n"
    )
    (tmp_path / "jobs.jsonl").write_text(
        '{"cluster": "clusters/c8.json", "tp": 2, "time_limit": 5}\n\n'
        '{"name": "x", "cluster": "clusters/c8.json", "tp": 4, "mode": "fixed"}\n'
        "{bad json\n"
    )
    return tmp_path


def _run(argv, capsys):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def _lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _strip(doc):
    doc = json.loads(json.dumps(doc))
    if doc["ok"]:
        doc["result"].pop("solve_seconds")
    return doc


def test_folder_in_process(inputs, capsys):
    rc, out, err = _run(["batch", str(inputs / "jobs"), "--workers", "2"], capsys)
    assert rc == 1  # some jobs failed
    docs = {d["index"]: d for d in _lines(out)}
    assert sorted(docs) == [0, 1, 2, 3]
    assert [docs[i]["name"] for i in range(4)] == ["a", "bad-tp", "c", "d"]
    assert docs[0]["ok"] and docs[2]["ok"]
    assert docs[1]["error"]["field"] == "world_size" and "not divisible" in docs[1]["error"]["message"]
    assert "unknown key 'tpp'" in docs[3]["error"]["message"]
    assert docs[2]["result"]["mode"] == "free"
    # the summary goes to stderr so that stdout stays JSONL
    assert "4 jobs: 2 ok, 2 failed" in err
    # each result is what `rankmap solve JOB.yaml` prints
    rc, single, _ = _run(["solve", str(inputs / "jobs" / "a.yaml")], capsys)
    assert rc == 0
    assert _strip({"ok": True, "result": json.loads(single)})["result"] == _strip(docs[0])["result"]


def test_yaml_list_to_file_and_server_agree(inputs, capsys):
    out_local = inputs / "local.jsonl"
    rc, out, err = _run(["batch", str(inputs / "list.yaml"), "-o", str(out_local), "--workers", "1"], capsys)
    assert rc == 1
    assert "4 jobs: 2 ok, 2 failed" in out  # with -o the table goes to stdout
    local = {d["index"]: d for d in _lines(out_local.read_text())}
    assert local[2]["error"]["field"] == "cluster"
    assert local[3]["error"]["type"] == "InfeasibleError"
    srv = serve(port=0, workers=2)
    try:
        rc, out, err = _run(["batch", str(inputs / "list.yaml"), "--server", srv.address], capsys)
    finally:
        srv.stop(grace=None).wait(10)
    assert rc == 1
    remote = {d["index"]: d for d in _lines(out)}
    assert sorted(remote) == [0, 1, 2, 3]
    for i in range(4):
        assert _strip(remote[i]) == _strip(local[i]), i


def test_jsonl_and_omit_groups(inputs, capsys):
    rc, out, err = _run(["batch", str(inputs / "jobs.jsonl"), "--omit-groups", "--quiet"], capsys)
    assert rc == 1
    assert err == ""
    docs = {d["index"]: d for d in _lines(out)}
    assert sorted(docs) == [0, 1, 2]
    assert docs[0]["ok"] and "groups" not in docs[0]["result"]
    assert docs[1]["name"] == "x" and docs[1]["result"]["mode"] == "fixed"
    assert "malformed JSON" in docs[2]["error"]["message"]


def test_unreachable_server_reports_every_job(inputs, capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc, out, err = _run(
        ["batch", str(inputs / "jobs.jsonl"), "--server", f"127.0.0.1:{port}", "--timeout", "2", "--quiet"], capsys
    )
    assert rc == 1
    docs = _lines(out)
    assert sorted(d["index"] for d in docs) == [0, 1, 2]
    assert {d["error"].get("code") for d in docs if d["index"] != 2} <= {"UNAVAILABLE", "DEADLINE_EXCEEDED"}


def test_bad_input_exits_2(tmp_path, capsys):
    rc, out, err = _run(["batch", str(tmp_path / "none.yaml")], capsys)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    (tmp_path / "scalar.yaml").write_text("42\n")
    rc, out, err = _run(["batch", str(tmp_path / "scalar.yaml")], capsys)
    assert rc == 2 and out == "" and "expected a list of jobs" in err


def test_cli_entry_point_streams_lines(inputs):
    proc = subprocess.run(
        [sys.executable, "-m", "rankmap", "batch", str(inputs / "jobs.jsonl"), "--omit-groups"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 1
    assert len(_lines(proc.stdout)) == 3
    assert "3 jobs: 2 ok, 1 failed" in proc.stderr


def test_exposure_key_in_batch_entries_in_process_and_on_server(inputs, capsys):
    """``exposure:`` is read by the job normaliser for batch entries too, and reaches the cost both ways."""
    (inputs / "exposed.yaml").write_text(
        "- {name: map, cluster: clusters/c8.json, tp: 2, traffic: {tp: 4e9, dp: 1GB}, exposure: {dp: 0.2, tp: 0.5},"
        " time_limit: 5}\n"
        "- {name: text, cluster: clusters/c8.json, tp: 2, traffic: {tp: 4e9, dp: 1GB}, exposure: 'tp=0.5,dp=0.2',"
        " time_limit: 5}\n"
        "- {name: bad, cluster: clusters/c8.json, tp: 2, traffic: {dp: 1GB}, exposure: {dp: 1.5}}\n"
        "- {name: unknown, cluster: clusters/c8.json, tp: 2, exposure: {xx: 0.5}}\n"
    )
    rc, out, err = _run(["batch", str(inputs / "exposed.yaml"), "--workers", "1", "--quiet"], capsys)
    assert rc == 1
    local = {d["index"]: d for d in _lines(out)}
    for i in (0, 1):
        cost = local[i]["result"]["cost"]
        assert {c: cc["exposure"] for c, cc in cost["classes"].items() if cc["exposure"] != 1.0} == {
            "tp": 0.5, "dp": 0.2
        }
        assert cost["total_seconds"] == pytest.approx(
            sum(cc["exposure"] * cost["by_class"][c] for c, cc in cost["classes"].items())
        )
    assert _strip(local[0])["result"] == _strip(local[1])["result"]
    assert local[2]["error"]["field"] == "exposure.dp" and "must be in [0, 1]" in local[2]["error"]["message"]
    assert local[3]["error"]["field"] == "exposure.xx"
    srv = serve(port=0, workers=2)
    try:
        rc, out, err = _run(["batch", str(inputs / "exposed.yaml"), "--server", srv.address, "--quiet"], capsys)
    finally:
        srv.stop(grace=None).wait(10)
    assert rc == 1
    remote = {d["index"]: d for d in _lines(out)}
    for i in range(4):
        assert _strip(remote[i]) == _strip(local[i]), i
