"""HTML extraction in a child process that can be killed: a timeout that holds.

Beam's ``with_exception_handling(timeout=...)`` runs the DoFn in a thread and waits on
it; resiliparse and lxml keep the GIL while they parse, so the waiting thread cannot
even notice the deadline (a page of 100,000 nested ``div`` elements ran for more than
ten minutes under ``timeout_s: 20``). Here each worker keeps one extraction process
(a fresh ``python -m transforms.extract.isolated``: forking a Beam worker with live gRPC
threads is unsafe, and multiprocessing's spawn re-runs the parent's ``__main__``); the
payload goes over a socket pair and the worker waits at most ``timeout_s`` for the answer. On
a timeout or a crash of the child, the child is killed and replaced, and the record
fails with ``TimeoutError`` (or ``ExtractorCrashed``) — the caller routes it to
``failed/`` with its raw bytes. Exceptions raised by the extractor come back as
themselves. Cost: one pipe round trip per page (measured in docs/BENCHMARKS.md).
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Optional

from transforms.extract.html import Extracted, Method, extract_html

_LOGGER = logging.getLogger(__name__)

_START_TIMEOUT_S = 120.0  # importing resiliparse/trafilatura in a fresh interpreter


class ExtractorCrashed(RuntimeError):
    """The extraction process died while working on a page (a crash in native code)."""


def _serve(conn: Connection) -> None:
    """The child's loop: (payload, charset, method, max_depth) in, (ok, value) out."""
    conn.send((True, "ready"))
    while True:
        try:
            payload, charset, method, max_depth = conn.recv()
        except (EOFError, OSError):  # the parent went away
            return
        try:
            answer: tuple[bool, Any] = (True, extract_html(payload, charset, Method(method), max_depth))
        except Exception as exc:  # sent back to be raised in the parent
            exc.add_note("in the extraction process:\n" + traceback.format_exc())
            answer = (False, exc)
        try:
            conn.send(answer)
        except Exception as exc:  # an exception that does not pickle
            conn.send((False, RuntimeError(f"{type(answer[1]).__name__}: {answer[1]} ({exc})")))


class IsolatedExtractor:
    """``extract_html`` in a killable child process, with a hard ``timeout_s``."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.restarts = 0
        self._proc: Optional[subprocess.Popen[bytes]] = None
        self._conn: Optional[Connection] = None

    def _start(self) -> Connection:
        ours, theirs = socket.socketpair()
        root = str(Path(__file__).resolve().parents[2])  # the folder that holds transforms/
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
        proc = subprocess.Popen([sys.executable, "-m", "transforms.extract.isolated", str(theirs.fileno())],
                                pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
        theirs.close()
        conn = Connection(ours.detach())
        try:
            if not conn.poll(_START_TIMEOUT_S):
                raise ExtractorCrashed(f"the extraction process did not start in {_START_TIMEOUT_S:.0f}s")
            conn.recv()
        except (EOFError, OSError) as exc:
            proc.kill()
            proc.wait()
            conn.close()
            raise ExtractorCrashed(f"the extraction process failed to start (exit code {proc.returncode})") from exc
        except ExtractorCrashed:
            proc.kill()
            proc.wait()
            conn.close()
            raise
        self._proc, self._conn = proc, conn
        return conn

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc is not None else None

    def extract(self, payload: bytes, charset: str, method: Method, max_depth: int) -> Extracted:
        """The extraction of one page; raises what the extractor raised, ``TimeoutError``
        after ``timeout_s`` or ``ExtractorCrashed`` (the child is replaced either way)."""
        conn = self._conn or self._start()
        try:
            conn.send((payload, charset, method.value, max_depth))
            answered = conn.poll(self.timeout_s)
            if answered:
                ok, value = conn.recv()
        except (EOFError, OSError) as exc:  # a broken pipe or socket: the child died
            code = self._proc.poll() if self._proc is not None else None
            self._replace("crash")
            raise ExtractorCrashed(f"the extraction process died (exit code {code}) on a page of "
                                   f"{len(payload):,} bytes: {exc or type(exc).__name__}") from None
        if not answered:
            self._replace("timeout")
            raise TimeoutError(f"extraction took more than {self.timeout_s:g}s ({len(payload):,} bytes); "
                               "the extraction process was restarted")
        if not ok:
            raise value
        return value

    def _replace(self, why: str) -> None:
        self.restarts += 1
        _LOGGER.warning("extraction process %s (%s): killing it; a new one starts with the next page",
                        self.pid, why)
        self.close()

    def close(self) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            conn.close()
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])))
