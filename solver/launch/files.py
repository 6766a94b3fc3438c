"""Launch files a user pastes (DESIGN §6): Slurm hostfile, torchrun lines, Open MPI rankfile, Kubernetes map.

Every launcher gets the chosen layout rank by rank:

* **Slurm** ``srun --distribution=arbitrary`` reads ``SLURM_HOSTFILE``: line i
  is the host of task (global rank) i.  Slurm numbers the tasks of a node in
  task order (``SLURM_LOCALID``), so local rank k of a host is its k-th
  lowest global rank, the same local rank :class:`~rankmap.solver.results.HostPlacement`
  uses; ``CUDA_VISIBLE_DEVICES`` lists the GPU of local rank 0, 1, ... and
  the program opens ``cuda:LOCAL_RANK``.  Any layout, free mode included.
* **Open MPI** ``mpirun --rankfile``: ``rank R=HOST slot=S`` puts rank R on
  HOST bound to logical core S.  A rankfile slot names CPU cores, not GPUs; S
  is the rank's local rank (distinct cores per host, in rank order) and the
  GPU comes, as with Slurm, from ``CUDA_VISIBLE_DEVICES`` indexed by
  ``OMPI_COMM_WORLD_LOCAL_RANK`` (Open MPI's local rank is also the order of
  the global ranks on the node).  Edit S for NUMA-aware binding (the
  ``CPU Affinity`` column of ``nvidia-smi topo -m``).  Any layout.
* **torchrun** gives global rank ``base(node_rank) + local_rank`` with
  ``base`` the sum of ``--nproc-per-node`` of lower node ranks (each host's command
  carries its own ``--nproc-per-node``: hosts of several sizes, issue 27); only the
  *static* rendezvous honours ``--node-rank`` (with ``c10d`` torchrun
  numbers nodes in join order and warns that ``--node-rank`` is ignored), so
  the commands use ``--rdzv-backend static --master-addr HOST0 --master-port
  29500`` with HOST0 = node rank 0's host.  torchrun can only express layouts
  where every host's ranks are one contiguous block in node-rank order; other
  (free-mode) layouts get no torchrun lines and a reason in ``unavailable``.
* **Kubernetes** (JobSet / PyTorchJob, one pod per host): pod index i (the
  completion index, ``JOB_COMPLETION_INDEX``) runs torchrun node rank i, so
  ``pod_nodes[i]`` is the node pod i must land on; same condition as torchrun.

When the hosts do not all use the same local GPU order, one
``CUDA_VISIBLE_DEVICES`` in a command cannot serve them all: the commands
then read it from a GPU file (``apply.gpus_file``: ``HOST LIST`` per host in
node-rank order) that ``--emit`` writes next to the launch file as ``FILE.gpus``.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import InvalidArgumentError
from ..results import HostPlacement

__all__ = ["LAUNCH_KEYS", "EMIT_KINDS", "MASTER_PORT", "TRAIN_COMMAND", "LaunchNames", "launch_files", "emit_files",
           "torchrun_launchable", "names_for"]

#: Keys of the launch part of ``apply``, in their order.
LAUNCH_KEYS = ("rendezvous", "slurm", "torchrun", "mpirun", "kubernetes", "unavailable", "gpus_file")
#: Kinds ``rankmap solve --emit`` writes.
EMIT_KINDS = ("slurm-hostfile", "torchrun", "rankfile", "kubernetes")
#: Port of the rendezvous / ``MASTER_PORT`` (torchrun's default).
MASTER_PORT = 29500
#: The training command the recipes run (replace it with your entry point and arguments).
TRAIN_COMMAND = "python pretrain_gpt.py"


#: Host names the launch files carry: what DNS, Slurm node names and Kubernetes node names use
#: (letters, digits, ``.``, ``_``, ``-``; ``:`` and ``[]`` for IP addresses).  Anything else (spaces,
#: newlines, ``$``, ``;``, quotes) would break a hostfile line or run in the shell commands.
_HOST_NAME = re.compile(r"^[A-Za-z0-9_\[][A-Za-z0-9._:\[\]-]*$")


def unsafe_host(hosts: Sequence[HostPlacement]) -> str | None:
    """The first host name launch files cannot carry (see :data:`_HOST_NAME`), or None."""
    for h in hosts:
        if not _HOST_NAME.match(str(h.host)) or len(str(h.host)) > 255:
            return str(h.host)
    return None


@dataclass(frozen=True)
class LaunchNames:
    """File names the commands refer to (defaults: what ``--emit`` writes without a path)."""

    hostfile: str = "rankmap.hostfile"
    rankfile: str = "rankmap.rankfile"
    torchrun: str = "rankmap-torchrun.sh"
    kubernetes: str = "rankmap.pod-nodes"

    def gpus(self, path: str) -> str:
        """The GPU file that goes with launch file ``path``."""
        return path + ".gpus"


def torchrun_launchable(hosts: Sequence[HostPlacement], rank_offset: int = 0) -> str:
    """``""`` when torchrun can launch the placement, else why not (one sentence naming a host).

    torchrun numbers ranks ``base(node_rank) + local_rank``: every host's ranks
    must be one contiguous block, the blocks in node-rank order.
    """
    ordered = sorted(hosts, key=lambda h: h.node_rank)
    sizes = np.array([len(h.global_ranks) for h in ordered], dtype=np.int64)
    if not sizes.sum():
        return ""
    ranks = np.fromiter((r for h in ordered for r in h.global_ranks), dtype=np.int64, count=int(sizes.sum()))
    # the blocks follow each other iff the ranks, concatenated in node-rank order, count up from rank_offset;
    # the first host holding a rank out of place is the one a host-by-host walk stops at
    wrong = np.flatnonzero(ranks != rank_offset + np.arange(ranks.size))
    if not wrong.size:
        return ""
    h = ordered[int(np.searchsorted(np.cumsum(sizes), wrong[0], side="right"))]
    r = np.asarray(h.global_ranks, dtype=np.int64)
    return (f"host {h.host} runs ranks {_ranks_text(r - rank_offset)}, not one contiguous block after the "
            f"previous node rank's: torchrun numbers ranks node_rank*nproc + local_rank; launch with "
            f"apply.slurm (srun --distribution=arbitrary) or apply.mpirun (rankfile)")


def _ranks_text(r: np.ndarray) -> str:
    s = ",".join(map(str, r[:6].tolist()))
    return s + (",..." if r.size > 6 else "")


def _gpu_lists(hosts: Sequence[HostPlacement]) -> tuple[list[str], bool]:
    lists = [",".join(map(str, h.cuda_visible_devices)) for h in hosts]
    return lists, len(set(lists)) <= 1


def _train(megatron_args: Sequence[str]) -> str:
    return " ".join([TRAIN_COMMAND, *map(shlex.quote, megatron_args)])


def launch_files(hosts: Sequence[HostPlacement], world_size: int, megatron_args: Sequence[str] = (),
                 rank_offset: int = 0, names: LaunchNames | None = None) -> dict[str, Any]:
    """The launch section of ``apply`` for a placement (DESIGN §6).

    Parameters
    ----------
    hosts : sequence of HostPlacement
        In node-rank order (:func:`~rankmap.solver.launch.placement.host_placements`);
        each host's ``global_ranks`` ascending (local rank k = its k-th lowest
        rank, as ``SLURM_LOCALID``, ``OMPI_COMM_WORLD_LOCAL_RANK`` and torchrun's
        ``LOCAL_RANK`` number them), ``cuda_visible_devices[k]`` its GPU.
    world_size : int
        Number of global ranks (W); every rank ``rank_offset .. rank_offset+W-1``
        must be on exactly one host.
    megatron_args : sequence of str
        Flags appended to the training command (the order flag).
    names : LaunchNames
        File names the commands refer to.

    Returns
    -------
    dict
        ``rendezvous`` (``HOST0:29500``); ``slurm`` {``hostfile``: host per
        rank (W lines), ``command``}; ``torchrun`` [{``host``, ``node_rank``,
        ``command``}] (empty when not launchable); ``mpirun`` {``rankfile``:
        ``rank R=HOST slot=S`` per rank, ``command``}; ``kubernetes``
        {``pod_nodes``: node per pod index, ``cuda_visible_devices`` per pod
        index, ``command``} (empty lists when not launchable); ``unavailable``
        {launcher: reason}; ``gpus_file`` (``HOST LIST`` per host) only when
        the hosts' local GPU orders differ.  Sizes are O(W) strings.

    Raises
    ------
    InvalidArgumentError
        When the placement does not cover every rank once, or a host's ranks
        are not ascending (field ``hosts``).
    """
    names = names or LaunchNames()
    q = names  # file names are checked plain (names_for): no quoting needed inside bash -c '...'
    bad = unsafe_host(hosts)
    if bad is not None:
        why = (f"host name {bad[:80]!r} has characters a hostfile line or a shell command cannot carry "
               "(letters, digits, '.', '_', '-' and ':' only); rename the host in the cluster")
        return {"rendezvous": "", "slurm": {"hostfile": [], "command": ""}, "torchrun": [],
                "mpirun": {"rankfile": [], "command": ""},
                "kubernetes": {"pod_nodes": [], "cuda_visible_devices": [], "command": ""},
                "unavailable": {k: why for k in ("slurm", "torchrun", "mpirun", "kubernetes")}}
    W = int(world_size)
    host_of_rank = np.full(W, -1, dtype=np.int64)
    local_of_rank = np.zeros(W, dtype=np.int64)
    sizes = np.array([len(h.global_ranks) for h in hosts], dtype=np.int64)
    flat = np.fromiter((r for h in hosts for r in h.global_ranks), dtype=np.int64, count=int(sizes.sum()))
    flat -= rank_offset
    hid = np.repeat(np.arange(len(hosts)), sizes)
    starts = np.cumsum(sizes) - sizes
    # what a walk over the hosts raises first (vectorised: a Python loop per host took 0.3 s at 16,384 hosts):
    # a rank outside 0..W-1 or already on an earlier host, else a host's ranks not ascending
    outside = (flat < 0) | (flat >= W)
    first_host = np.full(max(W, 1), len(hosts), dtype=np.int64)
    inside = np.flatnonzero(~outside)
    np.minimum.at(first_host, flat[inside], hid[inside])
    placed = outside.copy()
    placed[inside] = first_host[flat[inside]] != hid[inside]
    descending = np.zeros(flat.size, dtype=bool)
    if flat.size > 1:
        descending[1:] = (np.diff(flat) <= 0) & (hid[1:] == hid[:-1])
    bad = np.flatnonzero(placed | descending)
    if bad.size:
        i = int(hid[bad[0]])
        own = slice(int(starts[i]), int(starts[i] + sizes[i]))
        if placed[own].any():
            raise InvalidArgumentError(f"host {hosts[i].host}: ranks outside 0..{W - 1} or on two hosts", "hosts")
        # srun, mpirun and torchrun number a host's local ranks in global rank order
        raise InvalidArgumentError(f"host {hosts[i].host}: global_ranks are not ascending (local rank order)", "hosts")
    host_of_rank[flat] = hid
    local_of_rank[flat] = np.arange(flat.size) - starts[hid]
    if W and host_of_rank.min() < 0:
        raise InvalidArgumentError(f"rank {int(np.argmin(host_of_rank))} is on no host", "hosts")
    names_arr = np.array([h.host for h in hosts] or [""], dtype=object)
    rank_hosts = names_arr[host_of_rank].tolist() if W else []
    host0 = hosts[0].host if hosts else ""
    lists, uniform = _gpu_lists(hosts)
    train = _train(megatron_args)
    N = len(hosts)
    out: dict[str, Any] = {"rendezvous": f"{host0}:{MASTER_PORT}"}

    def cvd(lookup: str, path: str) -> str:
        if uniform:
            return f"CUDA_VISIBLE_DEVICES={lists[0] if lists else ''}"
        return f'CUDA_VISIBLE_DEVICES=$(sed -n "s/^{lookup} //p" {path})'

    env = f"MASTER_ADDR={host0} MASTER_PORT={MASTER_PORT}"
    out["slurm"] = {
        "hostfile": rank_hosts,
        "command": (f"SLURM_HOSTFILE={q.hostfile} srun --distribution=arbitrary --ntasks={W} --nodes={N} "
                    f"bash -c 'export RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID "
                    f"{env} {cvd('$SLURMD_NODENAME', names.gpus(names.hostfile))}; exec {train}'"),
    }
    out["mpirun"] = {
        "rankfile": [f"rank {r}={h} slot={s}" for r, (h, s) in enumerate(zip(rank_hosts, local_of_rank.tolist()))],
        "command": (f"mpirun -np {W} --rankfile {q.rankfile} "
                    f"bash -c 'export RANK=$OMPI_COMM_WORLD_RANK WORLD_SIZE=$OMPI_COMM_WORLD_SIZE "
                    f"LOCAL_RANK=$OMPI_COMM_WORLD_LOCAL_RANK {env} "
                    f"{cvd('$(hostname -s)', names.gpus(names.rankfile))}; exec {train}'"),
    }
    why = torchrun_launchable(hosts, rank_offset)
    out["unavailable"] = {"torchrun": why, "kubernetes": why} if why else {}
    rdzv = f"--rdzv-backend static --master-addr {host0} --master-port {MASTER_PORT}"
    out["torchrun"] = [] if why else [
        {"host": h.host, "node_rank": int(h.node_rank),
         "command": (f"CUDA_VISIBLE_DEVICES={lst} torchrun --nnodes {N} --nproc-per-node "
                     f"{len(h.cuda_visible_devices)} --node-rank {h.node_rank} {rdzv} {train.split(' ', 1)[1]}")}
        for h, lst in zip(hosts, lists)
    ]
    if why:
        out["kubernetes"] = {"pod_nodes": [], "cuda_visible_devices": [], "command": ""}
    else:
        gph = {len(h.cuda_visible_devices) for h in hosts}
        kcvd = (f"CUDA_VISIBLE_DEVICES={lists[0]}" if uniform else
                f'CUDA_VISIBLE_DEVICES=$(sed -n "$((JOB_COMPLETION_INDEX+1))s/^[^ ]* //p" '
                f'{names.gpus(names.kubernetes)})')
        if len(gph) == 1:
            nproc = str(gph.pop())
        else:  # hosts of several sizes: each pod runs as many ranks as its GPU list has entries
            kcvd = f"export {kcvd}; "
            nproc = '$(echo "$CUDA_VISIBLE_DEVICES" | tr , "\\n" | wc -l)'
        out["kubernetes"] = {
            "pod_nodes": [h.host for h in hosts],
            "cuda_visible_devices": lists,
            "command": (f"{kcvd}{'' if kcvd.endswith('; ') else ' '}torchrun --nnodes {N} --nproc-per-node {nproc} "
                        f"--node-rank $JOB_COMPLETION_INDEX "
                        f"--rdzv-backend static --master-addr $MASTER_ADDR --master-port {MASTER_PORT} "
                        f"{train.split(' ', 1)[1]}"),
        }
    if not uniform:
        out["gpus_file"] = [f"{h.host} {lst}" for h, lst in zip(hosts, lists)]
    return {k: out[k] for k in LAUNCH_KEYS if k in out}


#: File paths the emitted commands may name (they are pasted into shells, inside ``bash -c '...'``).
_PLAIN_PATH = re.compile(r"^[A-Za-z0-9._/+=,@%:~-]+$")


def names_for(kind: str, path: str) -> LaunchNames:
    """The :class:`LaunchNames` whose file of ``--emit`` kind ``kind`` is ``path`` (others default).

    Raises
    ------
    InvalidArgumentError
        For a path with characters a shell would read (spaces, quotes, ``;``, ``$`` ...): the
        commands name it unquoted (field ``output``).
    """
    if not _PLAIN_PATH.match(path or "") or len(path) > 4096:
        raise InvalidArgumentError(
            f"output path {path[:120]!r} has characters the emitted shell commands cannot name safely "
            "(use letters, digits and . _ / + = , @ % : ~ -)", "output")
    field = {"slurm-hostfile": "hostfile", "rankfile": "rankfile", "torchrun": "torchrun", "kubernetes": "kubernetes"}
    return LaunchNames(**{field[kind]: path})


def emit_files(kind: str, apply: dict, hosts: Sequence[HostPlacement], world_size: int, path: str,
               megatron_args: Sequence[str] = (), rank_offset: int = 0) -> dict[str, str]:
    """The files ``rankmap solve --emit KIND -o PATH`` writes: {path: text}.

    ``slurm-hostfile``: one host per global rank (``SLURM_HOSTFILE``);
    ``rankfile``: the Open MPI rankfile; ``torchrun``: a shell script to run
    on every host (it picks its line by ``hostname -s``); ``kubernetes``: one
    node name per pod index.  When the hosts' GPU orders differ, also
    ``PATH.gpus`` (``HOST LIST`` per host).  The returned texts' commands
    name ``path``.

    Raises
    ------
    InvalidArgumentError
        An unknown kind (field ``emit``); torchrun/kubernetes for a layout
        torchrun cannot launch, with the reason (field ``emit``).
    """
    if kind not in EMIT_KINDS:
        raise InvalidArgumentError(f"--emit {kind!r} is not one of {', '.join(EMIT_KINDS)}", "emit")
    files = launch_files(hosts, world_size, megatron_args, rank_offset, names_for(kind, path))
    launcher = {"slurm-hostfile": "slurm", "rankfile": "mpirun"}.get(kind, kind)
    if files["unavailable"].get(launcher):
        raise InvalidArgumentError(f"--emit {kind}: {files['unavailable'][launcher]}", "emit")
    out: dict[str, str] = {}
    if kind == "slurm-hostfile":
        out[path] = "\n".join(files["slurm"]["hostfile"]) + "\n"
    elif kind == "rankfile":
        out[path] = "\n".join(files["mpirun"]["rankfile"]) + "\n"
    elif kind == "kubernetes":
        out[path] = "\n".join(files["kubernetes"]["pod_nodes"]) + "\n"
    else:
        lines = ["#!/bin/sh", "# rankmap: run this on every host of the job (e.g. srun --ntasks-per-node=1 sh "
                 f"{shlex.quote(path)} ARGS...); it starts the torchrun of its host's node rank, ARGS (your",
                 "# training arguments) appended to the command.",
                 'case "$(hostname -s)" in']
        for t in files["torchrun"]:
            lines.append(f"  {t['host']}) {t['command'].replace(' torchrun ', ' exec torchrun ', 1)} \"$@\" ;;")
        lines += ['  *) echo "rankmap: host $(hostname -s) is not in this layout" >&2; exit 1 ;;', "esac"]
        out[path] = "\n".join(lines) + "\n"
    if "gpus_file" in files and kind != "torchrun":
        out[path + ".gpus"] = "\n".join(files["gpus_file"]) + "\n"
    return out
