"""The descent on the real objective (solver/localsearch.py): its moves, and layouts only they reach.

Hand-derived cases:

* DGX-1 hosts (examples/clusters/dgx1-v100-hybridcube.json: hybrid cube mesh of
  25/50 GB/s NVLinks, NCCL's calibrated 20/40 GB/s, four 12.5 GB/s NICs each shared by
  two GPUs on a PCIe switch), 4 hosts, two per leaf, leaves at 2:1 on a spine, tp4 pp2
  in order tp-dp-pp: every host holds two tp groups and two members of each of four dp
  rings (ranks t, t+4 | t+8, t+12).  The tp ring has a 20 GB/s edge whatever the 4 GPUs
  (:func:`ring_rate_gbps`): ``T_tp = fb_tp / 20 GB/s``.  Each host sends 4 dp rings' fb out
  over its 4 NICs: ``T_dp ≥ 4·fb_dp / (4 · 12.5 GB/s)``, and the launcher's device order
  meets it (NCCL runs each ring as 2 channels of fb/2, one per NIC of its two members, so
  every NIC carries two channels): the descent has nothing to gain.  (Under the single-ring
  model this case needed compound moves to spread the senders over the NICs; NCCL's
  channels spread them.)
* NVL72-style racks (:func:`nvl72_cluster`: 18 trays x 4 GPUs per rack, a rack's
  two leaves of 9 trays each with a 900 GB/s uplink, NCCL's 864), 2 racks, tp4 pp4 in
  order tp-dp-pp: a stage is 36 GPUs = 9 trays = one leaf, so the boundary between the
  racks (stage 1 -> 2 and back) sends all 36 flows of each direction over one leaf's
  uplink.  The descent spreads them until no uplink is busier than one flow on its NIC
  port (50 x 0.96 = 48 GB/s; PXN sends each flow out of the member on the receiver's rail).
"""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from rankmap.solver import cluster_from_graph, fat_tree_cluster, layout_cost, parallel_config
from rankmap.solver.fabric.builders import nvl72_cluster
from rankmap.solver.megatron.catalogue import megatron_groups
from rankmap.solver.search.localsearch import _compound_moves, descend, hot_hosts
from rankmap.solver.cost.timemodel import flow_bytes
from rankmap.solver.traffic import Collective, Traffic

DGX1 = Path(__file__).resolve().parents[1] / "examples" / "clusters" / "dgx1-v100-hybridcube.json"


