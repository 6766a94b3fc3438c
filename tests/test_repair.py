"""Issue 26.1 and 26.4: ``rankmap repair`` and ``rankmap compare``, CLI and Python API.

The cluster: 6 hosts x 4 GPUs (``fat_tree_cluster``: NVSwitch 450 GB/s, one 50 GB/s NIC per
GPU), leaves of 2 hosts (node000-001, node002-003, node004-005) under one root switch, 4:1
oversubscribed.  The rates NCCL reaches are 0.96 of the line rates (``NET_EFFICIENCY``): a NIC
48 GB/s, a leaf's uplink (2 hosts x 4 NICs x 50 GB/s / 4 = 100 GB/s) 96 GB/s each way.

The job: tp 4, pp 2, dp 2 (16 ranks, order tp-cp-ep-dp-pp: rank = tp + 4·dp + 8·pp), only
pipeline traffic, 8 GB per rank per step, without NCCL's latency model.  Pipeline rank r (stage
0) sends to r + 8 (stage 1) and back.  The running layout puts ranks 0-3 on node000, 4-7 on
node002, 8-11 on node001, 12-15 on node003: each pipeline inside one leaf, every flow alone on
its NIC: T_pp = 8 GB / 48 GB/s = 1/6 s.

node001 fails.  Spares (default): node004 and node005 (leaf 2).
* patch: ranks 8-11 to node004 (node004 and node005 cost the same; ties go to the first in name
  order).  The 4 pipelines of node000 <-> node004 cross leaf 0's uplink: 4 flows x 8 GB = 32 GB
  at 96 GB/s = 1/3 s (> 1/6 s alone on a NIC).  ranks_moved 4 (the failed ranks).
* pinned (at most 4 surviving ranks move, one host's GPUs): node000's block to node005 puts both
  stages in leaf 2: back to 1/6 s; ranks_moved 8 (4 failed + 4 surviving), node000 and node001
  removed, node004 and node005 added.
* full: a new solve reaches 1/6 s too; recommended: pinned (as cheap, fewer ranks moved).
"""

from __future__ import annotations

import json

import networkx as nx
import pytest

from cli_helpers import bad_input, run
from rankmap.solver import SolveOptions, fat_tree_cluster, parallel_config
from rankmap.solver.fabric.rates import NcclModel

RUNNING = ([f"node000/gpu{i}" for i in range(4)] + [f"node002/gpu{i}" for i in range(4)]
           + [f"node001/gpu{i}" for i in range(4)] + [f"node003/gpu{i}" for i in range(4)])
PP_ALONE = 8e9 / 48e9          # one 8 GB flow alone on a 48 GB/s NIC
PP_UPLINK = 4 * 8e9 / 96e9     # four such flows through a leaf's 96 GB/s uplink


def _graph():
    return fat_tree_cluster(6, 4, intra_bandwidth_gbps=450, nic_bandwidth_gbps=50, tiers=[(2, 4.0)])


@pytest.fixture()
def files(tmp_path):
    """(cluster file, running layout file: a solve-result-shaped document)."""
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps(nx.node_link_data(_graph(), edges="edges")))
    running = tmp_path / "running.json"
    running.write_text(json.dumps({
        "order": "tp-cp-ep-dp-pp", "world_size": 16, "mode": "launcher",
        "sizes": {"tp": 4, "cp": 1, "ep": 1, "etp": 4, "dp": 2, "edp": 2, "pp": 2},
        "assignment": RUNNING, "traffic_bytes": {"pp": 8e9},
        "nccl": {"algorithm": "auto", "pxn": True, "rates": {}, "latency": False},
    }))
    return cluster, running


def _options(**kw):
    # a limit well above what the searches need here (they end when their budgets complete), so a loaded
    # machine does not stop the pinned descent early
    return SolveOptions(nccl=NcclModel(latency=False), time_limit_seconds=kw.pop("time_limit_seconds", 10), **kw)


# --------------------------------------------------------------------------- repair, Python API


