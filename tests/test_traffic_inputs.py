"""Traffic inputs: explicit payloads, YAML model files and the ``rankmap traffic`` command."""

from __future__ import annotations

import argparse
import json

import pytest

from rankmap.solver import parallel_config
from rankmap.solver.errors import InvalidArgumentError
from rankmap.solver.traffic import (
    DEFAULT_MODEL,
    load_model_file,
    parse_bytes,
    parse_traffic,
    traffic_from_mapping,
    traffic_from_model,
)

SEED = DEFAULT_MODEL


# --------------------------------------------------------------------------- explicit payloads


def test_parse_traffic_values_and_units():
    assert parse_traffic("tp=4e9,dp=1e9") == {"tp": 4e9, "dp": 1e9}
    assert parse_traffic(" dp = 1GB , TP=4GB ") == {"tp": 4e9, "dp": 1e9}  # returned in class order
    assert parse_traffic("pp=512MiB,cp=2KiB,ep=3kb,edp=1.5T,embedding=0") == {
        "cp": 2048.0, "ep": 3000.0, "edp": 1.5e12, "pp": 512 * 2**20, "embedding": 0.0,
    }
    assert parse_traffic("etp=7B") == {"etp": 7.0}
    assert parse_bytes("2GiB") == 2 * 2**30
    assert parse_bytes(12) == 12.0


def _assert_traffic_error(text, needle, field):
    with pytest.raises(InvalidArgumentError) as exc:
        parse_traffic(text)
    assert needle in str(exc.value), str(exc.value)
    assert exc.value.field == field
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("value", ["-1", "inf", "nan", "1e400", "four"])
def test_parse_traffic_bad_byte_count_is_named(value):
    """A negative, non-finite or non-numeric byte count: quoted in the message, field traffic.<class>."""
    _assert_traffic_error(f"tp={value}", f"'{value}'", "traffic.tp")


@pytest.mark.parametrize(
    "text,needle,field",
    [
        ("tx=4e9", "'tx'", "traffic"),
        ("tp=1,tp=2", "'tp' given twice", "traffic.tp"),
        ("tp=4e9,,dp=1", "empty item", "traffic"),
        ("", "empty", "traffic"),
        ("tp", "'tp'", "traffic"),
        ("tp=4XB", "'XB'", "traffic.tp"),
        ("tp=", "''", "traffic.tp"),
    ],
)
def test_parse_traffic_errors(text, needle, field):
    _assert_traffic_error(text, needle, field)


def test_traffic_from_mapping():
    assert traffic_from_mapping({"tp": 4e9, "dp": "1GB", "pp": 10}) == {"tp": 4e9, "dp": 1e9, "pp": 10.0}
    assert traffic_from_mapping(None) == {}
    with pytest.raises(InvalidArgumentError, match="'bogus'"):
        traffic_from_mapping({"bogus": 1})
    with pytest.raises(InvalidArgumentError, match="negative") as exc:
        traffic_from_mapping({"dp": -5})
    assert exc.value.field == "traffic.dp"
    with pytest.raises(InvalidArgumentError, match="True"):
        traffic_from_mapping({"dp": True})
    with pytest.raises(InvalidArgumentError, match="mapping"):
        traffic_from_mapping([("tp", 1)])
    with pytest.raises(InvalidArgumentError, match="twice"):
        traffic_from_mapping({"tp": 1, "TP": 2})


# --------------------------------------------------------------------------- YAML model files


