"""WARC, WET and ARC records → ``RawRecord``, surviving truncated and corrupt files.

warcio parses the records. It does not report damage: a truncated gzip member or a
corrupt block just ends the record early (or ends the file). So after each record this
reader checks that the whole WARC block was read; when it was not, it emits a
``Failure`` naming the file and the record's offset with the raw bytes from there, then
resynchronises at the next gzip member (or ``WARC/`` line) that parses and reads on.
Every record before the damage, and every intact record after it, is kept.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
import zlib
from dataclasses import dataclass
from typing import IO, Iterator, Optional, Union

import apache_beam as beam
from warcio.archiveiterator import ArchiveIterator

from transforms import progress
from transforms.doc import Failure, RawRecord
from transforms.readers.files import FileRef, open_input
from transforms.routing import FAILED, StageCounters, make_failure, route_read

_LOGGER = logging.getLogger(__name__)

DOCUMENT_TYPES = ("response", "resource", "conversion")
HTML_TYPES = ("text/html", "application/xhtml+xml", "application/xml", "text/xml", "")
_GZIP_MAGIC = b"\x1f\x8b\x08"
_RESYNC_CHUNK = 1 << 20


@dataclass(frozen=True)
class WarcLimits:
    """Per-record limits. Payloads over ``max_payload_bytes`` are cut and flagged."""

    max_payload_bytes: int = 10 * 1024 * 1024
    max_failed_raw_bytes: int = 16 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.max_payload_bytes <= 0 or self.max_failed_raw_bytes <= 0:
            raise ValueError("WarcLimits sizes must be positive")


WarcItem = Union[RawRecord, Failure, str]  # str: the type of a skipped non-document record


def _mime_and_charset(content_type: str) -> tuple[str, str]:
    parts = [p.strip() for p in content_type.split(";")]
    mime = parts[0].lower() if parts else ""
    charset = ""
    for param in parts[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            charset = value.strip().strip("\"'").lower()
    return mime, charset


def _read_limited(stream: IO[bytes], limit: int) -> tuple[bytes, bool]:
    data = stream.read(limit + 1)
    if len(data) > limit:
        return data[:limit], True
    return data, False


def _drain(stream: IO[bytes]) -> None:
    while stream.read(1 << 16):
        pass


# ARC records have no record id; warcio's ARC→WARC conversion makes up a random one on
# every read. Ours is a uuid5 of (file name, offset, URL, date): the same on every read
# and every runner, and unchanged when the file moves to another directory or bucket.
_ARC_ID_NAMESPACE = uuid.UUID("6f0c2a4e-5c1b-4f3e-9a57-2d8f6b1e0c3a")


def arc_record_id(url_of_file: str, offset: int, url: str, date: str) -> str:
    name = url_of_file.replace("\\", "/").rsplit("/", 1)[-1]
    key = "\x00".join((name, str(offset), url, date))
    return f"<urn:uuid:{uuid.uuid5(_ARC_ID_NAMESPACE, key)}>"


def _to_raw_record(record, url_of_file: str, offset: int, limits: WarcLimits) -> RawRecord:
    headers = record.rec_headers
    url = headers.get_header("WARC-Target-URI") or ""
    fetched_at = headers.get_header("WARC-Date") or ""
    record_id = headers.get_header("WARC-Record-ID") or ""
    if record.rec_type == "conversion":
        data, truncated = _read_limited(record.content_stream(), limits.max_payload_bytes)
        lang = (headers.get_header("WARC-Identified-Content-Language") or "").split(",")[0]
        return RawRecord(
            kind="text", url=url, source=url_of_file, offset=offset, record_id=record_id,
            fetched_at=fetched_at, text=data.decode("utf-8", "replace"),
            content_type="text/plain", lang_hint=lang, truncated=truncated,
        )
    status = 0
    lang_hint = ""
    if record.http_headers is not None and record.rec_type == "response":
        status = int(record.http_headers.get_statuscode() or 0)
        content_type = record.http_headers.get_header("Content-Type") or ""
        lang_hint = record.http_headers.get_header("Content-Language") or ""
    else:
        content_type = headers.get_header("Content-Type") or ""
    mime, charset = _mime_and_charset(content_type)
    payload, truncated = b"", False
    if mime in HTML_TYPES and (status == 0 or 200 <= status < 300):
        payload, truncated = _read_limited(record.content_stream(), limits.max_payload_bytes)
    return RawRecord(
        kind="html", url=url, source=url_of_file, offset=offset, record_id=record_id,
        fetched_at=fetched_at, payload=payload, content_type=mime, http_status=status,
        charset=charset, lang_hint=lang_hint.split(",")[0].strip(), truncated=truncated,
    )


def _read_raw(fh: IO[bytes], start: int, stop: Optional[int], cap: int) -> bytes:
    fh.seek(start)
    want = cap + 1 if stop is None else min(cap + 1, max(0, stop - start))
    return fh.read(want)


def _is_gzip(fh: IO[bytes]) -> bool:
    fh.seek(0)
    return fh.read(3) == _GZIP_MAGIC


def _head(fh: IO[bytes], pos: int, gzipped: bool) -> Optional[bytes]:
    """The first bytes of the record at ``pos`` (decompressed), None if it is no gzip member."""
    fh.seek(pos)
    head = fh.read(4096)
    if gzipped:
        try:
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, 64)
        except zlib.error:
            return None
    return head


def _valid_start(fh: IO[bytes], pos: int, gzipped: bool) -> bool:
    head = _head(fh, pos, gzipped)
    return head is not None and (head.startswith(b"WARC/") or head[:1].isalnum())  # or ARC URL line


def _archive_kind(fh: IO[bytes], gzipped: bool) -> Optional[str]:
    """"warc", "arc" or None (not an archive) from the first bytes of the file."""
    head = _head(fh, 0, gzipped)
    start = head.lstrip(b"\r\n") if head is not None else b""
    if start.startswith(b"WARC/"):
        return "warc"
    return "arc" if start.startswith(b"filedesc://") else None


def _has_data_after(fh: IO[bytes], pos: int) -> bool:
    fh.seek(pos)
    return bool(fh.read(_RESYNC_CHUNK).strip(b"\r\n\x00 "))


def find_resync(fh: IO[bytes], start: int, gzipped: bool) -> Optional[int]:
    """The first offset >= ``start`` where a whole record (gzip member) begins."""
    marker = _GZIP_MAGIC if gzipped else b"\nWARC/"
    skip = 0 if gzipped else 1
    pos = start
    while True:
        fh.seek(pos)
        chunk = fh.read(_RESYNC_CHUNK + len(marker))
        if len(chunk) < len(marker):
            return None
        idx = chunk.find(marker)
        while idx != -1:
            candidate = pos + idx + skip
            if _valid_start(fh, candidate, gzipped):
                return candidate
            fh.seek(pos)
            idx = chunk.find(marker, idx + 1)
        pos += _RESYNC_CHUNK


def iter_warc(fh: IO[bytes], url: str, limits: WarcLimits, stage: str) -> Iterator[WarcItem]:
    """Every record of the open WARC/WET/ARC file ``fh``: ``RawRecord`` for documents,
    the record type (``str``) for skipped records, ``Failure`` for each damaged span."""
    gzipped = _is_gzip(fh)
    fh.seek(0, 2)
    size = fh.tell()
    base = 0
    kind = _archive_kind(fh, gzipped) if size else "warc"
    if kind is None:
        raw = _read_raw(fh, 0, None, limits.max_failed_raw_bytes)
        error = ValueError(f"{url}: not a WARC or ARC file (no 'WARC/' or 'filedesc://' header "
                           f"at offset 0)")
        yield make_failure(stage, error, url, 0, raw, error_type="not_warc",
                           max_raw_bytes=limits.max_failed_raw_bytes, with_traceback=False)
        return
    while base < size:
        fh.seek(base)
        # arc2warc only for ARC files: on a WARC file it reads damaged bytes as ARC headers.
        iterator = ArchiveIterator(fh, arc2warc=kind == "arc")
        damaged_at: Optional[int] = None
        error: Optional[BaseException] = None
        good_end = base  # where the bytes after the last intact record begin
        try:
            for record in iterator:
                # Read the record before asking its offset: get_record_offset() reads
                # the record to its end.
                if record.rec_type in DOCUMENT_TYPES:
                    item: WarcItem = _to_raw_record(record, url, -1, limits)
                else:
                    item = record.rec_type
                _drain(record.raw_stream)
                offset = iterator.get_record_offset()  # absolute: warcio starts at fh.tell()
                if isinstance(item, RawRecord):
                    record_id = (arc_record_id(url, offset, item.url, item.fetched_at) if kind == "arc"
                                 else item.record_id)
                    item = dataclasses.replace(item, offset=offset, record_id=record_id)
                if record.raw_stream.limit > 0:
                    missing = record.raw_stream.limit
                    error = EOFError(f"{url}: record at offset {offset} is truncated or corrupt "
                                     f"({missing} of {record.length} bytes missing)")
                    damaged_at = offset
                    break
                good_end = iterator.member_info[0] + iterator.member_info[1]
                yield item
            else:
                end = iterator.offset
                if _has_data_after(fh, end):
                    damaged_at = end
                    error = EOFError(f"{url}: unreadable bytes from offset {end} of {size}")
        except Exception as exc:  # warcio raises ArchiveLoadFailed, zlib.error, ValueError...
            damaged_at, error = good_end, exc
        if damaged_at is None:
            return
        resume = find_resync(fh, damaged_at + 1, gzipped)
        raw = _read_raw(fh, damaged_at, resume, limits.max_failed_raw_bytes)
        yield make_failure(stage, error or EOFError("damaged"), url, damaged_at, raw,
                           error_type="corrupt_record", max_raw_bytes=limits.max_failed_raw_bytes)
        if resume is None:
            return
        _LOGGER.warning("%s: damaged at offset %d, resuming at %d", url, damaged_at, resume)
        base = resume


class _ReadWarcFn(beam.DoFn):
    def __init__(self, stage: str, limits: WarcLimits) -> None:
        self._stage = stage
        self._limits = limits

    def setup(self) -> None:
        self._counters = StageCounters(self._stage)

    def process(self, ref: FileRef) -> Iterator[object]:
        try:
            fh = open_input(ref.url)
        except Exception as exc:
            self._counters.record_in()
            self._counters.failed("unreadable_file")
            yield beam.pvalue.TaggedOutput(FAILED, make_failure(self._stage, exc, ref.url, -1, b"",
                                                                error_type="unreadable_file"))
            return
        with fh:
            yield from self._items(fh, ref)
        progress.record(self._stage, "bytes", max(ref.size, 0))

    def _items(self, fh: IO[bytes], ref: FileRef) -> Iterator[object]:
        for item in iter_warc(fh, ref.url, self._limits, self._stage):
            if isinstance(item, str):
                self._counters.inc(f"skipped_{item}")
                continue
            yield route_read(self._counters, item)


class ReadWarc(beam.PTransform):
    """``FileRef`` of WARC/WET/ARC files → ``RawRecord`` (main) and ``Failure`` (``failed``).

    Damaged spans are counted as ``records_in`` and ``failed_<error>`` of ``stage`` (they
    never reach the stage's own DoFn, which counts the records it receives); document
    records as ``records_read``; request, metadata, warcinfo and revisit records as
    ``skipped_<type>``.
    """

    def __init__(self, stage: str, limits: WarcLimits = WarcLimits()) -> None:
        super().__init__()
        self._stage = stage
        self._limits = limits

    def expand(self, files: beam.PCollection[FileRef]) -> beam.pvalue.DoOutputsTuple:
        return files | "ReadRecords" >> beam.ParDo(
            _ReadWarcFn(self._stage, self._limits)
        ).with_outputs(FAILED, main="records")
