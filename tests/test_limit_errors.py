"""Errors from limits name the limit and the value, one limit per quantity everywhere (issue 28.5).

* hierarchical CP levels: ``MAX_HIERARCHICAL_CP_LEVELS`` (8) in ``rankmap groups``, ``solve`` (default
  model and explicit traffic), ``traffic``, job files and the service (it was numpy's "maximum supported
  dimension is 64" at 100 levels, "at most 8" in the traffic model and 16 on the server);
* time limits: ``MAX_TIME_LIMIT_SECONDS`` (one day) for ``--time-limit``, the job key, ``SolveOptions``
  and ``rankmap serve --max-time-limit`` (``--time-limit 1e308`` was an internal OverflowError);
* a fuzz pass over the numeric flags of ``rankmap groups`` and ``solve --time-limit``: exit 0, or the
  bad-input contract.
"""

from __future__ import annotations

import grpc
import pytest

from cli_helpers import bad_input, run, write_job
from rankmap import wire
from rankmap.server.limits import Limits
from rankmap.solver import InvalidArgumentError, SolveOptions, parallel_config
from rankmap.solver.megatron.config import MAX_HIERARCHICAL_CP_LEVELS
from rankmap.solver.types import MAX_TIME_LIMIT_SECONDS
from service_helpers import live_server, raw_call, two_hosts

server = live_server(workers=1, max_queued=4)

HUNDRED = ",".join(["1"] * 100)
LEVELS_MESSAGE = "hierarchical_context_parallel_sizes has 100 levels; at most 8 are supported (MAX_HIERARCHICAL_CP_LEVELS)"


def test_one_hierarchical_cp_limit():
    assert MAX_HIERARCHICAL_CP_LEVELS == 8
    # 8 levels of 1 (product 1 = cp) are accepted, 9 are not
    assert len(parallel_config(8, hierarchical_context_parallel_sizes=[1] * 8).hierarchical_context_parallel_sizes) == 8
    with pytest.raises(InvalidArgumentError, match="has 9 levels; at most 8") as e:
        parallel_config(8, hierarchical_context_parallel_sizes=[1] * 9)
    assert e.value.field == "hierarchical_context_parallel_sizes"


@pytest.mark.parametrize("argv", [
    ["groups", "--world-size", "8"],
    ["solve", "{cluster}"],                                   # the default model
    ["solve", "{cluster}", "--traffic", "cp=1e9"],             # explicit traffic
    ["traffic", "--world-size", "8", "--model", "llama3-8b"],
])
def test_hundred_levels_cli(capsys, cluster_file, argv):
    argv = [a.format(cluster=cluster_file) for a in argv] + ["--hierarchical-cp-sizes", HUNDRED]
    err = bad_input(capsys, *argv, needle=LEVELS_MESSAGE)
    assert "world_size defaults" not in err  # not a world-size problem


def test_hundred_levels_job_file(capsys, tmp_path, cluster_file):
    job = write_job(tmp_path, cluster_file, f"hierarchical_cp_sizes: [{HUNDRED}]")
    bad_input(capsys, "solve", job, needle=LEVELS_MESSAGE)


def test_hundred_levels_service(channel):
    from test_service_limits import bad_request

    for method, req in (("GetGroups", wire.get_groups_request(8, hierarchical_context_parallel_sizes=[1] * 100)),
                        ("Solve", wire.solve_request(two_hosts(), hierarchical_context_parallel_sizes=[1] * 100))):
        code, _, err = raw_call(channel, method, req)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, method
        assert bad_request(err) == ("sizes.hierarchical_context_parallel_sizes", LEVELS_MESSAGE), method


def test_level_product_is_exact(capsys):
    # 2**32 · 2**32 = 2**64 = 18446744073709551616 (np.prod wrapped it to 0)
    bad_input(capsys, "groups", "--world-size", "8", "--hierarchical-cp-sizes", "4294967296,4294967296",
              needle="multiply to 18446744073709551616, not cp = 1")


def test_one_time_limit(capsys, tmp_path, cluster_file):
    assert MAX_TIME_LIMIT_SECONDS == 86_400.0
    assert SolveOptions(time_limit_seconds=86_400).time_limit_seconds == 86_400
    message = "time_limit_seconds 1e+308 exceeds the limit of 86400 s (MAX_TIME_LIMIT_SECONDS, one day)"
    with pytest.raises(InvalidArgumentError, match="exceeds the limit of 86400 s"):
        SolveOptions(time_limit_seconds=86_400.5)
    bad_input(capsys, "solve", cluster_file, "--time-limit", "1e308", needle=message)
    job = write_job(tmp_path, cluster_file, "time_limit: 1e308")
    bad_input(capsys, "solve", job, needle=message)
    with pytest.raises(ValueError, match="max_time_limit 1e\\+06 exceeds the solver's limit of 86400 s"):
        Limits(max_time_limit=1e6)
    code, out, err = run(capsys, "serve", "--max-time-limit", "1e9")
    assert code == 2 and out == "" and "1e9 seconds exceeds the limit of 86400 s" in err


FUZZ_VALUES = ["0", "-1", "65", "9223372036854775808", "1" + "0" * 40, "1e308", "nan", "1" * 400]


@pytest.mark.parametrize("flag", ["--world-size", "--tp", "--cp", "--ep", "--etp", "--pp",
                                  "--num-distributed-optimizer-instances", "--hierarchical-cp-sizes"])
def test_fuzz_groups_numeric_flags(capsys, flag):
    for value in FUZZ_VALUES:
        argv = ["groups", "--world-size", "8"] if flag != "--world-size" else ["groups"]
        code, out, err = run(capsys, *argv, flag, value)
        if code != 0:  # the bad-input contract: exit 2, one line, no traceback
            assert code == 2 and out == "" and err.count("\n") == 1, (flag, value, err)
            assert "Traceback" not in err and "internal error" not in err, (flag, value, err)


def test_fuzz_time_limit(capsys, cluster_file):
    for value in ("0", "-1", "1e308", "inf", "nan", "1" * 400, "86400.5"):
        bad_input(capsys, "solve", cluster_file, "--time-limit", value)
