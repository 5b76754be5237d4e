"""The token-shard format: a small header, the flat token payload, a document index.

Layout (all little-endian; docs/SHARD_FORMAT.md shows how to read it with numpy alone):

    offset  size  field
    0       8     magic b"TFSHARD1"
    8       4     format version (uint32, 1)
    12      4     token width in bytes (uint32: 2 = uint16, 4 = uint32)
    16      8     number of documents D (uint64)
    24      8     number of tokens T (uint64)
    32      8     payload offset in bytes (uint64, = 96)
    40      8     index offset in bytes (uint64, = 96 + T * width)
    48      32    sha256 of everything after the header (payload + index)
    80      16    reserved, zero
    96      T*w   tokens
    ...     8*(D+1) uint64 document boundaries in tokens: doc i = tokens[idx[i]:idx[i+1]]

Writers write to a temporary name and rename (``storage.files.atomic_write``); readers
check magic, sizes and (by default) the checksum before trusting a shard.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Sequence

import numpy as np

MAGIC = b"TFSHARD1"
FORMAT_VERSION = 1
HEADER_SIZE = 96
_HEADER = struct.Struct("<8sIIQQQQ32s16s")

__all__ = ["FORMAT_VERSION", "HEADER_SIZE", "MAGIC", "Shard", "ShardError", "ShardHeader", "ShardInfo",
           "decode_shard", "dtype_for_vocab", "encode_shard", "header_sha256", "shard_header"]


class ShardError(ValueError):
    """A shard is missing, truncated, corrupt or not a shard; the message names it."""


@dataclass(frozen=True)
class ShardHeader:
    """The 96-byte header, field by field (the layout above); ``unpack`` reads it as it is,
    checking nothing: the reader that trusts it checks it (``decode_shard``,
    ``storage.verify.check_header``)."""

    magic: bytes
    version: int
    width: int  # bytes per token: 2 (uint16) or 4 (uint32)
    num_docs: int
    num_tokens: int
    payload_at: int
    index_at: int
    sha256: str  # hex, of every byte after the header
    reserved: bytes

    @classmethod
    def unpack(cls, data: bytes | bytearray | memoryview) -> "ShardHeader":
        """The header at the start of ``data`` (at least ``HEADER_SIZE`` bytes)."""
        magic, version, width, docs, tokens, payload_at, index_at, sha, reserved = _HEADER.unpack_from(data)
        return cls(magic, version, width, docs, tokens, payload_at, index_at, sha.hex(), reserved)

    def pack_into(self, buffer: bytearray) -> None:
        _HEADER.pack_into(buffer, 0, self.magic, self.version, self.width, self.num_docs, self.num_tokens,
                          self.payload_at, self.index_at, bytes.fromhex(self.sha256), self.reserved)


@dataclass(frozen=True)
class ShardInfo:
    name: str
    num_docs: int
    num_tokens: int
    num_bytes: int
    sha256: str
    dtype: str


def dtype_for_vocab(vocab_size: int) -> np.dtype:
    """uint16 when every token id fits, else uint32."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def encode_shard(docs: Sequence[np.ndarray], dtype: np.dtype) -> tuple[bytearray, int, int, str]:
    """(shard bytes, documents, tokens, sha256) of ``docs`` (token arrays, in order).

    The shard is built in one buffer of its final size: the tokens are copied (and cast)
    into the payload once, the index is computed in place and hashed from a view. The
    writer of a 256 MiB shard so holds its documents and one shard, where concatenating,
    ``tobytes`` and joining header, payload and index held three shards more.
    """
    dtype = np.dtype(dtype).newbyteorder("<")
    lengths = np.fromiter((len(d) for d in docs), dtype=np.uint64, count=len(docs))
    total = int(lengths.sum())
    index_at = HEADER_SIZE + total * dtype.itemsize
    out = bytearray(index_at + 8 * (len(docs) + 1))
    if total:
        payload = np.frombuffer(out, dtype=dtype, count=total, offset=HEADER_SIZE)
        np.concatenate(docs, out=payload, casting="unsafe")
    index = np.frombuffer(out, dtype="<u8", count=len(docs) + 1, offset=index_at)
    np.cumsum(lengths, out=index[1:])
    digest = hashlib.sha256(memoryview(out)[HEADER_SIZE:]).hexdigest()
    out[:HEADER_SIZE] = shard_header(dtype.itemsize, len(docs), total, digest)
    return out, len(docs), total, digest


def shard_header(width: int, num_docs: int, num_tokens: int, sha256: str) -> bytes:
    """The 96-byte header of a shard of ``num_docs`` documents and ``num_tokens`` tokens of
    ``width`` bytes whose payload and index hash to ``sha256`` (hex): what a writer that
    streams the payload (``transforms.tokenize``'s part joiner) writes first."""
    out = bytearray(HEADER_SIZE)
    ShardHeader(MAGIC, FORMAT_VERSION, width, num_docs, num_tokens, HEADER_SIZE,
                HEADER_SIZE + num_tokens * width, sha256, b"\0" * 16).pack_into(out)
    return bytes(out)


@dataclass(frozen=True)
class Shard:
    tokens: np.ndarray
    index: np.ndarray

    def doc(self, i: int) -> np.ndarray:
        return self.tokens[self.index[i]:self.index[i + 1]]

    @property
    def num_docs(self) -> int:
        return len(self.index) - 1


def decode_shard(data: bytes, name: str = "shard", verify: bool = True) -> Shard:
    """The tokens and document index of a shard's bytes; ``ShardError`` naming it if bad."""
    if len(data) < HEADER_SIZE:
        raise ShardError(f"{name}: {len(data)} bytes, shorter than the {HEADER_SIZE}-byte header")
    h = ShardHeader.unpack(data)
    if h.magic != MAGIC:
        raise ShardError(f"{name}: not a token shard (magic {h.magic!r})")
    if h.version != FORMAT_VERSION or h.width not in (2, 4):
        raise ShardError(f"{name}: unsupported version {h.version} or token width {h.width}")
    expected = HEADER_SIZE + h.num_tokens * h.width + 8 * (h.num_docs + 1)
    if len(data) != expected or h.payload_at != HEADER_SIZE or h.index_at != HEADER_SIZE + h.num_tokens * h.width:
        raise ShardError(f"{name}: {len(data)} bytes, expected {expected} (truncated or corrupt)")
    body = memoryview(data)[HEADER_SIZE:]
    if verify and hashlib.sha256(body).hexdigest() != h.sha256:
        raise ShardError(f"{name}: checksum mismatch (corrupt shard)")
    dtype = np.dtype("<u2") if h.width == 2 else np.dtype("<u4")
    token_array = np.frombuffer(data, dtype=dtype, count=h.num_tokens, offset=HEADER_SIZE)
    index = np.frombuffer(data, dtype="<u8", count=h.num_docs + 1, offset=h.index_at)
    if index[0] != 0 or index[-1] != h.num_tokens or np.any(np.diff(index.astype(np.int64)) < 0):
        raise ShardError(f"{name}: document index is inconsistent")
    return Shard(tokens=token_array, index=index)


def header_sha256(data: bytes) -> str:
    """The payload checksum stored in a shard's header (hex)."""
    return ShardHeader.unpack(data).sha256