def test_repair_api_patch_pinned_full():
    from rankmap.solver.job.repair import repair

    cfg = parallel_config(16, tp=4, pp=2)
    res = repair(_graph(), cfg, {"pp": 8e9}, RUNNING, failed_hosts=["node001"], options=_options())
    assert [o.kind for o in res.options] == ["patch", "pinned", "full"]
    assert res.failed_hosts == ("node001",) and res.spare_hosts == ("node004", "node005")

    patch = res.option("patch")
    # only the failed host's ranks (8-11) moved, each to the spare's GPU of the same local index
    assert patch.assignment == tuple(RUNNING[:8] + [f"node004/gpu{i}" for i in range(4)] + RUNNING[12:])
    assert patch.ranks_moved == 4
    assert (patch.hosts_removed, patch.hosts_added) == (("node001",), ("node004",))
    assert patch.cost.by_class["pp"] == pytest.approx(PP_UPLINK, rel=1e-9)
    assert patch.cost.total_seconds == pytest.approx(PP_UPLINK, rel=1e-9)

    pinned = res.option("pinned")
    assert pinned.assignment == tuple([f"node005/gpu{i}" for i in range(4)] + RUNNING[4:8]
                                      + [f"node004/gpu{i}" for i in range(4)] + RUNNING[12:])
    assert pinned.ranks_moved == 8
    assert (pinned.hosts_removed, pinned.hosts_added) == (("node000", "node001"), ("node004", "node005"))
    assert pinned.cost.total_seconds == pytest.approx(PP_ALONE, rel=1e-9)

    full = res.option("full")
    assert full.cost.total_seconds == pytest.approx(PP_ALONE, rel=1e-9)
    assert full.ranks_moved == sum(a != b for a, b in zip(full.assignment, RUNNING))
    assert "node001" not in {a.split("/")[0] for a in full.assignment}
    assert res.recommended == "pinned"
    # launch files for each option (the solve's apply): the hostfile of the pinned layout by node rank
    assert pinned.apply["hostfile"] == ["node005", "node002", "node004", "node003"]
    assert pinned.apply["slurm"]["hostfile"] == ["node005"] * 4 + ["node002"] * 4 + ["node004"] * 4 + ["node003"] * 4


def test_repair_api_max_moves_zero_and_failed_gpu():
    from rankmap.solver.job.repair import repair

    cfg = parallel_config(16, tp=4, pp=2)
    # a failed GPU takes its host out; no surviving rank may move: pinned can only re-choose the spare
    res = repair(_graph(), cfg, {"pp": 8e9}, RUNNING, failed_gpus=["node001/gpu2"], max_moves=0,
                 options=_options())
    assert res.failed_hosts == ("node001",)
    pinned = res.option("pinned")
    assert pinned.ranks_moved == 4
    assert pinned.cost.total_seconds == pytest.approx(PP_UPLINK, rel=1e-9)
    assert all(a == b for r, (a, b) in enumerate(zip(pinned.assignment, RUNNING)) if not 8 <= r < 12)


def test_repair_api_too_few_gpus_says_how_many():
    from rankmap.solver import InvalidArgumentError
    from rankmap.solver.job.repair import repair

    cfg = parallel_config(16, tp=4, pp=2)
    # survivors: node003 (4 GPUs) + spares node004, node005 (8) = 12 of 16 needed
    with pytest.raises(InvalidArgumentError, match="needs 16.* have 12: 4 missing") as exc:
        repair(_graph(), cfg, {"pp": 8e9}, RUNNING, failed_hosts=["node000", "node001", "node002"],
               options=_options())
    assert exc.value.field == "spare_hosts"


def test_repair_onto_smaller_spares_is_a_full_re_solve_on_mixed_hosts():
    from rankmap.solver.job.repair import repair

    # the spares keep 2 GPUs each: 12 surviving + 4 spare GPUs are the 16 needed, but no spare holds the
    # failed host's 4-GPU block, so patch and pinned say why; the full re-solve runs launcher mode on hosts
    # of two sizes (issue 27: blocks of 4, 4, 4, 2, 2 ranks) and moves every rank's GPU it must
    g = _graph()
    g.remove_nodes_from(["node004/gpu2", "node004/gpu3", "node005/gpu2", "node005/gpu3"])
    res = repair(g, parallel_config(16, tp=4, pp=2), {"pp": 8e9}, RUNNING, failed_hosts=["node001"],
                 options=_options(time_limit_seconds=2))
    assert res.recommended == "full" and [o.kind for o in res.options] == ["full"]
    assert set(res.options[0].hosts_added) == {"node004", "node005"}
    for kind in ("patch", "pinned"):
        assert res.unavailable[kind] == ("no free spare host with 4 GPUs for failed host 'node001' "
                                         "(1 failed, 2 spare host(s))")


# --------------------------------------------------------------------------- repair, CLI


