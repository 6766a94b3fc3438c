"""ParallelSizes (issue 14 item 3): the one spelling of the eight parallel-size arguments, as the
catalogue, the wire and both clients use it."""

from __future__ import annotations

import asyncio
import inspect

import numpy as np
import pytest

from rankmap import wire
from rankmap.client import AsyncRankmapClient, ParallelSizes, RankmapClient
from rankmap.solver import PARALLEL_SIZE_KEYS, InvalidArgumentError, megatron_groups, parallel_config
from rankmap.solver.fabric.builders import fat_tree_cluster


def test_fields_are_the_size_keys():
    assert tuple(ParallelSizes.__dataclass_fields__) == PARALLEL_SIZE_KEYS
    assert wire.SIZE_FIELDS == PARALLEL_SIZE_KEYS


def test_to_config_takes_parallel_configs_defaults():
    assert ParallelSizes(tp=2, pp=2).to_config(world_size=16) == parallel_config(16, tp=2, pp=2)
    cfg = parallel_config(32, tp=2, cp=2, ep=2, etp=1, pp=2, num_distributed_optimizer_instances=2,
                          hierarchical_context_parallel_sizes=[2, 1])
    assert ParallelSizes.of(cfg).to_config() == cfg
    assert ParallelSizes(hierarchical_context_parallel_sizes=[2, 2]).hierarchical_context_parallel_sizes == (2, 2)
    assert ParallelSizes(hierarchical_context_parallel_sizes=[]).hierarchical_context_parallel_sizes is None
    with pytest.raises(InvalidArgumentError) as err:
        ParallelSizes(tp=2).to_config()
    assert err.value.field == "world_size"
    with pytest.raises(InvalidArgumentError) as err:
        ParallelSizes(world_size=6, tp=4).to_config()
    assert err.value.field == "world_size"


def test_from_mapping_and_as_kwargs():
    sizes = ParallelSizes.from_mapping({"tp": 2}, pp=4, cp=None)
    assert sizes == ParallelSizes(tp=2, pp=4)
    assert sizes.as_kwargs() == {"tp": 2, "pp": 4}
    assert ParallelSizes.from_mapping(sizes, tp=2) == sizes
    with pytest.raises(InvalidArgumentError, match="tp is given twice"):
        ParallelSizes.from_mapping(sizes, tp=8)
    with pytest.raises(TypeError, match="unknown parallel size 'tpp'"):
        ParallelSizes.from_mapping(tpp=2)


def test_requests_are_the_same_from_keywords_or_sizes():
    g = fat_tree_cluster(2, 4)
    sizes = ParallelSizes(tp=2, pp=2, etp=1, hierarchical_context_parallel_sizes=[1])
    assert wire.solve_request(g, sizes=sizes) == wire.solve_request(g, **sizes.as_kwargs())
    assert (wire.evaluate_request(g, list(g)[:8], sizes=sizes)
            == wire.evaluate_request(g, list(g)[:8], tp=2, pp=2, etp=1, hierarchical_context_parallel_sizes=[1]))
    assert wire.get_groups_request(8, sizes=sizes) == wire.get_groups_request(sizes=sizes.replace(world_size=8))
    assert wire.sizes_from_proto(wire.sizes_to_proto(sizes)) == sizes
    with pytest.raises(InvalidArgumentError) as err:
        wire.solve_request(g, tp=2.5)
    assert err.value.field == "tp"


def test_client_methods_are_one_implementation():
    for name in ("solve", "evaluate", "get_groups", "import_cluster", "solve_config", "health"):
        sync, aio = getattr(RankmapClient, name), getattr(AsyncRankmapClient, name)
        assert inspect.signature(sync) == inspect.signature(aio)
        assert sync.__doc__ == aio.__doc__ and sync.__doc__
        assert inspect.iscoroutinefunction(aio) and not inspect.iscoroutinefunction(sync)
    assert "sizes" in inspect.signature(RankmapClient.solve).parameters


def test_clients_take_sizes():
    from rankmap.server.service import serve

    server = serve(host="127.0.0.1", port=0, workers=1, max_queued=4)
    try:
        want = megatron_groups(parallel_config(16, tp=2, pp=2))
        with RankmapClient(server.address, timeout=60) as client:
            got = client.get_groups(sizes=ParallelSizes(world_size=16, tp=2, pp=2))
            assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in want)
            with pytest.raises(TypeError):
                client.get_groups(16, tpp=2)

        async def run():
            async with AsyncRankmapClient(server.address, timeout=60) as client:
                return await client.get_groups(16, sizes=ParallelSizes(tp=2), pp=2)

        got = asyncio.run(run())
        assert all(np.array_equal(got[k], want[k]) for k in want)
    finally:
        server.stop(grace=None).wait()


def test_job_model_reads_sizes():
    import argparse

    from rankmap.cli import config_from_args
    from rankmap.solver.job.model import JOB_KEYS, JOB_SIZE_KEYS, job_sizes

    assert set(JOB_SIZE_KEYS) <= set(JOB_KEYS)
    job = {"tp": 2, "pp": 2, "cp": 2, "hierarchical_cp_sizes": [2, 1], "traffic": "tp=1GB"}
    assert job_sizes(job) == ParallelSizes(tp=2, pp=2, cp=2, hierarchical_context_parallel_sizes=(2, 1))
    args = argparse.Namespace(**{k: None for k in JOB_SIZE_KEYS}, order=None)
    args.tp, args.etp, args.world_size = 2, 1, 8
    assert config_from_args(args) == parallel_config(8, tp=2, etp=1)
    assert config_from_args(args, world_size=16, order="tp-cp-ep-pp-dp") == parallel_config(
        16, tp=2, etp=1, order="tp-cp-ep-pp-dp")
