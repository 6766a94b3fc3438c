"""rankmap's Megatron group catalogue without megatron-core.

* the three seed examples (group for group, names in Megatron's order);
* hand-checked cases from DESIGN section 1 (strides, etp defaulting, expert DP);
* every rejection names the offending value;
* hypothesis properties: families partition the world, group sizes follow the
  parallel sizes, coordinates round-trip through the mixed-radix formula.

The differential test against megatron-core itself is ``tests/test_oracle.py``.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rankmap.solver import (
    InvalidArgumentError,
    megatron_groups,
    parallel_config,
    rank_coordinates,
)

TOKENS = ("tp", "cp", "ep", "dp", "pp")

# --------------------------------------------------------------------------- seed examples

_HERE = Path(__file__).resolve().parent
_SHARED = Path(__file__).resolve().parents[2] / "shared" / "examples"
SEED_NAMES = ("seed-16gpu-tp2-pp4-dp2.json", "seed-8gpu-tp2-cp2-dp2.json", "seed-8gpu-tp2-ep2-dp2.json")


def _seed_path(name: str) -> Path | None:
    """Prefer the copy in tests/data (present on a clean clone), else the shared dir."""
    for base in (_HERE / "data", _SHARED):
        if (base / name).is_file():
            return base / name
    return None


def _as_lists(groups: dict) -> dict:
    return {k: v.tolist() for k, v in groups.items()}


@pytest.mark.parametrize("name", SEED_NAMES)
def test_seed_example(name):
    path = _seed_path(name)
    if path is None:
        pytest.skip(f"{name} not found in tests/data or {_SHARED}")
    seed = json.loads(path.read_text())
    s = seed["sizes"]
    cfg = parallel_config(
        seed["world_size"], tp=s["tp"], cp=s["cp"], ep=s["ep"], etp=s["etp"], pp=s["pp"], order=seed["order"]
    )
    assert cfg.sizes == s
    got = _as_lists(megatron_groups(cfg))
    assert list(got) == list(seed["groups"])
    for family, groups in seed["groups"].items():
        assert got[family] == groups, family


# --------------------------------------------------------------------------- hand-checked cases


def test_pp_first_order_strides_tp_across_halves():
    g = megatron_groups(parallel_config(16, tp=8, pp=2, order="pp-tp-dp"))
    assert g["TENSOR_MODEL_PARALLEL_GROUP"].tolist() == [list(range(0, 16, 2)), list(range(1, 16, 2))]
    assert g["PIPELINE_MODEL_PARALLEL_GROUP"].tolist() == [[2 * i, 2 * i + 1] for i in range(8)]


def test_default_order_tp_contiguous():
    g = megatron_groups(parallel_config(16, tp=8, pp=2))
    assert g["TENSOR_MODEL_PARALLEL_GROUP"].tolist() == [list(range(8)), list(range(8, 16))]
    assert g["PIPELINE_MODEL_PARALLEL_GROUP"].tolist() == [[i, i + 8] for i in range(8)]


def test_etp_defaulting_to_tp_is_rejected_and_explained():
    with pytest.raises(InvalidArgumentError) as err:
        parallel_config(4, tp=4, ep=4)
    msg = str(err.value)
    assert "etp" in msg and "defaulted to tp = 4" in msg
    assert "\n" not in msg


def test_explicit_etp_1_gives_one_expert_group():
    cfg = parallel_config(4, tp=4, ep=4, etp=1)
    g = megatron_groups(cfg)
    assert g["EXPERT_MODEL_PARALLEL_GROUP"].tolist() == [[0, 1, 2, 3]]
    assert g["EXPERT_TENSOR_PARALLEL_GROUP"].tolist() == [[0], [1], [2], [3]]
    assert g["TENSOR_MODEL_PARALLEL_GROUP"].tolist() == [[0, 1, 2, 3]]
    assert cfg.edp == 1


def test_instances_not_dividing_expert_dp_rejected():
    with pytest.raises(InvalidArgumentError) as err:
        parallel_config(4, tp=2, ep=2, num_distributed_optimizer_instances=2)
    msg = str(err.value)
    assert "num_distributed_optimizer_instances 2" in msg and "edp = 1" in msg


def test_expert_tp_larger_than_dense_tp():
    cfg = parallel_config(8, tp=1, ep=1, etp=4)
    g = megatron_groups(cfg)
    assert g["DATA_PARALLEL_GROUP"].tolist() == [list(range(8))]
    assert g["EXPERT_TENSOR_PARALLEL_GROUP"].tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert g["EXPERT_DATA_PARALLEL_GROUP"].tolist() == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert (cfg.dp, cfg.edp) == (8, 2)


def test_repeated_token_rejected():
    with pytest.raises(InvalidArgumentError) as err:
        parallel_config(8, tp=2, pp=2, order="tp-tp-dp-pp")
    assert "'tp-tp-dp-pp'" in str(err.value) and "repeats token 'tp'" in str(err.value)


@pytest.mark.parametrize(
    "kwargs, needles, field",
    [
        # empty token
        (dict(world_size=8, tp=2, order="tp--dp"), ["'tp--dp'", "empty token"], "order"),
        (dict(world_size=8, tp=2, order="tp-cp-ep-dp-pp-"), ["'tp-cp-ep-dp-pp-'", "empty token"], "order"),
        (dict(world_size=8, tp=2, order=""), ["order is empty"], "order"),
        # unknown token
        (dict(world_size=8, tp=2, order="tp-xp-dp"), ["'tp-xp-dp'", "'xp'"], "order"),
        # a size > 1 missing from the order
        (dict(world_size=8, tp=2, pp=2, order="tp-dp"), ["'tp-dp'", "'pp'", "pp = 2"], "order"),
        (dict(world_size=8, ep=2, etp=1, order="tp-cp-dp-pp"), ["'ep'", "ep = 2"], "order"),
        # hierarchical sizes whose product is not cp
        (dict(world_size=8, cp=4, hierarchical_context_parallel_sizes=[2, 3]), ["2,3", "6", "cp = 4"],
         "hierarchical_context_parallel_sizes"),
        # instances not dividing dp*cp
        (dict(world_size=8, tp=2, num_distributed_optimizer_instances=3),
         ["num_distributed_optimizer_instances 3", "dp*cp = 4*1 = 4"], "num_distributed_optimizer_instances"),
        # divisibility
        (dict(world_size=12, tp=8), ["world_size 12", "tp*cp*pp", "8"], "world_size"),
        (dict(world_size=8, tp=0), ["tp", "got 0"], "tp"),
        # pp not last with edp != dp
        (dict(world_size=32, tp=2, pp=4, ep=2, order="tp-ep-pp-dp"), ["'tp-ep-pp-dp'", "pp = 4", "edp = 2"],
         "order"),
    ],
)
def test_errors_name_the_value(kwargs, needles, field):
    with pytest.raises(InvalidArgumentError) as err:
        parallel_config(**kwargs)
    msg = str(err.value)
    assert "\n" not in msg
    for needle in needles:
        assert needle in msg, (needle, msg)
    assert err.value.field == field


# --------------------------------------------------------------------------- properties


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def configs(draw, default_order: bool = False):
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    cp = draw(st.sampled_from([1, 2, 4]))
    pp = draw(st.sampled_from([1, 2, 3, 4]))
    dp = draw(st.sampled_from([1, 2, 3, 4, 6, 8]))
    world = tp * cp * pp * dp
    per_stage = world // pp
    etp = draw(st.sampled_from([None] + _divisors(per_stage)))
    eff_etp = tp if etp is None else etp
    assume(per_stage % eff_etp == 0)
    ep = draw(st.sampled_from(_divisors(per_stage // eff_etp)))
    edp = per_stage // (eff_etp * ep)
    inst = draw(st.sampled_from(_divisors(math.gcd(dp * cp, edp))))
    hcp = None
    if cp > 1 and draw(st.booleans()):
        a = draw(st.sampled_from(_divisors(cp)))
        hcp = [a, cp // a]
    if default_order:
        order = "tp-cp-ep-dp-pp"
    else:
        perm = list(draw(st.permutations(TOKENS)))
        if draw(st.booleans()):  # usually keep pp last, the layouts Megatron accepts most
            perm.remove("pp")
            perm.append("pp")
        order = "-".join(perm)
    offset = draw(st.sampled_from([0, 0, 0, 16]))
    try:
        cfg = parallel_config(
            world, tp=tp, cp=cp, ep=ep, etp=etp, pp=pp, order=order,
            num_distributed_optimizer_instances=inst, hierarchical_context_parallel_sizes=hcp, rank_offset=offset,
        )
    except InvalidArgumentError:
        assume(False)
    return cfg


def _expected_sizes(cfg) -> dict:
    inst = cfg.num_distributed_optimizer_instances
    out = {
        "DATA_PARALLEL_GROUP_WITH_CP": cfg.dp * cfg.cp,
        "DATA_PARALLEL_GROUP": cfg.dp,
        "CONTEXT_PARALLEL_GROUP": cfg.cp,
        "MODEL_PARALLEL_GROUP": cfg.tp * cfg.pp,
        "TENSOR_MODEL_PARALLEL_GROUP": cfg.tp,
        "PIPELINE_MODEL_PARALLEL_GROUP": cfg.pp,
        "EMBEDDING_GROUP": 2 if cfg.pp > 1 else 1,
        "POSITION_EMBEDDING_GROUP": 1,
        "TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP": cfg.tp * cfg.dp * cfg.cp,
        "TENSOR_AND_DATA_PARALLEL_GROUP": cfg.tp * cfg.dp,
        "TENSOR_AND_CONTEXT_PARALLEL_GROUP": cfg.tp * cfg.cp,
        "EXPERT_MODEL_PARALLEL_GROUP": cfg.ep,
        "EXPERT_TENSOR_PARALLEL_GROUP": cfg.etp,
        "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP": cfg.etp * cfg.ep,
        "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP": cfg.etp * cfg.ep * cfg.pp,
        "EXPERT_DATA_PARALLEL_GROUP": cfg.edp,
        "INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP": cfg.world_size // inst,
    }
    if inst > 1:
        out["INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP"] = cfg.dp * cfg.cp // inst
        out["HIERARCHICAL_EXPERT_DATA_PARALLEL_GROUP_L0"] = cfg.edp // inst
        out["HIERARCHICAL_EXPERT_DATA_PARALLEL_GROUP_L1"] = inst
    for level, size in enumerate(cfg.hierarchical_context_parallel_sizes):
        out[f"HIERARCHICAL_CONTEXT_PARALLEL_GROUP_L{level}"] = size
    return out


PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])


@PROPS
@given(configs())
def test_families_partition_the_world_with_the_right_sizes(cfg):
    groups = megatron_groups(cfg)
    expected = _expected_sizes(cfg)
    assert set(groups) == set(expected)
    world = np.arange(cfg.rank_offset, cfg.rank_offset + cfg.world_size)
    for name, arr in groups.items():
        assert arr.ndim == 2 and arr.shape[1] == expected[name], name
        if name in ("EMBEDDING_GROUP", "POSITION_EMBEDDING_GROUP"):
            continue
        # a partition: every rank exactly once
        assert arr.size == cfg.world_size, name
        assert np.array_equal(np.sort(arr, axis=None), world), name
    # embedding groups: first (and last) stage of each pipeline group, in that order
    pp = groups["PIPELINE_MODEL_PARALLEL_GROUP"]
    assert np.array_equal(groups["POSITION_EMBEDDING_GROUP"][:, 0], pp[:, 0])
    assert np.array_equal(groups["EMBEDDING_GROUP"][:, 0], pp[:, 0])
    assert np.array_equal(groups["EMBEDDING_GROUP"][:, -1], pp[:, -1])


def _formula_rank(coords: dict, tokens: tuple, sizes: dict) -> np.ndarray:
    """Global rank from coordinates: mixed radix over ``tokens``, first token fastest."""
    rank, stride = 0, 1
    for t in tokens:
        rank = rank + coords[t] * stride
        stride *= sizes[t]
    return rank


@PROPS
@given(configs(default_order=True))
def test_rank_coordinates_default_order_formula(cfg):
    ranks = np.arange(cfg.world_size) + cfg.rank_offset
    c = rank_coordinates(cfg, ranks)
    tp, cp, dp, etp, ep, edp = cfg.tp, cfg.cp, cfg.dp, cfg.etp, cfg.ep, cfg.edp
    # DESIGN 1: rank = tp_rank + cp_rank*tp + ep_rank*tp*cp + dp_rank*tp*cp*ep + pp_rank*tp*cp*ep*dp
    dense = c["tp"] + c["cp"] * tp + c["dp"] * tp * cp + c["pp"] * tp * cp * dp
    expert = c["etp"] + c["ep"] * etp + c["edp"] * etp * ep + c["pp"] * etp * ep * edp
    assert np.array_equal(dense + cfg.rank_offset, ranks)
    assert np.array_equal(expert + cfg.rank_offset, ranks)
    for k, size in (("tp", tp), ("cp", cp), ("dp", dp), ("pp", cfg.pp), ("etp", etp), ("ep", ep), ("edp", edp)):
        assert c[k].min() >= 0 and c[k].max() < size


@PROPS
@given(configs())
def test_rank_coordinates_any_order_and_group_members(cfg):
    ranks = np.arange(cfg.world_size) + cfg.rank_offset
    c = rank_coordinates(cfg, ranks)
    tokens = cfg.tokens + tuple(t for t in TOKENS if t not in cfg.tokens)
    dense_sizes = {"tp": cfg.tp, "cp": cfg.cp, "ep": 1, "dp": cfg.dp, "pp": cfg.pp}
    expert_sizes = {"tp": cfg.etp, "cp": 1, "ep": cfg.ep, "dp": cfg.edp, "pp": cfg.pp}
    zero = np.zeros_like(ranks)
    dense = _formula_rank({"tp": c["tp"], "cp": c["cp"], "ep": zero, "dp": c["dp"], "pp": c["pp"]},
                          tokens, dense_sizes)
    expert = _formula_rank({"tp": c["etp"], "cp": zero, "ep": c["ep"], "dp": c["edp"], "pp": c["pp"]},
                           tokens, expert_sizes)
    assert np.array_equal(dense + cfg.rank_offset, ranks)
    assert np.array_equal(expert + cfg.rank_offset, ranks)

    # single-token families: member i has coordinate i and shares every other coordinate
    groups = megatron_groups(cfg)
    single = {
        "TENSOR_MODEL_PARALLEL_GROUP": ("tp", ("cp", "dp", "pp")),
        "CONTEXT_PARALLEL_GROUP": ("cp", ("tp", "dp", "pp")),
        "DATA_PARALLEL_GROUP": ("dp", ("tp", "cp", "pp")),
        "PIPELINE_MODEL_PARALLEL_GROUP": ("pp", ("tp", "cp", "dp")),
        "EXPERT_TENSOR_PARALLEL_GROUP": ("etp", ("ep", "edp", "pp")),
        "EXPERT_MODEL_PARALLEL_GROUP": ("ep", ("etp", "edp", "pp")),
        "EXPERT_DATA_PARALLEL_GROUP": ("edp", ("etp", "ep", "pp")),
    }
    for name, (varying, fixed) in single.items():
        arr = groups[name] - cfg.rank_offset
        assert np.array_equal(c[varying][arr], np.broadcast_to(np.arange(arr.shape[1]), arr.shape)), name
        for f in fixed:
            assert (c[f][arr] == c[f][arr[:, :1]]).all(), (name, f)


def test_rank_coordinates_rejects_out_of_range():
    cfg = parallel_config(8, tp=2, rank_offset=8)
    with pytest.raises(InvalidArgumentError) as err:
        rank_coordinates(cfg, [8, 16])
    assert "16" in str(err.value)


def test_all_permutations_of_default_sizes_partition():
    """Exhaustive over the 120 orders for one mixed configuration (cheap, no hypothesis)."""
    accepted = 0
    for perm in itertools.permutations(TOKENS):
        try:
            cfg = parallel_config(64, tp=2, cp=2, pp=2, ep=2, etp=1, order="-".join(perm))
        except InvalidArgumentError:
            continue
        accepted += 1
        for name, arr in megatron_groups(cfg).items():
            if name not in ("EMBEDDING_GROUP", "POSITION_EMBEDDING_GROUP"):
                assert np.array_equal(np.sort(arr, axis=None), np.arange(64)), (perm, name)
    assert accepted >= 24
