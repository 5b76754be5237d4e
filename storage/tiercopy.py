"""Copying one file of a version between fsspec filesystems, verified on the way.

A shard is verified by the sha256 of the bytes after its header, and its header field by
field against the index entry (``storage.verify.check_header``); any other file with a
checksum (documents tables, the tokenizer) by the sha256 of the whole file. A file that
fails is removed from the destination (or never appears there) and ``TierError`` names it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from typing import Any, BinaryIO, Optional

from storage.index import VersionFile
from storage.shards import HEADER_SIZE, ShardError, header_sha256
from storage.verify import BLOCK, check_header, file_sha256

_LOGGER = logging.getLogger(__name__)

__all__ = ["TierError", "copy_file", "digest_local", "digest_of", "file_problem", "in_place", "join"]


class TierError(RuntimeError):
    """A copy or a verification failed; the message names the file."""


def join(path: str, *parts: str) -> str:
    return "/".join([path.rstrip("/"), *parts])


class _Digest:
    """The checksum a file of ``kind`` is verified by, fed block by block: a shard's covers
    the bytes after its header (the header is kept and checked field by field), any other
    file's covers the whole file."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.header = b""
        self.sha = hashlib.sha256()

    def update(self, block: bytes) -> None:
        if self.kind == "shard" and len(self.header) < HEADER_SIZE:
            need = HEADER_SIZE - len(self.header)
            self.header += block[:need]
            block = block[need:]
        self.sha.update(block)

    def problem(self, f: VersionFile, entry: Optional[dict[str, Any]], dtype: Optional[str]) -> Optional[str]:
        """What differs from ``f`` (and its index entry), None when nothing does."""
        if f.sha256 is None:
            return None
        if self.kind == "shard" and (len(self.header) < HEADER_SIZE or header_sha256(self.header) != f.sha256):
            return "header checksum differs from index.json"
        if self.sha.hexdigest() != f.sha256:
            return "checksum mismatch"
        if self.kind == "shard" and entry is not None:
            try:
                check_header(self.header, entry, f.name, dtype)
            except ShardError as exc:
                return str(exc)
        return None


def digest_of(fh: BinaryIO, kind: str) -> _Digest:
    """The digest of everything left in ``fh``, read block by block."""
    digest = _Digest(kind)
    for block in iter(lambda: fh.read(BLOCK), b""):
        digest.update(block)
    return digest


def file_problem(fh: BinaryIO, f: VersionFile, entry: Optional[dict[str, Any]] = None,
                 dtype: Optional[str] = None) -> Optional[str]:
    """What differs between the rest of ``fh`` and ``f`` (see ``_Digest.problem``); None:
    nothing, or ``f`` has no checksum (then ``fh`` is not read)."""
    return None if f.sha256 is None else digest_of(fh, f.kind).problem(f, entry, dtype)


def digest_local(path: str, kind: str) -> _Digest:
    with open(path, "rb") as fh:
        return digest_of(fh, kind)


def in_place(fs: Any, path: str, f: VersionFile) -> bool:
    """True when ``path`` exists and is the expected file (shards: size and header
    checksum; other files with a checksum: the checksum)."""
    try:
        info = fs.info(path)
    except FileNotFoundError:
        return False
    if f.num_bytes is not None and int(info.get("size") or -1) != f.num_bytes:
        return False
    if f.sha256 is None:
        return True
    with fs.open(path, "rb") as fh:
        if f.kind == "shard":
            return header_sha256(fh.read(HEADER_SIZE)) == f.sha256
        return file_sha256(fh) == f.sha256


def _object_store(fs: Any) -> bool:
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    return any(p in ("s3", "s3a", "gs", "gcs", "az", "abfs") for p in protocols)


def _is_local_fs(fs: Any) -> bool:
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    return "file" in protocols or "local" in protocols


def _refuse(src: str, problem: str) -> TierError:
    return TierError(f"{problem} copying {src} (corrupt source?); destination left unchanged")


def copy_file(src_fs: Any, src: str, dst_fs: Any, dst: str, f: VersionFile,
              entry: Optional[dict[str, Any]] = None, dtype: Optional[str] = None) -> int:
    """Copies src → dst, verifying the checksum ``f`` names on the way; returns bytes copied.

    Filesystems get a ``.partial`` name and a rename; object stores get the final key
    directly, because an object only appears once its upload completes (a rename there
    is a second full copy: 3x slower, benchmarks/bench_tiers.py). Remote → local uses the
    filesystem's own streaming download (one request), local → object store its multipart
    upload; both are verified on the local side.
    """
    parent, name = dst.rsplit("/", 1)
    direct = _object_store(dst_fs)
    partial = dst if direct else join(parent, f".partial-{uuid.uuid4().hex[:8]}-{name}")
    if direct and _is_local_fs(src_fs):
        problem = digest_local(src, f.kind).problem(f, entry, dtype)
        if problem:
            raise _refuse(src, problem)
        dst_fs.put_file(src, dst)
        return os.path.getsize(src)
    dst_fs.makedirs(parent, exist_ok=True)
    if not direct and _is_local_fs(dst_fs) and not _is_local_fs(src_fs):
        src_fs.get_file(src, partial)
        digest = digest_local(partial, f.kind)
    else:
        digest = _Digest(f.kind)
        with src_fs.open(src, "rb") as fin, dst_fs.open(partial, "wb") as fout:
            for block in iter(lambda: fin.read(BLOCK), b""):
                digest.update(block)
                fout.write(block)
    problem = digest.problem(f, entry, dtype)
    if problem:
        dst_fs.rm(partial)
        raise _refuse(src, problem)
    if not direct:
        dst_fs.mv(partial, dst)
    return int(dst_fs.info(dst)["size"])
