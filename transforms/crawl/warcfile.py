"""Rolling, atomically committed WARC files for crawl responses (warcio).

Each file is written under a temporary name and renamed into place when it is closed,
so a reader of ``crawl/warc/`` never sees a partial file. A file rolls over once it
exceeds ``max_bytes``. Response bodies are stored decoded (``Content-Encoding`` and
``Transfer-Encoding`` removed, ``Content-Length`` set to the stored length), each with
its request record; a body cut at the size limit carries ``WARC-Truncated: length``.
"""

from __future__ import annotations

import io
import logging
from typing import IO, Optional

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from transforms.crawl.fetcher import Hop
from transforms.crawl.urls import path_and_query

_LOGGER = logging.getLogger(__name__)

_DROPPED_HEADERS = frozenset({"content-encoding", "transfer-encoding", "content-length"})


class _CountingWriter(io.RawIOBase):
    """Counts the bytes written through it (Beam file handles have no ``tell``)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self.written = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self._raw.write(data)
        self.written += len(data)
        return len(data)

    def close(self) -> None:
        self._raw.close()
        super().close()


class RollingWarcWriter:
    """Writes hops into ``<directory>/<prefix>-NNNNN.warc.gz`` files."""

    def __init__(self, directory: str, prefix: str, max_bytes: int = 1 << 30,
                 software: str = "tokenfactory") -> None:
        self._directory = directory.rstrip("/")
        self._prefix = prefix
        self._max_bytes = max_bytes
        self._software = software
        self._seq = 0
        self._out: Optional[_CountingWriter] = None
        self._writer: Optional[WARCWriter] = None
        self._tmp = ""
        self._final = ""
        self.committed: list[str] = []
        self.records = 0

    def _open(self) -> None:
        name = f"{self._prefix}-{self._seq:05d}.warc.gz"
        self._final = FileSystems.join(self._directory, name)
        self._tmp = FileSystems.join(self._directory, f".tmp-{name}")
        raw = FileSystems.create(self._tmp, compression_type=CompressionTypes.UNCOMPRESSED)
        self._out = _CountingWriter(raw)
        self._writer = WARCWriter(self._out, gzip=True)
        info = self._writer.create_warcinfo_record(name, {"software": self._software,
                                                          "format": "WARC File Format 1.1"})
        self._writer.write_record(info)

    def write(self, hop: Hop) -> None:
        """Stores the request and the response of ``hop`` (which must have a response)."""
        if self._writer is None:
            self._open()
        writer = self._writer
        assert writer is not None  # opened above
        request = writer.create_warc_record(
            hop.url, "request", payload=io.BytesIO(b""),
            http_headers=StatusAndHeaders(f"GET {path_and_query(hop.url)} HTTP/1.1",
                                          hop.request_headers, is_http_request=True),
        )
        headers = [(k, v) for k, v in hop.headers if k.lower() not in _DROPPED_HEADERS]
        headers.append(("Content-Length", str(len(hop.body))))
        warc_headers = {"WARC-Date": hop.fetched_at} if hop.fetched_at else {}
        if hop.truncated:
            warc_headers["WARC-Truncated"] = "length"
        response = writer.create_warc_record(
            hop.url, "response", payload=io.BytesIO(hop.body), warc_headers_dict=warc_headers,
            http_headers=StatusAndHeaders(f"{hop.status} {hop.status_text}".strip(), headers,
                                          protocol=hop.http_version),
        )
        request.rec_headers.add_header("WARC-Concurrent-To",
                                       response.rec_headers.get_header("WARC-Record-ID"))
        writer.write_record(response)
        writer.write_record(request)
        self.records += 1
        if self._out is not None and self._out.written >= self._max_bytes:
            self._commit()

    def _commit(self) -> None:
        if self._out is None:
            return
        self._out.close()
        FileSystems.rename([self._tmp], [self._final])
        self.committed.append(self._final)
        _LOGGER.info("committed %s", self._final)
        self._out, self._writer = None, None
        self._seq += 1

    def close(self) -> None:
        """Commits the open file, if any."""
        self._commit()

    def abort(self) -> None:
        """Drops the open temporary file (after an error)."""
        if self._out is not None:
            self._out.close()
            FileSystems.delete([self._tmp])
            self._out, self._writer = None, None
