"""The command line contract (DESIGN §7): output shapes, job files, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest


from cli_helpers import bad_input, run, write_job  # noqa: E402

DATA = Path(__file__).parent / "data"


CLASS_COST_KEYS = {"seconds", "exposure", "bytes_per_rank", "payload_bytes", "latency_seconds", "bottleneck",
                   "algorithm", "channels"}
BOTTLENECK_KEYS = {"kind", "link", "load_bytes", "capacity_gbps", "utilization", "flows", "flow_bytes", "flow_gbps"}


def assert_cost_document(cost, exposure=None):
    """The JSON cost (DESIGN §4): total = Σ x_c·T_c, T_c per class, a ClassCost per class."""
    exposure = exposure or {}
    assert set(cost) == {"total_seconds", "by_class", "classes"}
    assert set(cost["classes"]) == set(cost["by_class"])
    for c, cc in cost["classes"].items():
        assert set(cc) == CLASS_COST_KEYS, c
        assert set(cc["bottleneck"]) == BOTTLENECK_KEYS, c
        assert cc["bottleneck"]["kind"] in ("none", "link", "per-flow"), c
        assert cc["seconds"] == cost["by_class"][c], c
        assert cc["seconds"] >= 0 and cc["bytes_per_rank"] >= 0 and cc["latency_seconds"] >= 0, c
        assert cc["exposure"] == exposure.get(c, 1.0), c
        if cc["bottleneck"]["kind"] == "none":
            assert cc["seconds"] == 0, c
        else:
            assert len(cc["bottleneck"]["link"]) == 2 and 0 <= cc["bottleneck"]["utilization"] <= 1 + 1e-9, c
    assert cost["total_seconds"] == pytest.approx(
        sum(cc["exposure"] * cost["by_class"][c] for c, cc in cost["classes"].items()), rel=1e-12, abs=1e-15
    )


def describe(bottleneck_doc) -> str:
    from rankmap.solver.results import Bottleneck

    d = dict(bottleneck_doc)
    d["link"] = tuple(d["link"]) if d["link"] is not None else None
    return Bottleneck(**d).describe()


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
    assert_cost_document(doc["cost"])
    assert_cost_document(doc["baseline"]["cost"])
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
    assert "CUDA_VISIBLE_DEVICES" in out and "improvement" in out
    assert "status OPTIMAL" in out or "status FEASIBLE" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("class "))
    for col in ("bytes/rank", "time (chosen)", "time (baseline)", "bottleneck (chosen)"):
        assert col in lines[header], col
    assert "cost (chosen)" not in out and "est. time" not in out
    # one row per class that moves bytes, ending with what limits it; then the total per step
    code, js, _ = run(capsys, "solve", str(cluster_file), "--tp", "4", "--pp", "2", "--traffic",
                      "tp=4e9,dp=1e8,pp=8e9", "--orders", "megatron-cli")
    doc = json.loads(js)
    rows = {line.split()[0]: line for line in lines[header + 1:] if line.strip()}
    for c in ("tp", "dp", "pp"):
        assert rows[c].endswith(describe(doc["cost"]["classes"][c]["bottleneck"])), rows[c]
    assert any(("limited by " in rows[c] or "per-flow: " in rows[c]) for c in ("tp", "dp", "pp"))
    assert "predicted communication time per step" in rows["total/step"]
    assert lines[lines.index(rows["total/step"]) + 1].startswith("improvement ")
    assert "lower bound" in lines[lines.index(rows["total/step"]) + 1]


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
    assert json.loads(out)["cost"] == doc["cost"]
    code, table, err = run(capsys, "evaluate", str(cluster_file), "--assignment", str(asg), "--tp", "4", "--pp", "2",
                           "--traffic", "tp=4e9,dp=1e8,pp=8e9", "--format", "table")
    assert code == 0, err
    rows = {line.split()[0]: line for line in table.splitlines() if line.strip()}
    assert {"bytes/rank", "time", "bottleneck"} <= set(rows["class"].split())
    for c in ("tp", "dp", "pp"):
        assert rows[c].endswith(describe(doc["cost"]["classes"][c]["bottleneck"])), rows[c]
    assert "predicted communication time per step" in rows["total/step"]


def test_exposure_flag_job_key_and_evaluate(capsys, cluster_file, tmp_path):
    """--exposure reaches the objective: x_c per class in the cost, total = Σ x_c·T_c."""
    base = ["solve", str(cluster_file), "--tp", "4", "--pp", "2", "--traffic", "tp=4e9,dp=1e8,pp=8e9",
            "--orders", "megatron-cli"]
    code, out, err = run(capsys, *base, "--exposure", "DP=0.2, tp=0.5")
    assert code == 0, err
    flagged = json.loads(out)
    want = {"tp": 0.5, "dp": 0.2}
    assert_cost_document(flagged["cost"], want)
    assert_cost_document(flagged["baseline"]["cost"], want)
    code, out, err = run(capsys, *base)
    plain = json.loads(out)
    assert_cost_document(plain["cost"])
    # T_c of the same layout does not depend on x_c; only the sum does
    if plain["assignment"] == flagged["assignment"] and plain["order"] == flagged["order"]:
        assert plain["cost"]["by_class"] == pytest.approx(flagged["cost"]["by_class"])
    # the job-file key (a mapping, or the flag's string) gives the same result; the flag wins over the file
    for value in ("{dp: 0.2, tp: 0.5}", "'tp=0.5,dp=0.2'"):
        job = tmp_path / "job.yaml"
        job.write_text(f"cluster: {cluster_file.name}\ntp: 4\npp: 2\ntraffic: {{tp: 4e9, dp: 1e8, pp: 8e9}}\n"
                       f"orders: megatron-cli\nexposure: {value}\n")
        code, out, err = run(capsys, "solve", str(job))
        assert code == 0, err
        from_job = json.loads(out)
        assert from_job["cost"] == flagged["cost"] and from_job["assignment"] == flagged["assignment"]
    code, out, err = run(capsys, "solve", str(job), "--exposure", "dp=1")
    assert code == 0, err
    assert_cost_document(json.loads(out)["cost"], {"dp": 1.0})
    # evaluate takes the same flag: same layout, same exposure -> same cost as the solve
    asg = tmp_path / "solve.json"
    asg.write_text(json.dumps(flagged))
    code, out, err = run(capsys, "evaluate", str(cluster_file), "--assignment", str(asg), "--tp", "4", "--pp", "2",
                         "--traffic", "tp=4e9,dp=1e8,pp=8e9", "--exposure", "tp=0.5,dp=0.2")
    assert code == 0, err
    assert json.loads(out)["cost"] == flagged["cost"]
    code, table, err = run(capsys, "evaluate", str(cluster_file), "--assignment", str(asg), "--tp", "4", "--pp",
                           "2", "--traffic", "tp=4e9,dp=1e8,pp=8e9", "--exposure", "tp=0.5,dp=0.2",
                           "--format", "table")
    assert code == 0, err
    total = next(line for line in table.splitlines() if line.startswith("total/step"))
    assert "exposure tp 0.5, dp 0.2" in total


@pytest.mark.parametrize(
    "value, needle",
    [
        ("dp=1.5", "exposure dp = 1.5 must be in [0, 1] [exposure.dp]"),
        ("dp=abc", "exposure dp = 'abc' is not a number [exposure.dp]"),
        ("dp=-0.1", "[exposure.dp]"),
        ("dp=nan", "[exposure.dp]"),
        ("dp=0.1,dp=0.2", "given twice"),
        ("xx=0.5", "exposure names unknown traffic class 'xx'"),
        ("dp", "is not CLASS=X"),
        ("", "exposure is empty"),
    ],
)
@pytest.mark.parametrize("command", ["solve", "evaluate"])
def test_bad_exposure_is_one_line_exit_2(capsys, cluster_file, tmp_path, command, value, needle):
    extra = []
    if command == "evaluate":
        asg = tmp_path / "asg.json"
        asg.write_text(json.dumps([f"node{h:03d}/gpu{i}" for h in range(2) for i in range(8)]))
        extra = ["--assignment", str(asg)]
    code, out, err = run(capsys, command, str(cluster_file), *extra, "--tp", "4", "--traffic", "dp=1e9",
                         "--exposure", value)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("rankmap: error: ") and needle in err, err


@pytest.mark.parametrize(
    "value, needle",
    [
        ("{dp: 1.5}", "[exposure.dp]"),
        ("{dp: abc}", "exposure dp = 'abc' is not a number [exposure.dp]"),
        ("{dp: true}", "[exposure.dp]"),
        ("{xx: 0.5}", "unknown traffic class 'xx'"),
        ("[0.5]", "exposure must be a mapping"),
        ("'dp=2'", "[exposure.dp]"),
    ],
)
def test_bad_exposure_in_job_file(capsys, cluster_file, tmp_path, value, needle):
    job = write_job(tmp_path, cluster_file.name, f"tp: 4\ntraffic: {{dp: 1e9}}\nexposure: {value}")
    bad_input(capsys, "solve", job, needle=needle)


def test_cost_table_rows_from_a_cost():
    """The table from a cost alone (no solve): bytes per rank, T_c chosen/baseline, the bottleneck, the total."""
    from rankmap.cli_solve import cost_table
    from rankmap.solver.results import Bottleneck, ClassCost, CostBreakdown

    link = Bottleneck("link", ("leaf0", "spine"), 72e9, 400.0, 1.0, 32, 2.25e9, 50.0)
    flow = Bottleneck("per-flow", ("h0g0", "h0-nvs"), 1e9, 450.0, 0.25, 1, 4e9, 450.0)
    chosen = CostBreakdown(
        total_seconds=0.5 * 0.0089 + 0.2 * 0.18,
        by_class={"tp": 0.0089, "cp": 0.0, "dp": 0.18},
        classes={
            "tp": ClassCost(0.0089, 0.5, 3e9, 4e9, 0.0, flow),
            "cp": ClassCost(0.0),
            "dp": ClassCost(0.18, 0.2, 1.75e9, 1e9, 2e-6, link),
        },
    )
    baseline = CostBreakdown(total_seconds=0.5 * 0.02 + 0.2 * 0.36, by_class={"tp": 0.02, "cp": 0.0, "dp": 0.36})
    lines = cost_table(chosen, {"tp": 4e9, "cp": 0.0, "dp": 1e9}, baseline=baseline)
    rows = {line.split()[0]: line for line in lines}
    assert set(rows) == {"class", "tp", "dp", "total/step"}  # cp moves no bytes: no row
    assert rows["dp"].split()[:7] == ["dp", "1.75", "GB", "180.0", "ms", "360.0", "ms"]
    assert rows["dp"].endswith("limited by leaf0→spine at 100% (72 GB, 32 flows, 400 GB/s)")
    assert rows["tp"].endswith(flow.describe()) and "per-flow: 4 GB at 450 GB/s" in rows["tp"]
    assert rows["total/step"].split()[1:5] == ["40.45", "ms", "82.00", "ms"]
    assert "predicted communication time per step" in rows["total/step"]
    assert "exposure tp 0.5, dp 0.2" in rows["total/step"]
    alone = cost_table(chosen, {"tp": 4e9, "dp": 1e9})
    assert "time (baseline)" not in alone[0] and alone[0].split()[:5] == ["class", "bytes/rank", "time", "algo",
                                                                          "bottleneck"]
    # how NCCL runs each class: "-" where the cost does not say (an older server's answer)
    assert rows["dp"].split()[7] == "-"


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


@pytest.mark.parametrize("argv", [
    ["--world-size", "1024", "--tp", "8", "--pp", "4"],
    ["--world-size", "131072", "--tp", "8", "--pp", "16", "--cp", "2", "--ep", "8"],
    ["--world-size", "4096", "--tp", "64", "--pp", "2"],
])
def test_groups_table_stays_under_160_columns(capsys, argv):
    """Readable at any scale: long group lists, wide TP groups and many stages are summarised."""
    code, out, _ = run(capsys, "groups", *argv, "--format", "table")
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= 160
    assert len(out.splitlines()) < 80
    assert "more" in out


def test_user_slips_get_the_fix_named(capsys, tmp_path):
    """A misspelt job key names the closest key; a world size defaulted from the usable GPUs says
    so when an exclusion left a count the sizes do not divide; with megatron-cli asked but the
    second stock order invalid for the sizes, the table says so instead of suggesting the flag."""
    hgx = Path(__file__).resolve().parents[1] / "examples" / "clusters" / "hgx-a100-2nodes.json"
    job = write_job(tmp_path, hgx, "tp: 4\ntime_limt: 5")
    line = bad_input(capsys, "solve", job, needle="unknown key 'time_limt' (did you mean 'time_limit'?)")
    assert "known keys:" in line
    bad_input(capsys, "solve", hgx, "--tp", "4", "--exclude-device", "node1/gpu7",
              needle="world_size defaults to the 15 usable GPUs (after the exclusions); give --world-size")
    nvl = Path(__file__).resolve().parents[1] / "examples" / "clusters" / "gb200-nvl72-2racks.json"
    code, out, err = run(capsys, "solve", nvl, "--tp", "4", "--pp", "4", "--ep", "8", "--etp", "1",
                         "--world-size", "128", "--traffic", "tp=1e9,ep=1e9,pp=1e8", "--orders", "megatron-cli",
                         "--time-limit", "3", "--format", "table")
    assert code == 0, err
    assert "only the default order was searched" not in out
    assert "tp-cp-ep-pp-dp (--use-tp-pp-dp-mapping) is not valid for these sizes" in out


def test_free_mode_keeps_gpus_in_index_order_when_it_costs_nothing(capsys):
    """Free mode on 2 HGX hosts, tp4 pp2: the ranks a host runs take its GPUs in index order when
    another local order is no faster, so the launch needs no per-rank GPU map."""
    hgx = Path(__file__).resolve().parents[1] / "examples" / "clusters" / "hgx-a100-2nodes.json"
    code, out, err = run(capsys, "solve", hgx, "--tp", "4", "--pp", "2", "--model", "llama3-8b", "--mode", "free",
                         "--time-limit", "8")
    assert code == 0, err
    doc = json.loads(out)
    for h in doc["hosts"]:
        assert h["cuda_visible_devices"] == "0,1,2,3,4,5,6,7", h


def test_evaluate_names_an_entry_that_is_not_a_gpu(capsys, tmp_path):
    """A file that is not an assignment (a shell script) names its first entry that is no GPU of the cluster."""
    hgx = Path(__file__).resolve().parents[1] / "examples" / "clusters" / "hgx-a100-2nodes.json"
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/bash\nsrun python pretrain_gpt.py\n")
    bad_input(capsys, "evaluate", hgx, "--assignment", script, "--tp", "4",
              needle="'srun python pretrain_gpt.py' is not a GPU of the cluster")


# --------------------------------------------------------------------------- how NCCL runs collectives (issue 25)


def h100_cluster(capsys, tmp_path, hosts: int = 1) -> Path:
    """``rankmap cluster --gpus-per-node 8 --gpu h100`` (``hosts`` > 1: ``--nodelist node[1-N]``), as a file."""
    path = tmp_path / f"h100x{hosts}.json"
    extra = ["--nodelist", f"node[1-{hosts}]"] if hosts > 1 else []
    code, _, err = run(capsys, "cluster", "--gpus-per-node", "8", "--gpu", "h100", *extra, "-o", path)
    assert code == 0, err
    return path


def _tp8_evaluate(capsys, tmp_path, cluster, *flags) -> dict:
    """``rankmap evaluate`` of tp8 on the first host's GPUs in index order, 4 GB of tp traffic: the tp class."""
    asg = tmp_path / "tp8.json"
    gpus = [n["id"] for n in json.loads(cluster.read_text())["nodes"] if n.get("kind") == "gpu"]
    asg.write_text(json.dumps(gpus[:8]))
    code, out, err = run(capsys, "evaluate", cluster, "--assignment", asg, "--world-size", "8", "--tp", "8",
                         "--traffic", "tp=4e9", *flags)
    assert code == 0, err
    return json.loads(out)["cost"]["classes"]["tp"]


