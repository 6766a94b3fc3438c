"""How to launch a layout (DESIGN §5, §6): the launcher's own device order (the baseline),
Megatron arguments, host placements; the launch files are in :mod:`.files`."""

from __future__ import annotations

import re
from typing import Iterable, Sequence

import numpy as np

from ..megatron.config import ParallelConfig
from ..fabric.cluster import Cluster
from ..megatron.orders import same_groups_as as _same_groups_as
from ..megatron.ranks import DEFAULT_ORDER
from ..errors import InvalidArgumentError
from ..results import HostPlacement
from ..types import LAUNCH_ORDER_POLICIES

__all__ = ["apply_instructions", "host_placements", "launcher_device_order", "launcher_host_order",
           "natural_key", "parse_host_list"]

_DIGIT_RUNS = re.compile(r"([0-9]+)", re.ASCII)


def natural_key(name: str) -> tuple:
    """Sort key of a host name in natural order: ``node2 < node10``, ``gpu-a1 < gpu-a2 < gpu-b1``.

    The name is split into alternating text and digit runs; text compares as
    text, digit runs by value (then by width, so ``n1 < n01``), the whole name
    last (a total order).  This is the order Slurm's hostlist sorting gives
    (``scontrol show hostnames`` of a sorted node list, the order ``srun``
    places tasks in).
    """
    parts = _DIGIT_RUNS.split(name)
    key = tuple((int(p), len(p)) if i % 2 else p for i, p in enumerate(parts))
    return key, name


def parse_host_list(text: str, source: str = "launch order") -> tuple[str, ...]:
    """Host names from a host list file's text, in file order.

    One host per line, as ``scontrol show hostnames``, a Slurm or Open MPI
    hostfile (only the first word counts: ``node1 slots=8`` is ``node1``) or
    a Slurm hostlist expression per line (``node[01-04]``).  Blank lines and
    ``#`` comments are skipped.  A host repeated on consecutive lines counts
    once (``$PBS_NODEFILE``, LSF's ``$LSB_DJOB_HOSTFILE`` and per-task Slurm
    hostfiles list a host once per slot); a host that comes back after
    another is kept, and :func:`launcher_host_order` refuses it.

    Raises
    ------
    InvalidArgumentError
        A malformed hostlist expression or a list without any host (field
        ``launch_order``).
    """
    from ..formats.hostlist import expand

    out: list[str] = []
    for line in text.splitlines():
        word = line.split("#", 1)[0].split()
        if not word:
            continue
        for host in expand(word[0], "launch_order"):
            if not out or out[-1] != host:
                out.append(host)
    if not out:
        raise InvalidArgumentError(f"{source} names no host", "launch_order")
    return tuple(out)


def launcher_host_order(cluster: Cluster, launch_order: str | Sequence[str] = "sorted",
                        skip_hosts: Iterable[str] = ()) -> np.ndarray:
    """Host indices (into ``cluster.hosts``) in the order the launcher numbers them, shape (hosts,).

    Parameters
    ----------
    launch_order : "sorted", "listed" or sequence of host names
        ``sorted``: natural-sorted host names (:func:`natural_key`), what
        ``srun`` and ``torchrun`` under Slurm do; ``listed``: the order of
        first appearance in the cluster graph; a sequence: that order (e.g.
        the scheduler's hostfile), which must name every host of the cluster
        once.
    skip_hosts : iterable of str
        Hosts the list may name although the cluster lacks them (excluded hosts).

    Raises
    ------
    InvalidArgumentError
        An unknown policy, a host not in the cluster, a host given twice, or a
        cluster host the list leaves out; each named (field ``launch_order``).
    """
    H = len(cluster.hosts)
    if isinstance(launch_order, str):
        if launch_order == "listed":
            return np.arange(H, dtype=np.int64)
        if launch_order == "sorted":
            return np.array(sorted(range(H), key=lambda h: natural_key(cluster.hosts[h])), dtype=np.int64)
        raise InvalidArgumentError(
            f"launch_order {launch_order!r} is not one of {', '.join(LAUNCH_ORDER_POLICIES)} or a list of hosts",
            "launch_order",
        )
    index = {h: i for i, h in enumerate(cluster.hosts)}
    skip = set(map(str, skip_hosts))
    seen: dict[str, int] = {}
    order = []
    for pos, raw in enumerate(launch_order):
        host = str(raw)
        if host in seen:
            raise InvalidArgumentError(
                f"launch_order names host {host!r} twice (entries {seen[host]} and {pos})", "launch_order"
            )
        seen[host] = pos
        i = index.get(host)
        if i is None:
            if host in skip:
                continue
            raise InvalidArgumentError(f"launch_order host {host!r} (entry {pos}) is not a host of the cluster",
                                       "launch_order")
        order.append(i)
    if len(order) != H:
        listed = set(order)
        missing = [cluster.hosts[h] for h in range(H) if h not in listed]
        raise InvalidArgumentError(
            f"launch_order leaves out {len(missing)} host(s) of the cluster, first {missing[0]!r}; "
            f"list every host the job runs on", "launch_order"
        )
    return np.asarray(order, dtype=np.int64)


def launcher_device_order(cluster: Cluster, launch_order: str | Sequence[str] = "sorted",
                          skip_hosts: Iterable[str] = ()) -> np.ndarray:
    """Device index of each global rank when the launcher runs the job without rankmap, shape (n,).

    The baseline of DESIGN §5: hosts in :func:`launcher_host_order`, each
    host's GPUs by ``local_index`` (CUDA device index = local rank, as
    torchrun, ``srun`` and ``mpirun`` number them); O(n log n).

    Raises
    ------
    InvalidArgumentError
        As :func:`launcher_host_order`.
    """
    horder = launcher_host_order(cluster, launch_order, skip_hosts)
    pos = np.empty(len(cluster.hosts), dtype=np.int64)
    pos[horder] = np.arange(horder.size)
    return np.lexsort((np.arange(cluster.num_devices), cluster.local_index, pos[cluster.host_of])).astype(np.int64)

def apply_instructions(cfg: ParallelConfig, hosts: Sequence[HostPlacement], launcher: bool = True) -> dict:
    """The ``apply`` section of a result (DESIGN §6): Megatron order and flags, and the launch files.

    Keys: ``order``; ``megatron_args`` (``["--use-tp-pp-dp-mapping"]`` or
    ``[]``); ``note`` (one line); ``hostfile`` (hosts in node-rank order);
    then :func:`~rankmap.solver.launch.files.launch_files` (``rendezvous``,
    ``slurm``, ``torchrun``, ``mpirun``, ``kubernetes``, ``unavailable``,
    ``gpus_file``).  ``launcher`` is kept for callers; the files follow from
    the placement itself (free-mode layouts get them too).
    """
    from .files import launch_files

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
    out.update(launch_files(hosts, cfg.world_size, megatron_args, cfg.rank_offset))
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
                cuda_visible_devices=tuple(cluster.local_index[dev_of_rank[ranks]].tolist()),
                global_ranks=tuple(ranks.tolist()),
            )
        )
    return tuple(out)


