"""Routing every record to exactly one of kept / rejected / failed, and counting it.

Each stage DoFn counts ``records_in`` once per input and then emits the input to one
output: the main output (kept), ``REJECTED`` (a ``Rejected`` with a reason code) or
``FAILED`` (a ``Failure`` carrying the raw input). That is what makes
``in == out + rejected + failed`` hold for every stage.

Every stage imports this module, so it registers the coders of the record types
(``transforms.doc.ROW_TYPES``: ``RowCoder``, schema-encoded) with Beam: the records stay
importable without Beam, and every pipeline that routes them encodes them as rows.
"""

from __future__ import annotations

import logging
import time
import traceback as traceback_mod
from typing import Any, Iterable, NamedTuple, Optional

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms import progress
from transforms.doc import ROW_TYPES, Doc, Failure, RawRecord, Rejected

_LOGGER = logging.getLogger(__name__)

for _cls in ROW_TYPES:
    beam.coders.registry.register_coder(_cls, beam.coders.RowCoder)

KEPT = "kept"
REJECTED = "rejected"
FAILED = "failed"

# Cap on the raw bytes kept with a failure: enough to replay any real web record.
DEFAULT_MAX_RAW_BYTES = 16 * 1024 * 1024


class StageOutputs(NamedTuple):
    """The three outputs of a stage transform."""

    kept: beam.PCollection
    rejected: beam.PCollection
    failed: beam.PCollection


class StageCounters:
    """Fixed-name Beam counters for one stage, plus a throttled progress log line."""

    def __init__(self, stage: str, log_every_s: float = 10.0) -> None:
        self.stage = stage
        self._in = Metrics.counter(stage, "records_in")
        self._out = Metrics.counter(stage, "records_out")
        self._chars = Metrics.distribution(stage, "chars_out")
        self._by_name: dict[str, Any] = {}
        self._local = {"in": 0, "out": 0, "rejected": 0, "failed": 0}
        self._log_every_s = log_every_s
        self._last_log = time.monotonic()

    def _counter(self, name: str) -> Any:
        counter = self._by_name.get(name)
        if counter is None:
            counter = self._by_name[name] = Metrics.counter(self.stage, name)
        return counter

    def record_in(self, n: int = 1) -> None:
        self._in.inc(n)
        self._local["in"] += n
        progress.record(self.stage, "in", n)
        self._maybe_log()

    def kept(self, chars: int = 0) -> None:
        self._out.inc()
        self._chars.update(chars)
        self._local["out"] += 1
        progress.record(self.stage, "out")
        self._maybe_log()

    def kept_many(self, n: int) -> None:
        """``n`` documents kept at once (the Arrow paths: no ``chars_out`` per document)."""
        self._out.inc(n)
        self._local["out"] += n
        progress.record(self.stage, "out", n)
        self._maybe_log()

    def rejected_many(self, reason: str, n: int) -> None:
        self._counter(f"rejected_{reason}").inc(n)
        self._local["rejected"] += n
        progress.record(self.stage, "rejected", n)
        self._maybe_log()

    def rejected(self, reason: str) -> None:
        self._counter(f"rejected_{reason}").inc()
        self._local["rejected"] += 1
        progress.record(self.stage, "rejected")
        self._maybe_log()

    def failed(self, error_type: str) -> None:
        self._counter(f"failed_{error_type}").inc()
        self._local["failed"] += 1
        progress.record(self.stage, "failed")
        self._maybe_log()

    def inc(self, name: str, n: int = 1) -> None:
        """A free counter that is not part of the in/out table (e.g. skipped records)."""
        self._counter(name).inc(n)

    def _maybe_log(self) -> None:
        now = time.monotonic()
        if now - self._last_log >= self._log_every_s:
            self._last_log = now
            seen = " ".join(f"{k}={v}" for k, v in self._local.items() if v)
            _LOGGER.info("progress %s (this worker): %s", self.stage, seen)


