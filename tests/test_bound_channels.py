"""The bound against the exhaustive optimum on uneven NIC layouts (issue 25: channels as paths through hosts).

Random small clusters mixing what NCCL's search handles unevenly: NVSwitch or direct GPU links or
none (PCIe only), a NIC per GPU, a NIC shared by two GPUs under a PCIe switch, one NIC per host,
two NICs on one GPU, each host its own mix; rail-aligned or single-leaf fabrics.  For each, the
analytic bound (``lower_bound``, ``search_lower_bound``) must not exceed the least
``layout_cost`` over every layout (tests/exact_optimum.py).  ``RANKMAP_BOUND_SEEDS=N`` runs N
seeds (the adversarial pass used 300); the suite runs a few.
"""

from __future__ import annotations

import os
import random

import networkx as nx
import pytest

from rankmap.solver import NcclModel, cluster_from_graph
from rankmap.solver.bound.analytic import lower_bound, search_lower_bound
from rankmap.solver.megatron.orders import candidate_orders

from exact_optimum import optimum
from test_solve import random_sizes

SEEDS = int(os.environ.get("RANKMAP_BOUND_SEEDS", "3"))


def uneven_cluster(rng: random.Random) -> nx.Graph:
    """A random small cluster whose hosts have uneven NIC layouts (module doc)."""
    hosts, per = rng.choice([(2, 4), (2, 3), (3, 2), (2, 2)])
    g = nx.Graph()
    rails = rng.random() < 0.5
    leaves = [f"leaf{r}" for r in range(per)] if rails else ["leaf0"]
    g.add_node("spine", kind="switch")
    for leaf in leaves:
        g.add_node(leaf, kind="switch")
        g.add_edge(leaf, "spine", bandwidth=float(rng.choice([25, 50, 100, 400])))
    for h in range(hosts):
        host = f"h{h}"
        intra = rng.choice(["nvswitch", "direct", "none"])
        nic_mode = rng.choice(["per_gpu", "shared", "one", "two"])
        gpus = [f"{host}/gpu{i}" for i in range(per)]
        for i, gpu in enumerate(gpus):
            g.add_node(gpu, kind="gpu", host=host, local_index=i)
        if intra == "nvswitch":
            g.add_node(f"{host}/nvs", kind="nvswitch")
            bw = float(rng.choice([40, 100, 300]))
            for gpu in gpus:
                g.add_edge(gpu, f"{host}/nvs", bandwidth=bw)
        elif intra == "direct":
            bw = float(rng.choice([20, 50, 100]))
            for a in range(per):
                for b in range(a + 1, per):
                    if rng.random() < 0.8 or b == a + 1:
                        g.add_edge(gpus[a], gpus[b], bandwidth=bw)
        nic_bw = float(rng.choice([12.5, 25, 50]))
        pcie = float(rng.choice([16, 32]))

        def nic(name, idx, leaf):
            g.add_node(name, kind="nic", host=host, nic_index=idx)
            g.add_edge(name, leaves[leaf % len(leaves)], bandwidth=nic_bw)

        if nic_mode in ("per_gpu", "two"):
            for i, gpu in enumerate(gpus):
                nic(f"{host}/nic{i}", i, i)
                g.add_edge(gpu, f"{host}/nic{i}", bandwidth=pcie)
                if nic_mode == "two" and i == 0:
                    nic(f"{host}/nicb{i}", 100 + i, i + 1)
                    g.add_edge(gpu, f"{host}/nicb{i}", bandwidth=pcie)
        else:  # PCIe switches of two GPUs ("shared") or of all ("one"), one NIC under each
            size = 2 if nic_mode == "shared" else per
            for s in range(0, per, size):
                sw = f"{host}/sw{s}"
                g.add_node(sw, kind="pcie_switch", host=host)
                nic(f"{host}/nic{s}", s, s)
                g.add_edge(sw, f"{host}/nic{s}", bandwidth=pcie * 2)
                for gpu in gpus[s:s + size]:
                    g.add_edge(gpu, sw, bandwidth=pcie)
    return g


def _check(seed: int) -> None:
    rng = random.Random(seed)
    g = uneven_cluster(rng)
    try:
        cl = cluster_from_graph(g, nccl=NcclModel(latency=rng.random() < 0.5))
    except Exception as e:  # a GPU with no path to the others is not a cluster
        pytest.skip(f"not a cluster: {e}")
    cfg = random_sizes(rng, cl.num_devices)
    traffic = {c: rng.choice([0.0, 1e6, 1e8, 1e9, 4e9]) for c in ("tp", "cp", "dp", "pp", "ep", "edp", "etp",
                                                                   "embedding")}
    orders = candidate_orders(cfg, "all")
    mode = "free" if cl.num_devices <= 6 else "launcher"
    best = optimum(cl, orders, traffic, None, mode)
    assert lower_bound(cl, cfg, traffic) <= best * (1 + 1e-9) + 1e-15, (seed, cfg, traffic)
    assert search_lower_bound(cl, orders, traffic, None, mode) <= best * (1 + 1e-9) + 1e-15, (seed, cfg, traffic)


@pytest.mark.parametrize("seed", range(SEEDS))
def test_bound_never_above_the_optimum_on_uneven_nics(seed):
    _check(seed)
