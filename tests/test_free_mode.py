"""Free mode is never worse than launcher mode (issue 15 item 2).

Every launcher layout (ranks in blocks of G per host) is a free layout, so the
free-mode optimum is at most the launcher-mode optimum.  The search keeps that
promise by construction: on equal hosts, free mode first runs the launcher
search with the launcher solve's own budgets (same answer), then searches free
layouts from all its candidates.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from rankmap.solver import SolveOptions, parallel_config, solve
from rankmap.solver.search import solve as search_mod


def fragmented_nvl(hosts_per_rack=(3, 1, 2), gpus_per_host: int = 4, nvlink: float = 900.0, nic: float = 50.0,
                   hosts_per_leaf: int = 2) -> nx.Graph:
    """A fragmented allocation of NVL72-style racks: rack r contributes ``hosts_per_rack[r]`` hosts.

    All GPUs of a rack hang off one NVLink switch (``nvlink`` GB/s per GPU);
    each GPU has its own NIC (``nic`` GB/s) into a leaf of ``hosts_per_leaf``
    hosts (numbered across racks, so leaves straddle racks); leaves reach one
    spine at 2:1.  Hosts are listed round-robin over the racks (the baseline
    order interleaves racks, as a scheduler's fragmented node list does).
    """
    queues = [[(r, t) for t in range(c)] for r, c in enumerate(hosts_per_rack)]
    listing = []
    while any(queues):
        for q in queues:
            if q:
                listing.append(q.pop(0))
    g = nx.Graph()
    for h, (r, t) in enumerate(listing):
        host = f"r{r}t{t}"
        leaf = f"leaf{h // hosts_per_leaf}"
        for i in range(gpus_per_host):
            gpu = f"{host}/gpu{i}"
            g.add_node(gpu, kind="gpu", host=host, local_index=i)
            g.add_node(f"rack{r}/nvswitch", kind="nvswitch")
            g.add_edge(gpu, f"rack{r}/nvswitch", bandwidth=nvlink)
            g.add_node(f"{host}/nic{i}", kind="nic", host=host)
            g.add_edge(gpu, f"{host}/nic{i}", bandwidth=nic)
            g.add_node(leaf, kind="switch")
            g.add_edge(f"{host}/nic{i}", leaf, bandwidth=nic)
    g.add_node("spine", kind="switch")
    for leaf in {f"leaf{h // hosts_per_leaf}" for h in range(len(listing))}:
        down = sum(d["bandwidth"] for _, d in g[leaf].items())
        g.add_edge(leaf, "spine", bandwidth=down / 2.0)
    return g


CASES = [
    (dict(tp=4, pp=2), dict(tp=1e9, dp=5e7, pp=4e9)),                      # pp-heavy
    (dict(tp=2, ep=4, etp=1, pp=2), dict(tp=1e9, ep=8e9, etp=1e9, dp=5e8, edp=1e9, pp=2e8)),  # EP-heavy
    (dict(tp=4, pp=3), dict(tp=8e9, dp=4e8, pp=2e8)),                      # tp-heavy, dp = 2
]


@pytest.mark.parametrize("sizes,traffic", CASES)
def test_free_is_never_worse_than_launcher(sizes, traffic):
    """24 GPUs (6 hosts x 4) over three partly used NVL racks: free cost <= launcher cost.

    24 > 16 GPUs, so neither mode enumerates: the guarantee comes from free
    mode running the launcher search first.
    """
    g = fragmented_nvl()
    cfg = parallel_config(world_size=24, **sizes)
    costs = {}
    for mode in ("launcher", "free"):
        res = solve(g, cfg, traffic, SolveOptions(mode=mode, orders="megatron-cli", time_limit_seconds=2.0))
        costs[mode] = res.layout.cost.total_seconds
    assert costs["free"] <= costs["launcher"] * (1 + 1e-12)


def test_free_mode_starts_from_the_launcher_answer(monkeypatch):
    """With the free-layout steps switched off, free mode returns the launcher solve's answer exactly.

    Above 16 GPUs four steps differ between the modes: ``refine``, the
    free tree-partition proposal (the other proposals are the launcher ones), the grid-permutation
    layouts and the free anytime phase; making them no-ops in free mode leaves the launcher candidates, so the
    free answer must be the launcher answer: same order, same GPU for every
    rank, same cost.
    """
    g = fragmented_nvl()
    cfg = parallel_config(world_size=24, tp=4, pp=2)
    traffic = dict(tp=1e9, dp=5e7, pp=4e9)
    opts = dict(orders="megatron-cli", time_limit_seconds=2.0)
    launcher = solve(g, cfg, traffic, SolveOptions(mode="launcher", **opts))

    def launcher_only(stage):
        """The search ``stage`` run for the launcher's candidates only (none for the free bijection)."""

        def run(cluster, candidates, surrogate, traffic_, exposure, options, launcher_flag, *a, **k):
            if not launcher_flag:
                return []
            return stage(cluster, candidates, surrogate, traffic_, exposure, options, launcher_flag, *a, **k)

        return run

    monkeypatch.setattr(search_mod, "refine", launcher_only(search_mod.refine))
    monkeypatch.setattr(search_mod, "tree_partition_layout", lambda *a, **k: None)
    monkeypatch.setattr(search_mod, "_free_grid_layouts", lambda *a, **k: [])
    monkeypatch.setattr(search_mod, "anytime_search", launcher_only(search_mod.anytime_search))
    free = solve(g, cfg, traffic, SolveOptions(mode="free", **opts))
    assert free.layout.order == launcher.layout.order
    assert free.layout.assignment == launcher.layout.assignment
    assert free.layout.cost.total_seconds == launcher.layout.cost.total_seconds
    # the answer is launchable: every block of 4 consecutive ranks on one host
    hosts = np.array([a.split("/")[0] for a in free.layout.assignment]).reshape(-1, 4)
    assert (hosts == hosts[:, :1]).all()
