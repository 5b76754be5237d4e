"""The extract stage: ``RawRecord`` → ``Doc`` (HTML extracted, text passed through).

Each record is kept, rejected with an ``ExtractReason`` or failed. A page that makes the
parser raise, nests deeper than ``max_depth`` or runs past ``timeout_s`` becomes a
``failed/extract`` record with its raw bytes (``with_exception_handling``), and the job
goes on up to the configured error ratio. With ``isolation: process`` (the default) the
HTML is extracted in a child process that is killed at the timeout
(``transforms.extract.isolated``); ``isolation: thread`` uses Beam's thread timeout,
which native parsers holding the GIL do not let fire.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import typing
from dataclasses import dataclass
from enum import Enum
from typing import Callable, Iterator, Optional, Union

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.doc import Doc, RawRecord, document_id, stable_id
from transforms.extract.html import (
    MAX_HTML_DEPTH,
    Extracted,
    Method,
    extract_html,
    looks_like_html,
    normalize_text,
)
from transforms.extract.isolated import IsolatedExtractor
from transforms.routing import (
    FAILED,
    REJECTED,
    CountFn,
    DeadLettersToFailures,
    StageOutputs,
    reject,
)

_LOGGER = logging.getLogger(__name__)

ISOLATIONS = ("process", "thread")
HTML_MIME_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_SNIFF_MIME_TYPES = frozenset({"", "application/xml", "text/xml", "application/octet-stream"})


class ExtractReason(str, Enum):
    HTTP_STATUS = "http_status"  # a redirect, 404, 500... stored in the WARC
    CONTENT_TYPE = "content_type"  # not HTML (images, PDF, JSON...)
    EMPTY = "empty"  # no text after extraction
    TOO_SHORT = "too_short"  # fewer characters than ``min_chars``


@dataclass(frozen=True)
class ExtractConfig:
    """How HTML becomes text. ``max_error_ratio`` fails the job above that failure rate."""

    # cascade (resiliparse; trafilatura for pages whose text is still mostly short lines)
    # | resiliparse | trafilatura
    method: str = Method.CASCADE.value
    timeout_s: float = 10.0  # per page; a page past it goes to failed/extract/
    min_chars: int = 1  # a shorter text is rejected (too_short)
    max_error_ratio: float = 0.05  # share of failed records above which the job fails (every stage but crawl)
    max_depth: int = MAX_HTML_DEPTH  # HTML nested deeper fails instead of exhausting the parser's recursion
    isolation: str = "process"  # process (a child killed at the timeout) | thread (Beam's timeout)

    def __post_init__(self) -> None:
        if self.method not in {m.value for m in Method}:
            raise ValueError(f"method must be one of {[m.value for m in Method]}, got {self.method!r}")
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ValueError(f"timeout_s must be a finite number > 0, got {self.timeout_s}")
        if self.max_depth < 1:
            raise ValueError(f"max_depth must be >= 1, got {self.max_depth}")
        if self.isolation not in ISOLATIONS:
            raise ValueError(f"isolation must be one of {list(ISOLATIONS)}, got {self.isolation!r}")
        if self.min_chars < 0:
            raise ValueError(f"min_chars must be >= 0, got {self.min_chars}")
        if not 0.0 < self.max_error_ratio <= 1.0:
            raise ValueError(f"max_error_ratio must be in (0, 1], got {self.max_error_ratio}")


def record_doc_id(record: RawRecord) -> str:
    """The document id of ``record``: its reader's choice, else ``document_id`` of its own
    id (a WARC-Record-ID), else a hash of its file, offset and URL."""
    if record.doc_id:
        return record.doc_id
    if record.record_id:
        return document_id(record.source, record.offset, record.record_id)
    return stable_id(record.source, record.offset, record.url)


def _doc_shell(record: RawRecord) -> Doc:
    return Doc(
        id=record_doc_id(record),
        source_id=record.record_id,
        url=record.url,
        text="",
        source=record.source,
        fetched_at=record.fetched_at,
        title=record.title,
        lang_hint=record.lang_hint,
        truncated=record.truncated,
    )


def classify(record: RawRecord) -> Union[ExtractReason, None]:
    """The reason a record cannot hold a document, or None if it should be extracted."""
    if record.kind != "html":
        return None
    if record.http_status and not 200 <= record.http_status < 300:
        return ExtractReason.HTTP_STATUS
    if record.content_type in HTML_MIME_TYPES:
        return None
    if record.content_type in _SNIFF_MIME_TYPES and looks_like_html(record.payload):
        return None
    return ExtractReason.CONTENT_TYPE


Extractor = Callable[[bytes, str, Method, int], Extracted]


def extract_record(record: RawRecord, config: ExtractConfig,
                   on_method: Optional[Callable[[str], None]] = None,
                   extractor: Extractor = extract_html) -> Union[Doc, tuple[Doc, ExtractReason, str]]:
    """The ``Doc`` of ``record``, or (shell doc, reason, detail) when it is rejected.
    ``on_method`` is told which extractor produced the text of an HTML page."""
    shell = _doc_shell(record)
    reason = classify(record)
    if reason == ExtractReason.HTTP_STATUS:
        return shell, reason, f"HTTP {record.http_status}"
    if reason == ExtractReason.CONTENT_TYPE:
        return shell, reason, record.content_type or "unknown"
    if record.kind == "html":
        out = extractor(record.payload, record.charset, Method(config.method), config.max_depth)
        if on_method is not None:
            on_method(out.method)
        doc = dataclasses.replace(shell, text=out.text, title=out.title,
                                  lang_hint=out.lang_hint or record.lang_hint)
    else:
        doc = dataclasses.replace(shell, text=normalize_text(record.text))
    if not doc.text:
        return doc, ExtractReason.EMPTY, ""
    if len(doc.text) < config.min_chars:
        return doc, ExtractReason.TOO_SHORT, f"{len(doc.text)} < {config.min_chars} chars"
    return doc


class _ExtractFn(beam.DoFn):
    """Pure routing of one record; in/out counting happens outside (see ``CountFn``);
    ``extracted_<method>`` counts which extractor made each HTML page's text (the
    cascade's fallback share), ``truncated_payload`` the records the reader cut at its
    size limit (marked ``Doc.truncated``)."""

    def __init__(self, config: ExtractConfig, stage: str = "extract") -> None:
        self._config = config
        self._stage = stage

    def setup(self) -> None:
        self._methods = {m.value: Metrics.counter(self._stage, f"extracted_{m.value}") for m in Method}
        self._truncated = Metrics.counter(self._stage, "truncated_payload")
        self._isolated: Optional[IsolatedExtractor] = None
        self._extractor: Extractor = extract_html
        if self._config.isolation == "process":
            self._isolated = IsolatedExtractor(self._config.timeout_s)
            self._extractor = self._isolated.extract

    def teardown(self) -> None:
        if getattr(self, "_isolated", None) is not None:
            self._isolated.close()  # type: ignore[union-attr]

    def process(self, record: RawRecord) -> Iterator[object]:
        if record.truncated:
            self._truncated.inc()
        result = extract_record(record, self._config, lambda m: self._methods[m].inc(), self._extractor)
        if isinstance(result, Doc):
            yield result
        else:
            doc, reason, detail = result
            yield reject(doc, reason.value, detail)


class ExtractText(beam.PTransform):
    """``RawRecord`` → ``StageOutputs`` (kept ``Doc``, ``Rejected``, ``Failure``)."""

    def __init__(self, config: ExtractConfig = ExtractConfig(), stage: str = "extract") -> None:
        super().__init__()
        self._config = config
        self._stage = stage

    def expand(self, records: beam.PCollection[RawRecord]) -> StageOutputs:
        stage = self._stage
        results = (
            records
            | "CountIn" >> beam.ParDo(CountFn(stage, "in"))
            # the rejected output's type declared: Beam warned "Tags {'rejected'} requested in
            # with_outputs() but not declared" beside the dead letters' declared type
            | "Extract" >> beam.ParDo(_ExtractFn(self._config, stage))
            .with_output_types(typing.Any, **{REJECTED: typing.Any})
            .with_exception_handling(
                main_tag="kept",
                dead_letter_tag=FAILED,
                # in a child process the extractor enforces the timeout itself
                timeout=None if self._config.isolation == "process" else self._config.timeout_s,
                threshold=self._config.max_error_ratio,
            )
            .with_outputs(REJECTED, main="kept")
        )
        return StageOutputs(
            kept=results["kept"] | "CountKept" >> beam.ParDo(CountFn(stage, "kept")),
            rejected=results[REJECTED] | "CountRejected" >> beam.ParDo(CountFn(stage, "rejected")),
            failed=results[FAILED] | "ToFailures" >> beam.ParDo(DeadLettersToFailures(stage)),
        )
