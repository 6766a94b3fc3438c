"""Traffic classes, model payloads, presets and the ``rankmap traffic`` command."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rankmap.solver import parallel_config
from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.traffic import (
    CLASS_GROUP,
    CLASS_KIND,
    DEFAULT_MODEL,
    PRESETS,
    TRAFFIC_CLASSES,
    ModelSpec,
    class_group_size,
    count_parameters,
    model_preset,
    num_micro_batches,
    pair_bytes_factor,
    params_per_rank,
    traffic_from_model,
)

# --------------------------------------------------------------------------- classes


def test_classes_groups_and_kinds_match_design():
    assert TRAFFIC_CLASSES == ("tp", "cp", "ep", "etp", "dp", "edp", "pp", "embedding")
    assert CLASS_GROUP == {
        "tp": "TENSOR_MODEL_PARALLEL_GROUP",
        "cp": "CONTEXT_PARALLEL_GROUP",
        "ep": "EXPERT_MODEL_PARALLEL_GROUP",
        "etp": "EXPERT_TENSOR_PARALLEL_GROUP",
        "dp": "DATA_PARALLEL_GROUP_WITH_CP",
        "edp": "EXPERT_DATA_PARALLEL_GROUP",
        "pp": "PIPELINE_MODEL_PARALLEL_GROUP",
        "embedding": "EMBEDDING_GROUP",
    }
    assert CLASS_KIND == {
        "tp": "all_reduce", "cp": "ring_p2p", "ep": "all_to_all", "etp": "all_reduce",
        "dp": "all_gather", "edp": "all_gather", "pp": "p2p_chain", "embedding": "all_reduce",
    }


def test_group_names_exist_in_catalogue():
    from rankmap.solver import GROUP_NAMES

    assert set(CLASS_GROUP.values()) <= set(GROUP_NAMES)


@pytest.mark.parametrize(
    "kind,n,expected",
    [
        ("all_reduce", 2, 1.0),
        ("all_reduce", 8, 0.25),
        ("all_gather", 4, 0.25),
        ("all_to_all", 8, 0.125),
        ("p2p_chain", 4, 1.0),
        ("all_reduce", 1, 0.0),
        ("p2p_chain", 1, 0.0),
    ],
)
def test_pair_bytes_factor(kind, n, expected):
    assert pair_bytes_factor(kind, n) == expected


@given(st.integers(2, 4096))
def test_all_reduce_sends_ring_volume(n):
    # each rank sends 2S/n to each of n-1 peers = 2(n-1)/n S, the ring all-reduce volume
    assert math.isclose(pair_bytes_factor("all_reduce", n) * (n - 1), 2 * (n - 1) / n)
    assert math.isclose(pair_bytes_factor("all_gather", n) * (n - 1), (n - 1) / n)


def test_pair_bytes_factor_errors():
    with pytest.raises(InvalidArgumentError, match="broadcast"):
        pair_bytes_factor("broadcast", 4)
    with pytest.raises(InvalidArgumentError, match="0"):
        pair_bytes_factor("all_reduce", 0)


def test_class_group_sizes():
    cfg = parallel_config(64, tp=2, cp=2, ep=4, etp=1, pp=2)
    sizes = {c: class_group_size(c, cfg) for c in TRAFFIC_CLASSES}
    assert sizes == {"tp": 2, "cp": 2, "ep": 4, "etp": 1, "dp": 16, "edp": 8, "pp": 2, "embedding": 2}
    assert class_group_size("embedding", parallel_config(8, tp=8)) == 1


# --------------------------------------------------------------------------- the seed GPT by hand

SEED = DEFAULT_MODEL


def test_seed_preset_is_designs_default():
    m = model_preset("default")
    assert m is SEED or m == SEED
    assert model_preset("seed-gpt") == SEED == model_preset("GPT-24L-4096")
    assert (SEED.num_layers, SEED.hidden_size, SEED.num_attention_heads, SEED.ffn_hidden_size) == (24, 4096, 32, 16384)
    assert (SEED.vocab_size, SEED.seq_length, SEED.micro_batch_size, SEED.num_micro_batches) == (50304, 2048, 1, 8)
    assert SEED.dtype == "bf16" and SEED.element_bytes == 2
    assert SEED.param_element_bytes == 2 and SEED.grad_element_bytes == 4


def test_seed_parameter_count_by_hand():
    h, f, L, V, s = 4096, 16384, 24, 50304, 2048
    # one layer: QKV h*3h + proj h*h + fc1 h*f + fc2 f*h = 201,326,592 weights
    weights = 3 * h * h + h * h + 2 * h * f
    assert weights == 201_326_592
    # biases 3h + h + f + h and two LayerNorms (weight+bias) 2*2h = 13h = 53,248
    small = 3 * h + h + f + h + 4 * h
    assert small == 13 * h == 53_248
    # 24 layers + final LayerNorm 2h + tied word embedding V*h + learned positions s*h
    total = L * (weights + small) + 2 * h + V * h + s * h
    assert total == 4_833_116_160 + 8_192 + 206_045_184 + 8_388_608 == 5_047_558_144
    counts = count_parameters(SEED)
    assert counts.total == counts.dense == counts.active == total
    assert counts.expert == 0
    # Narayanan et al. 2021: P = 12 L h^2 (1 + 13/(12h) + (V+s)/(12 L h)), plus the final LN 2h
    assert math.isclose(total, 12 * L * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * L * h)) + 2 * h)


def test_seed_tp2_pp4_dp2_by_hand():
    cfg = parallel_config(16, tp=2, pp=4)  # dp = 16 / (2*4) = 2, the seed article's example
    assert cfg.dp == 2
    t = traffic_from_model(SEED, cfg)
    assert list(t) == list(TRAFFIC_CLASSES)
    # L_s = 24/4 = 6 layers per stage; act = b*(s/cp)*h*bytes = 1*2048*4096*2 = 16,777,216 B
    act = 1 * 2048 * 4096 * 2
    assert act == 16_777_216
    # tp = 4 * L_s * m * act = 4 * 6 * 8 * 16,777,216 = 3,221,225,472 B (3.22 GB)
    assert t["tp"] == 4 * 6 * 8 * act == 3_221_225_472
    # pp = m * act = 8 * 16,777,216 = 134,217,728 B
    assert t["pp"] == 8 * act == 134_217_728
    # dp, Megatron's default (no --use-distributed-optimizer): a ring all-reduce of the fp32 main
    # gradients (bf16 reduces in fp32) of the P/(tp*pp) parameters a rank holds:
    # 4 bytes * 5,047,558,144 / 8 = 2,523,779,072 B
    assert t["dp"] == 4 * 5_047_558_144 / 8 == 2_523_779_072
    assert [c.kind for c in t.collectives["dp"]] == ["all_reduce"]
    # embedding = V*h/tp * grad bytes = 50304*4096/2*4 = 412,090,368 B (tied, pp > 1)
    assert t["embedding"] == 50304 * 4096 / 2 * 4 == 412_090_368
    # cp = 1 and a dense model: no cp, ep, etp or edp traffic
    assert t["cp"] == t["ep"] == t["etp"] == t["edp"] == 0


def test_seed_cp_formula():
    cfg = parallel_config(16, tp=2, cp=2, pp=2)
    t = traffic_from_model(SEED, cfg)
    # cp_comm_type p2p (Megatron's default, TE AttnFuncWithCPAndKVP2P): per layer and micro-batch
    # 3(cp-1) sends of KV = b*(s/cp)*(2k/tp)*d*bytes = 1*1024*(2*32/2)*128*2 = 8,388,608 B to the
    # ring successor (KV forward; KV and dKV backward).  L_s = 12, m = 8:
    # cp = 8 * 12 * 3 * (2-1) * 8,388,608 = 2,415,919,104 B
    assert t["cp"] == 8 * 12 * 3 * 1 * (1024 * 32 * 128 * 2) == 2_415_919_104
    assert [c.kind for c in t.collectives["cp"]] == ["ring_p2p"]
    # act now uses s/cp = 1024 tokens: tp = 4*12*8*(1*1024*4096*2)
    assert t["tp"] == 4 * 12 * 8 * 1024 * 4096 * 2
    assert t["pp"] == 8 * 1024 * 4096 * 2


def test_dp_bytes_scale_with_one_over_tp_pp():
    base = traffic_from_model(SEED, parallel_config(128))["dp"]  # tp = pp = 1
    assert base == 4 * 5_047_558_144  # fp32 gradient all-reduce
    for tp, pp in [(2, 1), (1, 2), (2, 4), (4, 2), (8, 8)]:
        t = traffic_from_model(SEED, parallel_config(128, tp=tp, pp=pp))  # dp >= 2
        assert math.isclose(t["dp"], base / (tp * pp))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]))
def test_dp_payload_times_tp_pp_is_constant(tp, pp, dp):
    cfg = parallel_config(tp * pp * dp, tp=tp, pp=pp)
    t = traffic_from_model(SEED, cfg)
    if dp == 1:
        assert t["dp"] == 0
    else:
        assert math.isclose(t["dp"] * tp * pp, 4 * 5_047_558_144)


def test_dense_model_has_no_expert_traffic():
    # etp defaults to tp = 2 > 1, ep = 2 > 1: a dense model still moves nothing there
    cfg = parallel_config(16, tp=2, ep=2, pp=2)
    t = traffic_from_model(SEED, cfg)
    assert t["ep"] == t["etp"] == t["edp"] == 0
    assert t["tp"] > 0 and t["dp"] > 0
    for name in ("llama3-8b", "llama3-70b", "gpt3-175b"):
        t = traffic_from_model(model_preset(name), parallel_config(64, tp=8, pp=2))
        assert t["ep"] == t["etp"] == t["edp"] == 0


def test_size_one_groups_get_zero():
    t = traffic_from_model(SEED, parallel_config(1))
    assert all(v == 0 for v in t.values())
    t = traffic_from_model(SEED, parallel_config(8, tp=8))  # dp = 1, pp = 1
    assert t["tp"] > 0
    assert t["dp"] == t["pp"] == t["embedding"] == 0


def test_untied_embeddings_have_no_embedding_allreduce():
    t = traffic_from_model(model_preset("llama3-8b"), parallel_config(16, tp=2, pp=4))
    assert t["embedding"] == 0


def test_moe_formulas_mixtral():
    """Mixtral 8x7B recipe (seq 4096, gbs 512, alltoall dispatcher, SP, distributed optimizer).

    tp 2, ep 4, etp 2, pp 2 on 64 GPUs: dp = 64/(2*2) = 16, edp = 64/(4*2*2) = 4,
    m = 512/16 = 32 micro-batches, L_moe,s = 32/2 = 16 MoE layers per stage.
    X = b*s*h = 4096*4096 = 16,777,216 elements; with SP a rank holds Y = X/tp tokens.
    - tp: only the attention half of each layer (the experts run on etp): 16 halves, each
      AG + RS forward and 2 AG + 1 RS backward of X*2 bytes -> 10 bytes/element:
      32 * 16 * 16,777,216 * 10 = 85,899,345,920 B.
    - ep (MoEAlltoAllTokenDispatcher): K*Y = 2 * 8,388,608 elements per dispatch and per
      combine, forward and backward, 2 bytes: 32 * 16 * 2 * 8,388,608 * 8 = 68,719,476,736 B.
    - etp: all-gather / reduce-scatter of etp*K*Y, 4 per MoE layer:
      32 * 16 * 2*2*8,388,608 * 2 * 4 = 137,438,953,472 B.
    - pp: m * X * 2 / tp = 32 * 16,777,216 = 536,870,912 B.
    - dp / edp: distributed optimizer, (4 + 2) bytes per held parameter.
    """
    model = model_preset("mixtral-8x7b")
    assert (model.seq_length, model.global_batch_size, model.moe_token_dispatcher_type) == (4096, 512, "alltoall")
    assert model.sequence_parallel and model.use_distributed_optimizer
    cfg = parallel_config(64, tp=2, ep=4, etp=2, pp=2)
    assert (cfg.dp, cfg.edp) == (16, 4)
    t = traffic_from_model(model, cfg)
    X = 4096 * 4096
    assert num_micro_batches(model, cfg) == 32
    assert t["tp"] == 32 * 16 * X * 10 == 85_899_345_920
    assert t["ep"] == 32 * 16 * 2 * (X / 2) * 8 == 68_719_476_736
    assert t["etp"] == 32 * 16 * 2 * 2 * (X / 2) * 2 * 4 == 137_438_953_472
    assert t["pp"] == 32 * X * 2 / 2 == 536_870_912
    counts = count_parameters(model)
    dense, expert = params_per_rank(model, cfg)
    assert dense == counts.dense / 4 and expert == counts.expert / (2 * 4 * 2)
    assert t["edp"] == 6 * expert and t["dp"] == 6 * dense
    # one expert: 3 * 4096 * 14336 weights (SwiGLU, no bias)
    assert counts.expert_mlp == 3 * 4096 * 14336
    assert counts.expert == 32 * 8 * counts.expert_mlp


def test_deepseek_moe_layers():
    """DeepSeek-V3 (arXiv:2412.19437 §3.2, §3.3): flex dispatcher, node-limited routing
    M = 4 of G = 8 groups, FP8 dispatch and BF16 combine, 3 dense layers first.

    ep 64, pp 16 on 2,048 GPUs (the published layout): dp = 128, m = 15360/128 = 120,
    L_moe,s = 58/16 = 3.625, Y = b*s*h = 4096*7168 = 29,360,128 elements (tp = 1).
    Per token element: dispatch forward 1 byte (FP8) + combine forward 2 + backward 2 + 2 = 7.
    Between the 8 node groups (8 ranks each, stride 8) one copy per selected node, M = 4:
    120 * 3.625 * 4 * 29,360,128 * 7 = 357,606,359,040 B; inside a group K = 8 copies:
    120 * 3.625 * 8 * 29,360,128 * 7 = 715,212,718,080 B.
    """
    model = model_preset("deepseek-v3")
    pattern = model.moe_layer_pattern()
    assert pattern[:3] == (False, False, False) and all(pattern[3:]) and len(pattern) == 61
    cfg = parallel_config(2048, ep=64, pp=16, etp=1)
    assert num_micro_batches(model, cfg) == 120
    t = traffic_from_model(model, cfg)
    Y = 4096 * 7168
    between, inside = t.collectives["ep"]
    assert (between.kind, between.size, between.stride) == ("all_to_all", 8, 8)
    assert (inside.kind, inside.size, inside.stride) == ("all_to_all", 8, 1)
    assert math.isclose(between.payload_bytes, 120 * 3.625 * 4 * Y * 7)
    assert math.isclose(between.payload_bytes, 357_606_359_040)
    assert math.isclose(inside.payload_bytes, 120 * 3.625 * 8 * Y * 7)
    assert t["ep"] == between.payload_bytes + inside.payload_bytes
    assert t["etp"] == 0  # etp = 1
    # ep 8 = G: one rank per group, nothing forwarded inside it
    t8 = traffic_from_model(model, parallel_config(256, ep=8, pp=16, etp=1))
    assert [p.size for p in t8.collectives["ep"]] == [8]


def test_moe_layer_freq_int_and_list():
    base = dict(num_layers=8, hidden_size=256, num_attention_heads=4, vocab_size=1000, seq_length=128,
                num_experts=4, moe_router_topk=1)
    assert ModelSpec(**base, moe_layer_freq=2).num_moe_layers_resolved == 4  # layers 0, 2, 4, 6
    assert ModelSpec(**base, moe_layer_freq=[0, 1] * 4).num_moe_layers_resolved == 4
    assert ModelSpec(**base, num_moe_layers=5).num_moe_layers_resolved == 5
    with pytest.raises(InvalidArgumentError, match="moe_layer_freq has 3 entries"):
        ModelSpec(**base, moe_layer_freq=[1, 1, 1])


def test_micro_batches_from_global_batch():
    cfg = parallel_config(16, tp=2, pp=4)  # dp = 2
    assert num_micro_batches(model_preset("default", global_batch_size=32), cfg) == 16
    assert num_micro_batches(model_preset("default", global_batch_size=32, micro_batch_size=2), cfg) == 8
    # cp does not count towards dp for the batch
    assert num_micro_batches(model_preset("default", global_batch_size=32), parallel_config(32, tp=2, cp=2, pp=4)) == 16
    with pytest.raises(InvalidArgumentError, match="global_batch_size=33") as exc:
        traffic_from_model(model_preset("default", global_batch_size=33), cfg)
    assert exc.value.field == "model.global_batch_size"
    with pytest.raises(InvalidArgumentError, match="disagrees"):
        num_micro_batches(model_preset("default", global_batch_size=32, num_micro_batches=4), cfg)
    assert num_micro_batches(ModelSpec(), cfg) == 1  # Megatron's default gbs = b*dp


def test_model_does_not_fit_sizes():
    with pytest.raises(InvalidArgumentError, match="tp=64") as exc:
        traffic_from_model(SEED, parallel_config(64, tp=64))
    assert exc.value.field == "tp"
    with pytest.raises(InvalidArgumentError, match="tp=16.*num_query_groups=8"):
        traffic_from_model(model_preset("llama3-8b"), parallel_config(16, tp=16))
    with pytest.raises(InvalidArgumentError, match="ep=3.*num_experts=8") as exc:
        traffic_from_model(model_preset("mixtral-8x7b"), parallel_config(6, ep=3))
    assert exc.value.field == "ep"
    with pytest.raises(InvalidArgumentError, match="pp=32.*num_layers=24"):
        traffic_from_model(SEED, parallel_config(32, pp=32))
    with pytest.raises(InvalidArgumentError, match="cp=3.*seq_length=2048"):
        traffic_from_model(SEED, parallel_config(3, cp=3))


# --------------------------------------------------------------------------- presets


@pytest.mark.parametrize(
    "name,published_total,published_active",
    [
        ("gpt3-175b", 175e9, None),  # Brown et al. 2020 (174.6 B in Narayanan et al. 2021)
        ("llama3-8b", 8.03e9, None),  # Meta-Llama-3-8B model card / safetensors
        ("llama3-70b", 70.6e9, None),
        ("llama3-405b", 405e9, None),  # arXiv:2407.21783
        ("mixtral-8x7b", 46.7e9, 12.9e9),  # arXiv:2401.04088
        ("deepseek-v3", 671e9, 37e9),  # arXiv:2412.19437
        ("gpt-24l-4096", 5.05e9, None),
    ],
)
def test_preset_parameter_counts(name, published_total, published_active):
    counts = count_parameters(model_preset(name))
    assert abs(counts.total / published_total - 1) < 0.02, counts.total
    if published_active is not None:
        assert abs(counts.active / published_active - 1) < 0.03, counts.active
    else:
        assert counts.active == counts.total


def test_preset_exact_counts():
    # Llama 3 8B: 32 * (attention 2*4096^2 + 2*4096*1024 + MLP 3*4096*14336 + 2 norms 2*4096)
    #             + final norm 4096 + untied 2 * 128256 * 4096 = 8,030,261,248 (the checkpoint's count)
    assert count_parameters(model_preset("llama3-8b")).total == 8_030_261_248
    assert count_parameters(model_preset("llama3-70b")).total == 70_553_706_496
    assert count_parameters(model_preset("mixtral-8x7b")).total == 46_702_792_704


def test_every_preset_yields_traffic():
    for name, model in PRESETS.items():
        t = traffic_from_model(model, parallel_config(64, tp=2, pp=2, ep=2 if model.is_moe else 1))
        assert set(t) == set(TRAFFIC_CLASSES), name
        assert all(v >= 0 and math.isfinite(v) for v in t.values()), name


def test_model_preset_overrides_and_errors():
    m = model_preset("llama3-8b", seq_length=4096, micro_batch_size=2, dtype="fp32")
    assert (m.seq_length, m.micro_batch_size, m.dtype, m.element_bytes) == (4096, 2, "fp32", 4)
    assert m.param_element_bytes == 4 and m.grad_element_bytes == 4
    assert model_preset("default", dtype="fp16").grad_element_bytes == 2
    g = model_preset("default", global_batch_size=64)
    assert g.global_batch_size == 64 and g.num_micro_batches is None
    with pytest.raises(InvalidArgumentError) as exc:
        model_preset("gpt5")
    assert "gpt5" in str(exc.value) and "llama3-8b" in str(exc.value) and "deepseek-v3" in str(exc.value)
    assert exc.value.field == "model"
    with pytest.raises(InvalidArgumentError, match="'hidden'"):
        model_preset("default", hidden=3)
    with pytest.raises(InvalidArgumentError, match="bf17"):
        model_preset("default", dtype="bf17")


@pytest.mark.parametrize(
    "kwargs,field,needle",
    [
        ({"hidden_size": 0}, "model.hidden_size", "0"),
        ({"num_layers": -3}, "model.num_layers", "-3"),
        ({"num_layers": True}, "model.num_layers", "True"),
        ({"seq_length": 2.5}, "model.seq_length", "2.5"),
        ({"num_query_groups": 5}, "model.num_query_groups", "5"),
        ({"hidden_size": 100, "num_attention_heads": 32}, "model.hidden_size", "100"),
        ({"dtype": "int4"}, "model.dtype", "int4"),
        ({"param_bytes": -2}, "model.param_bytes", "-2"),
        ({"grad_bytes": float("nan")}, "model.grad_bytes", "nan"),
        ({"num_experts": 4, "moe_router_topk": 5}, "model.moe_router_topk", "5"),
        ({"num_moe_layers": 3}, "model.num_moe_layers", "3"),
        ({"normalization": "BatchNorm"}, "model.normalization", "BatchNorm"),
        ({"untie_embeddings": "yes"}, "model.untie_embeddings", "yes"),
        ({"global_batch_size": 7, "micro_batch_size": 2}, "model.global_batch_size", "7"),
        ({"max_position_embeddings": 1024}, "model.seq_length", "1024"),
    ],
)
def test_model_spec_validation(kwargs, field, needle):
    with pytest.raises(InvalidArgumentError) as exc:
        ModelSpec(**kwargs)
    assert exc.value.field == field
    assert needle in str(exc.value)
    assert "\n" not in str(exc.value)
