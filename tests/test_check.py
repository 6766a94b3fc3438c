"""Issue 26.2 and 26.3: ``rankmap check`` (a granted allocation against requirements and rankmap's best
on the same hosts) and ``rankmap request`` (the scheduler request that keeps TP/EP groups inside one
NVLink domain), through the CLI and the Python API; expected values derived by hand in comments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import bad_input, run
from rankmap.solver import InfeasibleError, InvalidArgumentError, parallel_config
from rankmap.solver.allocation.check import check_allocation, parse_within
from rankmap.solver.allocation.request import group_span, recommend_allocation
from rankmap.solver.types import Constraint

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "clusters"
GB200 = EXAMPLES / "gb200-nvl72-2racks.json"  # 2 NVL72 racks: r1t01..r1t18, r2t01..r2t18, 4 GPUs each
HGX = EXAMPLES / "hgx-a100-2nodes.json"  # node1, node2: 8 A100 each
MOE = ["--world-size", "16", "--tp", "8", "--ep", "8", "--etp", "1", "--traffic", "tp=1e9,ep=4e9,dp=1e9"]


def _hostfile(tmp_path, hosts, name="granted.hostfile", per_host=4):
    path = tmp_path / name
    path.write_text("".join(f"{h}\n" for h in hosts for _ in range(per_host)))
    return path


def test_check_names_every_group_that_straddles_racks(capsys, tmp_path):
    # Slurm granted 4 trays, interleaved across the racks: ranks 0-3 r1t01 (rack1), 4-7 r2t01 (rack2),
    # 8-11 r1t02 (rack1), 12-15 r2t02 (rack2).  tp=8, order tp-cp-ep-dp-pp: tp groups [0..7], [8..15];
    # the expert generator (etp 1, ep 8, edp 2) gives ep groups of stride etp = 1: [0..7], [8..15] too.
    # Each of the 4 groups has 4 GPUs in rack1 and 4 in rack2: 4 violations, domains rack1 then rack2.
    hf = _hostfile(tmp_path, ["r1t01", "r2t01", "r1t02", "r2t02"])
    code, out, err = run(capsys, "check", GB200, "--hostfile", hf, *MOE, "--within", "tp=nvlink,ep=nvlink",
                         "--time-limit", "5", "--strict")
    assert code == 1, err  # --strict: a requirement is broken
    doc = json.loads(out)
    assert doc["ok"] is False
    assert doc["hosts"] == ["r1t01", "r2t01", "r1t02", "r2t02"]
    racks = ["nvlink:nvl72-rack1", "nvlink:nvl72-rack2"]
    assert doc["violations"] == [
        {"class": "tp", "level": "nvlink", "group": list(range(0, 8)), "domains": racks},
        {"class": "tp", "level": "nvlink", "group": list(range(8, 16)), "domains": racks},
        {"class": "ep", "level": "nvlink", "group": list(range(0, 8)), "domains": racks},
        {"class": "ep", "level": "nvlink", "group": list(range(8, 16)), "domains": racks},
    ]
    assert [(r["requirement"], r["groups"], r["violations"]) for r in doc["requirements"]] == [
        ("tp within nvlink", 2, 2), ("ep within nvlink", 2, 2)]
    # the cost is evaluate's on the same file; rankmap's best on these 4 trays is cheaper and keeps the groups
    # inside the racks (two trays of one rack per group)
    code, ev, err = run(capsys, "evaluate", GB200, "--hostfile", hf, *MOE)
    assert code == 0, err
    assert doc["cost"] == json.loads(ev)["cost"]
    assert doc["best_cost"]["total_seconds"] < doc["cost"]["total_seconds"]
    assert doc["improvement"] == pytest.approx(1 - doc["best_cost"]["total_seconds"] / doc["cost"]["total_seconds"])
    best = tmp_path / "best.json"
    best.write_text(json.dumps(doc["best_assignment"]))
    assert sorted({a.split("/")[0] for a in doc["best_assignment"]}) == ["r1t01", "r1t02", "r2t01", "r2t02"]
    code, out, err = run(capsys, "check", GB200, "--assignment", best, *MOE, "--order", doc["best_order"],
                         "--within", "tp=nvlink,ep=nvlink", "--no-best", "--strict")
    assert code == 0, err
    again = json.loads(out)
    assert again["ok"] is True and again["violations"] == []
    assert again["cost"] == doc["best_cost"] and again["best_cost"] is None


def test_check_passes_a_rack_aligned_allocation(capsys, tmp_path):
    # r1t01, r1t02 (rack1) run ranks 0-7, r2t01, r2t02 (rack2) ranks 8-15: every tp and ep group in one rack
    hf = _hostfile(tmp_path, ["r1t01", "r1t02", "r2t01", "r2t02"])
    code, out, err = run(capsys, "check", GB200, "--hostfile", hf, *MOE, "--within", "tp=nvlink,ep=nvlink",
                         "--strict", "--no-best", "--format", "table")
    assert code == 0, err
    assert "tp within nvlink           2           0" in out
    assert "OK: every required group is inside one domain" in out


def test_check_host_level_names_the_hosts(capsys, tmp_path):
    # tp 4, pp 2 on 16 GPUs in the default order: pp groups [r, r + 8] for r = 0..7 (stride tp*cp*ep*dp = 4*2);
    # node1 runs 0-7 and node2 8-15, so all 8 pp groups cross the hosts; dp groups [r, r+4] stay in a host
    hf = _hostfile(tmp_path, ["node1", "node2"], per_host=8)
    code, out, err = run(capsys, "check", HGX, "--hostfile", hf, "--tp", "4", "--pp", "2",
                         "--traffic", "tp=4e9,pp=8e9,dp=1e8", "--within", "pp=host,dp=host", "--no-best")
    assert code == 0, err
    doc = json.loads(out)
    assert [v["group"] for v in doc["violations"]] == [[r, r + 8] for r in range(8)]
    assert all(v["class"] == "pp" and v["domains"] == ["node1", "node2"] for v in doc["violations"])
    assert [(r["class"], r["groups"], r["violations"]) for r in doc["requirements"]] == [("pp", 8, 8),
                                                                                       ("dp", 8, 0)]


def test_check_api_same_as_cli(tmp_path):
    from rankmap.solver.formats.graphfile import load_graph

    graph = load_graph(str(GB200))
    cfg = parallel_config(16, tp=8, ep=8, etp=1)
    hosts = ["r1t01", "r2t01", "r1t02", "r2t02"]
    assignment = [f"{h}/gpu{i}" for h in hosts for i in range(4)]
    res = check_allocation(graph, cfg, assignment, {"tp": 1e9, "ep": 4e9, "dp": 1e9}, "tp=nvlink", best=False)
    assert not res.ok and [v.group for v in res.violations] == [tuple(range(8)), tuple(range(8, 16))]
    with pytest.raises(InvalidArgumentError, match=r"assignment\[3\] = 'r9t01/gpu0' is not a GPU"):
        check_allocation(graph, cfg, assignment[:3] + ["r9t01/gpu0"] + assignment[4:], {"tp": 1e9}, best=False)


@pytest.mark.parametrize("within, needle", [
    ("tp=rack", "unknown level 'rack'"),
    ("tq=nvlink", "unknown traffic class 'tq'"),
    ("tp=nvlink,tp=host", "names tp twice"),
    ("tp=level:9", "level 'level:9' is out of range"),
])
def test_check_bad_within(capsys, tmp_path, within, needle):
    hf = _hostfile(tmp_path, ["r1t01", "r1t02", "r2t01", "r2t02"])
    bad_input(capsys, "check", GB200, "--hostfile", hf, *MOE, "--within", within, "--no-best", needle=needle)


def test_check_bad_hostfile(capsys, tmp_path):
    hf = _hostfile(tmp_path, ["r1t01", "r1t02", "r2t01"])  # 12 lines for a 16-rank job
    bad_input(capsys, "check", GB200, "--hostfile", hf, *MOE, "--within", "tp=nvlink",
              needle=f"hostfile {hf} has 12 lines (one per global rank) but --world-size is 16")
    hf = _hostfile(tmp_path, ["r1t01", "r1t02", "r2t01", "r3t01"], name="unknown.hostfile")
    bad_input(capsys, "check", GB200, "--hostfile", hf, *MOE, needle="line 13: host 'r3t01' is not a host")


def test_parse_within_is_the_constraint_vocabulary():
    assert parse_within("tp=nvlink, ep=nvlink,pp=leaf") == (
        Constraint("tp", "nvlink"), Constraint("ep", "nvlink"), Constraint("pp", "leaf"))
    assert parse_within(["tp within host"]) == (Constraint("tp", "host"),)


# --------------------------------------------------------------------------- rankmap request


def test_group_spans():
    cfg = parallel_config(256, tp=8, ep=8, etp=1, cp=1, pp=2)
    # tp-cp-ep-dp-pp: tp 8; ep in the expert generator etp-ep: 1*8 = 8; dp: tp*cp*dp = 8*16 = 128; pp: all 256
    assert [group_span(cfg, c) for c in ("tp", "ep", "dp", "pp", "cp")] == [8, 8, 128, 256, 1]
    cfg = parallel_config(64, tp=4, pp=4, order="tp-cp-ep-pp-dp")
    # pp before dp: a pp group spans tp*pp = 16 consecutive ranks
    assert group_span(cfg, "pp") == 16


def test_request_nvl72_tp8_ep8(capsys):
    # 256 ranks on GB200 NVL72 (4 GPUs per tray, 72 per rack = 18 trays): 64 nodes.  tp 8 spans 8 ranks; ep 8
    # with etp 1 spans 1*8 = 8 ranks: unit lcm(8, 8) = 8 ranks = 2 nodes.  Segments: multiples of 2 that fit
    # 18 nodes and divide 64 -> 2, 4, 8, 16; the largest, 16, packs most of the job per rack (least 2).
    code, out, err = run(capsys, "request", "--world-size", "256", "--tp", "8", "--ep", "8", "--etp", "1",
                         "--nvlink-domain-size", "72", "--gpus-per-node", "4", "--within", "tp=nvlink,ep=nvlink")
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["nodes"], doc["nodes_per_domain"], doc["unit_ranks"], doc["unit_nodes"]) == (64, 18, 8, 2)
    assert (doc["segment_nodes"], doc["min_segment_nodes"]) == (16, 2)
    req = doc["requests"]
    assert req["slurm"]["options"] == ["--nodes=64", "--ntasks-per-node=4", "--gpus-per-node=4", "--segment=16"]
    assert req["kueue"]["annotations"] == {"kueue.x-k8s.io/podset-slice-required-topology": "nvidia.com/gpu.clique",
                                           "kueue.x-k8s.io/podset-slice-size": "16"}
    sub = req["volcano"]["spec"]["subGroupPolicy"][0]
    assert sub["subGroupSize"] == 16 and sub["networkTopology"] == {"mode": "hard", "highestTierAllowed": 1}
    assert req["volcano"]["spec"]["networkTopology"]["mode"] == "soft"
    assert all(r["why"] for r in req.values())


def test_request_expert_tp_defaults_to_tp():
    # etp defaults to tp = 8: an ep group spans etp*ep = 64 ranks = 16 nodes; unit lcm(8, 64) = 64 ranks, 16 nodes;
    # multiples of 16 within 18 nodes dividing 64: only 16
    a = recommend_allocation(parallel_config(256, tp=8, ep=8), 4, 72, parse_within("tp=nvlink,ep=nvlink"))
    assert (a.unit_ranks, a.unit_nodes, a.segment_nodes, a.min_segment_nodes) == (64, 16, 16, 16)


def test_request_job_inside_one_rack():
    # 64 ranks = 16 nodes <= 18: the whole job fits one rack; the segment is all 16 nodes
    a = recommend_allocation(parallel_config(64, tp=8), 4, 72, (Constraint("tp", "nvlink"),))
    assert a.segment_nodes == 16 and a.unit_nodes == 2
    by = {r.scheduler: r for r in a.requests}
    assert by["slurm"].options[-1] == "--segment=16"
    assert dict(by["kueue"].annotations) == {"kueue.x-k8s.io/podset-required-topology": "nvidia.com/gpu.clique"}
    assert by["volcano"].spec == {"networkTopology": {"mode": "hard", "highestTierAllowed": 1}}


def test_request_from_cluster_files(capsys):
    # the GB200 example: 144 GPUs, 4 per tray, racks of 72 (nvlink_domain); tp 8 -> unit 2 nodes; 36 nodes:
    # multiples of 2 within 18 dividing 36 -> the largest is 18 (one whole rack per segment)
    code, out, err = run(capsys, "request", "--cluster", GB200, "--tp", "8", "--scheduler", "slurm")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["requests"]["slurm"]["options"][-1] == "--segment=18" and list(doc["requests"]) == ["slurm"]
    # HGX A100: NVLink domains are the hosts (8 GPUs); tp 8 stays in a node; both hosts under one switch:
    # topology/tree, --switches=ceil(2 nodes / 2 per leaf)=1 leaf, waiting the default hour
    code, out, err = run(capsys, "request", "--cluster", HGX, "--tp", "8", "--format", "table")
    assert code == 0, err
    assert "slurm    sbatch --nodes=2 --ntasks-per-node=8 --gpus-per-node=8 --switches=1@1:00:00" in out
    assert 'kueue    kueue.x-k8s.io/podset-preferred-topology: "kubernetes.io/hostname"' in out


@pytest.mark.parametrize("argv, needle", [
    (["--world-size", "64", "--tp", "16", "--nvlink-domain-size", "8", "--gpus-per-node", "4"],
     "tp groups span 16 consecutive ranks in order tp-cp-ep-dp-pp, more than the 8 GPUs of one NVLink domain"),
    (["--world-size", "64", "--tp", "8", "--nvlink-domain-size", "70", "--gpus-per-node", "4"],
     "--nvlink-domain-size 70 is not a multiple of --gpus-per-node 4"),
    (["--world-size", "64", "--tp", "8", "--nvlink-domain-size", "72", "--gpus-per-node", "4", "--within", "tp=leaf"],
     "--within tp=leaf: a request keeps groups inside an NVLink domain"),
    (["--world-size", "64", "--tp", "8", "--nvlink-domain-size", "72", "--gpus-per-node", "4", "--max-wait", "soon"],
     "--max-wait 'soon' is not a Slurm time"),
    (["--world-size", "64", "--tp", "8", "--nvlink-domain-size", "72"], "give --cluster CLUSTER, or"),
    (["--world-size", "64", "--tp", "8", "--nvlink-domain-size", "72", "--gpus-per-node", "4", "--scheduler", "pbs"],
     "invalid choice: 'pbs'"),
    (["--world-size", "66", "--tp", "2", "--nvlink-domain-size", "72", "--gpus-per-node", "4"],
     "world size 66 is not a multiple of 4 GPUs per node"),
    # the service's field is int32: the CLI refuses what it could not carry
    (["--world-size", "64", "--tp", "8", "--nvlink-domain-size", "4294967296", "--gpus-per-node", "4"],
     "--nvlink-domain-size 4294967296 is above 2,147,483,647, the largest the service's int32 field holds"),
    (["--world-size", "64", "--tp", "8", "--nvlink-domain-size", "72", "--gpus-per-node", "2147483648"],
     "--gpus-per-node 2147483648 is above 2,147,483,647"),
])
def test_request_bad_input(capsys, argv, needle):
    bad_input(capsys, "request", *argv, needle=needle)


def test_request_infeasible_is_an_error():
    with pytest.raises(InfeasibleError, match="do not divide the 4 GPUs of a node"):
        recommend_allocation(parallel_config(24, tp=3), 4, 8)


def test_one_spine_over_oversubscribed_leaves_is_one_spine_domain(capsys, tmp_path):
    """Three leaves of two 4-GPU hosts under one spine, 2:1 oversubscribed: the forest happens to be rooted at
    leaf1, and the spine's link to it counted the 16 GPUs of leaves 2 and 3 as its senders, so leaf1's
    share looked half the others' and 'spine' became two domains (leaf1 | leaves 2-3): a dp group over
    m01, m03, m05, m06 was reported straddling.  The link's smaller side (8 GPUs) is its share."""
    conf = tmp_path / "topo.conf"
    conf.write_text("SwitchName=leaf1 Nodes=m[01-02]\nSwitchName=leaf2 Nodes=m[03-04]\n"
                    "SwitchName=leaf3 Nodes=m[05-06]\nSwitchName=spine Switches=leaf[1-3]\n")
    cluster = tmp_path / "c.json"
    code, _out, err = run(capsys, "cluster", "--gpu", "h100", "--gpus-per-node", "4", "--fabric", str(conf),
                          "--oversubscription", "2", "-o", str(cluster))
    assert code == 0, err
    hf = tmp_path / "m.hf"
    hf.write_text("".join(f"{h}\n" * 4 for h in ("m01", "m03", "m05", "m06")))
    code, out, err = run(capsys, "check", str(cluster), "--hostfile", str(hf), "--world-size", "16", "--tp", "4",
                         "--within", "dp=spine", "--no-best", "--traffic", "tp=1e9", "--strict")
    assert code == 0, err
    assert json.loads(out)["violations"] == []


