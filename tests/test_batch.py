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


# --------------------------------------------------------------------------- executors, API, progress (issue 13)


def test_ray_executor_without_ray_is_one_line_exit_2(inputs, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError, as without the extra
    rc, out, err = _run(["batch", str(inputs / "jobs.jsonl"), "--executor", "ray"], capsys)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "pip install 'rankmap[ray]'" in err
    from rankmap.batch import solve_many
    from rankmap.solver.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match=r"rankmap\[ray\]"):
        solve_many(str(inputs / "jobs.jsonl"), executor="ray")


def test_executor_flags_that_do_not_go_together_exit_2(inputs, capsys):
    for argv, needle in (
        (["--ray-address", "auto"], "--ray-address needs --executor ray"),
        (["--executor", "ray", "--server", "127.0.0.1:1"], "--server and --executor ray"),
        (["--executor", "dask"], "invalid choice"),
    ):
        rc, out, err = _run(["batch", str(inputs / "jobs.jsonl"), *argv], capsys)
        assert rc == 2 and out == "" and needle in err, argv


def test_solve_many_process_matches_the_cli(inputs, capsys):
    from rankmap.batch import solve_many

    docs = solve_many(str(inputs / "list.yaml"), workers=2)
    assert [d["index"] for d in docs] == [0, 1, 2, 3]
    rc, out, _ = _run(["batch", str(inputs / "list.yaml"), "--workers", "1", "--quiet"], capsys)
    cli = {d["index"]: d for d in _lines(out)}
    assert [_strip(d) for d in docs] == [_strip(cli[i]) for i in range(4)]
    # job mappings in memory: relative paths against base_dir, names defaulted
    jobs = [{"cluster": "clusters/c8.json", "tp": 2, "time_limit": 5}, {"name": "typo", "tpp": 2}]
    docs = solve_many(jobs, "process", workers=1, base_dir=str(inputs), omit_groups=True)
    assert docs[0]["ok"] and docs[0]["name"] == "job0" and "groups" not in docs[0]["result"]
    assert not docs[1]["ok"] and docs[1]["name"] == "typo" and "unknown key 'tpp'" in docs[1]["error"]["message"]
    with pytest.raises(Exception, match="executor 'dask'"):
        solve_many(jobs, "dask")


def test_solve_many_in_memory_jobs():
    from rankmap.batch import SolveJob, iter_solve_many
    from rankmap.solver import SolveOptions, parallel_config, solve

    g = make_cluster(2, 4)
    traffic = {"tp": 4e9, "pp": 8e9, "dp": 1e8}
    jobs = [SolveJob(g, parallel_config(8, tp=2, pp=2), traffic, SolveOptions(orders="megatron-cli"), name="a"),
            SolveJob(g, parallel_config(16, tp=2), traffic, name="bad")]  # 16 ranks on 8 GPUs
    docs = {d["name"]: d for d in iter_solve_many(jobs, workers=2)}
    want = solve(g, jobs[0].cfg, traffic, jobs[0].options).to_dict()
    assert _strip(docs["a"])["result"] == _strip({"ok": True, "result": want})["result"]
    assert docs["bad"]["error"]["field"] == "world_size"


def test_batch_progress_bar_on_stderr_only(inputs, capsys):
    rc, out, err = _run(["batch", str(inputs / "jobs.jsonl"), "--workers", "1", "--progress", "--quiet"], capsys)
    assert rc == 1
    assert len(_lines(out)) == 3  # stdout stays pure JSON lines
    bar = err.replace("\r", "\n").strip().splitlines()[-1]
    assert "batch" in bar and "3/3" in bar and "2 ok, 1 failed" in bar and "job/s" in bar
    # not a terminal and no --progress: no bar
    rc, out, err = _run(["batch", str(inputs / "jobs.jsonl"), "--workers", "1", "--quiet"], capsys)
    assert err == ""