def test_load_model_file_full_and_preset(tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text(
        "name: tiny\nnum_layers: 4\nhidden_size: 256\nnum_attention_heads: 8\nnum_query_groups: 2\n"
        "ffn_hidden_size: 1024\nvocab_size: 1000\nseq_length: 512\nnum_micro_batches: 4\n"
        "swiglu: true\nnormalization: RMSNorm\nadd_bias_linear: false\nposition_embedding: rope\n"
    )
    m = load_model_file(p)
    assert (m.name, m.num_layers, m.num_query_groups, m.swiglu, m.normalization) == ("tiny", 4, 2, True, "RMSNorm")
    q = tmp_path / "p.yaml"
    q.write_text("preset: llama3-8b\nseq-length: 4096\nglobal_batch_size: 64\n")
    m = load_model_file(q)
    assert m.name == "llama3-8b" and m.seq_length == 4096 and m.num_micro_batches is None
    assert m.num_query_groups == 8


@pytest.mark.parametrize("name, text, match, field", [
    ("m.yaml", "preset: default\nhiden_size: 4096\n", "'hiden_size'", "model.hiden_size"),
    ("m.yaml", "num_layers: 4\nhidden_size: [256\nvocab_size: 1000\n", "line ", "model_file"),  # malformed YAML
    ("m.yaml", "num_layers: 4\nhidden_size: 256\nnum_layers: 8\n", "line 3.*duplicate key 'num_layers'", "model_file"),
    ("missing.yaml", None, "cannot read", "model_file"),
    ("list.yaml", "- 1\n- 2\n", "mapping", "model"),
    ("empty.yaml", "", "empty", "model_file"),
    ("bad.yaml", "preset: default\nhidden_size: -1\n", "positive integer", "model.hidden_size"),
])
def test_load_model_file_errors(tmp_path, name, text, match, field):
    """A bad model file: one line naming what is wrong (the key, the YAML line), and the field."""
    p = tmp_path / name
    if text is not None:
        p.write_text(text)
    with pytest.raises(InvalidArgumentError, match=match) as exc:
        load_model_file(p)
    assert exc.value.field == field
    assert "\n" not in str(exc.value)


# --------------------------------------------------------------------------- CLI


def _parser():
    from rankmap.cli_traffic import register

    parser = argparse.ArgumentParser(prog="rankmap")
    sub = parser.add_subparsers(dest="command")
    register(sub)
    return parser


def test_traffic_from_args_modes():
    from rankmap.cli_traffic import traffic_from_args

    cfg = parallel_config(16, tp=2, pp=4)
    p = _parser()
    # nothing given: the default model
    args = p.parse_args(["traffic", "--world-size", "16", "--tp", "2", "--pp", "4"])
    assert traffic_from_args(args, cfg) == traffic_from_model(SEED, cfg)
    # --traffic alone: exactly those payloads
    args = p.parse_args(["traffic", "--world-size", "16", "--traffic", "tp=4e9"])
    t = traffic_from_args(args, cfg)
    assert t["tp"] == 4e9 and sum(t.values()) == 4e9
    # a model plus --traffic: the model's payloads, tp replaced
    args = p.parse_args(["traffic", "--world-size", "16", "--model", "default", "--traffic", "tp=4e9"])
    t = traffic_from_args(args, cfg)
    assert t["tp"] == 4e9 and t["dp"] == traffic_from_model(SEED, cfg)["dp"]
    # an override counts as a model flag
    args = p.parse_args(["traffic", "--world-size", "16", "--num-micro-batches", "16"])
    assert traffic_from_args(args, cfg)["pp"] == 16 * 16_777_216


def test_add_model_arguments_keeps_existing_flags():
    from rankmap.cli_traffic import add_model_arguments

    p = argparse.ArgumentParser()
    p.add_argument("--traffic", default=None)
    add_model_arguments(p)  # must not raise on the duplicate --traffic
    args = p.parse_args(["--model", "llama3-8b", "--traffic", "tp=1"])
    assert args.model == "llama3-8b" and args.traffic == "tp=1"


def test_cli_json(capsys):
    from rankmap.cli import main

    rc = main(["traffic", "--world-size", "16", "--tp", "2", "--pp", "4"])
    out, err = capsys.readouterr()
    assert rc == 0 and err == ""
    doc = json.loads(out)
    assert doc["traffic"]["tp"] == 3_221_225_472
    assert doc["traffic"]["dp"] == 2_523_779_072
    assert doc["classes"]["dp"]["group"] == "DATA_PARALLEL_GROUP_WITH_CP"
    # a ring all-reduce over dp = 2 sends 2(n-1)/n * S = S per rank
    assert doc["classes"]["dp"]["bytes_sent_per_rank"] == 2_523_779_072
    assert doc["bytes_sent_per_rank"]["dp"] == 2_523_779_072
    assert [p["kind"] for p in doc["classes"]["dp"]["shape"]] == ["all_reduce"]
    assert doc["classes"]["dp"]["shape"][0]["subgroup_size"] == 2
    assert "630,944,768 parameters" in doc["classes"]["dp"]["formula"]  # 5,047,558,144 / 8
    assert "distrib_optimizer.py" in doc["classes"]["dp"]["source"]
    assert doc["model"]["name"] == "gpt-24l-4096"
    assert doc["model"]["parameters"]["total"] == 5_047_558_144
    assert doc["sizes"]["dp"] == 2


def test_cli_table(capsys):
    from rankmap.cli import main

    rc = main(["traffic", "--world-size", "16", "--tp", "2", "--pp", "4", "--format", "table"])
    out, _ = capsys.readouterr()
    assert rc == 0
    assert "3.22 GB" in out and "TENSOR_MODEL_PARALLEL_GROUP" in out and "EMBEDDING_GROUP" in out
    assert ", bf16\n" in out


def test_cli_table_names_fp8_training(capsys):
    """``--dtype fp8`` trains bf16 parameters with FP8 GEMMs (TransformerEngine, hybrid format): the header
    says so, and without sequence parallelism the tp all-reduces stay bf16 (the same 3.22 GB)."""
    from rankmap.cli import main

    rc = main(["traffic", "--world-size", "16", "--tp", "2", "--pp", "4", "--dtype", "fp8", "--format", "table"])
    out, _ = capsys.readouterr()
    assert rc == 0
    assert ", bf16 with FP8 GEMMs (hybrid)\n" in out and "3.22 GB" in out


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--model", "gpt5"], "gpt5"),
        (["--traffic", "tp=-4"], "-4"),
        (["--traffic", "xx=4"], "xx"),
        (["--model", "default", "--model-file", "x.yaml"], "not several"),
        (["--tp", "64"], "tp=64"),
        (["--global-batch-size", "3"], "global_batch_size=3"),
        (["--model-file", "/nonexistent/m.yaml"], "cannot read"),
    ],
)
def test_cli_errors_exit_2_one_line(capsys, argv, needle):
    from rankmap.cli import main

    rc = main(["traffic", "--world-size", "64"] + argv)
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and needle in err
