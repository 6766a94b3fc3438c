"""Issue 10's cases: hand-derived volumes for dense, sequence-parallel, interleaved, CP and MoE
configurations, the distributed optimizer, and Megatron-LM's own arguments as input.

Every expected number is derived in the test's docstring or comments from the paper or the
Megatron-core / TransformerEngine function it cites, not read back from the code.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rankmap.cli import main
from rankmap.solver import parallel_config
from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.job.model import resolve_traffic
from rankmap.solver.cost.timemodel import part_flows
from rankmap.solver.traffic import (
    bytes_sent_per_rank,
    count_parameters,
    model_preset,
    parse_megatron_args,
    traffic_from_model,
    with_overrides,
)

GB = 1e9

#: Llama-3-70B as in the issue: 1,024 GPUs, tp 8, pp 4 (dp 32), seq 8192, micro-batch 1,
#: global batch 1024 (m = 1024 / (1 * 32) = 32 micro-batches), bf16, no sequence parallel,
#: Megatron's default optimizer (no --use-distributed-optimizer).
LLAMA70 = dict(global_batch_size=1024, sequence_parallel=False, use_distributed_optimizer=False)
CFG70 = parallel_config(1024, tp=8, pp=4)
BSH = 1 * 8192 * 8192  # b*s*h elements of one micro-batch's hidden states = 67,108,864


def _llama70(**kw):
    return model_preset("llama3-70b", **{**LLAMA70, **kw})


def test_llama3_70b_tensor_parallel_sends_601_gb_per_rank():
    """Narayanan et al. SC'21 §3.3: per layer and micro-batch, 2 all-reduces forward and 2
    backward of b·s·h elements; a ring all-reduce sends 2(t−1)/t of its payload per rank, so
    8·bsh·(t−1)/t elements per layer = 7·bsh for t = 8, in bf16 2 bytes each:
    7 · 67,108,864 · 2 = 939,524,096 B per layer per micro-batch; 80/4 = 20 layers per stage and
    32 micro-batches: 939,524,096 · 20 · 32 = 601,295,421,440 B = 601.3 GB."""
    t = traffic_from_model(_llama70(), CFG70)
    sent = bytes_sent_per_rank(t, CFG70)
    assert sent["tp"] == 8 * BSH * 7 / 8 * 2 * 20 * 32 == 601_295_421_440
    assert round(sent["tp"] / GB, 1) == 601.3
    # the payload S: 4 all-reduces of bsh·2 bytes per layer: 4 · 134,217,728 · 20 · 32
    assert t["tp"] == 4 * BSH * 2 * 20 * 32 == 343_597_383_680
    assert [c.kind for c in t.collectives["tp"]] == ["all_reduce"]


def test_llama3_70b_pipeline_and_data_parallel_without_options():
    """pp: 1F1B sends one micro-batch's activations b·s·h·2 B = 134,217,728 B forward and its
    gradient back (Megatron-core p2p_communication send_forward/send_backward), 32 micro-batches:
    S = 4,294,967,296 B; an inner stage sends S to each neighbour: 8,589,934,592 B.
    dp: Megatron's default is an all-reduce of the gradients, in fp32 for bf16 training
    (validate_args sets accumulate_allreduce_grads_in_fp32), of the P/(tp·pp) parameters one
    rank holds: P = 70,553,706,496 (Llama-3-70B, 128,256-token vocabulary, untied), 4 bytes ·
    P / 32 = 8,819,213,312 B; a ring all-reduce over dp = 32 sends 2·31/32 of it."""
    t = traffic_from_model(_llama70(), CFG70)
    assert count_parameters(_llama70()).total == 70_553_706_496
    assert t["pp"] == 32 * BSH * 2 == 4_294_967_296
    sent = bytes_sent_per_rank(t, CFG70)
    assert sent["pp"] == 2 * 4_294_967_296
    assert t["dp"] == 4 * 70_553_706_496 / 32 == 8_819_213_312
    assert sent["dp"] == pytest.approx(2 * 31 / 32 * 8_819_213_312, rel=1e-12)
    assert t["embedding"] == 0  # untied embeddings: no embedding all-reduce


def test_sequence_parallel_changes_tp_and_pp():
    """Korthikanti et al. 2022 §4.2.2 with Megatron-core's weight-gradient re-gather: per layer
    and micro-batch 6 all-gathers + 4 reduce-scatters of b·s·h (DESIGN §3); each sends (t−1)/t of
    its payload per rank: 10 · 7/8 · bsh · 2 B = 1,174,405,120 B per layer, · 20 · 32 =
    751,619,276,800 B: 25% more than the 601.3 GB of the all-reduces.
    pp: activations are split along the sequence across tp, b·(s/t)·h·2 B = 16,777,216 B per
    micro-batch: 32 · 16,777,216 = 536,870,912 B, 1/8 of the no-SP 4.29 GB."""
    t = traffic_from_model(_llama70(sequence_parallel=True), CFG70)
    sent = bytes_sent_per_rank(t, CFG70)
    assert sent["tp"] == pytest.approx(10 * 7 / 8 * BSH * 2 * 20 * 32, rel=1e-12)
    assert sent["tp"] == pytest.approx(751_619_276_800, rel=1e-12)
    assert sent["tp"] / 601_295_421_440 == pytest.approx(1.25, rel=1e-12)
    assert [c.kind for c in t.collectives["tp"]] == ["all_gather"]
    assert t["pp"] == 32 * BSH * 2 / 8 == 536_870_912


def test_distributed_optimizer_changes_dp():
    """With --use-distributed-optimizer (Megatron-core distrib_optimizer.py) the gradients are
    reduce-scattered (fp32, 4 B) and the bf16 parameters all-gathered (2 B): each a ring that
    sends (n−1)/n of its payload, together (4 + 2) · P/32 · 31/32 = 12,815,419,344 B per rank,
    against 2 · 31/32 · 4 · P/32 without it: the plain all-reduce sends 8/6 = 1.33× as much.
    --grad-reduce-in-bf16 reduces in 2 bytes: (2 + 2) · P/32 · 31/32."""
    P_rank = 70_553_706_496 / 32
    plain = bytes_sent_per_rank(traffic_from_model(_llama70(), CFG70), CFG70)["dp"]
    dist_t = traffic_from_model(_llama70(use_distributed_optimizer=True), CFG70)
    dist = bytes_sent_per_rank(dist_t, CFG70)["dp"]
    assert dist_t["dp"] == 6 * P_rank
    assert dist == pytest.approx(6 * P_rank * 31 / 32, rel=1e-12) == pytest.approx(12_815_419_344, rel=1e-12)
    assert plain / dist == pytest.approx(8 / 6, rel=1e-12)
    bf16 = traffic_from_model(_llama70(use_distributed_optimizer=True, grad_reduce_in_bf16=True), CFG70)
    assert bf16["dp"] == 4 * P_rank


def test_distributed_optimizer_instances_split_the_ring():
    """num_distributed_optimizer_instances N = 2 (parallel_state's intra/inter instance groups):
    reduce-scatter + all-gather inside each instance of dp/N = 16 ranks, then an all-reduce of
    the fp32 gradient shard (4 · P_rank / 16 B) across the 2 instances, between ranks 16 apart
    in the dp group."""
    P_rank = 70_553_706_496 / 32
    cfg = parallel_config(1024, tp=8, pp=4, num_distributed_optimizer_instances=2)
    t = traffic_from_model(_llama70(use_distributed_optimizer=True), cfg)
    inner, outer = t.collectives["dp"]
    assert (inner.kind, inner.size, inner.payload_bytes) == ("all_gather", 16, 6 * P_rank)
    assert (outer.kind, outer.size, outer.stride) == ("all_reduce", 2, 16)
    assert outer.payload_bytes == 4 * P_rank / 16
    sent = bytes_sent_per_rank(t, cfg)["dp"]
    assert sent == pytest.approx(15 / 16 * 6 * P_rank + 2 * 1 / 2 * 4 * P_rank / 16, rel=1e-12)


def test_interleaving_v4_four_times_the_pipeline_bytes_and_a_wrap_flow():
    """Virtual pipeline v = 4 (Narayanan et al. §2.2.2): each micro-batch crosses every stage
    boundary once per model chunk, so 4× the bytes; the stage after the last is the first
    ((rank + 1) mod pp in p2p_communication), which receives 3 of the 4 chunks' outputs:
    the wrap flow carries (v−1)/v = 3/4 of S.  Flows of one pp group 0-1-2-3: forward and
    backward between neighbours (6) and the wrap pair 3→0, 0→3."""
    plain = traffic_from_model(_llama70(), CFG70)
    inter = traffic_from_model(_llama70(virtual_pipeline_model_parallel_size=4), CFG70)
    assert inter["pp"] == 4 * plain["pp"]
    (part,) = inter.collectives["pp"]
    assert part.wrap == 0.75
    flows = list(part_flows(part, np.array([[0, 1, 2, 3]])))
    pairs = {(int(s), int(d)): b for src, dst, b in flows for s, d in zip(src, dst)}
    assert {k: pairs[k] for k in [(0, 1), (1, 2), (2, 3), (1, 0), (2, 1), (3, 2)]} == dict.fromkeys(
        [(0, 1), (1, 2), (2, 3), (1, 0), (2, 1), (3, 2)], inter["pp"])
    assert pairs[(3, 0)] == pairs[(0, 3)] == 0.75 * inter["pp"]
    assert len(pairs) == 8


def test_megatron_num_layers_per_virtual_stage_uses_the_pp_size():
    """--num-layers-per-virtual-pipeline-stage 5 with 80 layers and pp 4: v = 80/4/5 = 4
    (Megatron-LM validate_args), also when pp comes from rankmap's flags."""
    meg = parse_megatron_args("--num-layers 80 --hidden-size 8192 --num-attention-heads 64 --seq-length 8192 "
                              "--num-layers-per-virtual-pipeline-stage 5")
    assert meg.model_for(8, 4).virtual_pipeline_model_parallel_size == 4
    assert meg.model_for(8, 2).virtual_pipeline_model_parallel_size == 8
    with pytest.raises(InvalidArgumentError, match="80 is not divisible by the pipeline size 3"):
        meg.model_for(8, 3)
    with pytest.raises(InvalidArgumentError, match="does not divide"):
        meg.model_for(8, 20)  # 80 / 20 = 4 layers per stage: not a multiple of 5


def test_context_parallel_p2p_ring_attention():
    """cp_comm_type p2p (TransformerEngine AttnFuncWithCPAndKVP2P): per layer and micro-batch
    the KV chunk b·(s/cp)·2k·d·e goes to the ring successor cp−1 times forward and KV + dKV
    cp−1 times each backward: 3(cp−1) sends.  Llama-3-8B, cp 4, tp 1, 8 KV heads of 128:
    KV = 1 · 2048 · 2·8·128 · 2 B = 8,388,608 B; 3 · 3 · KV = 75,497,472 B per layer; 32 layers,
    m = 4 micro-batches: 9,663,676,416 B, all of it to one neighbour (shape ring_p2p)."""
    cfg = parallel_config(64, cp=4)
    model = model_preset("llama3-8b", num_micro_batches=4, global_batch_size=None)
    t = traffic_from_model(model, cfg)
    KV = 1 * (8192 // 4) * 2 * 8 * 128 * 2
    assert KV == 8_388_608
    assert t["cp"] == 4 * 32 * 3 * 3 * KV == 9_663_676_416
    assert [c.kind for c in t.collectives["cp"]] == ["ring_p2p"]
    assert bytes_sent_per_rank(t, cfg)["cp"] == t["cp"]
    # all_gather: (3 + 0) ring all-gathers / reduce-scatters of the whole sequence's KV (cp · KV)
    ag = traffic_from_model(with_overrides(model, cp_comm_type="all_gather"), cfg)
    assert ag["cp"] == 4 * 32 * 3 * 4 * KV
    assert bytes_sent_per_rank(ag, cfg)["cp"] == pytest.approx(3 / 4 * ag["cp"], rel=1e-12)


def test_mixtral_expert_parallel_all_to_all():
    """Mixtral 8x7B, ep 8, tp 1, top-2, all-to-all dispatcher (Megatron-core
    MoEAlltoAllTokenDispatcher): per MoE layer and micro-batch the K = 2 copies of the rank's
    s·h = 4096 · 4096 token elements go out in the dispatch and come back in the combine, forward
    and backward: 4 all-to-alls of K·Y·2 B = 67,108,864 B; payload 4 · 67,108,864 = 268,435,456 B
    per layer; every layer is MoE, pp 4 → 8 layers per stage; m = 2: 4,294,967,296 B.  An
    all-to-all sends (n−1)/n of it: 7/8.  No dense-TP MLP traffic since tp = 1."""
    cfg = parallel_config(64, pp=4, ep=8)  # dp = 16, edp = 2
    model = model_preset("mixtral-8x7b", num_micro_batches=2, global_batch_size=None)
    t = traffic_from_model(model, cfg)
    Y = 4096 * 4096
    assert t["ep"] == 2 * 8 * 4 * 2 * Y * 2 == 4_294_967_296
    assert bytes_sent_per_rank(t, cfg)["ep"] == pytest.approx(7 / 8 * t["ep"], rel=1e-12)
    assert t["tp"] == 0 and t["etp"] == 0


def test_moe_sequence_parallel_divides_tokens_and_etp_replaces_dense_tp_mlp():
    """With tp 2 and sequence parallel each rank dispatches s/tp tokens: Y halves.  With etp = 1
    the MoE layers' MLP is not tensor-parallel, so tp carries one half-layer (attention) per MoE
    layer instead of two: Mixtral-like, the tp payload halves against etp = tp."""
    model = model_preset("mixtral-8x7b", num_micro_batches=2, global_batch_size=None)
    one = traffic_from_model(model, parallel_config(64, pp=4, ep=8))
    sp = traffic_from_model(model, parallel_config(128, tp=2, pp=4, ep=8, etp=1))
    assert sp["ep"] == one["ep"] / 2
    # tp per MoE layer: attention only (1 half-layer); per half 5 collectives of X·2 B (SP, r=0)
    X = 4096 * 4096
    assert sp["tp"] == 2 * 8 * 1 * X * 5 * 2


def test_deepseek_v3_fp8_dispatch_and_node_limited_routing():
    """DeepSeek-V3 report §2.1.2 / §3.2.2: tokens go to at most M = 4 of the G = 8 node groups
    (one copy per node, forwarded over NVLink inside it: the flex dispatcher), dispatch in FP8
    (1 byte) and combine in BF16 (2 bytes).  Per MoE layer and micro-batch an all-to-all of
    M·Y between the 8 groups and of K·Y = 8·Y inside each group, each carrying
    (1 + 2) forward + 2·2 backward = 7 bytes per element (bf16 both ways would be 8).
    ep 64 over 8 groups of 8; Y = s·h = 4096 · 7168 (tp 1); 58 MoE layers, pp 16 →
    58/16 per stage; m = 1."""
    cfg = parallel_config(1024, pp=16, ep=64)
    model = model_preset("deepseek-v3", num_micro_batches=1, global_batch_size=None)
    t = traffic_from_model(model, cfg)
    between, inside = t.collectives["ep"]
    Y = 4096 * 7168
    L = 58 / 16
    assert (between.kind, between.size, between.stride) == ("all_to_all", 8, 8)
    assert between.payload_bytes == pytest.approx(L * 4 * Y * 7, rel=1e-12)
    assert (inside.size, inside.stride) == (8, 1)
    assert inside.payload_bytes == pytest.approx(L * 8 * Y * 7, rel=1e-12)
    bf16 = traffic_from_model(with_overrides(model, moe_fp8_dispatch=False), cfg)
    assert bf16["ep"] / t["ep"] == pytest.approx(8 / 7, rel=1e-12)


def test_fp8_touches_only_the_forward_tp_all_gathers():
    """FP8 GEMMs (TransformerEngine) all-gather their FP8-cast inputs: the forward all-gathers of
    sequence-parallel tp drop to 1 byte; reduce-scatters, backward collectives and the pipeline
    activations stay bf16.  Per half-layer: 1 + 2 (forward AG, RS) + 3 · 2 (backward) = 9 bytes
    per element instead of 10; pp unchanged."""
    bf16 = traffic_from_model(_llama70(sequence_parallel=True), CFG70)
    fp8 = traffic_from_model(_llama70(sequence_parallel=True, fp8="e4m3"), CFG70)
    assert fp8["tp"] / bf16["tp"] == pytest.approx(9 / 10, rel=1e-12)
    assert fp8["pp"] == bf16["pp"]
    assert fp8["dp"] == bf16["dp"]


def test_recompute_full_repeats_forward_collectives():
    """--recompute-granularity full (uniform): every layer's forward runs twice, so its forward
    all-reduces twice: per half-layer 3 all-reduces instead of 2 (tp × 1.5); selective
    recompute (core attention only) leaves tp alone."""
    base = traffic_from_model(_llama70(), CFG70)
    full = traffic_from_model(_llama70(recompute_granularity="full"), CFG70)
    sel = traffic_from_model(_llama70(recompute_granularity="selective"), CFG70)
    assert full["tp"] / base["tp"] == pytest.approx(1.5, rel=1e-12)
    assert sel["tp"] == base["tp"]


# --------------------------------------------------------------------------- Megatron arguments

LLAMA70_ARGS = (
    "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 "
    "--num-attention-heads 64 --group-query-attention --num-query-groups 8 --seq-length 8192 "
    "--max-position-embeddings 8192 --micro-batch-size 1 --global-batch-size 1024 --bf16 --swiglu "
    "--vocab-size 128256 --untie-embeddings-and-output-weights --normalization RMSNorm "
    "--position-embedding-type rope --disable-bias-linear --tensor-model-parallel-size 8 "
    "--pipeline-model-parallel-size 4 --lr 1.5e-4 --train-iters 1000 --data-path /data/x_text_document"
)


def test_megatron_args_read_model_sizes_and_ignore_training_flags():
    """The Llama-3-70B command line: the model (GQA 8 groups, SwiGLU, RMSNorm, untied), the
    sizes (tp 8, pp 4), training flags ignored; Megatron pads the vocabulary to a multiple of
    128 · tp = 1024: 128,256 → 129,024 (_vocab_size_with_padding)."""
    meg = parse_megatron_args(LLAMA70_ARGS)
    assert meg.sizes == {"tp": 8, "pp": 4}
    assert set(meg.ignored) >= {"--lr", "--train-iters", "--data-path"}
    m = meg.model
    assert (m.num_layers, m.hidden_size, m.num_query_groups, m.ffn_hidden_size) == (80, 8192, 8, 28672)
    assert m.vocab_size == 129_024 and m.untie_embeddings and m.swiglu and not m.add_bias_linear
    assert meg.model_for(4, 4).vocab_size == 128_512  # multiple of 512


def test_rankmap_traffic_with_megatron_args_gives_the_hand_derived_tp(capsys):
    assert main(["traffic", "--world-size", "1024", "--megatron-args", LLAMA70_ARGS]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["sizes"]["tp"] == 8 and doc["sizes"]["pp"] == 4 and doc["sizes"]["dp"] == 32
    assert doc["classes"]["tp"]["bytes_sent_per_rank"] == 601_295_421_440


def test_model_only_megatron_args_take_sizes_from_flags(capsys):
    """A model-only argument string stands in for a model file: --tp/--pp give the sizes."""
    model_only = LLAMA70_ARGS.replace("--tensor-model-parallel-size 8 ", "").replace(
        "--pipeline-model-parallel-size 4 ", "")
    assert main(["traffic", "--world-size", "1024", "--tp", "8", "--pp", "4", "--megatron-args", model_only]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["classes"]["tp"]["bytes_sent_per_rank"] == 601_295_421_440


@pytest.mark.parametrize("argv, needle", [
    (["--tp", "4"], "--tp 4 disagrees with --tensor-model-parallel-size 8"),
    (["--megatron-extra", "--hidden-size x"], "--hidden-size"),
])
def test_megatron_args_errors_exit_2_one_line(capsys, argv, needle):
    args = LLAMA70_ARGS
    extra = []
    if argv[0] == "--megatron-extra":
        args = args.replace("--hidden-size 8192", argv[1])
    else:
        extra = argv
    assert main(["traffic", "--world-size", "1024", *extra, "--megatron-args", args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and needle in err and err.count("\n") == 1


def test_megatron_args_malformed_values_name_the_flag():
    base = "--num-layers 8 --hidden-size 512 --num-attention-heads 8 --seq-length 1024"
    with pytest.raises(InvalidArgumentError, match="--micro-batch-size"):
        parse_megatron_args(base + " --micro-batch-size two")
    with pytest.raises(InvalidArgumentError, match="--cp-comm-type"):
        parse_megatron_args(base + " --cp-comm-type ring")
    # given twice: the last value wins, as Megatron-LM's argparse does
    assert parse_megatron_args(base + " --num-layers 9").model.num_layers == 9
    # num_layers must divide by pp (Megatron-LM asserts it) unless the split is uneven
    with pytest.raises(InvalidArgumentError, match="--num-layers 9 is not divisible by the pipeline size 2"):
        parse_megatron_args(base + " --num-layers 9").model_for(1, 2)
    uneven = parse_megatron_args(base + " --num-layers 9 --decoder-first-pipeline-num-layers 4")
    assert uneven.model_for(1, 2).num_layers == 9


def test_megatron_tp_pp_dp_mapping_sets_the_order_and_misspellings_warn(capsys):
    """--use-tp-pp-dp-mapping: Megatron-LM builds its groups in order tp-cp-ep-pp-dp
    (megatron/training/initialize.py), so that is the order rankmap searches and reports;
    a misspelt flag that rankmap would read is named on stderr."""
    meg = parse_megatron_args(SMALL_ARGS + " --use-tp-pp-dp-mapping")
    assert meg.order == "tp-cp-ep-pp-dp"
    assert main(["solve", HGX2, "--megatron-args", SMALL_ARGS + " --use-tp-pp-dp-mapping --sequence-paralel",
                 "--time-limit", "5"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    # the order searched is Megatron's, and so is the baseline's: without rankmap this job runs in it
    assert doc["orders_searched"] == ["tp-cp-ep-pp-dp"]
    assert doc["baseline"]["order"] == "tp-cp-ep-pp-dp"
    assert "--sequence-paralel (did you mean --sequence-parallel?)" in err
    with pytest.raises(InvalidArgumentError, match="--seq-length"):
        parse_megatron_args("--num-layers 8 --hidden-size 512 --num-attention-heads 8")


# --------------------------------------------------------------------------- solve / evaluate / gRPC

#: A small real-shaped recipe for 16 GPUs: 2 HGX A100 hosts (examples/clusters/hgx-a100-2nodes.json).
SMALL_ARGS = ("--num-layers 16 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --micro-batch-size 1 "
              "--global-batch-size 16 --bf16 --sequence-parallel --tensor-model-parallel-size 4 "
              "--pipeline-model-parallel-size 2 --use-distributed-optimizer --lr 3e-4")
HGX2 = str(Path(__file__).resolve().parents[1] / "examples" / "clusters" / "hgx-a100-2nodes.json")


def _expected_small():
    meg = parse_megatron_args(SMALL_ARGS)
    cfg = parallel_config(16, tp=4, pp=2)
    return cfg, traffic_from_model(meg.model_for(4, 2), cfg)


def test_solve_and_evaluate_take_megatron_args(capsys):
    """rankmap solve reads sizes and traffic from the Megatron arguments; the predicted time of
    the chosen layout equals evaluate() of it with the same traffic, and the payloads in the
    result are the model's: pp with sequence parallel = m · b(s/t)h · 2 B = 8 · 4096·4096/4 · 2."""
    assert main(["solve", HGX2, "--megatron-args", SMALL_ARGS, "--time-limit", "10"]) == 0
    doc = json.loads(capsys.readouterr().out)
    cfg, traffic = _expected_small()
    assert (doc["sizes"]["tp"], doc["sizes"]["pp"], doc["sizes"]["dp"]) == (4, 2, 2)
    assert traffic["pp"] == 8 * 4096 * 4096 / 4 * 2
    assert doc["cost"]["classes"]["pp"]["payload_bytes"] == traffic["pp"]
    assert doc["cost"]["classes"]["tp"]["payload_bytes"] == traffic["tp"]
    from rankmap.solver import evaluate
    from rankmap.solver.formats import load_graph

    cost = evaluate(load_graph(HGX2), cfg.with_order(doc["order"]), doc["assignment"], traffic)
    assert cost.total_seconds == pytest.approx(doc["cost"]["total_seconds"], rel=1e-12)


def test_job_file_megatron_args_key(capsys, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(f"cluster: {HGX2}\nmegatron_args: \"{SMALL_ARGS}\"\ntime_limit: 10\n")
    assert main(["solve", str(job)]) == 0
    doc = json.loads(capsys.readouterr().out)
    _, traffic = _expected_small()
    assert doc["cost"]["classes"]["tp"]["payload_bytes"] == traffic["tp"]


def test_grpc_traffic_megatron_args():
    """Traffic.megatron_args over gRPC gives the in-process traffic; a size that disagrees is
    INVALID_ARGUMENT naming the field."""
    from rankmap.client import RankmapClient
    from rankmap import wire
    from rankmap.server.service import serve
    from rankmap.solver.formats import load_graph

    cfg, traffic = _expected_small()
    assert wire.traffic_from_proto(wire.traffic_to_proto(None, SMALL_ARGS), cfg) == traffic
    srv = serve(host="127.0.0.1", port=0, workers=1, max_queued=4)
    try:
        with RankmapClient(srv.address, timeout=60) as c:
            from rankmap.solver import cluster_from_graph

            g = load_graph(HGX2)
            devices = list(cluster_from_graph(g).devices)
            res = c.evaluate(g, devices, tp=4, pp=2, model=SMALL_ARGS)
            assert res.classes["tp"].payload_bytes == traffic["tp"]
            with pytest.raises(InvalidArgumentError) as err:
                c.evaluate(g, devices, tp=2, pp=2, model=SMALL_ARGS)
            assert "traffic.megatron_args" in str(err.value) or err.value.field == "traffic.megatron_args"
            assert "sizes.tp=2 disagrees with tp=4" in str(err.value)
            # sizes left out of the request come from the arguments (tp 4, pp 2), as on the CLI
            res = c.evaluate(g, devices, model=SMALL_ARGS)
            assert res.classes["tp"].payload_bytes == traffic["tp"]
            # --use-tp-pp-dp-mapping: searched and baseline order are Megatron's, as on the CLI
            sol = c.solve(g, model=SMALL_ARGS + " --use-tp-pp-dp-mapping", time_limit_seconds=5)
            assert sol.order == "tp-cp-ep-pp-dp" and sol.baseline.order == "tp-cp-ep-pp-dp"
    finally:
        srv.stop(grace=None).wait(10)


def _in_process_and_on_a_server(argv, capsys):
    """The JSON documents of ``rankmap ARGV`` in process and with ``--server`` (a local one-worker server)."""
    from rankmap.server.service import serve

    assert main(argv) == 0
    local = json.loads(capsys.readouterr().out)
    srv = serve(host="127.0.0.1", port=0, workers=1, max_queued=4)
    try:
        assert main(argv + ["--server", srv.address]) == 0
        remote = json.loads(capsys.readouterr().out)
    finally:
        srv.stop(grace=None).wait(10)
    return local, remote


def test_cli_server_solve_equals_in_process_for_model_shapes(capsys):
    """`rankmap solve --server` must send the model, not the bytes: with sequence parallelism
    and an interleaved pipeline the shapes (all-gathers, the wrap flow) decide the times, and the
    server must predict exactly what the in-process solve predicts."""
    args = SMALL_ARGS.replace("--pipeline-model-parallel-size 2", "--pipeline-model-parallel-size 2 "
                              "--num-layers-per-virtual-pipeline-stage 4")
    argv = ["solve", HGX2, "--megatron-args", args, "--time-limit", "10"]
    local, remote = _in_process_and_on_a_server(argv, capsys)
    assert remote["cost"]["total_seconds"] == pytest.approx(local["cost"]["total_seconds"], rel=1e-12)
    for c in ("tp", "pp", "dp"):
        assert remote["cost"]["classes"][c]["bytes_per_rank"] == local["cost"]["classes"][c]["bytes_per_rank"]
    assert remote["assignment"] == local["assignment"] and remote["order"] == local["order"]


def test_cli_server_evaluate_equals_in_process_for_model_shapes(capsys, tmp_path):
    """`rankmap evaluate --server` sends the model too (sequence parallel, interleaved pipeline,
    exposure): the server's predicted time equals the in-process one, class by class."""
    args = SMALL_ARGS.replace("--pipeline-model-parallel-size 2", "--pipeline-model-parallel-size 2 "
                              "--num-layers-per-virtual-pipeline-stage 4")
    assert main(["solve", HGX2, "--megatron-args", args, "--time-limit", "5", "--mode", "free"]) == 0
    result = tmp_path / "result.json"
    result.write_text(capsys.readouterr().out)
    argv = ["evaluate", HGX2, "--assignment", str(result), "--exposure", "dp=0.5"]
    local, remote = _in_process_and_on_a_server(argv, capsys)
    assert remote["order"] == local["order"]
    assert remote["cost"]["total_seconds"] == pytest.approx(local["cost"]["total_seconds"], rel=1e-12)
    for c, v in local["cost"]["by_class"].items():
        assert remote["cost"]["by_class"][c] == pytest.approx(v, rel=1e-12, abs=1e-15), c
    assert remote["cost"]["classes"]["dp"]["exposure"] == 0.5


def test_evaluate_a_result_file_uses_its_sizes_and_traffic(capsys, tmp_path):
    """`rankmap evaluate --assignment result.json` with no size or traffic flags evaluates the job
    the result was solved for (its sizes, its model's payloads and shapes): the same predicted
    time; a size flag that disagrees with the file is an error naming both."""
    assert main(["solve", HGX2, "--megatron-args", SMALL_ARGS, "--time-limit", "5"]) == 0
    result = tmp_path / "result.json"
    result.write_text(capsys.readouterr().out)
    doc = json.loads(result.read_text())
    assert doc["traffic_model"]["sequence_parallel"] is True
    assert main(["evaluate", HGX2, "--assignment", str(result)]) == 0
    ev = json.loads(capsys.readouterr().out)
    assert ev["sizes"]["tp"] == 4 and ev["sizes"]["pp"] == 2
    assert ev["cost"]["total_seconds"] == pytest.approx(doc["cost"]["total_seconds"], rel=1e-12)
    assert main(["evaluate", HGX2, "--assignment", str(result), "--tp", "8"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "--tp 8 disagrees with tp 4 in" in err


@pytest.mark.parametrize("expr, needle", [
    ("[0]*100000*5000", "more than 100000 entries"),              # was 12 s and 3.9 GB before failing
    ("[0]*(100000*100000*100000*100000)", "numbers must be small"),  # was an OverflowError (INTERNAL)
    ("[[0]*100000]*100000", "nested lists"),
    ("__import__('os')", "only lists of integers"),
    ("[1]+" * 1000 + "[1]", "nested too deeply"),
])
def test_moe_layer_freq_is_bounded_before_it_is_built(expr, needle):
    base = "--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --num-experts 4 "
    with pytest.raises(InvalidArgumentError, match=needle):
        parse_megatron_args(base + f"--moe-layer-freq '{expr}'")
    assert parse_megatron_args(base + "--moe-layer-freq '([0]*1+[1]*3)'").model.moe_layer_freq == (0, 1, 1, 1)


def test_hierarchical_cp_sizes_must_multiply_to_cp_whatever_the_comm_type():
    """megatron-core's parallel_state asserts prod(hierarchical_context_parallel_sizes) == cp."""
    meg = parse_megatron_args("--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128 "
                              "--hierarchical-context-parallel-sizes 2 2 2 2 --context-parallel-size 4")
    with pytest.raises(InvalidArgumentError, match=r"multiply to 16, not cp=4"):
        resolve_traffic(parallel_config(8, cp=4), megatron=meg)