def test_repair_cli_json(capsys, files):
    cluster, running = files
    code, out, err = run(capsys, "repair", cluster, "--running", running, "--failed", "node001", "--time-limit", 10)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["recommended"] == "pinned"
    kinds = {o["kind"]: o for o in doc["options"]}
    assert set(kinds) == {"patch", "pinned", "full"}
    patch = kinds["patch"]
    assert set(patch) >= {"kind", "order", "assignment", "cost", "ranks_moved", "hosts_removed", "hosts_added"}
    assert patch["order"] == "tp-cp-ep-dp-pp" and patch["ranks_moved"] == 4
    assert [r for r, (a, b) in enumerate(zip(patch["assignment"], RUNNING)) if a != b] == [8, 9, 10, 11]
    # cost: the same object as a solve's cost (nccl latency off from the running file)
    assert set(patch["cost"]) == {"total_seconds", "by_class", "classes"}
    assert patch["cost"]["total_seconds"] == pytest.approx(PP_UPLINK, rel=1e-9)
    assert patch["cost"]["classes"]["pp"]["bottleneck"]["kind"] == "link"
    assert kinds["pinned"]["cost"]["total_seconds"] == pytest.approx(PP_ALONE, rel=1e-9)
    assert kinds["pinned"]["ranks_moved"] == 8
    assert kinds["pinned"]["apply"]["torchrun"][0]["host"] == "node005"


def test_repair_cli_table(capsys, files):
    cluster, running = files
    code, out, err = run(capsys, "repair", cluster, "--running", running, "--failed", "node001", "--spares",
                         "node[004-005]", "--max-moves", 4, "--time-limit", 10, "--format", "table")
    assert code == 0, err
    assert "patch   tp-cp-ep-dp-pp        333.3 ms            4  node001 -> node004" in out
    assert "recommended pinned: 166.7 ms per step, 8 ranks moved" in out


@pytest.mark.parametrize("extra, needle", [
    (("--failed", "node999"), "failed host 'node999' is not a host of the cluster [failed_hosts]"),
    (("--failed", "node001", "--spares", "nodeX"), "spare host 'nodeX' is not a host of the cluster [spare_hosts]"),
    (("--failed", "node001", "--spares", "node002"), "spare host 'node002' already runs ranks"),
    (("--failed", "node001", "--spares", "node001"), "spare host 'node001' is also failed"),
    (("--failed-gpus", "node001/gpu9"), "failed GPU 'node001/gpu9' is not a GPU of the cluster [failed_gpus]"),
    (("--failed", "node005"), "runs a rank of the running layout; nothing to repair"),
    (("--failed", "node000,node001,node002"),
     "the job needs 16, the surviving hosts and the spares have 12: 4 missing"),
    (("--failed", "node001", "--world-size", "8"), "--world-size 8 but the running layout"),
    (("--failed", "node001", "--tp", "2"), "--tp 2 disagrees with tp 4"),
    ((), "no failure given"),
    (("--failed", "node001/gpu0"), "(it is a GPU of host 'node001': name failed GPUs with --failed-gpus"),
])
def test_repair_cli_bad_input(capsys, files, extra, needle):
    cluster, running = files
    bad_input(capsys, "repair", cluster, "--running", running, *extra, needle=needle)


def test_repair_cli_running_layout_not_of_this_cluster(capsys, files, tmp_path):
    cluster, _ = files
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(RUNNING[:15] + ["rack9/gpu0"]))
    bad_input(capsys, "repair", cluster, "--running", wrong, "--tp", 4, "--pp", 2, "--failed", "node001",
              needle="running layout rank 15 is on 'rack9/gpu0', which is not a GPU of the cluster")
    short = tmp_path / "short.json"
    short.write_text(json.dumps(RUNNING[:12]))
    bad_input(capsys, "repair", cluster, "--running", short, "--tp", 4, "--pp", 2, "--failed", "node001",
              needle="has 12 ranks (the world size)")
    twice = tmp_path / "twice.json"
    twice.write_text(json.dumps(RUNNING[:15] + [RUNNING[0]]))
    bad_input(capsys, "repair", cluster, "--running", twice, "--tp", 4, "--pp", 2, "--failed", "node001",
              needle="rank 15 is on 'node000/gpu0', which rank 0 already uses")
    bad_input(capsys, "repair", cluster, "--running", tmp_path / "missing.json", "--failed", "node001",
              needle="running layout file")


# --------------------------------------------------------------------------- compare

