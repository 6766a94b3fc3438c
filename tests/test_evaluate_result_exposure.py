"""`rankmap evaluate --assignment RESULT.json` evaluates the job that was solved, exposure included:
a solve with ``--exposure`` and the evaluation of its result give the same ``total_seconds``
(before, evaluate took every class at 1: 79.3 ms against the solve's 50.7 ms)."""

from __future__ import annotations

import json

from cli_helpers import bad_input, run


def _solve(capsys, cluster_file, tmp_path, *extra):
    code, out, err = run(capsys, "solve", cluster_file, "--tp", "4", "--pp", "2", "--traffic", "tp=4e9,dp=1e9,pp=1e8",
                         "--time-limit", "5", *extra)
    assert code == 0, err
    path = tmp_path / "result.json"
    path.write_text(out)
    return path, json.loads(out)


def test_evaluate_reads_the_results_exposure(capsys, cluster_file, tmp_path):
    path, result = _solve(capsys, cluster_file, tmp_path, "--exposure", "tp=0.5,dp=0.2")
    code, out, err = run(capsys, "evaluate", cluster_file, "--assignment", path)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["cost"]["total_seconds"] == result["cost"]["total_seconds"]
    assert doc["cost"]["classes"]["tp"]["exposure"] == 0.5
    assert doc["cost"]["classes"]["dp"]["exposure"] == 0.2
    assert doc["cost"]["classes"]["pp"]["exposure"] == 1


def test_exposure_flag_replaces_the_results(capsys, cluster_file, tmp_path):
    path, result = _solve(capsys, cluster_file, tmp_path, "--exposure", "tp=0.5,dp=0.2")
    code, out, err = run(capsys, "evaluate", cluster_file, "--assignment", path, "--exposure", "pp=0.5")
    assert code == 0, err
    classes = json.loads(out)["cost"]["classes"]
    assert (classes["tp"]["exposure"], classes["dp"]["exposure"], classes["pp"]["exposure"]) == (1, 1, 0.5)


def test_bad_exposure_in_the_result_names_file_and_class(capsys, cluster_file, tmp_path):
    path, result = _solve(capsys, cluster_file, tmp_path)
    result["cost"]["classes"]["dp"]["exposure"] = 7
    path.write_text(json.dumps(result))
    err = bad_input(capsys, "evaluate", cluster_file, "--assignment", path)
    assert err == f"rankmap: error: {path}: cost.classes: exposure dp = 7 must be in [0, 1] [exposure.dp]\n"
