"""JSONL (plain, .gz, .zst, .bz2, .xz) and Parquet files of documents → ``RawRecord``.

Both formats carry text that is already extracted, so records come out with
``kind="text"``. Which fields hold the text, id, URL and fetch time is configured per
input (``TextFields``); a name with dots is a path into nested objects (Dolma keeps the
URL in ``metadata.url``; a Parquet struct column reads the same way), unless the record
has a top-level key of exactly that name. A line or row that cannot be used (invalid
JSON, not an object, text missing or not a string) becomes a ``Failure`` naming the
file, the line (or row) and the byte offset, with the raw line; a truncated compressed
file yields every line before the damage and one ``Failure`` at the offset where
decompression failed. An optional field the config names (one not left at its default
name) that a record lacks or holds null is counted, ``missing_<role>`` (``missing_url``,
...), and shown in the run's table: a misspelt path does not read nothing silently.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional, Union

import apache_beam as beam
import fsspec
import pyarrow.parquet as pq

from transforms import progress
from transforms.doc import Failure, RawRecord, stable_id
from transforms.readers.files import FileRef, open_decompressed, storage_options_for
from transforms.routing import FAILED, StageCounters, make_failure, route_read

_LOGGER = logging.getLogger(__name__)

TabularItem = Union[RawRecord, Failure]
OnMissing = Callable[[str], None]  # called with the role ("url", "id", ...) of a missing field


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

    def optional(self) -> dict[str, str]:
        """role → field name of the fields besides the text."""
        return {"id": self.id, "url": self.url, "fetched_at": self.fetched_at, "lang": self.lang}

    def expected(self) -> dict[str, str]:
        """The optional fields named explicitly (not their default names): a record
        without one is counted. The default names are conventions that many sources
        lack some of (``fetched_at``, ``lang``), so they are read when present only."""
        defaults = TextFields().optional()
        return {role: name for role, name in self.optional().items() if name != defaults[role]}

    def columns(self, available: Iterable[str]) -> list[str]:
        """The top-level columns of ``available`` that hold the configured fields."""
        names = set(available)
        found = (column_of(name, names) for name in (self.text, *self.optional().values()))
        return [c for c in dict.fromkeys(found) if c is not None]


def column_of(name: str, available: set[str]) -> Optional[str]:
    """The top-level column holding field ``name``: the column of that name, else the
    first part of a dotted path; None when neither exists."""
    if name in available:
        return name
    top = name.split(".", 1)[0]
    return top if top in available else None


def field_value(obj: dict[str, Any], name: str) -> Any:
    """The value of field ``name``: the top-level key of that name, else the dotted path
    through nested objects (``metadata.url``); None when absent on the way."""
    if name in obj:
        return obj[name]
    value: Any = obj
    for part in name.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _as_str(value: Any) -> str:
    return "" if value is None else str(value)


def record_from_mapping(
    obj: Any, fields: TextFields, source: str, offset: int, position: str,
    id_position: Optional[str] = None, on_missing: Optional[OnMissing] = None,
) -> RawRecord:
    """A ``RawRecord`` from one JSON object / Parquet row; ``ValueError`` if unusable.
    A record with an id gets its document id from ``document_id`` (``ReadInputs``: the
    file's name and the record's offset); without an id field it is
    ``stable_id(source, id_position or position)``.
    ``on_missing`` gets the role of each ``fields.expected()`` field the record lacks."""
    if not isinstance(obj, dict):
        raise ValueError(f"{source} {position}: expected a JSON object, got {type(obj).__name__}")
    text = field_value(obj, fields.text)
    if text is None:
        raise ValueError(f"{source} {position}: field {fields.text!r} is missing or null")
    if not isinstance(text, str):
        raise ValueError(
            f"{source} {position}: field {fields.text!r} must be a string, got {type(text).__name__}"
        )
    values = {role: field_value(obj, name) for role, name in fields.optional().items()}
    if on_missing is not None:
        for role in fields.expected():
            if values[role] is None:
                on_missing(role)
    own_id = _as_str(values["id"])
    return RawRecord(
        kind="text",
        url=_as_str(values["url"]),
        source=source,
        offset=offset,
        record_id=own_id,
        doc_id="" if own_id else stable_id(source, id_position or position),
        fetched_at=_as_str(values["fetched_at"]),
        text=text,
        content_type="text/plain",
        lang_hint=_as_str(values["lang"]),
    )


def iter_jsonl(url: str, fields: TextFields, stage: str, start: int = 0,
               end: int = -1, on_missing: Optional[OnMissing] = None) -> Iterator[TabularItem]:
    """Records of a JSONL file (compression inferred from the name: .gz, .zst, ...), or
    of the lines that start in ``[start, end)`` of an uncompressed one. A record without
    an id gets one from the file and its byte offset, so ids do not depend on how the
    file was split; errors name the line where it is known (reads from the start).
    ``on_missing``: see ``record_from_mapping``."""
    line_no = 0 if start == 0 else None
    with open_decompressed(url) as fh:
        offset = _seek_line(fh, start) if start > 0 else 0
        while end < 0 or offset < end:
            try:
                line = fh.readline()
            except Exception as exc:  # EOFError, zlib / zstd errors on damaged files
                where = f"line {line_no}" if line_no is not None else f"the line at byte {offset}"
                error = type(exc)(f"{url}: unreadable after {where} (decompressed byte "
                                  f"{offset}): {exc or type(exc).__name__}")
                yield make_failure(stage, error, url, offset, b"", error_type="corrupt_file",
                                   with_traceback=False)
                return
            if not line:
                return
            if line_no is not None:
                line_no += 1
            if line.strip():
                yield _parse_line(line, url, offset, line_no, fields, stage, on_missing)
            offset += len(line)


def _seek_line(fh: Any, start: int) -> int:
    """Moves to the first line that starts at or after ``start``; returns its offset."""
    fh.seek(start - 1)
    if fh.read(1) == b"\n":
        return start
    return start + len(fh.readline())  # the rest of a line owned by the range before


def _parse_line(
    line: bytes, url: str, offset: int, line_no: Optional[int], fields: TextFields, stage: str,
    on_missing: Optional[OnMissing] = None,
) -> TabularItem:
    where = f"line {line_no} (byte {offset})" if line_no is not None else f"line at byte {offset}"
    try:
        obj = json.loads(line)
        return record_from_mapping(obj, fields, url, offset, where, id_position=f"byte {offset}",
                                   on_missing=on_missing)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        message = str(exc) if str(exc).startswith(url) else f"{url} {where}: {exc}"
        return make_failure(stage, ValueError(message), url, offset, line,
                            error_type="bad_record", with_traceback=False)


def iter_parquet(url: str, fields: TextFields, stage: str,
                 on_missing: Optional[OnMissing] = None) -> Iterator[TabularItem]:
    """Records of a Parquet file, one row group at a time. ``offset`` is the row index.
    A dotted field name reads inside a struct column. ``on_missing``: see
    ``record_from_mapping``."""
    with fsspec.open(url, "rb", **storage_options_for(url)) as fh:
        try:
            pfile = pq.ParquetFile(fh)
        except Exception as exc:
            yield make_failure(stage, exc, url, 0, _head(fh), error_type="corrupt_file",
                               with_traceback=False)
            return
        names = set(pfile.schema_arrow.names)
        if column_of(fields.text, names) is None:
            error = ValueError(f"{url}: no column {fields.text!r} (columns: {sorted(names)})")
            yield make_failure(stage, error, url, 0, b"", error_type="bad_schema",
                               with_traceback=False)
            return
        wanted = fields.columns(names)
        row = 0
        for group in range(pfile.num_row_groups):
            yield from _iter_row_group(pfile, group, wanted, url, row, fields, stage, on_missing)
            row += pfile.metadata.row_group(group).num_rows


def _iter_row_group(pfile: pq.ParquetFile, group: int, columns: list[str], url: str,
                    first_row: int, fields: TextFields, stage: str,
                    on_missing: Optional[OnMissing]) -> Iterator[TabularItem]:
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
            yield record_from_mapping(obj, fields, url, first_row + i, position, on_missing=on_missing)
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

    def _missing(self, role: str) -> None:
        self._counters.inc(f"missing_{role}")

    def process(self, ref: FileRef) -> Iterator[Any]:
        try:
            items = (iter_jsonl(ref.url, self._fields, self._stage, ref.start, ref.end, self._missing)
                     if self._fmt == "jsonl" else iter_parquet(ref.url, self._fields, self._stage, self._missing))
            for item in items:
                yield route_read(self._counters, item)
            progress.record(self._stage, "bytes", ref.span)
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

    def expand(self, files: beam.PCollection[FileRef]) -> beam.pvalue.DoOutputsTuple:
        return files | "ReadRows" >> beam.ParDo(
            _ReadTabularFn(self._stage, self._fmt, self._fields)
        ).with_outputs(FAILED, main="records")
