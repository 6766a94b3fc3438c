"""The job model shared by the CLI, batch and the server (rankmap.solver.job.model)."""

from __future__ import annotations

import networkx as nx
import pytest

from rankmap.solver import parallel_config
from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.job.model import megatron_sizes, resolve_traffic, usable_gpus
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


def test_resolve_job_defaults_values_and_precedence(cluster_file, tmp_path):
    """resolve_job: one job dict -> (graph, cfg, traffic, options), as `rankmap solve` and batch read it."""
    from rankmap.solver.job.model import JOB_DEFAULTS
    from rankmap.solver.job.resolve import resolve_job
    from rankmap.solver.types import SolveOptions, parse_constraint

    # job-file spellings: sizes as ASCII digits, one constraint as a string, traffic as a mapping
    job = {"cluster": str(cluster_file), "tp": "2", "pp": 2, "exclude_host": "node001",
           "constraint": "tp within host", "traffic": {"tp": "4e9", "dp": 1e9}}
    graph, cfg, traffic, options = resolve_job(job)
    assert graph.number_of_nodes() > 16
    assert cfg.world_size == 8  # the GPUs of node000: node001 is excluded
    assert (cfg.tp, cfg.pp, cfg.cp, cfg.ep, cfg.dp, cfg.order) == (2, 2, 1, 1, 2, "tp-cp-ep-dp-pp")
    assert dict(traffic) == {"tp": 4e9, "cp": 0.0, "ep": 0.0, "etp": 0.0, "dp": 1e9, "edp": 0.0, "pp": 0.0,
                             "embedding": 0.0}  # explicit bytes alone: the other classes 0
    assert options == SolveOptions(constraints=(parse_constraint("tp within host"),), exclude_hosts=("node001",))
    assert (options.mode, options.orders, options.launch_order, options.time_limit_seconds, options.seed) == (
        JOB_DEFAULTS["mode"], JOB_DEFAULTS["orders"], JOB_DEFAULTS["launch_order"], JOB_DEFAULTS["time_limit"],
        JOB_DEFAULTS["seed"]) == ("launcher", "default", "sorted", 30.0, 0)

    # given values (the command line's) win; a cluster ending in .yaml is a job file filling the rest
    job_file = tmp_path / "job.yaml"
    job_file.write_text(f"cluster: {cluster_file}\ntp: 8\nseed: 7\nmodel: gpt-24l-4096\nmode: free\n")
    resolved = resolve_job({}, given={"cluster": str(job_file), "tp": 4, "time_limit": 2.5})
    assert (resolved.cfg.world_size, resolved.cfg.tp, resolved.cfg.dp) == (16, 4, 4)
    assert (resolved.options.seed, resolved.options.mode, resolved.options.time_limit_seconds) == (7, "free", 2.5)
    assert resolved.job["cluster"] == str(cluster_file) and resolved.job["tp"] == 4
    assert dict(resolved.traffic) == dict(traffic_from_model(model_preset("gpt-24l-4096"), resolved.cfg))

    # Megatron-LM arguments fill the sizes they spell out
    meg = resolve_job({"cluster": str(cluster_file),
                       "megatron_args": "--num-layers 24 --hidden-size 4096 --num-attention-heads 32 --seq-length 2048 "
                                       "--tensor-model-parallel-size 4 --pipeline-model-parallel-size 2"})
    assert (meg.cfg.tp, meg.cfg.pp, meg.cfg.dp) == (4, 2, 2)

    with pytest.raises(InvalidArgumentError) as err:
        resolve_job({"cluster": str(cluster_file), "seed": 1.5})
    assert err.value.field == "seed"
    with pytest.raises(InvalidArgumentError, match="no cluster given"):
        resolve_job({"tp": 2})


def test_nccl_job_keys_reach_the_solve_options(cluster_file, tmp_path):
    """nccl_algo / nccl_rate / pxn / nccl_latency (issue 25): one NcclModel in SolveOptions.nccl, whatever the
    job came from (a job dict, a batch entry, flags given over a job file); unset keys are NCCL's defaults."""
    from rankmap.batch import prepare_job
    from rankmap.batch_input import job_from_entry
    from rankmap.solver import NcclModel
    from rankmap.solver.fabric.rates import DEFAULT_NCCL
    from rankmap.solver.job.model import JOB_DEFAULTS, JOB_KEYS
    from rankmap.solver.job.resolve import resolve_job
    from rankmap.solver.job.values import job_nccl, nccl_rates_from_value

    assert {"nccl_algo", "nccl_rate", "pxn", "nccl_latency"} <= set(JOB_KEYS)
    assert (JOB_DEFAULTS["nccl_algo"], JOB_DEFAULTS["pxn"], JOB_DEFAULTS["nccl_latency"]) == (
        DEFAULT_NCCL.algorithm, DEFAULT_NCCL.pxn, DEFAULT_NCCL.latency)
    assert job_nccl({}) is DEFAULT_NCCL
    assert resolve_job({"cluster": str(cluster_file)}).options.nccl == DEFAULT_NCCL
    want = NcclModel(algorithm="nvlstree", pxn=False, rates={"nic": 45.0, "nvlink": 20.0}, latency=False)
    for rate in ({"nic": 45, "nvlink": "20"}, "nic=45,nvlink=20", ["nic=45", "NVLINK=20"]):
        job = {"cluster": str(cluster_file), "nccl_algo": "NVLSTree", "nccl_rate": rate, "pxn": False,
               "nccl_latency": False}
        assert resolve_job(job).options.nccl == want, rate
        # a batch entry is read the same way (spellings with dashes too)
        entry = {"name": "x", "cluster": str(cluster_file), "nccl-algo": "nvlstree", "nccl-rate": rate, "pxn": False,
                 "nccl-latency": False}
        name, normalized = job_from_entry(entry, str(tmp_path), "entry")
        assert prepare_job(normalized)[3].nccl == want
    # flags (already typed values) win over the job's, key by key; nccl_rate as a whole
    given = resolve_job({"cluster": str(cluster_file), "nccl_algo": "tree", "nccl_rate": {"nic": 45}, "pxn": False},
                        given={"nccl_algo": "ring", "nccl_rate": ["nvlink=10"]})
    assert given.options.nccl == NcclModel(algorithm="ring", pxn=False, rates={"nvlink": 10.0})
    assert nccl_rates_from_value(None) == {} and nccl_rates_from_value(" nic = 45 , nvlink=1e1 ") == {
        "nic": 45.0, "nvlink": 10.0}
    with pytest.raises(InvalidArgumentError) as err:
        resolve_job({"cluster": str(cluster_file), "nccl_rate": {"nic": -1}})
    assert err.value.field == "nccl_rate.nic"
    with pytest.raises(InvalidArgumentError) as err:
        resolve_job({"cluster": str(cluster_file), "nccl_algo": "collnet"})
    assert err.value.field == "nccl_algo" and "'collnet'" in err.value.message