# Allocation A = node000-003: both pipelines inside a leaf, 1/6 s.  Allocation B = node000, node002,
# node004, node001: two hosts of leaf 0, one of leaf 1, one of leaf 2; the best pairs node000 with
# node001 and leaves one pipeline pair across leaves: 4 flows x 8 GB through a 96 GB/s leaf link, 1/3 s.
ALLOC_A = "node[000-003]"
ALLOC_B = "node000,node002,node004,node001"


def test_compare_api():
    from rankmap.solver.job.compare import compare, parse_allocations

    g = _graph()
    allocations = parse_allocations([ALLOC_B, ALLOC_A], g)
    assert allocations[1].hosts == ("node000", "node001", "node002", "node003")
    res = compare(g, parallel_config(16, tp=4, pp=2), {"pp": 8e9}, allocations, _options())
    first, second = res.allocations
    assert (first.rank, first.index, first.allocation.text) == (1, 1, ALLOC_A)
    assert first.result.cost.total_seconds == pytest.approx(PP_ALONE, rel=1e-9)
    assert first.difference is None
    assert (second.rank, second.index) == (2, 0)
    assert second.result.cost.total_seconds == pytest.approx(PP_UPLINK, rel=1e-9)
    d = second.difference
    assert d["class"] == "pp"
    assert d["seconds"] == pytest.approx(PP_UPLINK - PP_ALONE, rel=1e-9)
    assert d["class_seconds"] == pytest.approx(PP_UPLINK, rel=1e-9)
    assert d["best_class_seconds"] == pytest.approx(PP_ALONE, rel=1e-9)
    # the link: a leaf's link to the root switch (leaf 1 or 2, whichever end the crossing pipeline sits)
    assert "switch:root" in d["link"] and {"switch:t0.1", "switch:t0.2"} & set(d["link"])
    assert "at 100%" in d["bottleneck"] and "96 GB/s" in d["bottleneck"]


def test_compare_tie_names_no_class():
    from rankmap.solver.job.compare import compare, parse_allocations

    # node[000-003] and node[002-005] are the same shape (two whole leaves): the same 1/6 s, input order kept
    g = _graph()
    res = compare(g, parallel_config(16, tp=4, pp=2), {"pp": 8e9}, parse_allocations([ALLOC_A, "node[002-005]"], g),
                  _options(time_limit_seconds=4))
    first, second = res.allocations
    assert (first.index, second.index) == (0, 1)
    assert second.result.cost.total_seconds == pytest.approx(PP_ALONE, rel=1e-9)
    assert second.difference["class"] is None and second.difference["link"] is None
    assert second.difference["seconds"] == pytest.approx(0.0, abs=1e-12)


def test_compare_cli(capsys, files):
    cluster, _ = files
    code, out, err = run(capsys, "compare", cluster, "--allocation", ALLOC_B, "--allocation", ALLOC_A,
                         "--tp", 4, "--pp", 2, "--traffic", "pp=8e9", "--no-nccl-latency", "--time-limit", 4)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["world_size"] == 16
    a, b = doc["allocations"]
    assert set(a) >= {"rank", "hosts", "cost", "order", "assignment"}
    assert (a["rank"], a["hosts"]) == (1, ["node000", "node001", "node002", "node003"])
    assert a["cost"]["total_seconds"] == pytest.approx(PP_ALONE, rel=1e-9)
    assert {x.split("/")[0] for x in a["assignment"]} == set(a["hosts"])
    assert (b["rank"], b["hosts"]) == (2, ["node000", "node002", "node004", "node001"])
    assert b["difference"]["class"] == "pp" and b["cost"]["total_seconds"] == pytest.approx(PP_UPLINK, rel=1e-9)
    code, out, err = run(capsys, "compare", cluster, "--allocation", ALLOC_B, "--allocation", ALLOC_A,
                         "--tp", 4, "--pp", 2, "--traffic", "pp=8e9", "--no-nccl-latency", "--time-limit", 4,
                         "--format", "table")
    assert code == 0, err
    assert out.splitlines()[1].startswith("1        166.7 ms  tp-cp-ep-dp-pp    node[000-003]")
    assert "+166.7 ms: pp 166.7 ms -> 333.3 ms, limited by switch:" in out


