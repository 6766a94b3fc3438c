"""The job model shared by the CLI, batch and the server (rankmap.solver.job)."""

from __future__ import annotations

import networkx as nx
import pytest

from rankmap.solver import parallel_config
from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.job import megatron_sizes, resolve_traffic, usable_gpus
from rankmap.solver.traffic import DEFAULT_MODEL, model_preset, parse_megatron_args, traffic_from_model


def test_usable_gpus_counts_gpus_not_excluded():
    g = nx.Graph()
    for h in ("a", "b"):
        for i in range(4):
            g.add_node(f"{h}{i}", host=h)  # kind absent: a GPU (DESIGN §2)
    g.add_node("sw", kind="switch")
    g.add_node("lonely")  # no host: a host of its own
    assert usable_gpus(g) == 9
    assert usable_gpus(g, exclude_hosts=["a"]) == 5
    assert usable_gpus(g, exclude_devices=["b0", "lonely"], exclude_hosts=["a"]) == 3


def test_resolve_traffic_rule():
    """DESIGN §3: nothing → the seed's GPT; explicit alone → exactly those bytes; a model (or an
    override) → its payloads with the explicit classes replaced."""
    cfg = parallel_config(16, tp=2, pp=4)
    assert dict(resolve_traffic(cfg)) == dict(traffic_from_model(DEFAULT_MODEL, cfg))
    only = resolve_traffic(cfg, {"dp": 1e9})
    assert only["dp"] == 1e9 and sum(only.values()) == 1e9 and len(only) == 8
    assert dict(resolve_traffic(cfg, {"dp": 1e9}, fill=False)) == {"dp": 1e9}
    model = model_preset("llama3-8b", global_batch_size=None, num_micro_batches=4)
    mixed = resolve_traffic(cfg, {"dp": 1e9}, model=model)
    expect = traffic_from_model(model, cfg)
    assert mixed["dp"] == 1e9 and mixed["tp"] == expect["tp"] and mixed["pp"] == expect["pp"]
    # an override alone applies to the default model
    longer = resolve_traffic(cfg, overrides={"seq_length": 4096, "micro_batch_size": None})
    assert longer["pp"] == 2 * traffic_from_model(DEFAULT_MODEL, cfg)["pp"]


def test_megatron_sizes_fill_and_conflict():
    meg = parse_megatron_args("--num-layers 8 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 "
                              "--tensor-model-parallel-size 2")

    def conflict(key, given, value):
        return InvalidArgumentError(f"{key}: {given} vs {value}", key)

    assert megatron_sizes(meg, {"tp": None, "pp": 2}, conflict) == {"tp": 2, "pp": 2}
    assert megatron_sizes(meg, {"tp": 2}, conflict) == {"tp": 2}
    with pytest.raises(InvalidArgumentError, match="tp: 4 vs 2"):
        megatron_sizes(meg, {"tp": 4}, conflict)
    with pytest.raises(InvalidArgumentError, match="not both"):
        resolve_traffic(parallel_config(2, tp=2), model=DEFAULT_MODEL, megatron=meg)
