"""Differential oracle: megatron-core's own ``initialize_model_parallel``, dry-run.

:func:`megatron_catalogue` runs the real
``megatron.core.parallel_state.initialize_model_parallel`` for a given world size
with ``torch.distributed`` faked: ``is_initialized`` / ``get_world_size`` /
``get_rank`` answer for a pretend rank 0 of ``world_size`` ranks and
``new_group`` records its ``ranks`` and ``group_desc`` instead of creating a
process group.  Nothing real (no store, no backend, no thread) is created.

This module imports megatron-core at import time on purpose: tests that use it
guard themselves with ``pytest.importorskip("megatron.core")`` (the ``[oracle]``
extra installs it).
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from typing import Any, Dict, List, Optional, Sequence, Union
from unittest import mock

with warnings.catch_warnings():
    # megatron-core warns at import time about missing Transformer Engine / Apex.
    warnings.simplefilter("ignore")
    import torch
    import torch.distributed
    from megatron.core import parallel_state

__all__ = ["megatron_catalogue", "MEGATRON_VERSION"]

try:  # pragma: no cover - informational only
    from importlib.metadata import version as _version

    MEGATRON_VERSION = _version("megatron-core")
except Exception:  # pragma: no cover
    MEGATRON_VERSION = "unknown"

Groups = Dict[str, List[List[int]]]

# parallel_state is module-global state; one oracle run at a time.
_LOCK = threading.Lock()


class _FakeDistributedError(RuntimeError):
    """parallel_state used a torch.distributed feature the fake does not provide."""


class _FakeGroup:
    """Stands in for a ProcessGroup; only identity matters to parallel_state."""

    __slots__ = ("ranks", "desc")

    def __init__(self, ranks, desc):
        self.ranks = ranks
        self.desc = desc

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"_FakeGroup({self.desc}, {self.ranks})"


@contextlib.contextmanager
def _fake_distributed(world_size: int, rank: int, record: list):
    """Patch the torch.distributed entry points parallel_state uses; restore on exit."""

    def new_group(ranks=None, timeout=None, backend=None, pg_options=None,
                  use_local_synchronization=False, group_desc=None, **_):
        ranks = [int(r) for r in ranks] if ranks is not None else list(range(world_size))
        record.append((group_desc, ranks))
        return _FakeGroup(ranks, group_desc)

    def get_rank(group=None):
        if group is None:
            return rank
        if isinstance(group, _FakeGroup):
            return group.ranks.index(rank) if rank in group.ranks else -1
        raise _FakeDistributedError("fake torch.distributed: get_rank on an unknown group")

    def get_world_size(group=None):
        if group is None:
            return world_size
        if isinstance(group, _FakeGroup):
            return len(group.ranks)
        raise _FakeDistributedError("fake torch.distributed: get_world_size on an unknown group")

    def refuse(*args, **kwargs):
        raise _FakeDistributedError("fake torch.distributed: collective called during the dry run")

    dist = torch.distributed
    patches = {
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "get_world_size": get_world_size,
        "get_rank": get_rank,
        "new_group": new_group,
        "barrier": refuse,
        "destroy_process_group": lambda *a, **k: None,
    }
    with contextlib.ExitStack() as stack:
        for name, fn in patches.items():
            stack.enter_context(mock.patch.object(dist, name, fn, create=True))
        yield


def megatron_catalogue(
    world_size: int,
    tp: int = 1,
    pp: int = 1,
    cp: int = 1,
    ep: int = 1,
    etp: Optional[int] = None,
    order: str = "tp-cp-ep-dp-pp",
    num_distributed_optimizer_instances: int = 1,
    hierarchical_context_parallel_sizes: Optional[Sequence[int]] = None,
    rank: int = 0,
) -> Union[Groups, BaseException]:
    """Run megatron-core's ``initialize_model_parallel`` dry and record its groups.

    Parameters
    ----------
    world_size : int
        What the fake ``torch.distributed.get_world_size()`` answers.
    tp, pp, cp, ep, etp, order, num_distributed_optimizer_instances, hierarchical_context_parallel_sizes
        Passed to ``initialize_model_parallel`` as ``tensor_model_parallel_size``,
        ``pipeline_model_parallel_size``, ``context_parallel_size``,
        ``expert_model_parallel_size``, ``expert_tensor_parallel_size`` and the
        keywords of the same name.  ``create_gloo_process_groups=False``.
    rank : int
        What the fake ``get_rank()`` answers (it does not change the groups).

    Returns
    -------
    dict of str -> list of list of int, or the exception
        ``group_desc`` -> every ``ranks`` list created under that name, in
        creation order (keys in order of first creation).  When Megatron raises
        (``RuntimeError``, ``AssertionError``, ``KeyError``, ``ZeroDivisionError``
        ...), the exception object is returned instead.  Megatron's global state
        is reset (``destroy_model_parallel``) before and after every call.
    """
    record: list = []
    kwargs: Dict[str, Any] = dict(
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        context_parallel_size=cp,
        expert_model_parallel_size=ep,
        expert_tensor_parallel_size=etp,
        order=order,
        num_distributed_optimizer_instances=num_distributed_optimizer_instances,
        hierarchical_context_parallel_sizes=(
            list(hierarchical_context_parallel_sizes) if hierarchical_context_parallel_sizes is not None else None
        ),
        create_gloo_process_groups=False,
    )
    with _LOCK, _fake_distributed(world_size, rank, record):
        parallel_state.destroy_model_parallel()
        try:
            parallel_state.initialize_model_parallel(**kwargs)
        except (ImportError, _FakeDistributedError):
            raise  # a broken environment or a gap in the fake, not Megatron's verdict
        except Exception as exc:  # Megatron's own verdict: the config is rejected
            return exc
        finally:
            parallel_state.destroy_model_parallel()
    out: Groups = {}
    for desc, ranks in record:
        out.setdefault(desc, []).append(ranks)
    return out


if __name__ == "__main__":  # pragma: no cover - manual use
    import json
    import sys

    args = [int(a) for a in sys.argv[1:3]] or [8, 2]
    res = megatron_catalogue(args[0], tp=args[1] if len(args) > 1 else 1)
    print(res if isinstance(res, BaseException) else json.dumps(res))
