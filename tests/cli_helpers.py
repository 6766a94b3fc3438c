"""Running the command line in tests: ``run``, the bad-input contract ``bad_input``, job files ``write_job``."""

from __future__ import annotations

from rankmap.cli import main

__all__ = ["run", "bad_input", "write_job"]


def run(capsys, *argv) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` of ``rankmap ARGV...`` (arguments converted with ``str``)."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def bad_input(capsys, *argv, needle: str = "") -> str:
    """Run the CLI and check the bad-input contract (DESIGN §7); returns the stderr line.

    Exit 2, nothing on stdout, exactly one line on stderr containing ``needle``, no
    traceback and no "internal error".
    """
    code, out, err = run(capsys, *argv)
    assert code == 2, (code, err)
    assert out == ""
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err and "internal error" not in err, err
    assert needle in err, err
    return err


def write_job(tmp_path, cluster, body: str, name: str = "job.yaml"):
    """The job file ``tmp_path / name``: ``cluster: CLUSTER`` and then the YAML lines ``body``."""
    job = tmp_path / name
    job.write_text(f"cluster: {cluster}\n{body}\n")
    return job
