"""Progress of model training: a bar with rate and ETA on a terminal, plain lines elsewhere.

``Steps`` wraps a loop of known length (optimiser steps): on a terminal it is a tqdm bar
(rate, ETA, the last loss); on a pipe or a log file, one line every ``every_s`` seconds
and one at the end, so a CI log or ``make run > log`` shows that training is moving
without a line per step. ``Working`` is for one long call that reports nothing itself
(sentencepiece's trainer, fastText's): the elapsed time every ``every_s`` seconds.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Optional, TextIO

__all__ = ["Steps", "Working", "duration", "format_steps"]

PLAIN_EVERY_S = 10.0  # seconds between plain lines when the output is not a terminal


def duration(seconds: float) -> str:
    """``h:mm:ss`` (the progress lines of training and of the stages)."""
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def format_steps(desc: str, done: int, total: int, elapsed: float, unit: str = "step",
                 postfix: str = "") -> str:
    """``desc: done/total units (rate/s, ETA h:mm:ss) postfix [elapsed]`` (the plain line)."""
    rate = done / elapsed if elapsed > 0 else 0.0
    line = f"{desc}: {done:,}/{total:,} {unit}s ({rate:,.1f}/s"
    if 0 < done < total and rate > 0:
        line += f", ETA {duration((total - done) / rate)}"
    line += ")"
    if postfix:
        line += f" {postfix}"
    return line + f" [{duration(elapsed)}]"


def _is_tty(out: TextIO) -> bool:
    return bool(getattr(out, "isatty", lambda: False)())


class Steps:
    """Progress of ``total`` steps; ``update(n, loss=...)`` after each, ``close()`` at the end
    (or use it as a context manager)."""

    def __init__(self, total: int, desc: str, unit: str = "step", out: Optional[TextIO] = None,
                 every_s: float = PLAIN_EVERY_S) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.out = out if out is not None else sys.stderr  # looked up now: it may be redirected
        self.every_s = every_s
        self.done = 0
        self._start = self._last = time.monotonic()
        self._postfix = ""
        self._bar: Any = None
        if _is_tty(self.out):
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=desc, unit=unit, file=self.out, dynamic_ncols=True,
                             mininterval=0.2, leave=True)

    def update(self, n: int = 1, **postfix: float) -> None:
        self.done += n
        if postfix:
            self._postfix = " ".join(f"{k} {v:.3f}" for k, v in postfix.items())
        if self._bar is not None:
            if postfix:
                self._bar.set_postfix_str(self._postfix, refresh=False)
            self._bar.update(n)
            return
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            self._line()

    def _line(self) -> None:
        self.out.write(format_steps(self.desc, self.done, self.total, time.monotonic() - self._start,
                                    self.unit, self._postfix) + "\n")
        self.out.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self.done:
            self._line()

    def __enter__(self) -> "Steps":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Working:
    """``with Working("training the tokenizer"):`` prints the elapsed time every ``every_s``
    seconds (rewriting one line on a terminal) while one long call runs, and a last line
    with the total."""

    def __init__(self, desc: str, out: Optional[TextIO] = None, every_s: Optional[float] = None) -> None:
        self.desc = desc
        self.out = out if out is not None else sys.stderr
        self.tty = _is_tty(self.out)
        self.every_s = every_s if every_s is not None else (1.0 if self.tty else PLAIN_EVERY_S)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="working", daemon=True)
        self._start = time.monotonic()
        self._shown = False

    def _emit(self, final: bool = False) -> None:
        line = f"{self.desc}: {'done in' if final else 'running'} {duration(time.monotonic() - self._start)}"
        if self.tty:
            self.out.write("\r" + line + "\x1b[K" + ("\n" if final else ""))
        else:
            self.out.write(line + "\n")
        self.out.flush()
        self._shown = True

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._emit()

    def __enter__(self) -> "Working":
        self._start = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self._shown or self.tty:
            self._emit(final=True)
