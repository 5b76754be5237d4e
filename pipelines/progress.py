"""A live progress line for local runs: documents per stage, rate, and an ETA.

Stage DoFns record what they count here as well as in Beam metrics (``StageCounters``).
The in-process runners (FnApiRunner, DirectRunner) run those DoFns in this process, so a
thread can show the counts while the pipeline runs; on a remote or multi-process runner
the line stays empty and the per-worker progress log lines take over. The ETA needs the
input size: the readers record the bytes of every finished input file.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from typing import Optional, TextIO

from models.progress import duration
from transforms.progress import reset, snapshot


def format_line(stage: str, counts: Counter, elapsed: float, total_bytes: Optional[int]) -> str:
    rate = counts["in"] / elapsed if elapsed > 0 else 0.0
    line = (f"{stage}: {counts['in']:,} in ({rate:,.0f}/s)  out {counts['out']:,}  "
            f"rejected {counts['rejected']:,}  failed {counts['failed']:,}")
    if total_bytes:
        done = min(counts["bytes"] / total_bytes, 1.0)
        line += f"  {100 * done:5.1f}% of input"
        if 0 < done < 1:
            line += f"  ETA {duration(elapsed * (1 - done) / done)}"
    return line + f"  [{duration(elapsed)}]"


class ProgressLine:
    """Rewrites one status line on a terminal (a log-style line every ``every_s`` elsewhere)."""

    def __init__(self, stage: str, total_bytes: Optional[int] = None, out: Optional[TextIO] = None,
                 every_s: float = 1.0) -> None:
        out = out if out is not None else sys.stderr  # looked up now: it may be redirected
        self.stage, self.total_bytes, self.out = stage, total_bytes, out
        self.tty = bool(getattr(out, "isatty", lambda: False)())
        self.every_s = every_s if self.tty else max(every_s, 10.0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
        self._start = time.monotonic()

    def __enter__(self) -> "ProgressLine":
        reset(self.stage)
        self._start = time.monotonic()
        self._thread.start()
        return self

    def _emit(self) -> None:
        line = format_line(self.stage, snapshot(self.stage), time.monotonic() - self._start, self.total_bytes)
        self.out.write(("\r" + line + "\x1b[K") if self.tty else line + "\n")
        self.out.flush()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._emit()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._emit()
        if self.tty:
            self.out.write("\n")
