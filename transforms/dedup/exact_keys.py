"""Exact dedup on columns (no Beam): fixed-width keys per document, decisions per bucket.

A document's text key is the SHA-1 of its normalised text (``normalize_for_dedup``: the
words of ``normalized_bytes`` joined by single spaces), cut to 128 bits, plus a 64-bit
check: BLAKE2b of the same bytes, an independent function. Two documents are duplicates
only when all 192 bits agree, so texts whose 128-bit keys collide are still told apart
(``tests/transforms/test_exact_files.py`` forces such a collision). A URL key is the same
pair over the normalised URL (``normalize_url``); a document without one has none and is
never a URL duplicate.

Keys travel in ``KeyChunk``s (numpy arrays for many documents, split by the key's first
word into buckets), never one element per document. ``decide`` ranks a bucket's members
that share a key by ``DedupConfig.node_of`` and keeps the first, exactly as
``ExactDedup`` does with whole ``Doc`` objects.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence

import numpy as np
import pyarrow as pa

from transforms.crawl.urls import normalize_url
from transforms.dedup.minhash import char_batches, normalized_batch

_LOGGER = logging.getLogger(__name__)

KEY_WORDS = 3  # uint64 words per key: 128 bits of SHA-1, 64 bits of BLAKE2b (the check)
_BATCH_CHARS = 128 * 1024  # characters normalised together (arrays stay in cache)


def key_digest(data: bytes) -> bytes:
    """The 128-bit key of normalised bytes: the first 16 bytes of their SHA-1."""
    return hashlib.sha1(data).digest()[:16]


def check_digest(data: bytes) -> bytes:
    """The 64-bit collision check: BLAKE2b of the same bytes (independent of SHA-1)."""
    return hashlib.blake2b(data, digest_size=8).digest()


def digest_keys(parts: Sequence[bytes]) -> np.ndarray:
    """(len(parts), KEY_WORDS) uint64: key and check of each byte string."""
    out = np.empty((len(parts), KEY_WORDS), dtype=np.uint64)
    if not len(parts):
        return out
    out[:, :2] = np.frombuffer(b"".join([key_digest(p) for p in parts]), dtype=">u8").reshape(-1, 2)
    out[:, 2] = np.frombuffer(b"".join([check_digest(p) for p in parts]), dtype=">u8")
    return out


def _collapsed(buf: np.ndarray) -> np.ndarray:
    """``normalized_batch`` output with every space run cut to one space and spaces at a
    document's start and end removed (NUL separates documents)."""
    word = buf > 32
    keep = word | (buf == 0)
    keep[1:] |= (buf[1:] == 32) & word[:-1]  # the first space after a word
    out = buf[keep]
    trailing = np.zeros(len(out), dtype=bool)  # a kept space followed by a separator or the end
    if len(out):
        trailing[:-1] = (out[:-1] == 32) & (out[1:] == 0)
        trailing[-1] = out[-1] == 32
    return out[~trailing]


def normalized_texts(texts: Sequence[str]) -> list[bytes]:
    """``normalize_for_dedup(t).encode()`` of every text, computed a batch at a time."""
    out: list[bytes] = []
    for start, stop in char_batches(texts, _BATCH_CHARS):
        buf, _ = normalized_batch(texts[start:stop])
        out += _collapsed(buf).tobytes().split(b"\0")
    return out


def text_keys(texts: Sequence[str]) -> np.ndarray:
    """(n, KEY_WORDS) uint64 text keys."""
    return digest_keys(normalized_texts(texts))


def url_keys(urls: Sequence[Optional[str]]) -> tuple[np.ndarray, np.ndarray]:
    """(has_url bool mask, keys of the documents that have one): a URL that is empty or
    does not normalise is no URL."""
    normal = [normalize_url(u) if u else None for u in urls]
    has = np.array([n is not None for n in normal], dtype=bool)
    keys = digest_keys([n.encode("utf-8", "surrogatepass") for n in normal if n is not None])
    return has, keys


