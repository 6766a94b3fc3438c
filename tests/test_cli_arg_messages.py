"""Messages of the argparse number types: they name the value and say what is expected, truthfully
(a float flag takes ``1e9``, so "ASCII digits only" is not its rule; ``0`` is ASCII digits)."""

from __future__ import annotations

import pytest

from cli_helpers import bad_input


@pytest.mark.parametrize("value", ["nan", "inf", "abc", "1_0"])
def test_float_flag_message_names_the_value(capsys, cluster_file, value):
    err = bad_input(capsys, "solve", cluster_file, "--tp", "2", "--time-limit", value)
    assert err == (f"rankmap solve: error: argument --time-limit: expected a finite number (e.g. 1.5 or 4e9), "
                   f"got {value!r}\n")


def test_positive_int_flag_zero_is_out_of_range_not_non_ascii(capsys):
    err = bad_input(capsys, "view", "result.json", "-o", "x.html", "--max-hosts", "0")
    assert err == "rankmap view: error: argument --max-hosts: expected a positive integer, got 0\n"


def test_positive_int_flag_non_digits_still_says_ascii(capsys):
    err = bad_input(capsys, "view", "result.json", "-o", "x.html", "--max-hosts", "٨")
    assert err == "rankmap view: error: argument --max-hosts: expected a positive integer, got '٨' (ASCII digits only)\n"


@pytest.mark.parametrize("order", [("--compact", "--format", "table"), ("--format", "table", "--compact")])
def test_groups_compact_with_table_is_refused(capsys, order):
    """``--compact`` shapes the JSON only: with ``--format table`` it used to be ignored silently (exit 0)."""
    err = bad_input(capsys, "groups", "--world-size", "8", *order)
    assert err == "rankmap: error: --compact shapes the JSON; it cannot be combined with --format table [compact]\n"


def test_groups_compact_json_still_works(capsys):
    from cli_helpers import run

    code, out, err = run(capsys, "groups", "--world-size", "8", "--tp", "2", "--ep", "2", "--compact")
    assert code == 0 and err == ""
    assert out.startswith('{"order":"tp-cp-ep-dp-pp","world_size":8,')


def test_a_negative_size_is_out_of_range_not_non_digits(capsys, cluster_file):
    """``-2`` is an integer: the message says the range (sizes >= 0; positive flags >= 1)."""
    err = bad_input(capsys, "solve", cluster_file, "--tp", "-2")
    assert err == "rankmap solve: error: argument --tp: expected an integer >= 0, got -2\n"
    err = bad_input(capsys, "view", "result.json", "-o", "x.html", "--max-hosts", "-3")
    assert err == "rankmap view: error: argument --max-hosts: expected an integer >= 1, got -3\n"


def test_an_output_in_a_missing_directory_is_refused_before_the_solve(capsys, cluster_file, tmp_path, monkeypatch):
    import rankmap.cli_solve as cli_solve

    def no_solve(*a, **k):  # the refusal must come before the search
        raise AssertionError("solved")

    monkeypatch.setattr(cli_solve, "solve_from_args", no_solve)
    missing = tmp_path / "no" / "such" / "x"
    for emit in ("torchrun", "html"):
        err = bad_input(capsys, "solve", cluster_file, "--tp", "2", "--emit", emit, "-o", str(missing))
        assert err == (f"rankmap: error: cannot write {str(missing)!r}: directory {str(missing.parent)!r} "
                       "does not exist [output]\n")
