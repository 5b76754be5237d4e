"""Input files over any fsspec URL: local paths, globs, ``https://`` and ``s3://``.

Beam's own ``FileSystems`` knows no ``https://`` and needs extra packages for S3, so
inputs are matched and opened with fsspec. Matching happens on a worker (``MatchInputs``)
and the matched files are reshuffled, so many files spread across workers.
"""

from __future__ import annotations

import dataclasses

import io
import logging
import os
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import apache_beam as beam
import fsspec
from fsspec.implementations.local import LocalFileSystem

_LOGGER = logging.getLogger(__name__)

_GLOB_CHARS = set("*?[")


@dataclass(frozen=True)
class FileRef:
    """A matched input file: its URL, size in bytes (-1 if unknown) and a version tag;
    ``start``/``end`` make it a byte range of the file (``end`` -1: to its end)."""

    url: str
    size: int = -1
    version: str = ""  # mtime, ETag or "" — part of the resume fingerprint
    start: int = 0
    end: int = -1
    # the name document ids are derived from ("": ``url``): the file's path below its input
    # pattern's folder (the crawl's WARC files: below the output), so that moving the data
    # or the output keeps the ids; the stage makes it the URL where two files share a name
    id_source: str = ""

    @property
    def span(self) -> int:
        """The bytes this reference covers (0 when the size is unknown)."""
        stop = self.end if self.end >= 0 else self.size
        return max(stop - self.start, 0)


COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".zstd")


def split_ranges(ref: FileRef, split_bytes: int) -> list[FileRef]:
    """``ref`` cut into byte ranges of ``split_bytes`` for a line-oriented reader, so a
    large file is read by many workers (and no runner holds one file's output as one
    bundle: Beam's Spark runner ran out of heap on a 1.3 GB JSONL file read whole).
    Compressed files and files of unknown size stay whole. A range owns the lines that
    start inside it."""
    if split_bytes <= 0:
        raise ValueError(f"split_bytes must be > 0, got {split_bytes}")
    if ref.size <= split_bytes or ref.url.lower().endswith(COMPRESSED_SUFFIXES):
        return [ref]
    return [dataclasses.replace(ref, start=start, end=min(start + split_bytes, ref.size))
            for start in range(0, ref.size, split_bytes)]


def storage_options_for(url: str) -> dict[str, Any]:
    """fsspec options per protocol: anonymous S3 when no credentials are configured."""
    protocol = fsspec.core.split_protocol(url)[0] or "file"
    if protocol in ("s3", "s3a"):
        import botocore.session

        has_creds = botocore.session.get_session().get_credentials() is not None
        return {} if has_creds else {"anon": True}
    return {}


def _version_of(info: dict[str, Any]) -> str:
    for key in ("ETag", "etag", "mtime", "LastModified", "last_modified", "created"):
        if info.get(key) is not None:
            return str(info[key])
    return ""


def match_pattern(pattern: str) -> list[FileRef]:
    """Every file matching ``pattern`` (a URL, path or glob), sorted by URL.

    A pattern without glob characters must name an existing file
    (``FileNotFoundError`` otherwise); a glob may match nothing.
    """
    fs, urlpath = fsspec.core.url_to_fs(pattern, **storage_options_for(pattern))
    has_glob = any(c in pattern for c in _GLOB_CHARS)
    paths = fs.glob(urlpath) if has_glob else [urlpath]
    local = isinstance(fs, LocalFileSystem)
    base = _static_folder(urlpath)
    refs = []
    for path in sorted(paths):
        info = fs.info(path)
        if info.get("type") == "directory":
            continue
        url = os.path.normpath(path) if local else fs.unstrip_protocol(path)
        name = path[len(base):] if base and path.startswith(base) else path
        refs.append(FileRef(url=url, size=int(info.get("size") or -1), version=_version_of(info),
                            id_source=name))
    return refs


def _static_folder(urlpath: str) -> str:
    """The folder of ``urlpath`` before its first glob character, with its ``/`` ("" when
    there is none): a matched file's ``id_source`` is its path below it, so the documents of
    a folder keep their ids when the folder moves (``transforms.doc.document_id``)."""
    cut = min((urlpath.index(c) for c in _GLOB_CHARS if c in urlpath), default=len(urlpath))
    head = urlpath[:cut]
    return head[:head.rindex("/") + 1] if "/" in head else ""


def open_input(url: str, compression: str | None = None) -> Any:
    """An open binary file object for ``url`` (caller closes it)."""
    return fsspec.open(url, "rb", compression=compression, **storage_options_for(url)).open()


def open_decompressed(url: str) -> Any:
    """An open binary, line-readable stream of ``url``, decompressed by its suffix
    (.gz, .bz2, .xz, .zst; fsspec's zstd stream has no ``readline``, hence the wrapper)."""
    if url.endswith((".zst", ".zstd")):
        import zstandard

        raw = open_input(url)
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, closefd=True))
    return fsspec.open(url, "rb", compression="infer", **storage_options_for(url)).open()


class MatchInputs(beam.PTransform):
    """patterns → ``FileRef`` per matched file, reshuffled across workers."""

    def __init__(self, patterns: Sequence[str]) -> None:
        super().__init__()
        self._patterns = list(patterns)

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection[FileRef]:
        return (
            pbegin
            | "Patterns" >> beam.Create(self._patterns)
            | "Match" >> beam.FlatMap(_match_logged)
            | "Spread" >> beam.Reshuffle()
        )


def _match_logged(pattern: str) -> Iterable[FileRef]:
    refs = match_pattern(pattern)
    _LOGGER.info("input %s matched %d files", pattern, len(refs))
    return refs
