"""Hostile and malformed CLI input (issue 11, item 5 and the XML part of item 6).

Every reproducer of the issue is a bad input, so the CLI contract holds for each: exit
status 2, exactly one line on stderr, nothing on stdout, never a traceback.  The strict
loaders themselves (rankmap.solver.formats.safe) are tested directly below.
"""

from __future__ import annotations

import json

import networkx as nx
import pytest

from rankmap.solver import fat_tree_cluster
from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.formats import safe
from rankmap.solver.formats.hostlist import MAX_HOSTS, count, expand

from cli_helpers import bad_input, run, write_job  # noqa: E402


def graph_doc(n_hosts: int = 2, gpus: int = 4) -> dict:
    g = fat_tree_cluster(n_hosts, gpus, intra_bandwidth_gbps=450, nic_bandwidth_gbps=50)
    return json.loads(json.dumps(nx.node_link_data(g, edges="edges")))


def write_graph(tmp_path, doc: dict, name: str = "c.json"):
    """``doc`` as the cluster file ``tmp_path / name``."""
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def far_local_index_file(tmp_path):
    """A cluster file whose first GPU has local_index 2**40 (beyond MAX_LOCAL_INDEX)."""
    doc = graph_doc()
    next(n for n in doc["nodes"] if n.get("kind") == "gpu")["local_index"] = 2**40
    return write_graph(tmp_path, doc)


@pytest.fixture()
def cluster_file(tmp_path):
    return write_graph(tmp_path, graph_doc(), "cluster.json")


def billion_laughs(levels: int = 9) -> str:
    """A ~400-byte YAML alias bomb: 9**levels strings once expanded."""
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    prev = "a"
    for name in "bcdefghijk"[: levels - 1]:
        text += f"{name}: &{name} [" + ",".join(["*" + prev] * 9) + "]\n"
        prev = name
    return text, prev


# ------------------------------------------------------------------ deep nesting


def test_deep_json_cluster_file(capsys, tmp_path):
    f = tmp_path / "deep.json"
    f.write_text("[" * 100_000 + "]" * 100_000)
    bad_input(capsys, "solve", f, "--tp", "2", needle="nested 100000 levels deep; the limit is 64")
    bad_input(capsys, "evaluate", f, "--assignment", f, needle="nested")


def test_deep_json_inside_a_valid_graph(capsys, tmp_path):
    doc = graph_doc()
    doc["graph"] = {"note": json.loads("[" * 200 + "]" * 200)}
    f = write_graph(tmp_path, doc, "deep-attr.json")
    bad_input(capsys, "solve", f, "--tp", "2", needle="nested 202 levels deep")


def test_deep_json_assignment_file(capsys, cluster_file, tmp_path):
    a = tmp_path / "assignment.json"
    a.write_text('{"assignment": ' + "[" * 50_000 + "]" * 50_000 + "}")
    bad_input(capsys, "evaluate", cluster_file, "--assignment", a, needle="assignment file")