def test_evaluate_takes_the_world_size_of_a_partial_solve_result(capsys, tmp_path):
    """A solve on 16 of a cluster's 32 GPUs: evaluating its result needs no --world-size (its own)."""
    import networkx as nx

    from rankmap.solver import fat_tree_cluster

    cluster = tmp_path / "c.json"
    cluster.write_text(json.dumps(nx.node_link_data(fat_tree_cluster(4, 8), edges="edges")))
    code, out, err = run(capsys, "solve", str(cluster), "--world-size", "16", "--tp", "8", "--traffic", "tp=1e9,dp=1e9",
                         "--time-limit", "2")
    assert code == 0, err
    res = tmp_path / "r.json"
    res.write_text(out)
    code, out2, err = run(capsys, "evaluate", str(cluster), "--assignment", str(res))
    assert code == 0, err
    assert json.loads(out2)["world_size"] == 16
    assert json.loads(out2)["cost"]["total_seconds"] == pytest.approx(json.loads(out)["cost"]["total_seconds"],
                                                                       rel=1e-12)


@pytest.mark.parametrize("best", [[], ["--no-best"]])
def test_check_time_limit_zero_is_refused_with_or_without_the_best_layout(capsys, tmp_path, best):
    hf = _hostfile(tmp_path, ["r1t01", "r1t02", "r2t01", "r2t02"])
    err = bad_input(capsys, "check", GB200, "--hostfile", hf, *MOE, "--time-limit", "0", *best,
                    needle="--time-limit must be a positive number, got 0.0")
    assert err.endswith("[time_limit]\n")