def test_nccl_algo_ring_vs_nvls_on_one_h100_host(capsys, tmp_path):
    """tp8 all-reduce of S = 4 GB on one 8×H100 host: NCCL runs NVLS by default, ring when forced
    (--nccl-algo, case-insensitive as NCCL_ALGO).  By hand: NCCL's per-NVLink rate 20.6 GB/s × 18
    links = 370.8 GB/s of ring busbw; NVLS 2·0.85·370.8·7/9 ≈ 490.3 GB/s; time = 2·(7/8)·S / busbw plus
    NCCL's latency (ring 56 us, NVLS 25 us at 8 ranks on one node), none with --no-nccl-latency."""
    from rankmap.solver.cost.nccl import latency_seconds

    cluster = h100_cluster(capsys, tmp_path)
    S, ring_bus, nvls_bus = 4e9, 18 * 20.6e9, 2 * 0.85 * 18 * 20.6e9 * 7 / 9
    auto = _tp8_evaluate(capsys, tmp_path, cluster)
    assert (auto["algorithm"], auto["channels"]) == ("nvls", 8)
    assert auto["latency_seconds"] == pytest.approx(latency_seconds("nvls", "simple", "all_reduce", 8, 1)) == 25e-6
    assert auto["seconds"] == pytest.approx(2 * 7 / 8 * S / nvls_bus + 25e-6, rel=1e-9)
    for flag in ("ring", "RING", "Ring"):
        ring = _tp8_evaluate(capsys, tmp_path, cluster, "--nccl-algo", flag)
        assert (ring["algorithm"], ring["channels"]) == ("ring", 1)
        assert ring["latency_seconds"] == pytest.approx(latency_seconds("ring", "simple", "all_reduce", 8, 1)) == 56e-6
        assert ring["seconds"] == pytest.approx(2 * 7 / 8 * S / ring_bus + 56e-6, rel=1e-9)
    assert ring["seconds"] > 1.3 * auto["seconds"]
    for flag in ("nvls", "auto"):
        forced = _tp8_evaluate(capsys, tmp_path, cluster, "--nccl-algo", flag)
        assert forced["algorithm"] == "nvls" and forced["seconds"] == pytest.approx(auto["seconds"], rel=1e-12)
    # bandwidth terms alone
    bare = _tp8_evaluate(capsys, tmp_path, cluster, "--nccl-algo", "ring", "--no-nccl-latency")
    assert bare["latency_seconds"] == 0 and bare["seconds"] == pytest.approx(2 * 7 / 8 * S / ring_bus, rel=1e-12)
    # one NVLink port at 10 GB/s instead of 20.6: NVLS on 18 × 10 GB/s
    slow = _tp8_evaluate(capsys, tmp_path, cluster, "--nccl-rate", "nvlink=10")
    assert slow["algorithm"] == "nvls"
    assert slow["seconds"] == pytest.approx(2 * 7 / 8 * S / (2 * 0.85 * 180e9 * 7 / 9) + 25e-6, rel=1e-9)
    same = _tp8_evaluate(capsys, tmp_path, cluster, "--nccl-rate", "NVLINK=20.6")
    assert same["algorithm"] == "nvls" and same["seconds"] == pytest.approx(auto["seconds"], rel=1e-12)
    # solve: the chosen layout's tp all-reduce is the forced algorithm's
    code, out, err = run(capsys, "solve", cluster, "--tp", "8", "--traffic", "tp=4e9", "--nccl-algo", "ring",
                         "--time-limit", "5")
    assert code == 0, err
    doc = json.loads(out)
    assert_cost_document(doc["cost"])
    assert doc["cost"]["classes"]["tp"]["algorithm"] == "ring"
    assert doc["cost"]["classes"]["tp"]["seconds"] == pytest.approx(ring["seconds"], rel=1e-9)