def test_solve_progress_callback_phases_and_same_result():
    from rankmap.solver import SolveOptions, parallel_config, solve

    g = make_cluster(4, 4)  # 16 GPUs: the surrogate search, not the exhaustive one
    cfg = parallel_config(16, tp=2, pp=2)
    traffic = {"tp": 4e9, "pp": 8e9, "dp": 1e8}
    options = SolveOptions(orders="megatron-cli", time_limit_seconds=10)  # the wall clock never stops it
    calls = []
    with_cb = solve(g, cfg, traffic, options, progress=lambda phase, best: calls.append((phase, best)))
    plain = solve(g, cfg, traffic, options)
    assert [p for p, _ in calls][:3] == ["cluster model", "orders", "search"]
    assert calls[0][1] is None and calls[1][1] is None
    bests = [b for p, b in calls if p == "search"]
    assert all(b is not None for b in bests) and bests == sorted(bests, reverse=True)
    assert bests[-1] == pytest.approx(with_cb.cost.total_seconds)
    a, b = with_cb.to_dict(), plain.to_dict()
    a.pop("solve_seconds"), b.pop("solve_seconds")
    assert a == b


def test_solve_progress_line_on_stderr_not_in_json(inputs, capsys, monkeypatch):
    import rankmap.progress

    monkeypatch.setattr(rankmap.progress, "SOLVE_DELAY_SECONDS", 0.0)  # draw even a quick solve
    rc, out, err = _run(["solve", str(inputs / "jobs" / "a.yaml"), "--progress"], capsys)
    assert rc == 0
    json.loads(out)  # stdout is the JSON document alone
    assert "solve: search" in err and "best" in err
    rc, out, err = _run(["solve", str(inputs / "jobs" / "a.yaml")], capsys)  # no TTY, no --progress
    assert rc == 0 and err == ""


def test_a_job_that_fails_to_read_keeps_its_name(tmp_path, capsys):
    """An entry with a misspelt key fails alone, under its own ``name`` (not ``list[1]``), with the key named."""
    (tmp_path / "c8.json").write_text(node_link_text(make_cluster(2, 4)))
    (tmp_path / "list.yaml").write_text(
        "- {name: good, cluster: c8.json, tp: 4, traffic: {tp: 1e9}, time_limit: 5}\n"
        "- {name: typo-job, cluster: c8.json, tp: 4, time_limt: 5}\n"
    )
    rc, out, err = _run(["batch", str(tmp_path / "list.yaml")], capsys)
    assert rc == 1
    docs = {d["name"]: d for d in _lines(out)}
    assert docs["good"]["ok"] and not docs["typo-job"]["ok"]
    assert "unknown key 'time_limt' (did you mean 'time_limit'?)" in docs["typo-job"]["error"]["message"]


def _blas_threads() -> list[int]:
    """The BLAS thread counts of this process's loaded libraries (numpy's OpenBLAS at least)."""
    import numpy  # noqa: F401 - loads the BLAS library
    from threadpoolctl import threadpool_info

    return [d["num_threads"] for d in threadpool_info() if d["user_api"] == "blas"]


def test_worker_pool_gives_each_worker_its_share_of_the_cpus():
    """Two workers on 2 CPUs run 1 BLAS thread each; one worker on 2 CPUs keeps 2 (forked from a parent with 4)."""
    from threadpoolctl import threadpool_limits

    from rankmap.batch import worker_pool

    with threadpool_limits(limits=4):  # the parent's pools, as rankmap.entry sized them on a bigger machine
        assert set(_blas_threads()) == {4}
        with worker_pool(2, cpus=2) as pool:
            got = [pool.submit(_blas_threads).result() for _ in range(4)]
        with worker_pool(1, cpus=2) as pool:
            one = pool.submit(_blas_threads).result()
    assert got and all(set(g) == {1} for g in got)
    assert set(one) == {2}


def test_worker_pool_rejects_zero_workers():
    from rankmap.batch import worker_pool

    with pytest.raises(ValueError, match="workers must be >= 1, got 0"):
        worker_pool(0)
