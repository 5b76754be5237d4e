"""WARC, WET and ARC records → ``RawRecord``, surviving truncated and corrupt files.

warcio parses the records. It does not report damage: a truncated gzip member or a
corrupt block just ends the record early (or ends the file). So after each record this
reader checks that the whole WARC block was read; when it was not, it emits a
``Failure`` naming the file and the record's offset with the raw bytes from there, then
resynchronises at the next gzip member (or ``WARC/`` line) that parses and reads on.
Every record before the damage, and every intact record after it, is kept.

The format is decided from the first record that parses, not from the first bytes alone:
when the file's first gzip member (or its first bytes) is damaged, the reader looks for
the next record that begins with a WARC version line or an ARC header line, fails the
bytes before it as one damaged span and reads on from there. Only a file in which no such
record exists is "not a WARC".

``WARC-Block-Digest`` is checked in uncompressed files, where a record has one (warcio's
``check_digests``: sha1, sha256, ..., in base32, base16 or base64): there it is the only
check, and a record whose block does not match it is a ``digest_mismatch`` failure with
its raw bytes instead of a document with damaged text. In a gzipped file each member's
CRC-32 covers the same bytes already (a damaged member is a ``corrupt_record``), and the
digests would cost 36% more CPU for nothing (on uncompressed files they cost 72%: 150 ->
87 MB/s on one core, the shared WARC files decompressed). ``WARC-Payload-Digest`` is not checked:
writers disagree on whether it covers the transfer-encoded or the decoded body (warcio
issues 74 and 75), so its mismatch says nothing about damage.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import uuid
import zlib
from dataclasses import dataclass
from typing import IO, Generator, Iterator, Optional, Union

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
_WARC_LINE = re.compile(rb"WARC/[0-9]+\.[0-9]+\r?\n")
# An ARC record's first line: URL, IP address, 14-digit date, content type, ..., length.
_ARC_LINE = re.compile(rb"[A-Za-z][A-Za-z0-9+.-]*:\S* \S+ [0-9]{14} [^\n]*?[0-9]+\r?\n")
_BLOCK_DIGEST_FAILED = "block digest failed"  # warcio's DigestChecker problem text


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
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, 512)  # an ARC URL line fits
        except zlib.error:
            return None
    return head


def _valid_start(fh: IO[bytes], pos: int, gzipped: bool) -> bool:
    head = _head(fh, pos, gzipped)
    return head is not None and (head.startswith(b"WARC/") or head[:1].isalnum())  # or ARC URL line


def _kind_of(head: Optional[bytes], first: bool) -> Optional[str]:
    """"warc", "arc" or None from a record's first bytes. ``first``: the file's first
    record, where an ARC file has its ``filedesc://`` header; later ARC records begin with
    a URL line (URL, IP address, 14-digit date, ..., length)."""
    start = head.lstrip(b"\r\n") if head is not None else b""
    if _WARC_LINE.match(start):
        return "warc"
    if start.startswith(b"filedesc://") or (not first and _ARC_LINE.match(start)):
        return "arc"
    return None


def _first_record(fh: IO[bytes], gzipped: bool) -> Optional[tuple[int, str]]:
    """(offset, kind) of the first record after offset 0 that begins like a WARC or ARC
    record, or None: where a file whose first record is damaged can be read on."""
    pos = find_resync(fh, 1, gzipped)
    while pos is not None:
        kind = _kind_of(_head(fh, pos, gzipped), first=False)
        if kind is not None:
            return pos, kind
        pos = find_resync(fh, pos + 1, gzipped)
    return None


def _locate(fh: IO[bytes]) -> Optional[tuple[str, bool, int]]:
    """(kind, gzipped, offset of the first readable record) of a WARC/WET/ARC file, or
    None when no record in it parses (not an archive). The first bytes decide when they
    parse; else the nearest later record, gzipped or not (the damage may have hit the
    gzip magic itself), so a damaged first record loses only its own bytes."""
    gzipped = _is_gzip(fh)
    kind = _kind_of(_head(fh, 0, gzipped), first=True)
    if kind is not None:
        return kind, gzipped, 0
    found = [(hit[0], hit[1], gz) for gz in (gzipped, not gzipped)
             if (hit := _first_record(fh, gz)) is not None]
    if not found:
        return None
    offset, kind, gz = min(found)
    return kind, gz, offset


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


def _not_warc(fh: IO[bytes], url: str, limits: WarcLimits, stage: str) -> Failure:
    raw = _read_raw(fh, 0, None, limits.max_failed_raw_bytes)
    error = ValueError(f"{url}: not a WARC or ARC file (no record in it begins with a 'WARC/' "
                       f"or ARC header line)")
    return make_failure(stage, error, url, 0, raw, error_type="not_warc",
                        max_raw_bytes=limits.max_failed_raw_bytes, with_traceback=False)


def _digest_failure(fh: IO[bytes], record, iterator: ArchiveIterator, url: str, limits: WarcLimits,
                    stage: str) -> Optional[Failure]:
    """A ``digest_mismatch`` failure with the record's raw bytes when its block does not
    match its ``WARC-Block-Digest``, else None. Reads ``fh`` and puts its position back:
    warcio reads on from there."""
    checker = getattr(record, "digest_checker", None)
    problems = [p for p in (checker.problems if checker else []) if p.startswith(_BLOCK_DIGEST_FAILED)]
    if not problems:
        return None
    offset, length = iterator.member_info
    here = fh.tell()
    raw = _read_raw(fh, offset, offset + length, limits.max_failed_raw_bytes)
    fh.seek(here)
    error = ValueError(f"{url}: record at offset {offset} does not match its WARC-Block-Digest "
                       f"({record.rec_headers.get_header('WARC-Block-Digest')}): damaged bytes")
    return make_failure(stage, error, url, offset, raw, error_type="digest_mismatch",
                        max_raw_bytes=limits.max_failed_raw_bytes, with_traceback=False)


def _read_pass(fh: IO[bytes], base: int, kind: str, gzipped: bool, url: str, limits: WarcLimits,
               stage: str) -> Generator[WarcItem, None, tuple[Optional[int], Optional[BaseException]]]:
    """The records from ``base`` until the end of the file or the first damage that ends
    warcio's iteration; returns where that damage begins and what it was (None, None at
    the end of an intact file). Block digests are checked in uncompressed files only: in a
    gzip member the CRC-32 covers the same bytes already."""
    fh.seek(base)
    # arc2warc only for ARC files: on a WARC file it reads damaged bytes as ARC headers.
    iterator = ArchiveIterator(fh, arc2warc=kind == "arc", check_digests=not gzipped)
    good_end = base  # where the bytes after the last intact record begin
    try:
        for record in iterator:
            # Read the record before asking its offset: get_record_offset() reads it to its end.
            item: WarcItem = (_to_raw_record(record, url, -1, limits) if record.rec_type in DOCUMENT_TYPES
                              else record.rec_type)
            _drain(record.raw_stream)
            offset = iterator.get_record_offset()  # absolute: warcio starts at fh.tell()
            if record.raw_stream.limit > 0:
                return offset, EOFError(f"{url}: record at offset {offset} is truncated or corrupt "
                                        f"({record.raw_stream.limit} of {record.length} bytes missing)")
            good_end = iterator.member_info[0] + iterator.member_info[1]
            failure = _digest_failure(fh, record, iterator, url, limits, stage)
            if failure is not None:
                yield failure
            elif isinstance(item, RawRecord):
                record_id = arc_record_id(url, offset, item.url, item.fetched_at) if kind == "arc" else item.record_id
                yield dataclasses.replace(item, offset=offset, record_id=record_id)
            else:
                yield item
    except Exception as exc:  # warcio raises ArchiveLoadFailed, zlib.error, ValueError...
        return good_end, exc
    end = iterator.offset
    if _has_data_after(fh, end):
        return end, EOFError(f"{url}: unreadable bytes from offset {end} of {_size(fh)}")
    return None, None


def _size(fh: IO[bytes]) -> int:
    fh.seek(0, 2)
    return fh.tell()


def _damaged_span(fh: IO[bytes], at: int, error: BaseException, gzipped: bool, url: str, limits: WarcLimits,
                  stage: str) -> tuple[Failure, Optional[int]]:
    """The failure for the damaged bytes from ``at`` up to the next record that parses,
    and that record's offset (None: nothing readable follows)."""
    resume = find_resync(fh, at + 1, gzipped)
    raw = _read_raw(fh, at, resume, limits.max_failed_raw_bytes)
    if url not in str(error):  # zlib's and warcio's messages name neither file nor offset
        named = EOFError(f"{url}: damaged bytes at offset {at} ({type(error).__name__}: {error})")
        named.__cause__, error = error, named
    failure = make_failure(stage, error, url, at, raw, error_type="corrupt_record",
                           max_raw_bytes=limits.max_failed_raw_bytes)
    if resume is not None:
        _LOGGER.warning("%s: damaged at offset %d, resuming at %d", url, at, resume)
    return failure, resume


