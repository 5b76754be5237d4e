"""MinHash signatures and LSH band keys (pure numpy, no Beam).

Text is normalised (lower case, digits to 0, punctuation to spaces, whitespace runs
collapsed, as FineWeb's ``simplify_text``) and cut into word n-gram shingles (default 5).
A shingle hash is mixed with MurmurHash3's 32-bit finaliser and permuted by
``a * h + b mod 2^32`` with odd ``a`` — exactly datasketch 2.0's default ``affine32``
scheme, with the same permutations for the same seed. Two shingle hash functions:

* ``compat``: datasketch's ``sha1_hash32`` of the shingle's UTF-8 bytes, so signatures
  equal ``datasketch.MinHash(num_perm, seed).update_batch(shingles)`` bit for bit;
* ``fast`` (default): a 64-bit polynomial hash of every word computed with numpy over
  the text's bytes, combined over the n words and folded to 32 bits — no Python call per
  word or shingle.

Signatures of a batch are computed together: all shingle hashes of the batch in one
array, the permutations applied in chunks, and ``np.minimum.reduceat`` per document.
"""

from __future__ import annotations

import hashlib
import struct
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

# ASCII: punctuation, symbols and control characters -> space, digits -> "0".
# Bytes >= 128 (UTF-8 lead and continuation bytes) are never touched: mapping 0xB2, 0xB3
# or 0xB9 (chr() of them are superscript digits) would break multi-byte characters.
_ASCII_TABLE = bytes(
    (48 if chr(c).isdigit() else c if chr(c).isalnum() or c == 32 else 32) if c < 128 else c
    for c in range(256)
)
# Common non-ASCII punctuation, as UTF-8 byte sequences: General Punctuation (U+2000-206F:
# quotes, dashes, ellipsis, spaces), Latin-1 U+00A1-00BF (except letters ª µ º and the
# superscripts), CJK U+3000-3011, full-width ASCII punctuation U+FF01-FF0F / FF1A-FF20.
_UNICODE_PUNCT = re.compile(
    rb"\xe2\x80[\x80-\xbf]|\xe2\x81[\x80-\xaf]|\xc2[\xa0-\xa9\xab-\xb1\xb4\xb6-\xb8\xbb-\xbf]"
    rb"|\xe3\x80[\x80-\x91]|\xef\xbc[\x81-\x8f\x9a-\xa0]"
)
_EMPTY = np.uint32(0xFFFFFFFF)
_POLY = np.uint64(0x9E3779B97F4A7C15)
# Powers of an odd 64-bit multiplier for the per-byte word hash (words > 256 bytes reuse
# the last power: still a hash, just a weaker one for such words).
_BYTE_POWERS = np.cumprod(np.full(256, 0x100000001B3, dtype=np.uint64), dtype=np.uint64)
_CHUNK_ELEMENTS = 4_000_000  # shingles x permutations per numpy step (16 MB of uint32)


def normalize_for_dedup(text: str) -> str:
    """Lower case, ASCII digits -> 0, punctuation, symbols and control characters ->
    space, single spaces (see ``normalized_words``)."""
    return b" ".join(normalized_words(text)).decode("utf-8")


def normalized_bytes(text: str) -> bytes:
    """The normalised text as UTF-8 with separators as spaces (runs not collapsed)."""
    data = text.lower().encode("utf-8", "replace").translate(_ASCII_TABLE)
    if not data.isascii():
        data = _UNICODE_PUNCT.sub(b" ", data)
    return data


def word_hashes(data: bytes) -> np.ndarray:
    """A 64-bit polynomial hash of every space-separated word of ``data``, vectorised
    over the bytes (no Python call per word)."""
    buf = np.frombuffer(data, dtype=np.uint8)
    word = buf != 32
    if not word.any():
        return np.zeros(0, dtype=np.uint64)
    starts = np.flatnonzero(word & ~np.concatenate(([False], word[:-1])))
    positions = np.flatnonzero(word)
    first = np.searchsorted(positions, starts)  # index in ``positions`` of each word start
    offset = np.arange(len(positions)) - np.repeat(first, np.diff(np.append(first, len(positions))))
    with np.errstate(over="ignore"):
        values = (buf[positions].astype(np.uint64) + np.uint64(1)) * _BYTE_POWERS[np.minimum(offset, 255)]
        return np.add.reduceat(values, first)


def normalized_words(text: str) -> list[bytes]:
    """The UTF-8 words of the normalised text.

    Works on bytes: a 256-byte table for ASCII and one regex for the common non-ASCII
    punctuation. ``str.translate`` with a Unicode-wide table cost ~285 us per 3 KB
    non-ASCII document, this ~40 us.
    """
    return normalized_bytes(text).split()


