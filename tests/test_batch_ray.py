"""``rankmap batch --executor ray`` and ``solve_many(..., executor="ray")`` on a 2-CPU local Ray.

Skipped when ``import ray`` fails (``pip install 'rankmap[ray]'``), unless
``RANKMAP_REQUIRE_RAY=1`` (CI sets it: it installs the extra): then the tests
fail instead.  One Ray instance (2 CPUs, no dashboard) serves the module and is
shut down at its end; the batch code uses an initialised Ray as it is.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import re
import sys

import pytest

from rankmap.cli import main
from rankmap.solver.formats.graphfile import node_link_text

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_service import make_cluster  # noqa: E402

pytestmark = pytest.mark.ray

REQUIRE = os.environ.get("RANKMAP_REQUIRE_RAY", "") not in ("", "0")

try:
    ray = importlib.import_module("ray")
    _MISSING = None
except ImportError as exc:  # pragma: no cover - depends on the machine
    ray = None
    _MISSING = f"ray not importable ({exc}); pip install 'rankmap[ray]'"
    if not REQUIRE:
        pytest.skip(_MISSING, allow_module_level=True)


@pytest.fixture(scope="module")
def local_ray():
    """A 2-CPU local Ray instance for the module, shut down at the end."""
    if _MISSING is not None:  # only reachable with RANKMAP_REQUIRE_RAY=1
        pytest.fail(f"RANKMAP_REQUIRE_RAY=1 but {_MISSING}")
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


#: 12 jobs: small clusters (exhaustive search, deterministic), varied sizes, modes, orders,
#: traffic and constraints on two cluster files, plus two failures (bad sizes, infeasible).
_JOBS = [
    "{name: j00, cluster: c8.json, tp: 2, pp: 2, traffic: {tp: 4e9, pp: 8e9, dp: 1e8}, orders: megatron-cli}",
    "{name: j01, cluster: c8.json, tp: 4, model: llama3-8b}",
    "{name: j02, cluster: c8.json, tp: 2, model: {preset: llama3-8b, seq_length: 4096}, mode: free}",
    "{name: j03, cluster: c8.json, tp: 2, ep: 2, traffic: {ep: 8e9, dp: 1e9}, orders: all}",
    "{name: j04, cluster: c8.json, tp: 8, model: gpt-24l-4096, mode: fixed, orders: all}",
    "{name: j05, cluster: c8.json, tp: 2, pp: 4, exposure: 'dp=0.2', orders: megatron-cli}",
    "{name: j06, cluster: wide.json, tp: 2, pp: 2, traffic: {tp: 4e9, pp: 8e9, dp: 1e8}, orders: megatron-cli}",
    "{name: j07, cluster: wide.json, tp: 2, cp: 2, model: llama3-8b, constraints: [tp within host]}",
    "{name: j08, cluster: wide.json, pp: 2, traffic: {pp: 1e9, dp: 4e9}, mode: free}",
    "{name: j09, cluster: wide.json, tp: 4, model: mixtral-8x7b, ep: 2, etp: 1}",
    "{name: bad-tp, cluster: c8.json, tp: 3}",
    "{name: infeasible, cluster: c8.json, tp: 8, constraints: [tp within host]}",
]


@pytest.fixture()
def jobs_file(tmp_path):
    (tmp_path / "c8.json").write_text(node_link_text(make_cluster(2, 4)))
    (tmp_path / "wide.json").write_text(node_link_text(make_cluster(4, 2)))
    path = tmp_path / "jobs.yaml"
    path.write_text("".join(f"- {j}\n" for j in _JOBS))
    return path


_TIMING = re.compile(r',?"solve_seconds":[-+0-9.eE]+')


def _by_index(text: str) -> dict[int, str]:
    """JSON lines keyed by job index, timing fields removed, otherwise byte for byte."""
    out = {}
    for line in text.splitlines():
        if line.strip():
            out[json.loads(line)["index"]] = _TIMING.sub("", line)
    return out


def test_twelve_jobs_on_ray_same_lines_as_in_process(local_ray, jobs_file, capsys):
    rc_ray = main(["batch", str(jobs_file), "--executor", "ray", "--timeout", "600", "--quiet"])
    ray_out, ray_err = capsys.readouterr()
    rc_local = main(["batch", str(jobs_file), "--workers", "2", "--quiet"])
    local_out, _ = capsys.readouterr()
    assert rc_ray == rc_local == 1  # two jobs fail: same exit status as in process
    assert ray_err == ""
    ray_lines, local_lines = _by_index(ray_out), _by_index(local_out)
    assert sorted(ray_lines) == list(range(12))
    assert ray_lines == local_lines
    docs = {i: json.loads(line) for i, line in ray_lines.items()}
    assert [docs[i]["ok"] for i in range(12)] == [True] * 10 + [False, False]
    assert docs[10]["error"]["field"] == "world_size"
    assert docs[11]["error"]["type"] == "InfeasibleError"
    assert local_ray.is_initialized()  # an initialised Ray is used, not shut down


def test_solve_many_ray_shares_each_cluster_graph_once(local_ray, jobs_file, monkeypatch):
    from rankmap.batch import solve_many

    puts = []
    real_put = local_ray.put
    monkeypatch.setattr(local_ray, "put", lambda value, **kw: puts.append(value) or real_put(value, **kw))
    docs = solve_many(str(jobs_file), executor="ray", omit_groups=True)
    assert [d["index"] for d in docs] == list(range(12))
    assert len(puts) == 2  # c8.json and wide.json, each put in the object store once
    local = solve_many(str(jobs_file), executor="process", workers=2, omit_groups=True)
    for a, b in zip(docs, local):
        if a["ok"]:
            a["result"].pop("solve_seconds")
            b["result"].pop("solve_seconds")
        assert a == b


def test_solve_many_ray_in_memory_jobs(local_ray):
    from rankmap.batch import SolveJob, solve_many
    from rankmap.solver import SolveOptions, parallel_config, solve

    g = make_cluster(2, 4)
    traffic = {"tp": 4e9, "pp": 8e9, "dp": 1e8}
    jobs = [SolveJob(g, parallel_config(8, tp=tp, pp=pp), traffic, SolveOptions(orders="megatron-cli"))
            for tp, pp in ((2, 2), (4, 2), (2, 4))]
    docs = solve_many(jobs, executor="ray")
    assert [d["name"] for d in docs] == ["job0", "job1", "job2"]
    for job, doc in zip(jobs, docs):
        want = solve(g, job.cfg, traffic, job.options).to_dict()
        want.pop("solve_seconds")
        doc["result"].pop("solve_seconds")
        assert doc["result"] == want


def test_ray_batch_deadline_fails_unfinished_jobs(local_ray, jobs_file):
    from rankmap.batch import solve_many

    docs = solve_many(str(jobs_file), executor="ray", timeout=0)
    assert [d["index"] for d in docs] == list(range(12))
    assert {d["error"]["type"] for d in docs} == {"DeadlineExceeded"}
    assert docs[0]["error"]["code"] == "DEADLINE_EXCEEDED"
