"""The CPUs this process may really use, and BLAS threads capped to them.

``os.cpu_count()`` counts the machine's cores.  A process pinned with ``taskset``, a Slurm step
(``--cpus-per-task``, cgroup cpuset) or a Kubernetes container with a CPU limit (a CFS quota in
``cpu.max``, or a cpuset under the static CPU manager policy) may use fewer.  Two things go wrong
when the machine's count is used instead:

* ``rankmap serve`` / ``rankmap batch`` start one solve per core of the machine, which then share
  the few CPUs they may use (each solve's counted budget stays the same, so they all run late);
* OpenBLAS starts one thread per core of the machine whatever the affinity: measured on a 2-core
  VM pinned with ``taskset -c 0``, free 256–512-GPU solves took 5.0–5.7 s instead of 4.1–4.5 s
  (its two threads spun on one CPU; benchmarks/bench_budgets.py, 2026-12-03).

:func:`available_cpus` is the least of the affinity mask and the cgroup v2 quota;
:func:`cap_blas_threads` sets the BLAS/OpenMP thread variables to it unless the user set them.
The ``rankmap`` command calls it before anything imports numpy (``rankmap.entry``).
"""

from __future__ import annotations

import math
import os
from typing import MutableMapping

__all__ = ["BLAS_THREAD_VARIABLES", "available_cpus", "cap_blas_threads", "cgroup_cpu_limit"]

#: Environment variables read by OpenBLAS, MKL, BLIS and OpenMP runtimes when they start.
BLAS_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")

#: cgroup v2 CPU limit of this process (``max`` or ``QUOTA PERIOD`` in microseconds).
CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"


def cgroup_cpu_limit(path: str = CGROUP_CPU_MAX) -> int | None:
    """CPUs allowed by the cgroup v2 quota at ``path``: ``ceil(quota / period)``, or None.

    None when the file is absent or unreadable (cgroup v1, macOS), says ``max`` (no limit), or does
    not hold two positive integers.  Never raises.
    """
    try:
        with open(path, encoding="ascii") as f:
            fields = f.read().split()
    except (OSError, UnicodeDecodeError):
        return None
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        quota, period = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    if quota <= 0 or period <= 0:
        return None
    return max(1, math.ceil(quota / period))


def available_cpus(cgroup_path: str = CGROUP_CPU_MAX) -> int:
    """CPUs this process may run on (>= 1): the affinity mask, at most the cgroup v2 quota.

    Falls back to ``os.cpu_count()`` where there is no affinity call (macOS, Windows).
    """
    if hasattr(os, "sched_getaffinity"):
        n = len(os.sched_getaffinity(0))
    else:  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    limit = cgroup_cpu_limit(cgroup_path)
    if limit is not None:
        n = min(n, limit)
    return max(1, n)


def cap_blas_threads(environ: MutableMapping[str, str] | None = None, cpus: int | None = None) -> dict[str, str]:
    """Set each of :data:`BLAS_THREAD_VARIABLES` the user left unset to ``cpus`` (default :func:`available_cpus`).

    Takes effect only before numpy (or another BLAS user) is imported: BLAS libraries read these at
    load time.  A variable already set, even to an unusual value, is the user's choice and kept.

    Returns
    -------
    dict
        The variables this call set (name -> value), empty if the user had set all of them.
    """
    env = os.environ if environ is None else environ
    value = str(max(1, int(cpus if cpus is not None else available_cpus())))
    set_now = {}
    for name in BLAS_THREAD_VARIABLES:
        if name not in env:
            env[name] = value
            set_now[name] = value
    return set_now