def make_failure(
    stage: str,
    error: BaseException | str,
    source: str,
    offset: int,
    raw: bytes,
    error_type: Optional[str] = None,
    max_raw_bytes: int = DEFAULT_MAX_RAW_BYTES,
    with_traceback: bool = True,
) -> Failure:
    """A ``Failure`` for ``error``; ``raw`` is cut at ``max_raw_bytes`` and flagged."""
    if isinstance(error, BaseException):
        kind = error_type or type(error).__name__
        message = str(error) or kind
        tb = "".join(traceback_mod.format_exception(error)) if with_traceback else ""
    else:
        kind, message, tb = error_type or "error", error, ""
    return Failure(
        stage=stage,
        error_type=kind,
        error=message[:10_000],
        source=source,
        offset=offset,
        raw=raw[:max_raw_bytes],
        raw_truncated=len(raw) > max_raw_bytes,
        traceback=tb[-20_000:],
    )


def raw_of(element: Any) -> tuple[str, int, bytes]:
    """(source, offset, raw bytes) of any stage input, for failure records."""
    if isinstance(element, RawRecord):
        raw = element.payload if element.kind == "html" else element.text.encode("utf-8", "replace")
        return element.source, element.offset, raw
    if isinstance(element, Doc):
        return element.source, -1, element.text.encode("utf-8", "replace")
    if isinstance(element, (bytes, bytearray)):
        return "", -1, bytes(element)
    return "", -1, repr(element).encode("utf-8", "replace")


class DeadLettersToFailures(beam.DoFn):
    """Turns ``with_exception_handling`` dead letters into ``Failure`` records.

    A dead letter is ``(input_element, (exc_type, exc_value, traceback_lines))``;
    timeouts arrive as ``TimeoutError``. The input was counted as ``records_in`` by the
    DoFn that raised, so it is counted here as ``failed_<error>``.
    """

    def __init__(self, stage: str) -> None:
        self._stage = stage
        self._counters: Optional[StageCounters] = None

    def setup(self) -> None:
        self._counters = StageCounters(self._stage)

    def process(self, dead_letter: tuple[Any, tuple[Any, Any, Any]]) -> Iterable[Failure]:
        element, (exc_type, exc_value, tb_lines) = dead_letter
        name = getattr(exc_type, "__name__", str(exc_type))
        source, offset, raw = raw_of(element)
        if self._counters is None:
            self.setup()
        self._counters.failed(name)  # type: ignore[union-attr]
        yield Failure(
            stage=self._stage,
            error_type=name,
            error=str(exc_value)[:10_000] or name,
            source=source,
            offset=offset,
            raw=raw[:DEFAULT_MAX_RAW_BYTES],
            raw_truncated=len(raw) > DEFAULT_MAX_RAW_BYTES,
            traceback="".join(tb_lines or [])[-20_000:],
        )


def route_read(counters: StageCounters, item: Any) -> Any:
    """A reader's item onward: a ``Failure`` to ``FAILED`` (counted in and failed: it never
    reaches the stage's own DoFn), anything else to the main output (``records_read``)."""
    if isinstance(item, Failure):
        counters.record_in()
        counters.failed(item.error_type)
        return beam.pvalue.TaggedOutput(FAILED, item)
    counters.inc("records_read")
    return item


def reject(doc: Doc, reason: str, detail: str = "") -> beam.pvalue.TaggedOutput:
    return beam.pvalue.TaggedOutput(REJECTED, Rejected(doc=doc, reason=reason, detail=detail))


def fail(failure: Failure) -> beam.pvalue.TaggedOutput:
    return beam.pvalue.TaggedOutput(FAILED, failure)


class CountFn(beam.DoFn):
    """Counts elements passing through as ``records_in``, kept, rejected or failed.

    Stages whose work runs under a timeout count outside the timed DoFn, so a
    timed-out element that finishes late in its thread is never counted twice.

    Never count right after a multi-input ``Flatten``: runners fuse the steps after a
    Flatten into each input's stage, and Beam's Flink runner reports the counters of
    only one of those copies. Count each input before flattening.
    """

    def __init__(self, stage: str, what: str) -> None:
        if what not in ("in", "kept", "rejected", "failed"):
            raise ValueError(f"CountFn counts in/kept/rejected/failed, not {what!r}")
        self._stage = stage
        self._what = what

    def setup(self) -> None:
        self._counters = StageCounters(self._stage)

    def process(self, element: Any) -> Iterable[Any]:
        if self._what == "in":
            self._counters.record_in()
        elif self._what == "kept":
            self._counters.kept(len(getattr(element, "text", "")))
        elif self._what == "rejected":
            self._counters.rejected(element.reason)
        else:
            self._counters.failed(element.error_type)
        yield element
