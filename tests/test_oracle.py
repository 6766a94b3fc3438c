"""Differential test: rankmap's group catalogue against megatron-core itself.

Hundreds of seeded random configurations, valid and invalid, are run through
both megatron-core's ``initialize_model_parallel`` (dry-run with
``torch.distributed`` faked, see ``tests/megatron_oracle.py``) and
``rankmap.solver.parallel_config`` + ``megatron_groups``:

* Megatron accepts  -> rankmap accepts and every group family matches, name for
  name, group for group, member for member (list order included).
* Megatron raises   -> rankmap raises ``InvalidArgumentError``.

Known, intentional deviations (handled explicitly below, never silently):

1. Repeated order tokens (``tp-tp-dp-pp``): Megatron silently builds wrong groups
   (``get_mask`` uses the first occurrence, the world size no longer matches the
   ordered sizes); rankmap rejects them.
2. Case: rankmap reads the order case-insensitively everywhere.  Megatron's
   ``RankGenerator`` lower-cases too, but ``initialize_model_parallel`` checks
   ``order.endswith("pp")`` on the raw string, so ``TP-CP-EP-DP-PP`` with pp > 1
   and edp != dp trips its pp-last assert.  rankmap accepts it and must then
   equal Megatron run on the lower-cased order.
3. Non-positive sizes (``num_distributed_optimizer_instances=-1`` and friends):
   Megatron sometimes computes garbage groups without raising; rankmap rejects.

Whitespace inside the order (``"tp - dp"``) is also tolerated by rankmap but a
``KeyError`` in Megatron; it is simply not generated here.
"""

from __future__ import annotations

import functools
import importlib.metadata
import itertools
import math
import os
import random
import sys
import warnings
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.oracle


def _megatron_installed() -> bool:
    try:
        importlib.metadata.distribution("megatron-core")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


# .ci/run installs the [oracle] extra, so this must really run there: skip only
# when megatron-core is not installed at all.  Installed but not importable
# (torch/einops/packaging broken), or CI / RANKMAP_REQUIRE_ORACLE set, is a
# hard failure rather than a silent skip.
with warnings.catch_warnings():  # megatron-core warns about missing Transformer Engine / Apex
    warnings.simplefilter("ignore")
    if _megatron_installed() or os.environ.get("CI") or os.environ.get("RANKMAP_REQUIRE_ORACLE"):
        import megatron.core  # noqa: F401
    else:
        pytest.importorskip("megatron.core")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from megatron_oracle import megatron_catalogue  # noqa: E402

from rankmap.solver import InvalidArgumentError, megatron_groups, parallel_config  # noqa: E402

TOKENS = ("tp", "cp", "ep", "dp", "pp")
PERMUTATIONS = ["-".join(p) for p in itertools.permutations(TOKENS)]  # all 120
SEED = 20240611
N_VALID = 420
N_INVALID = 220
MAX_WORLD = 256


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _factorisations(n: int, rng: random.Random) -> list[int]:
    """A random ordered factorisation of n into 2..3 factors (1s allowed)."""
    parts = []
    rest = n
    for _ in range(rng.choice([1, 2])):
        f = rng.choice(_divisors(rest))
        parts.append(f)
        rest //= f
    parts.append(rest)
    rng.shuffle(parts)
    return parts


def _order_for(rng: random.Random, dec: dict, exp: dict) -> str:
    """Default, megatron-cli, or any permutation; maybe drop size-1 tokens; maybe odd case."""
    roll = rng.random()
    if roll < 0.15:
        order = "tp-cp-ep-dp-pp"
    elif roll < 0.25:
        order = "tp-cp-ep-pp-dp"
    elif roll < 0.45:
        # pp last keeps Megatron's pp-last assert out of the way: more accepted
        # non-default orders.
        order = "-".join(rng.sample(TOKENS[:4], 4)) + "-pp"
    else:
        order = rng.choice(PERMUTATIONS)
    tokens = order.split("-")
    if rng.random() < 0.35:
        droppable = [t for t in tokens if dec[t] == 1 and exp[t] == 1]
        drop = {t for t in droppable if rng.random() < 0.6}
        if len(drop) < len(tokens):
            tokens = [t for t in tokens if t not in drop]
    order = "-".join(tokens)
    if rng.random() < 0.1:
        order = rng.choice([order.upper(), order.title(), "".join(c.upper() if rng.random() < 0.5 else c for c in order)])
    return order