def test_compare_cli_job_file(capsys, files, tmp_path):
    from cli_helpers import write_job

    cluster, _ = files
    job = write_job(tmp_path, cluster, "tp: 4\npp: 2\ntraffic: {pp: 8.0e9}\nnccl_latency: false\ntime_limit: 4\n"
                                       "format: table")
    code, out, err = run(capsys, "compare", job, "--allocation", ALLOC_B, "--allocation", ALLOC_A)
    assert code == 0, err
    # the job file's format (table), sizes and traffic: allocation A first at 1/6 s
    assert out.splitlines()[1].startswith("1        166.7 ms  tp-cp-ep-dp-pp    node[000-003]")


@pytest.mark.parametrize("allocs, extra, needle", [
    ((ALLOC_A, "node[000-002],nodeQ"), (), "allocation 2 ('node[000-002],nodeQ'): 'nodeQ' is not a host of the "
                                          "cluster [allocations[1]]"),
    ((ALLOC_A, "node[000-002]"), (),
     "allocation 1 ('node[000-003]') has 16 GPUs and allocation 2 ('node[000-002]') 12"),
    ((ALLOC_A, "node[000-002]"), ("--world-size", "16"), "allocation 2 ('node[000-002]') has 12 GPUs; the job needs "
                                                        "16: 4 missing"),
    ((ALLOC_A, "node000,node000"), (), "names host 'node000' twice"),
    ((ALLOC_A,), (), "compare needs at least 2 allocations, got 1"),
    ((ALLOC_A, "node[3-1]"), (), "node[3-1]"),
])
def test_compare_cli_bad_input(capsys, files, allocs, extra, needle):
    cluster, _ = files
    args = [x for a in allocs for x in ("--allocation", a)]
    bad_input(capsys, "compare", cluster, *args, "--tp", 4, "--pp", 2, "--traffic", "pp=8e9", *extra, needle=needle)


def test_compare_cli_applies_measured_rates(capsys, files, tmp_path):
    """--measured caps the links as for solve: node000-node001 measured at 12 GB/s (one flow per rail) caps
    both hosts' NIC links, which every layout of both allocations crosses with its pipeline flows
    (both hold node000 and node001): each costs 8e9 / 12e9 = 666.7 ms (166.7 and 333.3 ms without), a tie
    ranked in the given order."""
    cluster, _ = files
    measured = tmp_path / "pairs.csv"
    measured.write_text("node000,node001,12\n")
    code, out, err = run(capsys, "compare", cluster, "--allocation", ALLOC_B, "--allocation", ALLOC_A,
                         "--tp", 4, "--pp", 2, "--traffic", "pp=8e9", "--no-nccl-latency", "--time-limit", 4,
                         "--measured", str(measured))
    assert code == 0, err
    doc = json.loads(out)
    assert [a["cost"]["total_seconds"] for a in doc["allocations"]] == pytest.approx([8e9 / 12e9] * 2, rel=1e-9)


@pytest.mark.parametrize("key, value, needle", [
    ("sizes", None, "'sizes'"), ("sizes", "x", "'sizes'"), ("world_size", 32, "world_size 32"),
    ("mode", "bogus", "mode 'bogus'"), ("order", -1, "'order'"), ("nccl", "x", "'nccl'"),
    ("traffic_bytes", -1, "'traffic_bytes'")])
def test_repair_refuses_a_malformed_running_result(capsys, files, tmp_path, key, value, needle):
    """A running solve result with a field of the wrong type or value: one error naming it (these ran with
    defaults, e.g. null sizes as tp1 pp1, found by an adversarial pass)."""
    cluster, running = files
    doc = json.loads(running.read_text())
    doc[key] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    err = bad_input(capsys, "repair", str(cluster), "--running", str(bad), "--failed", "node001")
    assert needle in err


def test_repair_refuses_an_order_other_than_the_running_one(capsys, files):
    cluster, running = files
    err = bad_input(capsys, "repair", str(cluster), "--running", str(running), "--failed", "node001",
                    "--order", "tp-cp-ep-pp-dp")
    assert "disagrees with order tp-cp-ep-dp-pp" in err