@dataclass(frozen=True)
class KeyChunk:
    """Documents of one input file (or one bucket) by their keys: row ``i`` is document
    ``rows[i]`` of input file ``files[i]``; ``url`` / ``text`` are (n, KEY_WORDS) keys
    (None when that step does not run on them); ``quality`` is set for
    ``keep: highest_quality`` (a missing score as 0.0, which ranks as None does; NaN stays NaN)."""

    files: np.ndarray  # uint32
    rows: np.ndarray  # int64
    ids: pa.Array  # string: an Arrow array pickles as its buffers (an object array: ~0.5 s a million)
    url: Optional[np.ndarray] = None
    text: Optional[np.ndarray] = None
    quality: Optional[np.ndarray] = None  # float64

    def __len__(self) -> int:
        return len(self.rows)

    def take(self, index: np.ndarray, url: bool = True) -> KeyChunk:
        pick = lambda a: None if a is None else a[index]  # noqa: E731
        return KeyChunk(self.files[index], self.rows[index], self.ids.take(index),
                        pick(self.url) if url else None, pick(self.text), pick(self.quality))

    def quality_of(self, i: int) -> Optional[float]:
        return None if self.quality is None else float(self.quality[i])


def by_bucket(chunk: KeyChunk, keys: np.ndarray, buckets: int) -> Iterator[tuple[int, KeyChunk]]:
    """(bucket, sub-chunk) for every bucket that ``keys`` (one row per document of
    ``chunk``) send documents to; the bucket is the key's first word mod ``buckets``."""
    if not len(chunk):
        return
    bucket = (keys[:, 0] % np.uint64(buckets)).astype(np.int64)
    order = np.argsort(bucket, kind="stable")
    cuts = np.flatnonzero(np.diff(bucket[order])) + 1
    for part in np.split(order, cuts):
        yield int(bucket[part[0]]), chunk.take(part)


def concat(chunks: Sequence[KeyChunk]) -> KeyChunk:
    """One chunk of all ``chunks`` (the same optional columns set on each)."""
    first = chunks[0]
    join = lambda name: (None if getattr(first, name) is None  # noqa: E731
                         else np.concatenate([getattr(c, name) for c in chunks]))
    ids = pa.concat_arrays([c.ids for c in chunks])
    return KeyChunk(join("files"), join("rows"), ids, join("url"), join("text"), join("quality"))


def decide(keys: np.ndarray, node: Callable[[int], str]) -> tuple[np.ndarray, np.ndarray]:
    """Among rows with equal keys keep the first by ``node(row)``: (rejected rows, the
    row each duplicates), both int64. Rows whose key is unique are never ranked."""
    n = len(keys)
    if n < 2:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    order = np.lexsort(keys.T[::-1])  # by word 0, then 1, then 2
    ranked = keys[order]
    same = (ranked[1:] == ranked[:-1]).all(axis=1)
    if not same.any():
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    sizes = np.diff(np.append(starts, n))
    rejected: list[int] = []
    kept_by: list[int] = []
    for start, size in zip(starts[sizes > 1].tolist(), sizes[sizes > 1].tolist()):
        members = order[start:start + size].tolist()
        best = min(members, key=node)
        others = [m for m in members if m != best]
        rejected += others
        kept_by += [best] * len(others)
    return np.array(rejected, dtype=np.int64), np.array(kept_by, dtype=np.int64)


@dataclass(frozen=True)
class Rejections:
    """Rows of one input file rejected by one step: ``rows[i]`` duplicates ``kept[i]``."""

    reason: str
    rows: np.ndarray  # int64
    kept: pa.Array  # string: the id kept in its place


def rejections_by_file(chunk: KeyChunk, rejected: np.ndarray, kept_by: np.ndarray,
                       reason: str) -> Iterator[tuple[int, Rejections]]:
    """``decide``'s answer for ``chunk`` as (input file, its ``Rejections``)."""
    if not len(rejected):
        return
    files = chunk.files[rejected]
    for file in np.unique(files).tolist():
        mine = files == file
        yield file, Rejections(reason, chunk.rows[rejected[mine]], chunk.ids.take(kept_by[mine]))