def test_nccl_flags_are_the_api_and_the_job_keys(capsys, tmp_path):
    """Every flag reaches the time model as the NcclModel field it names (2 hosts × 8 H100: ep all-to-all and
    dp rings across the NICs), and the job-file keys (nccl_algo, nccl_rate as a mapping, a string or a list,
    pxn, nccl_latency) give the same as the flags; a flag wins over the file."""
    from rankmap.solver import NcclModel, evaluate, parallel_config
    from rankmap.solver.formats.graphfile import load_graph

    cluster = h100_cluster(capsys, tmp_path, hosts=2)
    graph = load_graph(str(cluster))
    gpus = [n for n, d in graph.nodes(data=True) if d.get("kind") == "gpu"]
    asg = tmp_path / "asg.json"
    asg.write_text(json.dumps(gpus))
    cfg = parallel_config(16, tp=2, ep=8)
    traffic = {"tp": 1e9, "ep": 2e9, "dp": 1e9}
    base = ["evaluate", cluster, "--assignment", asg, "--tp", "2", "--ep", "8", "--traffic", "tp=1e9,ep=2e9,dp=1e9"]
    cases = [
        ([], NcclModel()),
        (["--nccl-algo", "tree"], NcclModel(algorithm="tree")),
        (["--nccl-rate", "nic=25"], NcclModel(rates={"nic": 25})),
        (["--nccl-rate", "nic=25", "--nccl-rate", "nvlink=15"], NcclModel(rates={"nic": 25, "nvlink": 15})),
        (["--nccl-rate", "nic=25,nvlink=15"], NcclModel(rates={"nic": 25, "nvlink": 15})),
        (["--no-pxn"], NcclModel(pxn=False)),
        (["--no-nccl-latency"], NcclModel(latency=False)),
    ]
    docs = []
    for flags, model in cases:
        code, out, err = run(capsys, *base, *flags)
        assert code == 0, err
        doc = json.loads(out)["cost"]
        assert_cost_document(doc)
        assert doc == evaluate(graph, cfg, gpus, traffic, nccl=model).to_dict(), flags
        docs.append(doc)
    default, _, nic25, *_ = docs
    assert nic25["classes"]["ep"]["seconds"] > 1.5 * default["classes"]["ep"]["seconds"]  # 25 of 48 GB/s per NIC
    assert default["classes"]["dp"]["algorithm"] == "ring" and default["classes"]["ep"]["algorithm"] == "p2p"
    assert all(cc["latency_seconds"] == 0 or cc["bottleneck"]["kind"] == "none"
               for cc in docs[-1]["classes"].values())
    assert all(cc["latency_seconds"] == 0 for cc in docs[-1]["classes"].values())

    # solve: flags and job keys give the same options, hence the same result
    flags = ["--nccl-algo", "tree", "--nccl-rate", "nic=25", "--no-pxn", "--no-nccl-latency"]
    solve = ["--tp", "2", "--ep", "8", "--traffic", "tp=1e9,ep=2e9,dp=1e9", "--time-limit", "5"]
    code, out, err = run(capsys, "solve", cluster, *solve, *flags)
    assert code == 0, err
    flagged = json.loads(out)
    flagged.pop("solve_seconds")
    for rate in ("{nic: 25}", "nic=25", "[nic=25]", "{NIC: '25'}"):
        job = write_job(tmp_path, cluster, f"tp: 2\nep: 8\ntraffic: {{tp: 1e9, ep: 2e9, dp: 1e9}}\ntime_limit: 5\n"
                                            f"nccl_algo: TREE\nnccl_rate: {rate}\npxn: false\nnccl_latency: false")
        code, out, err = run(capsys, "solve", job)
        assert code == 0, (rate, err)
        doc = json.loads(out)
        doc.pop("solve_seconds")
        assert doc == flagged, rate
    # the flag wins over the file (the file's rates are not read when the flag gives some)
    code, out, err = run(capsys, "solve", job, "--nccl-algo", "auto", "--nccl-rate", "nic=48")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["cost"]["classes"]["ep"]["seconds"] < flagged["cost"]["classes"]["ep"]["seconds"]
    assert doc["cost"]["classes"]["dp"]["latency_seconds"] == 0  # nccl_latency: false still from the file