def test_deep_yaml_job_file(capsys, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("cluster: " + "[" * 100_000 + "]" * 100_000 + "\n")
    bad_input(capsys, "solve", job, needle="nested more than 64 levels deep")
    job.write_text("constraint:\n" + "".join("  " * i + "- \n" for i in range(1, 200)))
    bad_input(capsys, "solve", job, needle="nested more than 64 levels deep")


def test_deep_batch_inputs(capsys, tmp_path):
    from rankmap.batch_input import load_entries

    jl = tmp_path / "jobs.jsonl"
    jl.write_text('{"tp": 1}\n' + '{"tp": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    entries = load_entries(str(jl))
    assert entries[0].error is None
    assert isinstance(entries[1].error, InvalidArgumentError) and "nested" in entries[1].error.message
    y = tmp_path / "jobs.yaml"
    y.write_text("- tp: " + "[" * 100_000 + "]" * 100_000 + "\n")
    bad_input(capsys, "batch", y, needle="nested more than 64 levels deep")


# ------------------------------------------------------------------ YAML aliases


def test_yaml_alias_bomb_in_a_known_key(capsys, tmp_path, cluster_file):
    # every anchor inside the value of one known key: [&a [lol x9], &b [*a x9], ..., *i]
    levels = ["&a [" + ",".join(["lol"] * 9) + "]"]
    levels += [f"&{n} [" + ",".join(["*" + p] * 9) + "]" for p, n in zip("abcdefgh", "bcdefghi")]
    value = "[" + ", ".join(levels) + ", *i]"
    assert len(value) < 400
    job = tmp_path / "job.yaml"
    job.write_text(f"cluster: {cluster_file}\nconstraint: {value}\n")
    err = bad_input(capsys, "solve", job, needle="aliases expand to more than 1,000,000 values")
    assert "job file" in err
    # batch YAML likewise (INPUT cannot be read: exit 2)
    bomb, last = billion_laughs(9)
    b = tmp_path / "batch.yaml"
    b.write_text(bomb + "jobs: *" + last + "\n")
    bad_input(capsys, "batch", b, needle="aliases expand")


def test_yaml_recursive_alias(capsys, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("constraint: &a [*a]\n")
    bad_input(capsys, "solve", job, needle="recursive alias")


def test_yaml_aliases_and_merge_keys_within_bounds_still_work(tmp_path):
    doc = safe.load_yaml("defaults: &d {tp: 2, pp: 2}\njobs:\n- {<<: *d, name: a}\n- {<<: *d, tp: 4}\n", "batch")
    assert doc["jobs"] == [{"tp": 2, "pp": 2, "name": "a"}, {"tp": 4, "pp": 2}]


# ------------------------------------------------------------------ duplicate keys


@pytest.mark.parametrize("body, needle", [
    ("tp: 2\npp: 1\ntp: 4", "line 4: duplicate key 'tp'"),
    ("world-size: 8\nworld_size: 4", "key 'world_size' given twice"),  # two spellings of one key
    ("constraint: tp within host\nconstraints: [pp within host]", "given twice"),  # a key and its alias
])
def test_duplicate_keys_in_job_file(capsys, tmp_path, cluster_file, body, needle):
    bad_input(capsys, "solve", write_job(tmp_path, cluster_file, body), needle=needle)


def test_duplicate_keys_in_graph_file(capsys, tmp_path):
    text = json.dumps(graph_doc())
    f = tmp_path / "dup.json"
    f.write_text(text.replace('"bandwidth":', '"bandwidth": 1, "bandwidth":', 1))
    bad_input(capsys, "solve", f, "--tp", "2", needle="duplicate key 'bandwidth'")


def test_duplicate_keys_in_batch_jsonl(tmp_path):
    from rankmap.batch_input import load_entries

    jl = tmp_path / "jobs.jsonl"
    jl.write_text('{"tp": 2, "tp": 4}\n')
    (e,) = load_entries(str(jl))
    assert "duplicate key 'tp'" in e.error.message


def test_duplicate_keys_in_topology_yaml(capsys, tmp_path):
    fabric = tmp_path / "topology.yaml"
    fabric.write_text("- topology: t1\n  cluster_default: true\n  cluster_default: false\n  tree:\n"
                      "    switches:\n    - switch: s1\n      nodes: n[1-2]\n")
    bad_input(capsys, "cluster", "--fabric", fabric, "--gpu", "h100", "--gpus-per-node", "8",
              needle="duplicate key 'cluster_default'")


# ------------------------------------------------------------------ node lists


def test_huge_nodelist_is_refused_before_expanding(capsys):
    err = bad_input(capsys, "cluster", "--nodelist", "n[1-1000000]", "--gpus-per-node", "8", "--gpu", "h100",
                    needle="names 1,000,000 hosts; the limit is 65,536")
    assert "n[1-1000000]" in err
    bad_input(capsys, "cluster", "--nodelist", "n[1-1000]x[1-1000]", "--gpus-per-node", "8", "--gpu", "h100",
              needle="names 1,000,000 hosts")
    bad_input(capsys, "cluster", "--nodelist", "n[0-99999999999999999999999]", "--gpus-per-node", "8",
              "--gpu", "h100", needle="is not numeric")


def test_cluster_gpu_count_is_bounded_before_building(capsys):
    bad_input(capsys, "cluster", "--nodelist", "n[1-60000]", "--gpus-per-node", "64", "--gpu", "h100",
              needle="60,000 hosts x 64 GPUs = 3,840,000 GPUs; the limit is 1,048,576")


def test_hostlist_count_matches_expand():
    for expr in ("node[001-016,040]", "a[1-2]b[1-3],c", "x", "r[1-2]-g[01-04],z[7]"):
        assert count(expr) == len(expand(expr))
    assert count("n[1-1000000]") == 1_000_000
    assert len(expand(f"n[1-{MAX_HOSTS}]")) == MAX_HOSTS
    with pytest.raises(InvalidArgumentError, match="limit"):
        expand(f"n[1-{MAX_HOSTS}],m")
    with pytest.raises(InvalidArgumentError, match="not numeric"):
        expand("n[١-٣]")  # Arabic-Indic digits


# ------------------------------------------------------------------ strict integers


@pytest.mark.parametrize("value", ["8_0", "٨", "0x10", "8.0", "+8", " ", "1" * 40])
def test_world_size_ascii_digits_only(capsys, value):
    bad_input(capsys, "groups", "--world-size", value, needle="--world-size")


@pytest.mark.parametrize(
    "argv",
    [
        ["groups", "--world-size", "8", "--tp", "2_0"],
        ["groups", "--world-size", "8", "--hierarchical-cp-sizes", "1,2_0"],
        ["cluster", "--gpu", "h100", "--gpus-per-node", "8_0", "--nodelist", "n[1-2]"],
        ["cluster", "--gpu", "h100", "--gpus-per-node", "٨", "--nodelist", "n[1-2]"],
        ["cluster", "--gpu", "h100", "--gpus-per-node", "8", "--nodelist", "n[1-2]", "--rate", "nic=5_0"],
        ["serve", "--port", "5_0051"],
        ["serve", "--workers", "٢"],
        ["serve", "--max-queued", "1_0"],
        ["traffic", "--world-size", "1_6", "--tp", "2"],
    ],
)
def test_strict_integers_on_every_flag(capsys, argv):
    bad_input(capsys, *argv)


def test_strict_integers_in_solve_flags(capsys, cluster_file):
    bad_input(capsys, "solve", cluster_file, "--seed", "1_0", needle="--seed")
    bad_input(capsys, "solve", cluster_file, "--time-limit", "1_0", needle="--time-limit")
    bad_input(capsys, "solve", cluster_file, "--time-limit", "nan", needle="--time-limit")
    bad_input(capsys, "solve", "--gpu", "h100", "--gpus-per-node", "8_0", "--nodelist", "n[1-2]",
              needle="--gpus-per-node")


@pytest.mark.parametrize(
    "line, needle",
    [
        ("tp: 8_0", "job key 'tp' must be a non-negative integer written in ASCII digits, got '8_0'"),
        ("tp: '٢'", "job key 'tp'"),
        ("tp: 0x2", "got '0x2'"),
        ("tp: 1:20", "got '1:20'"),  # YAML 1.1 sexagesimal (80) is a string here
        ("tp: !!int 8_0", "integer '8_0' is not ASCII decimal digits"),
        ("tp: true", "job key 'tp' must be an integer, got True"),
        ("seed: 1_0", "job key 'seed'"),
        ("world_size: '8 '", ""),  # surrounding spaces are fine: not an error about digits
        ("hierarchical_cp_sizes: 1,2_0", "hierarchical_cp_sizes"),
        ("time_limit: 1_0", "job key 'time_limit'"),
        ("time_limit: 1e999", "out of range"),
    ],
)
def test_strict_integers_in_job_files(capsys, tmp_path, cluster_file, line, needle):
    job = write_job(tmp_path, cluster_file, line)
    if line.startswith("world_size"):
        code, out, err = run(capsys, "solve", job, "--time-limit", "5")
        assert code == 0 and json.loads(out)["assignment"], err
        return
    bad_input(capsys, "solve", job, needle=needle)


def test_yaml_numbers_are_decimal():
    doc = safe.load_yaml("a: 010\nb: -3\nc: 4e9\nd: 1.5\ne: 8_0\nf: .inf\ng: 0o7\n", "x")
    assert doc == {"a": 10, "b": -3, "c": 4e9, "d": 1.5, "e": "8_0", "f": ".inf", "g": "0o7"}


# ------------------------------------------------------------------ finite JSON out, ranges


@pytest.mark.parametrize("bw", [5e-324, 1e-7, 1e308])
def test_bandwidth_out_of_range(capsys, tmp_path, bw):
    doc = graph_doc()
    for e in doc["edges"]:
        e["bandwidth"] = bw
    f = write_graph(tmp_path, doc)
    bad_input(capsys, "solve", f, "--tp", "2", needle=f"bandwidth {bw!r} GB/s, outside the accepted range")


def test_non_finite_json_in_is_refused(capsys, tmp_path):
    text = json.dumps(graph_doc())
    f = tmp_path / "c.json"
    f.write_text(text.replace('"bandwidth": 450', '"bandwidth": 1e999', 1))
    bad_input(capsys, "solve", f, "--tp", "2", needle="number 1e999 is out of range")
    f.write_text(text.replace('"bandwidth": 450', '"bandwidth": NaN', 1))
    bad_input(capsys, "solve", f, "--tp", "2", needle="NaN is not a finite number")


def test_core_refuses_out_of_range_bandwidth():
    from rankmap.solver.fabric.cluster import cluster_from_graph

    g = fat_tree_cluster(1, 2, intra_bandwidth_gbps=450, nic_bandwidth_gbps=50)
    u, v = next(iter(g.edges()))
    g[u][v]["bandwidth"] = 5e-324
    with pytest.raises(InvalidArgumentError, match="outside the accepted range"):
        cluster_from_graph(g)


def test_json_writer_refuses_non_finite():
    assert safe.dump_json({"x": 1.5}) == '{"x": 1.5}'
    with pytest.raises(InvalidArgumentError, match="non-finite"):
        safe.dump_json({"x": float("inf")})


# ------------------------------------------------------------------ local_index


def test_local_index_range_is_one_range(capsys, tmp_path):
    from rankmap.solver.fabric.cluster import cluster_from_graph
    from rankmap.solver.fabric.graph import MAX_LOCAL_INDEX

    f = far_local_index_file(tmp_path)
    bad_input(capsys, "solve", f, "--tp", "2", needle=f"the accepted range is 0..{MAX_LOCAL_INDEX}")
    g = fat_tree_cluster(1, 2, intra_bandwidth_gbps=450, nic_bandwidth_gbps=50)
    n = next(n for n, d in g.nodes(data=True) if d.get("kind") == "gpu")
    g.nodes[n]["local_index"] = 2**40
    with pytest.raises(InvalidArgumentError, match="accepted range"):
        cluster_from_graph(g)  # in process, as the service does
    g.nodes[n]["local_index"] = MAX_LOCAL_INDEX
    cluster_from_graph(g)


# ------------------------------------------------------------------ server: key


@pytest.mark.parametrize("server, needle", [("not-a-server", "job key 'server'"), ("127.0.0.1:99999", "outside 1..65535")])
def test_job_server_key_is_validated(capsys, tmp_path, cluster_file, server, needle):
    bad_input(capsys, "solve", write_job(tmp_path, cluster_file, f"server: {server}"), needle=needle)


def test_job_with_server_is_validated_before_sending(capsys, tmp_path):
    f = far_local_index_file(tmp_path)
    job = tmp_path / "job.yaml"
    # port 1 on loopback: nothing listens, so reaching the network would be exit 1
    job.write_text(f"cluster: {f}\nserver: 127.0.0.1:1\ntp: 2\n")
    bad_input(capsys, "solve", job, needle="accepted range")
    job.write_text(f"cluster: {f.parent / 'missing.json'}\nserver: 127.0.0.1:1\ntp: 8_0\n")
    bad_input(capsys, "solve", job, needle="job key 'tp'")


# ------------------------------------------------------------------ XML


def _entity_xml(root: str) -> str:
    return ('<?xml version="1.0"?>\n<!DOCTYPE lolz [\n <!ENTITY lol "lol">\n'
            ' <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">\n]>\n'
            f"<{root}>&lol2;</{root.split()[0]}>\n")


def test_nccl_xml_entities_are_refused(capsys, tmp_path):
    f = tmp_path / "topo.xml"
    f.write_text(_entity_xml("system version=\"1\""))
    bad_input(capsys, "cluster", "--host-topology", f, needle="XML entity declarations are not accepted")
    f.write_text('<?xml version="1.0"?>\n<!DOCTYPE s [<!ENTITY x SYSTEM "file:///etc/passwd">]>\n'
                 '<system version="1">&x;</system>\n')
    bad_input(capsys, "cluster", "--host-topology", f, needle="not accepted")


def test_graphml_entities_are_refused(capsys, tmp_path):
    f = tmp_path / "c.graphml"
    f.write_text(_entity_xml('graphml xmlns="http://graphml.graphdrawing.org/xmlns"'))
    bad_input(capsys, "solve", f, needle="XML entity declarations are not accepted")


def test_nccl_xml_strict_integers(capsys, tmp_path):
    f = tmp_path / "topo.xml"
    f.write_text('<system version="1"><cpu numaid="0"><pci busid="0000:01:00.0" class="0x030200" '
                 'link_speed="16.0 GT/s PCIe" link_width="16"><gpu dev="0" sm="90">'
                 '<nvlink target="0000:02:00.0" count="1_8" tclass="0x068000"/></gpu></pci></cpu></system>')
    bad_input(capsys, "cluster", "--host-topology", f, needle="count='1_8'")


# ------------------------------------------------------------------ the loaders themselves


def test_load_json_limits():
    assert safe.load_json('{"a": [1, 2.5, "[[["]}', "x") == {"a": [1, 2.5, "[[["]}
    with pytest.raises(InvalidArgumentError, match="nested 3 levels deep; the limit is 2"):
        safe.load_json("[[[]]]", "x", max_depth=2)
    with pytest.raises(InvalidArgumentError, match="larger than the 4-byte limit"):
        safe.load_json("[1, 2]", "x", max_bytes=4)
    with pytest.raises(InvalidArgumentError, match="more than 30 digits"):
        safe.load_json("1" * 5000, "x")
    with pytest.raises(InvalidArgumentError, match="x line 2 column 1: malformed JSON"):
        safe.load_json("[1,\n]", "x")


def test_load_yaml_limits():
    with pytest.raises(InvalidArgumentError, match="larger than"):
        safe.load_yaml("a: 1\n", "x", max_bytes=3)
    with pytest.raises(InvalidArgumentError, match="nested more than 2 levels"):
        safe.load_yaml("a: [[1]]\n", "x", max_depth=2)
    with pytest.raises(InvalidArgumentError, match="x line 2: malformed YAML"):
        safe.load_yaml("a: [1\nb: 2\n", "x")
    bomb, _ = billion_laughs(7)  # 9**7 = 4.8 million values
    with pytest.raises(InvalidArgumentError, match="aliases expand"):
        safe.load_yaml(bomb, "x")


def test_strict_int_and_float():
    assert safe.strict_int("42", "n") == 42 and safe.strict_int(7, "n") == 7
    assert safe.strict_int("-3", "n", signed=True) == -3
    for bad in ("8_0", "٨", "-3", "+3", "0x1", "", True, 1.0, "1" * 31):
        with pytest.raises(InvalidArgumentError):
            safe.strict_int(bad, "n")
    assert safe.strict_float("4e9", "x") == 4e9 and safe.strict_float(2, "x") == 2.0
    for bad in ("1_0", "nan", "inf", "1e999", "٣", True, float("nan")):
        with pytest.raises(InvalidArgumentError):
            safe.strict_float(bad, "x")


def test_abbreviated_and_misspelt_flags(capsys):
    """Abbreviations are refused (a script's --world must not silently mean --world-size); a
    misspelt flag gets the closest known one."""
    err = bad_input(capsys, "groups", "--world", "16", needle="--world-size")
    assert "required" in err or "unrecognized" in err
    bad_input(capsys, "groups", "--world-size", "8", "--ppp", "2", needle="(did you mean --pp?)")
    bad_input(capsys, "traffic", "--world-size", "8", "--seqlength", "4", needle="(did you mean --seq-length?)")


def test_importer_guesses_are_warned_on_stderr_only_on_success(capsys):
    """A GPU generation assumed from the NVLink count is a warning on stderr (a B200 user must not
    silently get H100 bandwidths); a command that fails still prints exactly its one error line."""
    from pathlib import Path

    topo = Path(__file__).resolve().parent / "data" / "real-inputs"
    hopper = next(topo.glob("nvsmi-topo_hopper-8gpu*"), None)
    if hopper is None:
        import pytest

        pytest.skip("the Hopper nvidia-smi sample is not in tests/data/real-inputs")
    code, out, err = run(capsys, "cluster", "--host-topology", hopper, "--nodelist", "n[1-2]")
    assert code == 0 and out.startswith("{")
    assert "rankmap: warning: GPU generation not given; assumed h100" in err
    # a table on stdout lists it under its notes, once: not also on stderr
    code, out, err = run(capsys, "cluster", "--host-topology", hopper, "--nodelist", "n[1-2]", "--format", "table")
    assert code == 0 and "  - GPU generation not given; assumed h100" in out and err == ""
    bad_input(capsys, "solve", "--host-topology", hopper, "--nodelist", "n[1-2]", "--tp", "3",
              needle="world_size 16")


def test_long_error_messages_are_clipped_to_one_readable_line(capsys, tmp_path):
    """A 1 MB host name in a launch-order file gives one line of at most ~2,000 characters."""
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("n" * 1_000_000 + "\n")
    g = tmp_path / "c.json"
    g.write_text(json.dumps(graph_doc()))
    err = bad_input(capsys, "solve", g, "--tp", "2", "--launch-order", hosts, needle="characters)")
    assert len(err) < 2200


def test_endless_topology_inputs_are_refused_not_loaded(capsys):
    """/dev/zero as a fabric or Volcano file: at most the size limit is read (8 MiB for YAML and
    topology.conf), then one line naming the file; before, these reads never ended."""
    import os

    if not os.path.exists("/dev/zero"):
        import pytest

        pytest.skip("no /dev/zero")
    bad_input(capsys, "cluster", "--fabric", "/dev/zero", "--gpu", "h100", "--gpus-per-node", "8",
              needle="fabric file '/dev/zero' has more than 8,388,608 characters")
    bad_input(capsys, "cluster", "--volcano-hypernodes", "/dev/zero", needle="'/dev/zero' has more than")


def test_cluster_refuses_to_write_a_graph_solve_would_refuse(capsys):
    from pathlib import Path

    conf = Path(__file__).resolve().parents[1] / "examples" / "clusters" / "gb200-nvl72-2racks.topology.conf"
    bad_input(capsys, "cluster", "--fabric", conf, "--gpu", "gb200", "--gpus-per-node", "4",
              "--nvlink-domain-rate", "1e10", needle="outside 1e-06..1e+09 GB/s")


def test_trees_with_two_parents_and_overlapping_blocks_are_errors(capsys):
    """A Volcano HyperNode listed by two parents (its uplink was silently split 400/400) and a
    node in two Slurm blocks (silently kept in the first) are one-line errors naming them."""
    from pathlib import Path

    bad = Path(__file__).resolve().parent / "data" / "malformed"
    bad_input(capsys, "cluster", "--volcano-hypernodes", bad / "volcano-two-parents.yaml",
              needle="HyperNode 'l1' is a member of both 's1' and 's2'")
    bad_input(capsys, "cluster", "--fabric", bad / "slurm-overlapping-blocks.conf", "--gpu", "h100",
              "--gpus-per-node", "8", needle="node 'n3' is in blocks 'b1' and 'b2'")


# ------------------------------------------------------------------ NCCL options (issue 25)


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--nccl-algo", "sideways"], "argument --nccl-algo: invalid choice: 'sideways'"),
        (["--nccl-algo", "^nvls"], "invalid choice: '^nvls'"),
        (["--nccl-algo", ""], "invalid choice: ''"),
        (["--nccl-rate", "pcie=20"], "--nccl-rate 'pcie=20': unknown key 'pcie'; keys: nic, nvlink [nccl_rate.pcie]"),
        (["--nccl-rate", "nic=0"], "--nccl-rate 'nic=0': the rate must be > 0 GB/s [nccl_rate.nic]"),
        (["--nccl-rate", "nic=-45"], "--nccl-rate 'nic=-45': the rate must be > 0 GB/s [nccl_rate.nic]"),
        (["--nccl-rate", "nic=nan"], "--nccl-rate 'nic=nan': 'nan' is not a finite number of GB/s"),
        (["--nccl-rate", "nvlink=inf"], "'inf' is not a finite number of GB/s [nccl_rate.nvlink]"),
        (["--nccl-rate", "nic=4_5"], "'4_5' is not a finite number"),
        (["--nccl-rate", "nic=fast"], "'fast' is not a finite number"),
        (["--nccl-rate", "nic=1e12"], "NCCL rate nic=1000000000000.0 must be a finite number of GB/s in 1e-6..1e9"),
        (["--nccl-rate", "nic"], "--nccl-rate 'nic' is not KEY=GBPS (keys: nic, nvlink; e.g. nic=45) [nccl_rate]"),
        (["--nccl-rate", "=45"], "--nccl-rate '=45' is not KEY=GBPS"),
        (["--nccl-rate", "nic=45,"], "--nccl-rate '' is not KEY=GBPS"),
        (["--nccl-rate", "nic=45", "--nccl-rate", "NIC=50"], "--nccl-rate 'NIC=50': nic given twice"),
        (["--no-pxn=true"], "argument --no-pxn: ignored explicit argument 'true'"),
        (["--no-nccl-latency=0"], "argument --no-nccl-latency: ignored explicit argument '0'"),
        (["--nccl-algo"], "argument --nccl-algo: expected one argument"),
    ],
)
@pytest.mark.parametrize("command", ["solve", "evaluate"])
def test_bad_nccl_flags_are_one_line_exit_2(capsys, tmp_path, cluster_file, command, flags, needle):
    extra = []
    if command == "evaluate":
        asg = tmp_path / "asg.json"
        asg.write_text(json.dumps([f"node{h:03d}/gpu{i}" for h in range(2) for i in range(4)]))
        extra = ["--assignment", str(asg)]
    bad_input(capsys, command, cluster_file, *extra, "--traffic", "dp=1e9", *flags, needle=needle)


@pytest.mark.parametrize(
    "line, needle",
    [
        ("nccl_algo: sideways", "unknown NCCL algorithm 'sideways'; one of auto, ring, tree, nvls, nvlstree [nccl_algo]"),
        ("nccl_algo: 3", "job key 'nccl_algo' must be a string, got 3"),
        ("nccl_rate: {nic: 0}", "--nccl-rate 'nic=0': the rate must be > 0 GB/s [nccl_rate.nic]"),
        ("nccl_rate: {nic: .nan}", "is not a finite number of GB/s [nccl_rate.nic]"),
        ("nccl_rate: {nic: true}", "[nccl_rate.nic]"),
        ("nccl_rate: {sys: 22}", "unknown key 'sys'; keys: nic, nvlink [nccl_rate.sys]"),
        ("nccl_rate: 'nic=-1'", "the rate must be > 0 GB/s [nccl_rate.nic]"),
        ("nccl_rate: [nic=45, nic=46]", "nic given twice"),
        ("nccl_rate: 45", "nccl_rate must be KEY=GBPS (e.g. nic=45), a list of them or a mapping"),
        ("nccl_rate: [45]", "nccl_rate must be KEY=GBPS strings or a mapping"),
        ("pxn: 'no'", "job key 'pxn' must be true or false, got 'no' [pxn]"),
        ("pxn: 0", "job key 'pxn' must be true or false, got 0"),
        ("nccl_latency: 'false'", "job key 'nccl_latency' must be true or false, got 'false'"),
        ("nccl_algorithm: ring", "unknown key 'nccl_algorithm' (did you mean 'nccl_algo'?)"),
        ("no_pxn: true", "unknown key 'no_pxn' (did you mean 'pxn'?)"),
    ],
)
def test_bad_nccl_job_keys(capsys, tmp_path, cluster_file, line, needle):
    job = write_job(tmp_path, cluster_file, f"traffic: {{dp: 1e9}}\n{line}")
    bad_input(capsys, "solve", job, needle=needle)


# ------------------------------------------------------------------ the graph's GPU name


def test_a_misspelt_gpu_name_in_a_cluster_file_is_refused(capsys, tmp_path):
    """A typo in ``graph.gpu`` used to drop NCCL's per-architecture constants silently (no NVLS:
    the tp ring of an HGX host 37% slower, exit 0)."""
    doc = graph_doc()
    doc["graph"]["gpu"] = "h-100"
    f = write_graph(tmp_path, doc, "typo.json")
    err = bad_input(capsys, "solve", f, "--tp", "4", needle="graph attribute gpu: unknown GPU 'h-100'")
    assert "h100" in err and "[gpu]" in err
    doc["graph"]["gpu"] = 100
    bad_input(capsys, "solve", write_graph(tmp_path, doc, "num.json"), "--tp", "4", needle="unknown GPU 100")
    for ok in ("H100", " h200 ", "generic", ""):
        doc["graph"]["gpu"] = ok
        code, out, err = run(capsys, "solve", write_graph(tmp_path, doc, "ok.json"), "--tp", "4", "--time-limit", "2")
        assert code == 0, err


def test_known_gpu_names_are_the_generations():
    from rankmap.solver.fabric.rates import known_gpu_names
    from rankmap.solver.formats.generations import GENERATIONS

    assert known_gpu_names() == sorted(GENERATIONS)


def test_a_self_loop_link_is_refused(capsys, tmp_path):
    doc = graph_doc()
    gpu = next(n["id"] for n in doc["nodes"] if n.get("kind") == "gpu")
    doc["edges"].append({"source": gpu, "target": gpu, "bandwidth": 100.0})
    err = bad_input(capsys, "solve", write_graph(tmp_path, doc, "loop.json"), "--tp", "4",
                    needle=f"link {gpu!r} -- {gpu!r} joins a node to itself")
    assert "[links]" in err


def test_a_node_kind_close_to_a_known_one_is_warned_about(capsys, tmp_path):
    """DESIGN §2: any kind other than "gpu" is a non-GPU node, so a typo ("gpuu", "GPU") silently dropped a GPU
    from the job; the solve still runs (the node is not a GPU) but says so on stderr, naming the kind and a node."""
    from rankmap.solver.formats.graphfile import graph_from_data, kind_warnings

    data = {"nodes": [{"id": "h0/g0", "host": "h0", "local_index": 0},
                      {"id": "h0/g1", "host": "h0", "local_index": 1, "kind": "gpuu"},
                      {"id": "h0/g2", "host": "h0", "local_index": 2},
                      {"id": "leaf", "kind": "switch"}, {"id": "x", "kind": "Nic"}, {"id": "y", "kind": "optics"}],
            "edges": [{"source": "h0/g0", "target": "h0/g2", "bandwidth": 300},
                      {"source": "h0/g1", "target": "leaf", "bandwidth": 50},
                      {"source": "h0/g0", "target": "leaf", "bandwidth": 50},
                      {"source": "x", "target": "leaf", "bandwidth": 50},
                      {"source": "y", "target": "leaf", "bandwidth": 50}]}
    G = graph_from_data(data)
    # "gpuu" and "Nic" look like typos of known kinds; "switch" is one; "optics" is a free-form non-GPU kind
    assert G.graph["kind_warnings"] == [
        "node kind 'gpuu' (e.g. node 'h0/g1') is not 'gpu': those nodes are not GPUs (did you mean 'gpu'?)",
        "node kind 'Nic' (e.g. node 'x') is not 'nic': those nodes are not 'nic' nodes (did you mean 'nic'?)"]
    assert kind_warnings({"gpu": "a", "pcie_switch": "b", "leaf": "c"}) == []
    path = tmp_path / "typo.json"
    path.write_text(json.dumps(data))
    code, out, err = run(capsys, "solve", path, "--tp", 2, "--format", "json")
    assert code == 0
    assert json.loads(out)["world_size"] == 2  # h0/g1 is not a GPU
    assert "node kind 'gpuu' (e.g. node 'h0/g1') is not 'gpu'" in err