def dgx1_hosts(num_hosts: int) -> nx.Graph:
    """``num_hosts`` copies of the DGX-1 example host, two per leaf switch (every fabric NIC on it at its
    port rate), leaves on one spine at half their NICs' capacity."""
    template = nx.node_link_graph(json.loads(DGX1.read_text()), edges="edges")
    g = nx.Graph()
    for h in range(num_hosts):
        ren = {n: f"n{h:02d}/{str(n).split('/', 1)[-1]}" for n in template.nodes}
        for n, d in template.nodes(data=True):
            g.add_node(ren[n], **{**d, "host": f"n{h:02d}"})
        for u, v, d in template.edges(data=True):
            g.add_edge(ren[u], ren[v], **d)
        for n, d in template.nodes(data=True):
            if d.get("kind") == "nic" and d.get("fabric_port", True):
                g.add_edge(ren[n], f"switch:leaf{h // 2}", bandwidth=float(d.get("port_bandwidth", 12.5)))
    for leaf in range((num_hosts + 1) // 2):
        name = f"switch:leaf{leaf}"
        g.nodes[name]["kind"] = "switch"
        g.add_edge(name, "switch:spine", bandwidth=sum(d["bandwidth"] for _, d in g[name].items()) / 2)
    g.nodes["switch:spine"]["kind"] = "switch"
    return g


def test_compound_moves_are_the_3_cycles_and_double_swaps():
    assert len(_compound_moves(4)) == 2 * 4 + 3
    moves = _compound_moves(8)
    assert len(moves) == 2 * 56 + 210
    for cycles in moves:
        touched = [i for cyc in cycles for i in cyc]
        assert len(touched) == len(set(touched)) and len(touched) in (3, 4)


def test_devices_behind_a_leaf_uplink_and_a_gpu_link():
    cl = cluster_from_graph(nvl72_cluster(2))
    fab = cl.fabric
    behind = fab.devices_behind(("switch:leaf1", "switch:spine"))
    assert sorted(cl.devices[d] for d in behind) == sorted(f"r0t{t:02d}/gpu{i}" for t in range(9, 18) for i in range(4))
    assert [cl.devices[d] for d in fab.devices_behind(("r1t03/gpu2", "nvlink:rack1"))] == ["r1t03/gpu2"]
    assert fab.devices_behind(("no-such-node", "switch:spine")).size == 0


def test_nccl_channels_balance_dgx1_senders_over_the_nics():
    cl = cluster_from_graph(dgx1_hosts(4))
    cfg = parallel_config(32, tp=4, pp=2).with_order("tp-dp-pp")
    # dp as the gradient all-reduce of a model's traffic (traffic_from_model); tp an all-reduce by default
    traffic = Traffic({"tp": 4e9, "dp": 2e9}, collectives={"dp": (Collective("all_reduce", 2e9),)})
    # tp: ring of 4 with a 25 GB/s NVLink edge at NCCL's 20 GB/s (x0.8: the copied hosts name no GPU generation)
    t_tp = flow_bytes("all_reduce", 4e9, 4) / 20e9
    # dp: 2 channels of fb/2 per ring (its two members on a host sit on two NICs); 4 rings x 2 channels over the
    # host's 4 NICs: 2 x fb/2 per 12.5 GB/s NIC, = the host's egress floor 4·fb / (4 x 12.5 GB/s)
    t_dp = 2 * flow_bytes("all_reduce", 2e9, 4) / 2 / 12.5e9
    # NCCL latency, Simple: tp one-host ring all-reduce of 4, 8.4 + 6·3.4 = 28.8 us; dp ring all-reduce of 4 over
    # 2 hosts, (8.4 + 4·3.4 + 2·14) x 1.4 = 70 us
    lat = 28.8e-6 + 70e-6
    start = np.arange(32)  # the launcher's device order
    assert layout_cost(cl, cfg, start, traffic).total_seconds == pytest.approx(t_tp + t_dp + lat, rel=1e-9)
    dev, cost, _used = descend(cl, cfg, traffic, start, "launcher", 2000, megatron_groups(cfg))
    assert cost == pytest.approx(t_tp + t_dp + lat, rel=1e-9)  # both terms at their floors: nothing to gain
    assert layout_cost(cl, cfg, dev, traffic).total_seconds == pytest.approx(cost, rel=1e-12)


def test_hot_hosts_and_the_descent_split_a_stage_boundary_over_two_leaves():
    cl = cluster_from_graph(nvl72_cluster(2))
    cfg = parallel_config(144, tp=4, pp=4).with_order("tp-dp-pp")
    traffic = {"pp": 1e9}
    start = np.arange(144)
    before = layout_cost(cl, cfg, start, traffic)
    # the busiest link is a leaf's uplink (900 GB/s, NCCL's 900 x 0.96 = 864) carrying the 36 flows of one
    # direction of the rack boundary; plus NCCL's latency of a send across nodes, Simple: 8.4 + 14 = 22.4 us
    fb = flow_bytes("p2p_chain", 1e9, 4)
    assert before.by_class["pp"] == pytest.approx(36 * fb / 864e9 + 22.4e-6, rel=1e-9)
    hot = hot_hosts(cl, before)
    assert hot is not None and hot.size == 9
    dev, cost, _used = descend(cl, cfg, traffic, start, "launcher", 400, megatron_groups(cfg))
    # some chain crosses the racks; NCCL's PXN relays a send on the sender's own tray (ncclTopoDevToRank with the
    # local systemId, search.cc:1433), so the 36 flows of one direction leave through the leaves of the 9 trays
    # (launcher blocks of 4) holding their senders: split 4 + 5 over a rack's two leaves at best, 20 flows on the
    # busier uplink (18 before the relay was kept on the tray: relays on other trays of the rack let 18 + 18)
    assert cost == pytest.approx(20 * fb / 864e9 + 22.4e-6, rel=1e-9)


def test_periodic_uniform_swaps_repeat_one_exchange_in_every_block():
    from rankmap.solver.search.localsearch import _moves, _periods

    assert _periods(8) == [4, 2] and _periods(4) == [2] and _periods(2) == [] and _periods(6) == [3, 2]
    # 2 hosts of 8 GPUs: the first moves are the periodic ones, 6 (k = 4) + 1 (k = 2)
    cl = cluster_from_graph(fat_tree_cluster(2, 8, intra="nvlink-pairs", intra_bandwidth_gbps=100.0,
                                             nic_bandwidth_gbps=25.0))
    dev = np.arange(16)
    moves = list(_moves(cl, dev, "launcher"))
    first = moves[:7]
    # k = 4, positions 1 <-> 2: ranks 1,2 / 5,6 / 9,10 / 13,14 exchange their GPUs
    expect = dev.copy()
    for a in (1, 5, 9, 13):
        expect[a], expect[a + 1] = dev[a + 1], dev[a]
    assert any(np.array_equal(m, expect) for m in first)
    # k = 2: every NVLink pair's two GPUs exchanged on every host
    pairs = dev.reshape(-1, 2)[:, ::-1].reshape(-1)
    assert np.array_equal(first[6], pairs)


def test_the_descent_swaps_both_halves_of_nvlink_pair_hosts_to_the_bound():
    """8 hosts of four 100 GB/s NVLink pairs under PCIe switches, 25 GB/s NICs, leaves of 4 hosts at 2:1; tp4 cp2
    pp2 in order ep-dp-tp-cp-pp with GPT-24L traffic (Megatron-LM's arguments: rankmap.solver.traffic presets).
    From the launcher's own layout (identity local order), the fastest layout of this order found by an unlimited
    run (local positions 1 <-> 2 and 5 <-> 6 on every host: the tp4 group of a host half takes one GPU of each
    of two NVLink pairs, so each dp ring's in-host hop stays on NVLink) costs exactly the launcher lower bound;
    neither swap alone improves.  The periodic swap is among the descent's first moves: a budget of 40
    evaluations reaches it (before the periodic moves the improving double swap was move 209)."""
    from rankmap.solver.bound.analytic import search_lower_bound
    from rankmap.solver.megatron.orders import candidate_orders
    from rankmap.solver.traffic import model_preset, traffic_from_model

    cl = cluster_from_graph(fat_tree_cluster(8, 8, intra="nvlink-pairs", intra_bandwidth_gbps=100.0,
                                             nic_bandwidth_gbps=25.0, tiers=[(4, 2.0)]))
    cfg = parallel_config(64, tp=4, cp=2, pp=2, order="ep-dp-tp-cp-pp")
    traffic = traffic_from_model(model_preset("gpt-24l-4096"), cfg)
    start = np.arange(64)
    c0 = layout_cost(cl, cfg, start, traffic).total_seconds
    dev, c, used = descend(cl, cfg, traffic, start, "launcher", 40, megatron_groups(cfg))
    assert used <= 40 and c < c0
    bound = search_lower_bound(cl, [cfg], traffic, None, "launcher")
    assert c == pytest.approx(bound, rel=1e-9)
    # the layout: the same local order on every host, positions 1 <-> 2 and 5 <-> 6 exchanged (hosts may move)
    local = (dev % 8).reshape(8, 8)
    assert all(np.array_equal(row, local[0]) for row in local)
