"""JSONL (plain, .gz, .zst, .bz2, .xz) and Parquet files of documents → ``RawRecord``.

Both formats carry text that is already extracted, so records come out with
``kind="text"``. Which fields hold the text, id, URL and fetch time is configured per
input (``TextFields``). A line or row that cannot be used (invalid JSON, not an object,
text missing or not a string) becomes a ``Failure`` naming the file, the line (or row)
and the byte offset, with the raw line; a truncated compressed file yields every line
before the damage and one ``Failure`` at the offset where decompression failed.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Union

import apache_beam as beam
import fsspec
import pyarrow.parquet as pq

from transforms import progress
from transforms.doc import Failure, RawRecord, stable_id
from transforms.readers.files import FileRef, open_decompressed, storage_options_for
from transforms.routing import FAILED, StageCounters, make_failure, route_read

_LOGGER = logging.getLogger(__name__)

TabularItem = Union[RawRecord, Failure]


@dataclass(frozen=True)
class TextFields:
    """Names of the input fields mapped onto the document record."""

    text: str = "text"
    id: str = "id"
    url: str = "url"
    fetched_at: str = "fetched_at"
    lang: str = "lang"

    def __post_init__(self) -> None:
        if not self.text:
            raise ValueError("text field name must not be empty")


def _as_str(value: Any) -> str:
    return "" if value is None else str(value)


def record_from_mapping(
    obj: Any, fields: TextFields, source: str, offset: int, position: str
) -> RawRecord:
    """A ``RawRecord`` from one JSON object / Parquet row; ``ValueError`` if unusable."""
    if not isinstance(obj, dict):
        raise ValueError(f"{source} {position}: expected a JSON object, got {type(obj).__name__}")
    text = obj.get(fields.text)
    if text is None:
        raise ValueError(f"{source} {position}: field {fields.text!r} is missing or null")
    if not isinstance(text, str):
        raise ValueError(
            f"{source} {position}: field {fields.text!r} must be a string, got {type(text).__name__}"
        )
    record_id = _as_str(obj.get(fields.id)) or stable_id(source, position)
    return RawRecord(
        kind="text",
        url=_as_str(obj.get(fields.url)),
        source=source,
        offset=offset,
        record_id=record_id,
        fetched_at=_as_str(obj.get(fields.fetched_at)),
        text=text,
        content_type="text/plain",
        lang_hint=_as_str(obj.get(fields.lang)),
    )


def iter_jsonl(url: str, fields: TextFields, stage: str) -> Iterator[TabularItem]:
    """Records of a JSONL file; compression inferred from the name (.gz, .zst, ...)."""
    offset = 0
    line_no = 0
    with open_decompressed(url) as fh:
        while True:
            try:
                line = fh.readline()
            except Exception as exc:  # EOFError, zlib / zstd errors on damaged files
                error = type(exc)(f"{url}: unreadable after line {line_no} (decompressed byte "
                                  f"{offset}): {exc or type(exc).__name__}")
                yield make_failure(stage, error, url, offset, b"", error_type="corrupt_file",
                                   with_traceback=False)
                return
            if not line:
                return
            line_no += 1
            if line.strip():
                yield _parse_line(line, url, offset, line_no, fields, stage)
            offset += len(line)


def _parse_line(
    line: bytes, url: str, offset: int, line_no: int, fields: TextFields, stage: str
) -> TabularItem:
    position = f"line {line_no}"
    try:
        obj = json.loads(line)
        return record_from_mapping(obj, fields, url, offset, position)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        message = str(exc) if str(exc).startswith(url) else f"{url} {position}: {exc}"
        return make_failure(stage, ValueError(message), url, offset, line,
                            error_type="bad_record", with_traceback=False)


def iter_parquet(url: str, fields: TextFields, stage: str) -> Iterator[TabularItem]:
    """Records of a Parquet file, one row group at a time. ``offset`` is the row index."""
    with fsspec.open(url, "rb", **storage_options_for(url)) as fh:
        try:
            pfile = pq.ParquetFile(fh)
        except Exception as exc:
            yield make_failure(stage, exc, url, 0, _head(fh), error_type="corrupt_file",
                               with_traceback=False)
            return
        names = set(pfile.schema_arrow.names)
        if fields.text not in names:
            error = ValueError(f"{url}: no column {fields.text!r} (columns: {sorted(names)})")
            yield make_failure(stage, error, url, 0, b"", error_type="bad_schema",
                               with_traceback=False)
            return
        wanted = [f for f in (fields.text, fields.id, fields.url, fields.fetched_at, fields.lang)
                  if f in names]
        row = 0
        for group in range(pfile.num_row_groups):
            yield from _iter_row_group(pfile, group, wanted, url, row, fields, stage)
            row += pfile.metadata.row_group(group).num_rows


def _iter_row_group(pfile: pq.ParquetFile, group: int, columns: list[str], url: str,
                    first_row: int, fields: TextFields, stage: str) -> Iterator[TabularItem]:
    try:
        rows = pfile.read_row_group(group, columns=columns).to_pylist()
    except Exception as exc:
        error = type(exc)(f"{url}: row group {group} (rows from {first_row}) unreadable: {exc}")
        yield make_failure(stage, error, url, first_row, b"", error_type="corrupt_file",
                           with_traceback=False)
        return
    for i, obj in enumerate(rows):
        position = f"row {first_row + i}"
        try:
            yield record_from_mapping(obj, fields, url, first_row + i, position)
        except ValueError as exc:
            raw = json.dumps(obj, default=str).encode()
            yield make_failure(stage, exc, url, first_row + i, raw, error_type="bad_record",
                               with_traceback=False)


def _head(fh: Any, n: int = 1 << 20) -> bytes:
    try:
        fh.seek(0)
        return fh.read(n)
    except Exception:
        return b""


class _ReadTabularFn(beam.DoFn):
    def __init__(self, stage: str, fmt: str, fields: TextFields) -> None:
        self._stage = stage
        self._fmt = fmt
        self._fields = fields

    def setup(self) -> None:
        self._counters = StageCounters(self._stage)

    def process(self, ref: FileRef) -> Iterator[Any]:
        reader = iter_jsonl if self._fmt == "jsonl" else iter_parquet
        try:
            for item in reader(ref.url, self._fields, self._stage):
                yield route_read(self._counters, item)
            progress.record(self._stage, "bytes", max(ref.size, 0))
        except Exception as exc:  # the file could not even be opened
            self._counters.record_in()
            self._counters.failed("unreadable_file")
            yield beam.pvalue.TaggedOutput(
                FAILED, make_failure(self._stage, exc, ref.url, -1, b"", error_type="unreadable_file")
            )


class ReadTabular(beam.PTransform):
    """``FileRef`` of JSONL or Parquet files → ``RawRecord`` (main) and ``Failure``.

    Failures count as ``records_in`` and ``failed_<error>`` of ``stage``; records that
    go on count as ``records_read`` (the stage's own DoFn counts them in).
    """

    def __init__(self, stage: str, fmt: str, fields: Optional[TextFields] = None) -> None:
        super().__init__()
        if fmt not in ("jsonl", "parquet"):
            raise ValueError(f"ReadTabular format must be jsonl or parquet, got {fmt!r}")
        self._stage = stage
        self._fmt = fmt
        self._fields = fields or TextFields()

    def expand(self, files: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        return files | "ReadRows" >> beam.ParDo(
            _ReadTabularFn(self._stage, self._fmt, self._fields)
        ).with_outputs(FAILED, main="records")