def _valid_case(rng: random.Random) -> dict:
    """Sizes whose divisibility holds; the order may still be one Megatron rejects."""
    while True:
        tp = rng.choice([1, 1, 2, 2, 4, 8])
        cp = rng.choice([1, 1, 1, 2, 4])
        pp = rng.choice([1, 1, 2, 2, 3, 4, 8])
        dp = rng.choice([1, 2, 3, 4, 6, 8, 16])
        world = tp * cp * pp * dp
        if world <= MAX_WORLD:
            break
    # expert side: etp * ep must divide world / pp
    per_stage = world // pp
    etp_given = rng.random() < 0.6
    if etp_given:
        etp = rng.choice(_divisors(per_stage))
    else:
        etp = None
    eff_etp = tp if etp is None else etp
    if per_stage % eff_etp:
        etp = rng.choice(_divisors(per_stage))
        eff_etp = etp
    ep = rng.choice(_divisors(per_stage // eff_etp)) if rng.random() < 0.7 else 1
    edp = per_stage // (eff_etp * ep)
    inst = 1
    if rng.random() < 0.4:
        inst = rng.choice(_divisors(math.gcd(dp * cp, edp))[1:] or [1])
    hcp = None
    if cp > 1 and rng.random() < 0.5:
        hcp = _factorisations(cp, rng)
    elif rng.random() < 0.05:
        hcp = [1] * rng.choice([1, 2]) if cp == 1 else None
    dec = {"tp": tp, "cp": cp, "ep": 1, "dp": dp, "pp": pp}
    exp = {"tp": eff_etp, "cp": 1, "ep": ep, "dp": edp, "pp": pp}
    return dict(
        world_size=world, tp=tp, cp=cp, ep=ep, etp=etp, pp=pp,
        order=_order_for(rng, dec, exp),
        num_distributed_optimizer_instances=inst,
        hierarchical_context_parallel_sizes=hcp,
    )


def _invalid_case(rng: random.Random) -> tuple[str, dict]:
    """A valid case broken in one way; returns (kind, kwargs)."""
    c = _valid_case(rng)
    kind = rng.choice(
        ["world", "world", "expert", "expert", "instances", "instances", "hcp", "missing", "missing",
         "unknown", "empty", "zero", "negative", "repeat", "repeat", "case"]
    )
    tp, cp, pp = c["tp"], c["cp"], c["pp"]
    if kind == "world":
        model = tp * cp * pp
        if model == 1:
            c["tp"] = tp = 2
            model = 2 * cp * pp
        c["world_size"] = model * rng.randint(1, 8) + rng.randint(1, model - 1)
        c["etp"] = 1
        c["ep"] = 1
        c["num_distributed_optimizer_instances"] = 1
    elif kind == "expert":
        per_stage = c["world_size"] // pp
        bad = [(e, t) for e in (1, 2, 3, 4, 8) for t in (None, 1, 2, 3, 4, 8)
               if per_stage % (e * (tp if t is None else t))]
        c["ep"], c["etp"] = rng.choice(bad)
        c["num_distributed_optimizer_instances"] = 1
    elif kind == "instances":
        dp = c["world_size"] // (tp * cp * pp)
        etp = tp if c["etp"] is None else c["etp"]
        edp = c["world_size"] // (etp * c["ep"] * pp)
        bad = [i for i in range(2, 17) if (dp * cp) % i or edp % i]
        c["num_distributed_optimizer_instances"] = rng.choice(bad)
    elif kind == "hcp":
        wrong = [f for f in ([2], [2, 2], [cp, 2], [4, 1], [3], [1, 1], [cp * 2]) if math.prod(f) != cp]
        c["hierarchical_context_parallel_sizes"] = rng.choice(wrong)
    elif kind == "missing":
        # make some size > 1 and omit its token from the order
        t = rng.choice(["tp", "cp", "pp", "ep"])
        if t in ("tp", "cp", "pp"):
            c[t] = 2
            c["world_size"] = c["tp"] * c["cp"] * c["pp"] * 2
            c["etp"], c["ep"] = 1, 1
        else:
            c["ep"], c["etp"] = 2, 1
            c["world_size"] = c["tp"] * c["cp"] * c["pp"] * 2
        c["num_distributed_optimizer_instances"] = 1
        c["hierarchical_context_parallel_sizes"] = None
        c["order"] = "-".join(x for x in rng.choice(PERMUTATIONS).split("-") if x != t)
    elif kind == "unknown":
        toks = rng.choice(PERMUTATIONS).split("-")
        toks[rng.randrange(5)] = rng.choice(["xp", "p", "tpp", "vp", "sp", "dpp"])
        c["order"] = "-".join(toks)
    elif kind == "empty":
        toks = rng.choice(PERMUTATIONS).split("-")
        toks.insert(rng.randrange(6), "")
        c["order"] = rng.choice(["-".join(toks), ""])
    elif kind == "zero":
        key = rng.choice(["tp", "cp", "pp", "ep", "etp", "num_distributed_optimizer_instances"])
        c[key] = 0
    elif kind == "negative":
        key = rng.choice(["tp", "pp", "ep", "etp", "num_distributed_optimizer_instances"])
        c[key] = -rng.choice([1, 2])
    elif kind == "repeat":
        toks = rng.choice(PERMUTATIONS).split("-")
        dup = rng.choice(toks)
        toks.insert(rng.randrange(6), dup)
        c["order"] = "-".join(toks)
    elif kind == "case":
        # upper-case pp at the end, pp > 1, edp != dp: Megatron's case-sensitive
        # endswith("pp") assert fires, rankmap accepts.
        c.update(world_size=16, tp=2, cp=1, pp=2, ep=2, etp=None, num_distributed_optimizer_instances=1,
                 hierarchical_context_parallel_sizes=None)
        c["order"] = rng.choice(["TP-CP-EP-DP-PP", "tp-cp-ep-dp-PP", "tp-dp-ep-cp-Pp", "Tp-Ep-Dp-Pp"])
    return kind, c


def _cases() -> list[tuple[str, dict]]:
    rng = random.Random(SEED)
    cases = [("valid", _valid_case(rng)) for _ in range(N_VALID)]
    cases += [_invalid_case(rng) for _ in range(N_INVALID)]
    # A few fixed ones worth always having.
    cases += [
        ("fixed", dict(world_size=16, tp=8, pp=2, order="pp-tp-dp")),
        ("fixed", dict(world_size=8, tp=1, ep=1, etp=4)),
        ("fixed", dict(world_size=256, tp=8, cp=2, pp=4, ep=8, etp=1, order="tp-cp-ep-dp-pp",
                       num_distributed_optimizer_instances=2, hierarchical_context_parallel_sizes=[2, 1])),
        ("fixed", dict(world_size=64, tp=2, cp=4, pp=2, ep=4, etp=2, order="tp-cp-ep-dp-pp",
                       hierarchical_context_parallel_sizes=[2, 2])),
        ("fixed", dict(world_size=32, tp=2, pp=2, ep=2, etp=1, order="tp-ep-pp-dp")),  # pp not last, accepted
        ("fixed", dict(world_size=32, tp=2, pp=4, ep=2, etp=2, order="tp-ep-pp-dp")),  # pp-last assert
        ("repeat", dict(world_size=8, tp=2, pp=2, order="tp-tp-dp-pp")),
        ("fixed", dict(world_size=1)),
        ("fixed", dict(world_size=1, order="pp")),
        ("fixed", dict(world_size=8, tp=8, etp=1, order="tp-cp-ep-pp")),  # omits dp: dp = 1 but edp = 8
        ("fixed", dict(world_size=8, etp=8, order="cp-ep-dp-pp")),  # omits tp: tp = 1 but etp = 8
        ("fixed", dict(world_size=8, tp=8, etp=1, order="tp-cp-ep-dp")),  # omits size-1 pp, accepted
        ("fixed", dict(world_size=8, cp=1, hierarchical_context_parallel_sizes=[1, 1])),
        ("fixed", dict(world_size=0)),
        ("fixed", dict(world_size=-4, tp=2)),
    ]
    return cases


CASES = _cases()


def _case_id(i_case) -> str:
    i, (kind, c) = i_case
    etp = "" if c.get("etp") is None else f"-etp{c['etp']}"
    return (f"{i:03d}-{kind}-w{c['world_size']}-tp{c.get('tp', 1)}-cp{c.get('cp', 1)}-pp{c.get('pp', 1)}"
            f"-ep{c.get('ep', 1)}{etp}-{c.get('order', '')}")


def _rankmap(c: dict):
    """rankmap's verdict: groups as lists, or the InvalidArgumentError."""
    try:
        cfg = parallel_config(**c)
    except InvalidArgumentError as exc:
        return exc
    return {k: v.tolist() for k, v in megatron_groups(cfg).items()}


@functools.lru_cache(maxsize=None)
def _outcome(i: int):
    """(kind, kwargs, megatron result, rankmap result, verdict) for case i, cached."""
    kind, c = CASES[i]
    mega = megatron_catalogue(**c)
    mine = _rankmap(c)
    tokens = [t.lower() for t in c.get("order", "tp-cp-ep-dp-pp").split("-")]
    repeated = len([t for t in tokens if t]) != len({t for t in tokens if t})
    non_positive = any(
        isinstance(v, int) and v < 1
        for k, v in c.items()
        if k not in ("order", "hierarchical_context_parallel_sizes")
    ) or any(v < 1 for v in (c.get("hierarchical_context_parallel_sizes") or ()))
    order = c.get("order", "tp-cp-ep-dp-pp")
    case_deviation = (
        isinstance(mega, AssertionError)
        and "pp-last" in str(mega)
        and order.lower().endswith("pp")
        and not order.endswith("pp")
    )
    if case_deviation and not repeated:
        # Deviation 2: the reference is Megatron on the lower-cased order (which
        # may still be rejected for another reason, e.g. instances not dividing).
        mega = megatron_catalogue(**{**c, "order": order.lower()})
    if repeated:
        verdict = "deviation-repeat"
    elif case_deviation and not isinstance(mega, BaseException):
        verdict = "deviation-case"
    elif isinstance(mega, BaseException):
        verdict = "both-reject"
    elif non_positive:
        verdict = "deviation-non-positive"
    else:
        verdict = "both-accept"
    return kind, c, mega, mine, verdict


def _assert_same_groups(mine: dict, mega: dict, c: dict) -> None:
    assert list(mine) == list(mega), f"{c}: group names/order differ:\n rankmap  {list(mine)}\n megatron {list(mega)}"
    for name in mega:
        if mine[name] != mega[name]:
            bad = next(i for i, (a, b) in enumerate(zip(mine[name], mega[name])) if a != b) \
                if len(mine[name]) == len(mega[name]) else None
            pytest.fail(
                f"{c}: {name} differs (first differing group index {bad}):\n"
                f" rankmap  {mine[name][:8]}...\n megatron {mega[name][:8]}..."
            )


@pytest.mark.parametrize("i", range(len(CASES)), ids=[_case_id(x) for x in enumerate(CASES)])
def test_against_megatron(i):
    kind, c, mega, mine, verdict = _outcome(i)
    if verdict == "deviation-repeat":
        # Deviation 1: rankmap always rejects a repeated token, naming it.
        assert isinstance(mine, InvalidArgumentError), f"{c}: rankmap accepted a repeated token"
        assert "repeats token" in str(mine)
    elif verdict == "deviation-case":
        # Deviation 2: rankmap accepts; it must equal Megatron on the lower-cased
        # order (``mega`` already is that run, see _outcome).
        assert not isinstance(mine, BaseException), f"{c}: rankmap rejected: {mine}"
        _assert_same_groups(mine, mega, c)
    elif verdict == "deviation-non-positive":
        # Deviation 3: Megatron let a non-positive size through; rankmap must not.
        assert isinstance(mine, InvalidArgumentError), f"{c}: rankmap accepted a non-positive size"
    elif verdict == "both-reject":
        assert isinstance(mine, InvalidArgumentError), (
            f"{c}: Megatron raises {type(mega).__name__}({mega}) but rankmap accepts"
        )
        assert "\n" not in str(mine)
    else:
        assert not isinstance(mine, BaseException), f"{c}: Megatron accepts but rankmap raises: {mine}"
        _assert_same_groups(mine, mega, c)


def test_case_mix_is_not_vacuous():
    """The random mix really covers what it claims to (guards against a generator regression)."""
    outcomes = [_outcome(i) for i in range(len(CASES))]
    verdicts = Counter(o[4] for o in outcomes)
    accepted = [o[1] for o in outcomes if o[4] == "both-accept"]

    def norm(order):
        return order.lower()

    assert len(CASES) >= 400
    assert verdicts["both-accept"] >= 150, verdicts
    assert verdicts["both-reject"] >= 80, verdicts
    assert verdicts["deviation-repeat"] >= 5, verdicts
    assert verdicts["deviation-case"] >= 3, verdicts
    assert sum(1 for c in accepted if norm(c.get("order", "")) not in ("tp-cp-ep-dp-pp",)) >= 80
    assert sum(1 for c in accepted if len(c.get("order", "").split("-")) < 5) >= 15  # size-1 tokens omitted
    assert sum(1 for c in accepted if not norm(c.get("order", "")).endswith("pp") and c.get("pp", 1) > 1) >= 5
    assert sum(1 for c in accepted if c.get("order", "") != c.get("order", "").lower()) >= 3  # mixed case
    assert sum(1 for c in accepted if c.get("etp") is not None and c["etp"] != c["tp"]) >= 30
    assert sum(1 for c in accepted if c.get("ep", 1) > 1) >= 50
    assert sum(1 for c in accepted if c.get("cp", 1) > 1 and c.get("hierarchical_context_parallel_sizes")) >= 20
    assert sum(1 for c in accepted if c.get("num_distributed_optimizer_instances", 1) > 1) >= 20
    assert max(c["world_size"] for c in accepted) >= 128
    assert len({norm(c.get("order", "")) for c in accepted}) >= 40
    # and what Megatron raises is more than one kind of exception
    errors = [o[2] for o in outcomes if isinstance(o[2], BaseException)]
    kinds = {type(e).__name__ for e in errors}
    assert {"RuntimeError", "AssertionError", "KeyError", "ZeroDivisionError"} <= kinds, kinds
    # each of Megatron's own checks is exercised
    for needle in ("pp-last", "Pipeline parallel groups are expected to be the same",
                   "partial DistOpt", "Expert data parallel size should be divisible",
                   "haven't", "expert_tensor_model_pipeline_parallel", "is not divisible by"):
        assert any(needle in str(e) for e in errors), needle
