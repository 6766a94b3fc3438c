"""Progress bars on stderr for ``rankmap batch`` and ``rankmap solve`` (tqdm).

Bars go to stderr only, never into the JSON output, and are shown only on a
terminal unless asked for (``--progress``).  The solver core knows nothing of
them: :class:`SolveProgress` is the ``progress`` callback that
:func:`rankmap.solver.solve` calls at its phase boundaries and when its best
predicted time improves.
"""

from __future__ import annotations

import sys
import threading
from typing import TextIO

__all__ = ["progress_enabled", "BatchProgress", "SolveProgress", "format_seconds"]

#: A solve shorter than this shows no bar at all.
SOLVE_DELAY_SECONDS = 1.0
#: How often a shown solve bar's clock is redrawn between solver callbacks.
_TICK_SECONDS = 0.5


def progress_enabled(forced: bool | None, stream: TextIO | None = None, quiet: bool = False) -> bool:
    """Whether to draw a bar: forced on by ``--progress``, else only when ``stream`` is a terminal.

    ``quiet`` turns the terminal default off (an explicit ``--progress`` still wins).
    """
    if forced:
        return True
    if quiet:
        return False
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def format_seconds(x: float | None) -> str:
    """A predicted time for people: ``175.6 ms``, ``1.25 s``, ``83.3 us``."""
    if x is None:
        return "-"
    if x >= 1:
        return f"{x:.3g} s" if x < 100 else f"{x:.0f} s"
    if x >= 1e-3:
        return f"{x * 1e3:.4g} ms"
    return f"{x * 1e6:.4g} us"


class BatchProgress:
    """The batch bar: jobs done of the total, ok / failed, rate and ETA (tqdm).

    Parameters
    ----------
    total : int
        Number of jobs.
    enabled : bool
        Draw the bar (see :func:`progress_enabled`); when False every call is a no-op.
    stream : file, optional
        Where to draw it (default stderr).
    """

    def __init__(self, total: int, enabled: bool, stream: TextIO | None = None):
        self.total = total
        self.done = 0
        self.failed = 0
        self._bar = None
        if enabled:
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit="job", desc="batch", file=sys.stderr if stream is None else stream,
                             dynamic_ncols=True, leave=True, smoothing=0.1)
            self._bar.set_postfix_str("0 ok, 0 failed", refresh=False)

    def update(self, ok: bool) -> None:
        """Count one finished job (``ok`` False for a failure)."""
        self.done += 1
        self.failed += 0 if ok else 1
        if self._bar is not None:
            self._bar.set_postfix_str(f"{self.done - self.failed} ok, {self.failed} failed", refresh=False)
            self._bar.update(1)

    def close(self) -> None:
        """Finish the bar (leaves its last state on its own line)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class SolveProgress:
    """A one-line solve status on stderr: phase, best predicted time so far, elapsed.

    Use it as a context manager and pass it as ``progress=`` to
    :func:`rankmap.solver.solve`.  Nothing is drawn unless the solve is still
    running after :data:`SOLVE_DELAY_SECONDS`; the line is cleared at the end.

    Parameters
    ----------
    enabled : bool
        Draw it at all (see :func:`progress_enabled`).
    stream : file, optional
        Where to draw it (default stderr).
    delay : float, optional
        Seconds before the line first appears (default :data:`SOLVE_DELAY_SECONDS`).
    """

    def __init__(self, enabled: bool, stream: TextIO | None = None, delay: float | None = None):
        self.enabled = enabled
        self.stream = sys.stderr if stream is None else stream
        self.delay = SOLVE_DELAY_SECONDS if delay is None else delay
        self.phase: str | None = None
        self.best: float | None = None
        self._bar = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> "SolveProgress":
        if self.enabled:
            from tqdm import tqdm

            self._bar = tqdm(total=None, desc="solve: starting", file=self.stream, delay=self.delay,
                             bar_format="{desc}{postfix} [{elapsed}]", miniters=0, mininterval=0, leave=False,
                             dynamic_ncols=True)
            self._thread = threading.Thread(target=self._tick, name="rankmap-solve-progress", daemon=True)
            self._thread.start()
        return self

    def __call__(self, phase: str, best_seconds: float | None) -> None:
        """The solver's callback: a new phase, or a better best predicted time."""
        self.phase = phase
        self.best = best_seconds
        with self._lock:
            if self._bar is None:
                return
            self._bar.set_description_str(f"solve: {phase}", refresh=False)
            if best_seconds is not None:
                self._bar.set_postfix_str(f"best {format_seconds(best_seconds)}", refresh=False)
            self._bar.update(0)

    def _tick(self) -> None:
        while not self._stop.wait(_TICK_SECONDS):
            with self._lock:
                if self._bar is None:
                    return
                self._bar.update(0)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None
