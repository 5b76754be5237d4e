"""Ctrl-C (SIGINT) and ``kill`` (SIGTERM) during a run: unwind cleanly, then be quiet.

The first of these signals raises ``SystemExit(128 + signum)`` in the main thread, so
the ``with`` blocks of the run unwind: the lease is released, the job server JVM and the
SDK worker pool this run started are stopped (Python's default for SIGTERM ends the
process at once and left both running under init; seen: a killed 3M Spark run left a
2.5 GB JVM and its pool). ``received()`` tells code that catches what the signal raised
(Beam turns it into a ``RuntimeError`` ``[while running ...]`` inside a DoFn) that the
run was interrupted rather than failed. Later signals are ignored, so a second Ctrl-C
does not break the clean-up half way (it is bounded: the lease's heartbeat thread is
joined for at most 30 s, the worker pool killed after 10 s).

From the first signal on, unless the run logs at ``DEBUG``, the way out is silent: the
logging of every module (Beam's error for the interrupted bundle, gRPC's, the job
server's Java lines, which Beam logs line by line) is switched off, and so are
tracebacks of other threads, what other threads write to stderr (the SDK harness prints
a failed instruction's traceback itself) and "Exception ignored" messages while the
interpreter ends; the command prints its one line. Before, a Ctrl-C printed 93 lines with 3
tracebacks on FnApiRunner and ended with exit 1 as if a stage had failed.

Not covered: a Ctrl-C at a terminal reaches the whole foreground process group, and
FnApiRunner's ``multi_processing`` SDK workers (``--engine direct-mp``), which Beam starts
through ``/bin/sh`` in the same group, print their own KeyboardInterrupt tracebacks
before the run stops them (a blocked SIGINT does not survive the shell, and an ignored
one is lost to the threads numpy starts at import). ``kill`` of the run's process alone
reaches only the run.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
from typing import Any, Iterator, Optional

_LOGGER = logging.getLogger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _State:
    """The first signal received while ``handled()`` is open, and whether to be quiet."""

    signum: Optional[int] = None
    quiet = False  # stays set after the run: the interpreter's end must be quiet too
    open = False  # handled() is open (signum stays readable after it closes)
    stderr: Any = None  # sys.stderr before _MainThreadOnly replaced it


class _MainThreadOnly:
    """``sys.stderr`` while an interrupted run ends quietly: writes from other threads are
    dropped. Beam's SDK harness prints a failed instruction's traceback itself, outside
    logging (``sdk_worker._execute``): on Prism, a Ctrl-C that stopped the job server while
    the harness fetched a bundle descriptor printed gRPC's UNAVAILABLE traceback (CI)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        if threading.current_thread() is threading.main_thread():
            return int(self._stream.write(text) or 0)
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _quiet_stderr() -> None:
    if _State.stderr is None:
        _State.stderr = sys.stderr
        sys.stderr = _MainThreadOnly(sys.stderr)


def _restore_stderr() -> None:
    if _State.stderr is not None:
        sys.stderr, _State.stderr = _State.stderr, None


def received() -> Optional[int]:
    """The number of the signal that interrupted the run, or None."""
    return _State.signum


def exit_code() -> int:
    """128 + the signal's number, the shell's convention (130 for Ctrl-C, 143 for kill)."""
    return 128 + (_State.signum or 0)


def raise_if_received() -> None:
    """``SystemExit(128 + signum)`` again if a signal arrived: the first one's exit can be
    swallowed where Python cannot raise it (a ``__del__`` or a weakref callback running
    in the main thread prints "Exception ignored", which the quiet hook hides, and the
    run goes on). Called after each pipeline and before a stage's manifest, so such a
    run still stops, and the stage it was in is not recorded as done."""
    if _State.open and _State.signum is not None:
        raise SystemExit(exit_code())


def _quiet_thread_hook(args: Any, previous: Any = threading.excepthook) -> None:
    if not _State.quiet:
        previous(args)


def _quiet_unraisable_hook(args: Any, previous: Any = sys.unraisablehook) -> None:
    if not _State.quiet:
        previous(args)


def _on_signal(signum: int, frame: object) -> None:
    if _State.signum is not None:
        return  # a second Ctrl-C while the run unwinds: the clean-up goes on
    _State.signum = signum
    if not logging.getLogger().isEnabledFor(logging.DEBUG):
        _State.quiet = True
        logging.disable(logging.CRITICAL)
        _quiet_stderr()
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """While open (in the main thread only: signals reach no other), SIGINT and SIGTERM
    interrupt the run as described above. The previous handlers and logging come back
    on exit (``pipelines.run.main`` also runs inside other programs, e.g. tests)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _State.signum, _State.quiet = None, False
    threading.excepthook, sys.unraisablehook = _quiet_thread_hook, _quiet_unraisable_hook
    previous = {s: signal.signal(s, _on_signal) for s in SIGNALS}
    _State.open = True
    try:
        yield
    finally:
        _State.open = False
        for s, handler in previous.items():
            signal.signal(s, handler)
        _restore_stderr()
        if _State.quiet:
            logging.disable(logging.NOTSET)


@contextlib.contextmanager
def ignored_by_children() -> Iterator[None]:
    """While open (a few milliseconds: one ``Popen``), SIGINT is ignored, so the process
    started inherits the ignored SIGINT through ``exec`` and a Ctrl-C at the terminal
    (sent to the whole process group) does not reach it: for a child the run stops
    itself. The job server JVM stopped on its own at a Ctrl-C, and the SDK harness of
    this process sometimes logged the broken data channel's traceback before the main
    thread had the signal. A Ctrl-C in the window itself is lost. Off the main thread
    (no signal handlers there) this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def stay_quiet() -> None:
    """After an interrupted run, keeps logging off until the process ends (``handled()``
    turns it back on for callers that go on)."""
    if _State.quiet:
        logging.disable(logging.CRITICAL)
        _quiet_stderr()