def iter_warc(fh: IO[bytes], url: str, limits: WarcLimits, stage: str) -> Iterator[WarcItem]:
    """Every record of the open WARC/WET/ARC file ``fh``: ``RawRecord`` for documents,
    the record type (``str``) for skipped records, ``Failure`` for each damaged span and
    each record that does not match its block digest."""
    size = _size(fh)
    if not size:
        return
    located = _locate(fh)
    if located is None:
        yield _not_warc(fh, url, limits, stage)
        return
    kind, gzipped, base = located
    if base > 0:  # the first record is damaged: its bytes fail, the rest is read
        error = EOFError(f"{url}: the first record is damaged (no 'WARC/' or 'filedesc://' header at "
                         f"offset 0); the next readable record begins at offset {base}")
        yield make_failure(stage, error, url, 0, _read_raw(fh, 0, base, limits.max_failed_raw_bytes),
                           error_type="corrupt_record", max_raw_bytes=limits.max_failed_raw_bytes)
        _LOGGER.warning("%s: damaged at offset 0, resuming at %d", url, base)
    while base is not None and base < size:
        damaged_at, error = yield from _read_pass(fh, base, kind, gzipped, url, limits, stage)
        if damaged_at is None:
            return
        failure, base = _damaged_span(fh, damaged_at, error or EOFError("damaged"), gzipped, url, limits, stage)
        yield failure


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