def test_compare_reads_the_whole_cluster_once(monkeypatch):
    """64 allocations of one host each (issue 28.1 item 4): the cluster is not copied per allocation; each
    allocation's cluster model reads a graph of its own GPUs (plus the switches), and its answer is the solve
    with every other host excluded."""
    import networkx as nx

    from rankmap.solver import solve
    from rankmap.solver.fabric import cluster as cluster_mod
    from rankmap.solver.job.compare import allocation_graph, compare, parse_allocations
    from rankmap.solver.search import problem

    g = fat_tree_cluster(64, 2, tiers=[(8, 4.0)])
    hosts = sorted({d["host"] for _n, d in g.nodes(data=True) if d.get("kind", "gpu") == "gpu"})
    allocations = parse_allocations(hosts, g)
    built, copies = [], []
    real_build, real_copy = cluster_mod.cluster_from_graph, nx.Graph.copy

    def counting_build(graph, *a, **k):
        built.append(sorted({d["host"] for _n, d in graph.nodes(data=True) if d.get("kind", "gpu") == "gpu"}))
        return real_build(graph, *a, **k)

    def counting_copy(self, *a, **k):
        copies.append(self.number_of_nodes())
        return real_copy(self, *a, **k)

    monkeypatch.setattr(problem, "cluster_from_graph", counting_build)
    monkeypatch.setattr(nx.Graph, "copy", counting_copy)
    cfg = parallel_config(2, tp=2)
    res = compare(g, cfg, {"tp": 1e9}, allocations, _options(time_limit_seconds=64))
    assert built == [[h] for h in hosts]  # 64 models, each of one host's 2 GPUs
    assert copies == []  # the 64 x (128 GPUs + switches) copies of before
    assert len(res.allocations) == 64
    # the same answer as a solve excluding every other host (8 GPUs per allocation of 2 hosts: exhaustive)
    monkeypatch.undo()
    small = fat_tree_cluster(8, 4, tiers=[(2, 4.0)])
    allocations = parse_allocations(["node[000-001]", "node001,node004", "node[006-007]"], small)
    cfg = parallel_config(8, tp=2, pp=2)
    res = compare(small, cfg, {"tp": 4e9, "pp": 1e9}, allocations, _options(time_limit_seconds=6))
    for a in res.allocations:
        others = tuple(h for h in (f"node{i:03d}" for i in range(8)) if h not in a.allocation.hosts)
        alone = solve(small, cfg, {"tp": 4e9, "pp": 1e9}, _options(time_limit_seconds=2, exclude_hosts=others,
                                                                    launch_order="sorted"))
        assert a.result.assignment == alone.assignment and a.result.cost.total_seconds == alone.cost.total_seconds
    sub = allocation_graph(small, ["node001"])
    ref = small.copy()
    ref.remove_nodes_from([n for n, d in small.nodes(data=True) if d.get("kind", "gpu") == "gpu"
                           and d["host"] != "node001"])
    assert list(sub.nodes(data=True)) == list(ref.nodes(data=True))
    assert list(sub.edges(data=True)) == list(ref.edges(data=True))


def test_repair_compare_and_check_stop_at_a_callers_deadline():
    """A deadline already passed (a gRPC call's budget spent, reason "deadline"): each answers with what it
    has, marked stopped_by "deadline", and no full re-solve starts (no timing: the deadline is 0 s)."""
    from rankmap.solver.allocation.check import check_allocation
    from rankmap.solver.job.compare import compare, parse_allocations
    from rankmap.solver.job.repair import repair
    from rankmap.solver.search.deadline import CALL_DEADLINE, Deadline

    cfg = parallel_config(16, tp=4, pp=2)
    res = repair(_graph(), cfg, {"pp": 8e9}, RUNNING, failed_hosts=["node001"], options=_options(),
                 deadline=Deadline(0.0, reason=CALL_DEADLINE))
    assert [o.kind for o in res.options] == ["patch", "pinned"] and "full" in res.unavailable
    patch = res.option("patch")
    assert patch.assignment == tuple(RUNNING[:8] + [f"node004/gpu{i}" for i in range(4)] + RUNNING[12:])
    assert res.option("pinned").stopped_by == "deadline"
    g = _graph()
    cmp = compare(g, cfg, {"pp": 8e9}, parse_allocations([ALLOC_B, ALLOC_A], g), _options(),
                  deadline=Deadline(0.0, reason=CALL_DEADLINE))
    assert [a.result.stopped_by for a in cmp.allocations] == ["deadline", "deadline"]
    assert [a.result.improvement for a in cmp.allocations] == [0.0, 0.0]  # the baselines
    chk = check_allocation(g, cfg, RUNNING, {"pp": 8e9}, time_limit_seconds=10,
                           deadline=Deadline(0.0, reason=CALL_DEADLINE))
    # the search stopped at its baseline, dearer than the granted layout: the granted one is the best
    assert chk.best.stopped_by == "deadline" and chk.best.assignment == tuple(RUNNING)
    assert chk.best_note.startswith("the granted layout is the best found")