def test_table_shows_each_class_algorithm_and_channels(capsys, tmp_path):
    """--format table: an ``algo`` column per class (ring×8, nvls×8, p2p, ...: ClassCost algorithm and channels)
    in solve and evaluate tables, every line within 160 columns."""
    from rankmap.solve_report import algo_text
    from rankmap.solver.results import ClassCost

    assert [algo_text(ClassCost(1.0, algorithm=a, channels=c)) for a, c in
            (("ring", 8), ("nvls", 1), ("p2p", 1), ("tree", 2), ("", 0))] == ["ring×8", "nvls", "p2p", "tree×2", "-"]
    cluster = h100_cluster(capsys, tmp_path, hosts=2)
    args = ["--tp", "2", "--ep", "8", "--traffic", "tp=4e9,ep=2e9,dp=1e9", "--time-limit", "5"]
    code, out, err = run(capsys, "solve", cluster, *args)
    assert code == 0, err
    doc = json.loads(out)
    result = tmp_path / "result.json"
    result.write_text(out)
    code, table, err = run(capsys, "solve", cluster, *args, "--format", "table")
    assert code == 0, err
    code, etable, err = run(capsys, "evaluate", cluster, "--assignment", result, "--format", "table")
    assert code == 0, err
    for text in (table, etable):
        lines = text.splitlines()
        assert max(len(line) for line in lines) <= 160
        header = next(line for line in lines if line.startswith("class "))
        assert "algo" in header.split()
        col = header.index("algo")
        rows = {line.split()[0]: line for line in lines[lines.index(header) + 1:] if line.strip()}
        for c in ("tp", "ep", "dp"):
            cc = doc["cost"]["classes"][c]
            want = cc["algorithm"] + (f"×{cc['channels']}" if cc["channels"] > 1 else "")
            assert rows[c][col:].split()[0] == want, (c, rows[c])
        assert rows["ep"][col:].startswith("p2p")  # all-to-all (×NCCL's p2p channels per peer)
        assert rows["dp"][col:].startswith("ring×")  # rings across the hosts: a channel per NIC
    # tp8 inside a host: NVLink SHARP, unless ring is forced
    for flags, algo in (([], "nvls"), (["--nccl-algo", "ring"], "ring")):
        code, table, err = run(capsys, "solve", cluster, "--tp", "8", "--traffic", "tp=4e9,dp=1e9", "--time-limit",
                               "5", "--format", "table", *flags)
        assert code == 0, err
        lines = table.splitlines()
        col = next(line for line in lines if line.startswith("class ")).index("algo")
        row = next(line for line in lines if line.startswith("tp "))
        assert row[col:].split()[0].split("×")[0] == algo, row
