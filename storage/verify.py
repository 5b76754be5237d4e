"""Checking a shard file against the ``index.json`` entry that lists it.

One pass over the file (8 MiB blocks) checks everything a reader relies on:

* the size is ``num_bytes``;
* every header field: magic, format version, token width (= the index's ``dtype``),
  document and token counts (= the entry's), payload and index offsets, the reserved
  bytes (zero) and the checksum field (= the entry's ``sha256``);
* a checksum of every byte after the header (the payload and the document index): the
  entry's ``xxh3_128`` when it records one and the caller asks for ``"fast"`` (what the
  loader does: ~12 GB/s per core here, against sha256's ~1.5 GB/s; it detects damage,
  truncation and a wrong file, not a forger who can also rewrite index.json), else its
  ``sha256`` (tier copies, ``checksum="sha256"``);
* the document index: starts at 0, never decreases, ends at the token count;
* every token id is below the tokenizer's vocabulary size, when the index records it.

A failure is a ``ShardError`` whose message names the shard and what differs. The cost is
about that of the checksum (see ``docs/SHARD_FORMAT.md`` for the measured figures).
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any, BinaryIO, Optional

import numpy as np
import xxhash

from storage.index import DTYPES
from storage.shards import FORMAT_VERSION, HEADER_SIZE, MAGIC, ShardError, ShardHeader

_LOGGER = logging.getLogger(__name__)

__all__ = ["BLOCK", "CHECKSUMS", "check_document_index", "check_header", "checksum_of", "file_sha256",
           "verify_shard"]

BLOCK = 8 * 1024 * 1024  # a multiple of 8: token and index blocks stay aligned
CHECKSUMS = ("fast", "sha256")  # what a caller may ask for (see checksum_of)


def checksum_of(entry: dict[str, Any], wanted: str) -> tuple[str, Any]:
    """(the index key, a new hash object) of the checksum a ``wanted`` check uses for the
    shard ``entry``: ``"fast"`` is the entry's ``xxh3_128`` when it records one (indexes
    written before it record only ``sha256``), ``"sha256"`` always the sha256."""
    if wanted not in CHECKSUMS:
        raise ValueError(f"checksum must be one of {CHECKSUMS}, got {wanted!r}")
    if wanted == "fast" and entry.get("xxh3_128") is not None:
        return "xxh3_128", xxhash.xxh3_128()
    return "sha256", hashlib.sha256()


def check_header(header: bytes, entry: dict[str, Any], name: str, dtype: Optional[str] = None) -> ShardHeader:
    """The parsed header when it is exactly what ``entry`` (and the index's ``dtype``)
    imply, else ``ShardError`` naming ``name`` and the field."""
    if len(header) < HEADER_SIZE:
        raise ShardError(f"{name}: {len(header)} bytes, shorter than the {HEADER_SIZE}-byte header "
                         "(truncated shard)")
    h = ShardHeader.unpack(header)
    if h.magic != MAGIC:
        raise ShardError(f"{name}: not a token shard (magic {h.magic!r}, damaged header?)")
    if h.version != FORMAT_VERSION:
        raise ShardError(f"{name}: header format version {h.version}, expected {FORMAT_VERSION} (damaged header?)")
    want = entry.get("dtype") or dtype
    expected_width = DTYPES.get(str(want)) if want else None
    if h.width not in (2, 4) or (expected_width is not None and h.width != expected_width):
        raise ShardError(f"{name}: header token width {h.width} bytes, index.json says "
                         f"{want or 'uint16 or uint32'} (dtype differs or damaged header)")
    for field, value in (("num_docs", h.num_docs), ("num_tokens", h.num_tokens)):
        if value != int(entry[field]):
            raise ShardError(f"{name}: header {field} {value}, index.json says {entry[field]} (damaged header?)")
    if h.payload_at != HEADER_SIZE or h.index_at != HEADER_SIZE + h.num_tokens * h.width:
        raise ShardError(f"{name}: header offsets {h.payload_at}/{h.index_at} do not match {h.num_tokens} tokens "
                         f"of {h.width} bytes (damaged header)")
    if h.reserved != b"\0" * len(h.reserved):
        raise ShardError(f"{name}: reserved header bytes are not zero (damaged header)")
    if h.sha256 != entry["sha256"]:
        raise ShardError(f"{name}: header checksum {h.sha256[:12]}..., index.json says "
                         f"{entry['sha256'][:12]}... (not the shard index.json lists)")
    expected_size = HEADER_SIZE + h.num_tokens * h.width + 8 * (h.num_docs + 1)
    if int(entry["num_bytes"]) != expected_size:
        raise ShardError(f"{name}: index.json says {entry['num_bytes']} bytes, its header implies "
                         f"{expected_size}")
    return h


def check_document_index(bounds: np.ndarray, num_tokens: int, name: str) -> None:
    """``bounds`` (uint64 document boundaries) start at 0, never decrease, end at ``num_tokens``."""
    if len(bounds) == 0 or bounds[0] != 0 or bounds[-1] != num_tokens:
        raise ShardError(f"{name}: document index does not run from 0 to {num_tokens} tokens (corrupt)")
    if len(bounds) > 1 and bool(np.any(bounds[1:] < bounds[:-1])):
        raise ShardError(f"{name}: document index decreases (corrupt)")


def verify_shard(fh: BinaryIO, entry: dict[str, Any], name: str, dtype: Optional[str] = None,
                 vocab_size: Optional[int] = None, checksum: bool | str = True) -> ShardHeader:
    """Reads the whole shard from ``fh`` once and checks it (see the module docstring).
    ``checksum``: ``True`` or ``"sha256"`` the sha256, ``"fast"`` the entry's xxh3_128
    where it records one (else the sha256), ``False`` none (only the checksum is skipped)."""
    header = check_header(_read_exact(fh, HEADER_SIZE), entry, name, dtype)
    if vocab_size is not None and vocab_size >= 1 << (8 * header.width):
        vocab_size = None  # every id of this width is inside the vocabulary: nothing to check
    token_bytes = header.num_tokens * header.width
    total = token_bytes + 8 * (header.num_docs + 1)
    key, digest = checksum_of(entry, "sha256" if checksum is True else checksum) if checksum else ("", None)
    token_dtype = np.dtype(f"<u{header.width}")
    top = 0
    index_parts: list[bytes] = []
    buffer = memoryview(bytearray(BLOCK))  # one buffer, no copies: hashing runs at the hash's speed
    done = 0
    while done <= total:  # one block past the end is enough to tell an overlong file
        n = _read_into(fh, buffer)
        if not n:
            break
        chunk = buffer[:n]
        if digest is not None:
            digest.update(chunk)
        tokens_here = min(n, max(0, token_bytes - done))
        if tokens_here and vocab_size is not None:
            usable = tokens_here - tokens_here % header.width  # whole tokens unless truncated
            top = max(top, int(np.frombuffer(chunk[:usable], dtype=token_dtype).max(initial=0)))
        if done + n > token_bytes:
            index_parts.append(bytes(chunk[max(0, token_bytes - done):]))
        done += n
    if done != total:
        raise ShardError(f"{name}: {HEADER_SIZE + done}{'+' if done > total else ''} bytes, index.json says "
                         f"{entry['num_bytes']} (truncated or overlong shard)")
    if digest is not None and digest.hexdigest() != entry[key]:
        raise ShardError(f"{name}: checksum mismatch ({key}; corrupt shard: its bytes are not the ones "
                         "index.json lists)")
    check_document_index(np.frombuffer(b"".join(index_parts), dtype="<u8"), header.num_tokens, name)
    if vocab_size is not None and header.num_tokens and top >= vocab_size:
        raise ShardError(f"{name}: token id {top} is outside the vocabulary of {vocab_size} ids")
    return header


def _read_into(fh: BinaryIO, buffer: memoryview) -> int:
    """Fills ``buffer`` from ``fh`` (fewer bytes only at the end of the file)."""
    got = 0
    readinto = getattr(fh, "readinto", None)
    while got < len(buffer):
        if readinto is not None:
            n = readinto(buffer[got:])
        else:
            part = fh.read(len(buffer) - got)
            n = len(part)
            buffer[got:got + n] = part
        if not n:
            break
        got += n
    return got


def _read_exact(fh: BinaryIO, size: int) -> bytes:
    """``size`` bytes, or fewer only at the end of the file (some file objects return
    short reads)."""
    parts, got = [], 0
    while got < size:
        part = fh.read(size - got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def file_sha256(fh: BinaryIO) -> str:
    """The sha256 of everything left in ``fh`` (a documents table, a tokenizer)."""
    digest = hashlib.sha256()
    for block in iter(lambda: fh.read(BLOCK), b""):
        digest.update(block)
    return digest.hexdigest()
