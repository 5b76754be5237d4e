"""The engine's own output in a file beside the job's outputs, not on the console.

A run on Flink or Spark printed the job server's Java stack traces, Beam's runner warnings
and the SDK harness's tracebacks among our progress lines (250+ lines for a run that
ended well). While ``engine_log`` is open, every record of Beam's loggers (``apache_beam``,
at the level the run sets: WARNING) and every line of the job server JVM
(``tokenfactory.jobserver``) goes to ``<output>/logs/engine-<UTC time>.log`` instead; the
SDK worker pool and FnApiRunner's ``multi_processing`` workers write their output there
too. The console keeps our own lines; the run prints the file's path at its end and, when
a stage fails, the file's last relevant lines (errors, exceptions, ``Caused by``).

An output on an object store gets the file when the run ends (it is written locally
first, under the temporary directory).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import tempfile
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterator, Sequence

__all__ = ["ENGINE_LOGGERS", "EngineLog", "engine_log", "relevant_lines"]

ENGINE_LOGGERS = ("apache_beam", "tokenfactory.jobserver")
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# A line worth showing from the log when a stage failed.
_RELEVANT = re.compile(r"\b(ERROR|SEVERE|FATAL|CRITICAL)\b|Exception\b|Error\b|^Caused by:|Traceback")


@dataclass
class EngineLog:
    """Where the engine's output of this run goes (``path``: a local file) and where it
    ends up (``final``: the same path, or the copy under an object-store output)."""

    path: str
    final: str
    _saved: list[tuple[logging.Logger, int, bool]] = field(default_factory=list)

    def summary(self) -> str:
        """``N lines, M of them errors`` of what was logged so far; '' when nothing was."""
        try:
            with open(self.path, encoding="utf-8", errors="replace") as fh:
                lines = fh.readlines()
        except OSError:
            return ""
        if not lines:
            return ""
        errors = len(relevant_lines(lines, limit=len(lines)))
        return f"{len(lines):,} lines" + (f", {errors:,} naming an error or exception" if errors else "")

    def tail(self, limit: int = 20) -> list[str]:
        """The last ``limit`` relevant lines of the log (``relevant_lines``)."""
        try:
            with open(self.path, encoding="utf-8", errors="replace") as fh:
                return relevant_lines(fh, limit)
        except OSError:
            return []


class _BeamOnRoot(logging.Filter):
    """On the console's handlers: a record Beam's code logged on the root logger goes to
    the engine log instead."""

    def __init__(self, handler: logging.Handler) -> None:
        super().__init__()
        self._handler = handler
        self._last: "logging.LogRecord | None" = None  # one write when the root has several handlers

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "root" and f"{os.sep}apache_beam{os.sep}" in (record.pathname or ""):
            if record is not self._last and record.levelno >= self._handler.level:
                self._last = record
                self._handler.handle(record)
            return False
        return True


def relevant_lines(lines: "Iterator[str] | list[str]", limit: int = 20) -> list[str]:
    """The last ``limit`` lines that name an error, an exception or its cause."""
    kept: deque[str] = deque(maxlen=limit)
    for line in lines:
        if _RELEVANT.search(line):
            kept.append(line.rstrip("\n")[:500])
    return list(kept)


def _local_path(output: str, stamp: str) -> tuple[str, str]:
    name = f"engine-{stamp}.log"
    if "://" in output and not output.startswith("file://"):
        from apache_beam.io.filesystems import FileSystems

        local = os.path.join(tempfile.gettempdir(), f"tokenfactory-{os.getpid()}-{name}")
        return local, FileSystems.join(output, "logs", name)
    base = output[len("file://"):] if output.startswith("file://") else output
    path = os.path.join(base, "logs", name)  # made at the first record (_LazyFileHandler)
    return path, path


class _LazyFileHandler(logging.FileHandler):
    """A file handler that makes its folder and file at its first record (a run that
    logs nothing, or is refused before it starts, leaves nothing), and writes under the
    temporary directory when the output's folder cannot be written (the run then fails
    on its own, with its own message)."""

    def __init__(self, log: EngineLog) -> None:
        self._log = log
        super().__init__(log.path, encoding="utf-8", delay=True)

    def _open(self):  # type: ignore[no-untyped-def]
        try:
            os.makedirs(os.path.dirname(self.baseFilename), exist_ok=True)
            return super()._open()
        except OSError:
            fallback = os.path.join(tempfile.gettempdir(),
                                    f"tokenfactory-{os.getpid()}-{os.path.basename(self.baseFilename)}")
            self.baseFilename = self._log.path = self._log.final = fallback
            return super()._open()


@contextlib.contextmanager
def engine_log(output: str, filters: Sequence[logging.Filter] = ()) -> Iterator[EngineLog]:
    """Sends Beam's and the job server's logging to the run's engine log while open;
    ``filters`` (e.g. the run's credential masking) apply to every record it writes."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    path, final = _local_path(output, stamp)
    log = EngineLog(path, final)
    handler = _LazyFileHandler(log)
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.setLevel(logging.INFO)
    for f in filters:
        handler.addFilter(f)
    for name in ENGINE_LOGGERS:
        logger = logging.getLogger(name)
        log._saved.append((logger, logger.level, logger.propagate))
        logger.addHandler(handler)
        if name == "tokenfactory.jobserver":  # every line of the JVM (Beam's own: as the run set them)
            logger.setLevel(logging.INFO)
        logger.propagate = False
    diverted = _BeamOnRoot(handler)  # Beam also logs on the root logger ("Waiting for grpc channel")
    root_handlers = list(logging.getLogger().handlers)
    for h in root_handlers:
        h.addFilter(diverted)
    _send_subprocess_workers_here()
    _ACTIVE.append(log)
    try:
        yield log
    finally:
        _ACTIVE.remove(log)
        for h in root_handlers:
            h.removeFilter(diverted)
        for logger, level, propagate in log._saved:
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate
        handler.close()
        if log.final != log.path and os.path.exists(log.path):
            _copy_out(log.path, log.final)


def _send_subprocess_workers_here() -> None:
    """FnApiRunner's ``multi_processing`` SDK workers are shell commands that inherit this
    process's stderr (each printed Beam's import notices and its INFO lines on the
    console): while an engine log is open, their output is appended to it. Patched once
    per process on Beam's ``SubprocessSdkWorker``; without an open log nothing changes."""
    from apache_beam.runners.portability import local_job_service

    worker = local_job_service.SubprocessSdkWorker
    if getattr(worker, "_tokenfactory_engine_log", False):
        return
    original = worker.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        log = active()
        if log is None:
            return
        try:
            os.makedirs(os.path.dirname(log.path), exist_ok=True)
        except OSError:
            return  # the worker keeps the console
        self._worker_command_line += f" >>{shlex.quote(log.path)} 2>&1"

    worker.__init__ = __init__
    worker._tokenfactory_engine_log = True


def active() -> "EngineLog | None":
    """The engine log open now, if any (the job server sends it every line)."""
    return _ACTIVE[-1] if _ACTIVE else None


_ACTIVE: list[EngineLog] = []


def _copy_out(path: str, final: str) -> None:
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    try:
        with open(path, "rb") as src, FileSystems.create(final, compression_type=CompressionTypes.UNCOMPRESSED) as dst:
            dst.write(src.read())
        os.unlink(path)
    except Exception:  # noqa: BLE001 - the log is a record of the run, never a reason to fail it
        logging.getLogger(__name__).warning("engine log kept at %s (could not copy it to %s)", path, final)
