"""How to launch a layout: Megatron arguments, hostfile, torchrun lines, host placements (DESIGN §6)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .catalogue import ParallelConfig
from .cluster import Cluster
from .orders import same_groups_as as _same_groups_as
from .ranks import DEFAULT_ORDER
from .types import HostPlacement

__all__ = ["apply_instructions", "host_placements"]

def apply_instructions(cfg: ParallelConfig, hosts: Sequence[HostPlacement], launcher: bool) -> dict:
    if cfg.order == DEFAULT_ORDER or _same_groups_as(cfg, DEFAULT_ORDER):
        megatron_args: list[str] = []
        note = "default order: no Megatron flag needed"
    elif _same_groups_as(cfg, "tp-cp-ep-pp-dp"):
        megatron_args = ["--use-tp-pp-dp-mapping"]
        note = "Megatron-LM: --use-tp-pp-dp-mapping (order tp-cp-ep-pp-dp)"
    else:
        megatron_args = []
        note = f"megatron-core: initialize_model_parallel(..., order={cfg.order!r})"
    out = {
        "order": cfg.order,
        "megatron_args": megatron_args,
        "note": note,
        "hostfile": [h.host for h in hosts],
    }
    if launcher:
        out["torchrun"] = [
            f"CUDA_VISIBLE_DEVICES={','.join(map(str, h.cuda_visible_devices))} torchrun --nnodes {len(hosts)} "
            f"--node-rank {h.node_rank} --nproc-per-node {len(h.cuda_visible_devices)}"
            for h in hosts
        ]
    return out


def host_placements(cluster: Cluster, dev_of_rank: np.ndarray) -> tuple[HostPlacement, ...]:
    """Per host: node rank, CUDA_VISIBLE_DEVICES by local rank, global ranks (hosts by lowest rank)."""
    host = cluster.host_of[dev_of_rank]
    hosts_used, first_rank = np.unique(host, return_index=True)
    by_host = np.argsort(host, kind="stable")
    counts = np.bincount(host, minlength=len(cluster.hosts))
    starts = np.concatenate([[0], np.cumsum(counts)])
    out = []
    for node_rank, h in enumerate(hosts_used[np.argsort(first_rank)].tolist()):
        ranks = by_host[starts[h] : starts[h + 1]]
        out.append(
            HostPlacement(
                host=cluster.hosts[h],
                node_rank=node_rank,
                cuda_visible_devices=tuple(int(x) for x in cluster.local_index[dev_of_rank[ranks]]),
                global_ranks=tuple(int(r) + 0 for r in ranks),
            )
        )
    return tuple(out)