def shingle_strings(words: Sequence[bytes], n: int) -> list[bytes]:
    """Word n-grams joined by spaces (one shingle of all words if there are fewer)."""
    if not words:
        return []
    if len(words) < n:
        return [b" ".join(words)]
    return [b" ".join(words[i:i + n]) for i in range(len(words) - n + 1)]


def sha1_hash32(data: bytes) -> int:
    """datasketch's default hash: the first 4 bytes of SHA-1, little endian."""
    return struct.unpack("<I", hashlib.sha1(data).digest()[:4])[0]


def fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finaliser (datasketch ``_fmix`` for width 32)."""
    h = h.astype(np.uint32, copy=True)
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    h ^= h >> np.uint32(16)
    return h


def fast_shingle_hashes(w: np.ndarray, n: int) -> np.ndarray:
    """32-bit hashes of the word n-grams from 64-bit word hashes."""
    if len(w) == 0:
        return np.zeros(0, dtype=np.uint32)
    n = min(n, len(w))
    count = len(w) - n + 1
    with np.errstate(over="ignore"):
        h = w[:count].copy()
        for k in range(1, n):
            h = h * _POLY + w[k:k + count]
        h ^= h >> np.uint64(33)
        h *= np.uint64(0xFF51AFD7ED558CCD)
        h ^= h >> np.uint64(33)
    return (h >> np.uint64(32)).astype(np.uint32)


@dataclass(frozen=True)
class MinHasher:
    """Signatures of ``num_perm`` permutations of word ``ngram`` shingles."""

    num_perm: int = 112
    seed: int = 1
    ngram: int = 5
    compat: bool = False

    def __post_init__(self) -> None:
        if self.num_perm <= 0 or self.ngram <= 0:
            raise ValueError("num_perm and ngram must be > 0")

    @property
    def permutations(self) -> tuple[np.ndarray, np.ndarray]:
        """(a, b), as datasketch's affine32 scheme draws them for ``seed``."""
        gen = np.random.RandomState(self.seed)
        a = gen.randint(0, 1 << 31, self.num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
        b = gen.randint(0, 1 << 32, self.num_perm, dtype=np.uint32)
        return a, b

    def shingle_hashes(self, text: str) -> np.ndarray:
        """Mixed 32-bit shingle hashes of the normalised ``text`` (empty: no shingles)."""
        if self.compat:
            words = normalized_words(text)
            raw = np.asarray([sha1_hash32(s) for s in shingle_strings(words, self.ngram)],
                             dtype=np.uint32)
        else:
            raw = fast_shingle_hashes(word_hashes(normalized_bytes(text)), self.ngram)
        return fmix32(raw)

    def signatures(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), num_perm) uint32; an empty text's row is all 0xFFFFFFFF."""
        out = np.full((len(texts), self.num_perm), _EMPTY, dtype=np.uint32)
        hashes = [self.shingle_hashes(t) for t in texts]
        a, b = self.permutations
        rows = max(1, _CHUNK_ELEMENTS // self.num_perm)
        start = 0
        while start < len(texts):
            stop, size = start, 0
            while stop < len(texts) and (size == 0 or size + len(hashes[stop]) <= rows):
                size += len(hashes[stop])
                stop += 1
            self._fill(out, hashes, start, stop, a, b)
            start = stop
        return out

    def _fill(self, out: np.ndarray, hashes: list[np.ndarray], start: int, stop: int,
              a: np.ndarray, b: np.ndarray) -> None:
        lengths = np.array([len(h) for h in hashes[start:stop]])
        nonempty = np.flatnonzero(lengths)
        if len(nonempty) == 0:
            return
        flat = np.concatenate([hashes[start + i] for i in nonempty])
        # permutations x shingles: reduceat then runs along contiguous rows, 9x faster
        # than the shingles x permutations layout. uint32 arithmetic wraps mod 2^32.
        permuted = np.empty((len(a), len(flat)), dtype=np.uint32)
        np.multiply(a[:, None], flat[None, :], out=permuted)
        np.add(permuted, b[:, None], out=permuted)
        offsets = np.concatenate(([0], np.cumsum(lengths[nonempty])[:-1]))
        out[start + nonempty] = np.minimum.reduceat(permuted, offsets, axis=1).T


def band_keys(signature: np.ndarray, bands: int, rows: int) -> list[bytes]:
    """One key per band: the band index and the band's values (bytes, for grouping)."""
    return [bytes([band]) + signature[band * rows:(band + 1) * rows].tobytes()
            for band in range(bands)]


def optimal_bands(threshold: float, num_perm: int, false_positive_weight: float = 0.5,
                  false_negative_weight: float = 0.5) -> tuple[int, int]:
    """(bands, rows) for a Jaccard ``threshold``: datasketch's own routine."""
    from datasketch.lsh import _optimal_param

    return _optimal_param(threshold, num_perm, false_positive_weight, false_negative_weight)


def is_empty(signature: np.ndarray) -> bool:
    return bool((signature == _EMPTY).all())
