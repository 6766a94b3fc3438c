"""``rankmap cluster --format table``: the route-bandwidth levels are counted without a search
per GPU (issue 27 deliverable 6: a Slurm tree with 8 core and 17 multi-parent edge switches
took 48.9 s as a table and 2.3 s as JSON, one widest-path search per source GPU)."""

from __future__ import annotations

import random

import networkx as nx
import pytest

from rankmap.solver.formats import build_cluster, summarize
from rankmap.solver.formats import summary

from cli_helpers import run


def multi_parent_conf(tmp_path, hosts_per_edge: int = 8):
    """8 core switches, each the parent of all 17 edge switches (every edge has 8 parents)."""
    lines = [f"SwitchName=core{c} Switches=edge[01-17]" for c in range(1, 9)]
    lines += [f"SwitchName=edge{e:02d} Nodes=node[{e:02d}01-{e:02d}{hosts_per_edge:02d}]" for e in range(1, 18)]
    conf = tmp_path / "topology.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


def test_multi_parent_levels_exact_with_one_search(tmp_path, monkeypatch):
    G = build_cluster(fabric=multi_parent_conf(tmp_path), gpu="h100", gpus_per_node=8)
    calls = []
    real = summary._route_widths
    monkeypatch.setattr(summary, "_route_widths", lambda *a: calls.append(a[1]) or real(*a))
    levels = summary.bandwidth_levels(G)
    # 17 edges x 8 hosts = 136 hosts of 8 GPUs = 1,088 GPUs, C(1088, 2) = 591,328 pairs.
    # Same host: 136 x C(8, 2) = 3,808 pairs over the NVSwitch at H100's 450 GB/s.
    # Other hosts: 591,328 - 3,808 = 587,520 pairs, bottleneck the GPU-NIC / NIC-leaf port, 50 GB/s
    # (400 Gb/s); the 8 core switches add paths, never a narrower or wider route.
    assert [(w, c) for w, c, _ in levels] == [(450.0, 3808), (50.0, 587520)]
    assert [ex for _, _, ex in levels] == [("node0101/gpu0", "node0101/gpu1"), ("node0101/gpu0", "node0102/gpu0")]
    # the complexity guard: the examples need one widest-path search (from the first GPU), the
    # counts none; before, there was one search per source GPU (1,024 of the 1,088)
    assert calls == ["node0101/gpu0"]
    text = summarize(G)
    assert "evenly spaced" not in text and "unreachable" not in text
    assert "hosts 136  GPUs 1088" in text


def test_cluster_table_cli_counts_every_pair(tmp_path, capsys):
    code, out, err = run(capsys, "cluster", "--fabric", multi_parent_conf(tmp_path, 2), "--gpu", "h100",
                         "--gpus-per-node", "8", "--format", "table")
    assert code == 0, err
    # 34 hosts x 8 = 272 GPUs: 34 x 28 = 952 same-host pairs, C(272, 2) - 952 = 36,856 - 952 = 35,904
    lines = [ln.split() for ln in out.splitlines()]
    assert ["450", "952", "node0101/gpu0", "-", "node0101/gpu1"] in lines
    assert ["50", "35904", "node0101/gpu0", "-", "node0102/gpu0"] in lines


def _random_graph(seed: int) -> nx.Graph:
    r = random.Random(seed)
    G = nx.Graph()
    n = r.randint(2, 14)
    for i in range(n):
        G.add_node(i, kind=r.choice(["gpu", "gpu", "switch", "nic"]))
    for _ in range(r.randint(1, 25)):
        a, b = r.sample(range(n), 2)
        G.add_edge(a, b, bandwidth=float(r.choice([1, 2, 3, 5, 8])))
    return G


@pytest.mark.parametrize("seed", range(120))
def test_counting_agrees_with_a_search_per_source(seed):
    # the union-find counts and examples equal the definition evaluated pair by pair (a widest-path
    # search from every GPU), on random graphs with GPU-GPU links, relays and disconnected parts
    G = _random_graph(seed)
    is_gpu = {n: d["kind"] == "gpu" for n, d in G.nodes(data=True)}
    gpus = [n for n in G.nodes if is_gpu[n]]
    assert summary.bandwidth_levels(G) == summary._levels_per_source(G, gpus, is_gpu, 1024)
