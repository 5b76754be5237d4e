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

The per-document functions (``normalized_bytes``, ``word_hashes``, ``fast_shingle_hashes``)
define the values. ``MinHasher.signatures`` computes the same values for a batch at once:
the batch is normalised as one byte string (documents separated by NUL; characters that
``str.lower()`` leaves alone skip it), every word hash of the batch comes from one prefix
sum, and each permutation runs over all shingles of a cache-sized chunk of documents
(``np.minimum.reduceat`` per document). ``tests/transforms/test_dedup.py`` pins batch ==
per-document values.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import struct
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

_LOGGER = logging.getLogger(__name__)

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
    return list(map(b" ".join, zip(*(words[k:] for k in range(n)))))  # no slice per shingle


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
        # (murmur's finaliser would xor h >> 33 in again here: it leaves the top 32 bits,
        # the only ones kept, unchanged, so it is left out)
    return (h >> np.uint64(32)).astype(np.uint32)


# --- batches: the values of the functions above, for many documents at once -------------

# _ASCII_TABLE with upper case lowered (bytes.lower folded in) and NUL kept: it separates
# the documents of a batch (a document's own NULs become spaces first, as in _ASCII_TABLE).
_BATCH_TABLE = bytes(0 if c == 0 else c + 32 if 65 <= c <= 90 else _ASCII_TABLE[c] for c in range(256))
_BLANK, _LOWERS = 1, 2  # code point flags: blanked punctuation; changed by str.lower()
_BATCH_CHARS = 128 * 1024  # characters normalised and hashed together (arrays stay in cache)
_LONG_DOC_CHARS = 256 * 1024  # longer documents take the per-document path (bounded tables)
_PERM_CHUNK = 64 * 1024  # shingles per permutation step (256 KB of uint32: stays in cache)
_INVERSE = np.uint64(pow(0x100000001B3, -1, 1 << 64))
# _LENGTH_SUMS[L]: the sum of the first L _BYTE_POWERS (the "+ 1" of every byte of a word).
_LENGTH_SUMS = np.concatenate(([np.uint64(0)], np.cumsum(_BYTE_POWERS, dtype=np.uint64)))
_tables: list[np.ndarray] = []  # [P^j, P * P^-j] for j < len, grown on demand


def char_batches(texts: Sequence[str], limit: int = 0) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` of runs of consecutive texts of at most ``limit`` characters
    (0: ``_BATCH_CHARS``) together, in order; a longer text is a run of its own."""
    limit = limit or _BATCH_CHARS
    start = 0
    while start < len(texts):
        stop, chars = start, 0
        while stop < len(texts) and (stop == start or chars + len(texts[stop]) <= limit):
            chars += len(texts[stop])
            stop += 1
        yield start, stop
        start = stop


@functools.lru_cache(maxsize=1)
def code_point_flags() -> np.ndarray:
    """uint8 per code point: ``_BLANK`` where ``_UNICODE_PUNCT`` matches the character's
    UTF-8, ``_LOWERS`` where ``str.lower()`` changes it (~0.2 s). The normaliser uses
    ``flags_of``, which computes them for the code points a batch meets; this whole table,
    computed block by block another way, is the reference the tests hold it to."""
    flags = np.zeros(0x110000, dtype=np.uint8)
    for first in range(0x80, 0x110000, 4096):
        chars = [chr(c) for c in range(first, min(first + 4096, 0x110000)) if not 0xD800 <= c < 0xE000]
        block = "".join(chars)
        lowered = block.lower()
        if len(lowered) == len(block):  # one character for one: compare them as arrays
            codes = np.frombuffer(block.encode("utf-32-le"), dtype="<u4")
            changed = codes[np.frombuffer(lowered.encode("utf-32-le"), dtype="<u4") != codes]
        else:  # a character lowers to two (U+0130): one by one
            changed = np.array([ord(c) for c in chars if c.lower() != c], dtype=np.int64)
        flags[changed] |= _LOWERS
        for match in _UNICODE_PUNCT.finditer(block.encode("utf-8")):
            flags[ord(match.group().decode("utf-8"))] |= _BLANK
    return flags


_SEEN_FLAGS: dict[int, int] = {}  # code point -> flags, for the code points met so far


def flags_of(codes: np.ndarray) -> np.ndarray:
    """``code_point_flags()[codes]``, computed for the distinct code points of ``codes``
    only (building the whole table costs ~0.2 s a process; a batch meets a few dozen)."""
    unique, inverse = np.unique(codes, return_inverse=True)
    values = np.zeros(len(unique), dtype=np.uint8)
    for i, code in enumerate(unique.tolist()):
        flag = _SEEN_FLAGS.get(code)
        if flag is None:
            flag = _SEEN_FLAGS[code] = _flag_of(code)
        values[i] = flag
    return values[inverse.reshape(-1)]


def _flag_of(code: int) -> int:
    if code < 0x80 or 0xD800 <= code < 0xE000:
        return 0
    char = chr(code)
    flag = _LOWERS if char.lower() != char else 0
    return flag | (_BLANK if _UNICODE_PUNCT.fullmatch(char.encode("utf-8")) else 0)


def _position_tables(size: int) -> tuple[np.ndarray, np.ndarray]:
    """``P^j`` and ``P^(1-j)`` mod 2^64 for ``j < size`` (P the per-byte multiplier)."""
    if not _tables or len(_tables[0]) < size:
        size = max(size, 1 << 16, 2 * len(_tables[0]) if _tables else 0)
        with np.errstate(over="ignore"):
            powers = np.cumprod(np.concatenate(([np.uint64(1)], np.full(size - 1, _BYTE_POWERS[0]))),
                                dtype=np.uint64)
            inverse = np.cumprod(np.concatenate(([_BYTE_POWERS[0]], np.full(size - 1, _INVERSE))),
                                 dtype=np.uint64)
        _tables[:] = [powers, inverse]
    return _tables[0], _tables[1]


def _utf8_chars(buf: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offset, code point, byte length) of every non-ASCII character in ``buf``, valid
    UTF-8 followed by 3 padding bytes."""
    lead = np.flatnonzero(buf[:-3] >= 0xC0)
    b0 = buf[lead].astype(np.uint32)
    b1, b2, b3 = ((buf[lead + k] & 0x3F).astype(np.uint32) for k in (1, 2, 3))
    two, three = b0 < 0xE0, b0 < 0xF0
    code = np.where(two, ((b0 & 0x1F) << 6) | b1,
                    np.where(three, ((b0 & 0x0F) << 12) | (b1 << 6) | b2,
                             ((b0 & 0x07) << 18) | (b1 << 12) | (b2 << 6) | b3))
    return lead, code, np.where(two, 2, np.where(three, 3, 4))


def _joined(parts: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """``parts`` joined by NUL through ``_BATCH_TABLE`` into a writable array with 3
    padding bytes, and the offset of each part's end."""
    data = b"\0".join(parts).translate(_BATCH_TABLE)
    buf = np.zeros(len(data) + 3, dtype=np.uint8)
    buf[:len(data)] = np.frombuffer(data, dtype=np.uint8)
    return buf, np.cumsum([len(p) + 1 for p in parts]) - 1


def normalized_batch(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The normalised UTF-8 of ``texts`` as one uint8 array, documents separated by NUL,
    and the offset where each document ends. Each document has the words of
    ``normalized_bytes`` (punctuation is blanked in place, so space runs may be longer).

    ``str.lower()`` (~6 ns a character) runs only on documents with a non-ASCII character
    it changes; elsewhere lower-casing is the byte table (ASCII only, and only ASCII
    changes)."""
    parts = [t.encode("utf-8", "replace") for t in texts]
    if b"\0".join(parts).count(0) != len(parts) - 1:
        parts = [p.replace(b"\0", b" ") for p in parts]
    buf, ends = _joined(parts)
    if buf[:-3].max(initial=0) < 0x80:
        return buf[:-3], ends
    lead, code, width = _utf8_chars(buf)
    flags = flags_of(code)
    lowers = lead[(flags & _LOWERS) != 0]
    if len(lowers):
        for d in np.unique(np.searchsorted(ends, lowers)).tolist():
            parts[d] = texts[d].lower().encode("utf-8", "replace").replace(b"\0", b" ")
        buf, ends = _joined(parts)
        lead, code, width = _utf8_chars(buf)
        flags = flags_of(code)
    blank = (flags & _BLANK) != 0
    lead, width = lead[blank], width[blank]
    buf[lead] = 32
    buf[lead + 1] = 32
    buf[lead[width == 3] + 2] = 32  # _UNICODE_PUNCT characters are 2 or 3 bytes long
    return buf[:-3], ends


def batch_word_hashes(buf: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``word_hashes`` of every document in ``normalized_batch`` output, concatenated, and
    the number of words of each document. A word's hash is
    ``(prefix[stop] - prefix[start]) * P^(1-start) + _LENGTH_SUMS[length]`` with
    ``prefix`` the running sum of ``byte * P^position`` (words over 256 bytes, whose
    powers stop growing, are hashed one by one)."""
    n = len(buf)
    powers, inverse = _position_tables(n + 1)
    edges = np.zeros(n + 2, dtype=np.int8)
    np.greater(buf, 32, out=edges[1:-1].view(np.bool_))  # NUL and space separate words
    cuts = np.flatnonzero(edges[1:] != edges[:-1])  # (flatnonzero of an int8 diff is 9x slower)
    starts, stops = cuts[0::2], cuts[1::2]
    prefix = np.zeros(n + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        np.cumsum(np.multiply(buf.astype(np.uint64), powers[:n]), out=prefix[1:])
        lengths = stops - starts
        hashes = (prefix[stops] - prefix[starts]) * inverse[starts] + _LENGTH_SUMS[np.minimum(lengths, 256)]
    for i in np.flatnonzero(lengths > 256).tolist():
        hashes[i] = word_hashes(buf[starts[i]:stops[i]].tobytes())[0]
    return hashes, np.diff(np.searchsorted(starts, ends), prepend=0)


def batch_shingle_hashes(hashes: np.ndarray, words: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``fast_shingle_hashes`` of every document from the concatenated word hashes and
    words per document: all shingle hashes in one array (windows that cross documents
    dropped), and the number of shingles of each document."""
    ends = np.cumsum(words)
    counts = np.maximum(words - n + 1, 0)
    if len(hashes) >= n:
        every = fast_shingle_hashes(hashes, n)
        crossing = (ends[:, None] - np.arange(1, n)[None, :]).ravel()  # the last n-1 starts of each
        keep = np.ones(len(every), dtype=bool)
        keep[crossing[(crossing >= 0) & (crossing < len(every))]] = False
        flat = every[keep]
    else:
        flat = np.zeros(0, dtype=np.uint32)
    short = np.flatnonzero((words > 0) & (words < n))  # one shingle of all their words
    if len(short):
        values = [fast_shingle_hashes(hashes[ends[d] - words[d]:ends[d]], n)[0] for d in short.tolist()]
        flat = np.insert(flat, np.cumsum(counts)[short] - counts[short], values)
        counts[short] = 1
    return flat, counts


@functools.lru_cache(maxsize=16)
def _permutations(seed: int, num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    gen = np.random.RandomState(seed)
    a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    return a, b


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
        return _permutations(self.seed, self.num_perm)

    def shingle_hashes(self, text: str) -> np.ndarray:
        """Mixed 32-bit shingle hashes of the normalised ``text`` (empty: no shingles):
        the reference, one document at a time."""
        if self.compat:
            words = normalized_words(text)
            raw = np.asarray([sha1_hash32(s) for s in shingle_strings(words, self.ngram)],
                             dtype=np.uint32)
        else:
            raw = fast_shingle_hashes(word_hashes(normalized_bytes(text)), self.ngram)
        return fmix32(raw)

    def batch_hashes(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``shingle_hashes`` of every text, concatenated, and the count of each."""
        buf, ends = normalized_batch(texts)
        if not self.compat:
            flat, counts = batch_shingle_hashes(*batch_word_hashes(buf, ends), self.ngram)
            return fmix32(flat), counts
        raw: list[int] = []
        counts = np.zeros(len(texts), dtype=np.int64)
        for d, part in enumerate(buf.tobytes().split(b"\0")):
            shingles = shingle_strings(part.split(), self.ngram)
            raw += map(sha1_hash32, shingles)
            counts[d] = len(shingles)
        return fmix32(np.asarray(raw, dtype=np.uint32)), counts

    def signatures(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), num_perm) uint32; an empty text's row is all 0xFFFFFFFF."""
        out = np.full((len(texts), self.num_perm), _EMPTY, dtype=np.uint32)
        for start, stop in char_batches(texts):
            if len(texts[start]) > _LONG_DOC_CHARS:  # a long document (alone): per-document path
                hashes = self.shingle_hashes(texts[start])
                counts = np.array([len(hashes)])
            else:
                hashes, counts = self.batch_hashes(texts[start:stop])
            out[start:stop] = self.minimums(hashes, counts)
        return out

    def minimums(self, hashes: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Signatures from mixed shingle hashes: row d, column k is
        ``min(a[k] * h + b[k] mod 2^32)`` over document d's ``counts[d]`` hashes (in order
        in ``hashes``), all 0xFFFFFFFF for a document without any. Permutation by
        permutation over chunks of ``_PERM_CHUNK`` shingles: scalar-times-vector steps on
        a chunk in cache are ~2.5x faster than one permutations x shingles product."""
        out = np.full((len(counts), self.num_perm), _EMPTY, dtype=np.uint32)
        rows = np.flatnonzero(counts)
        if len(rows) == 0:
            return out
        ends = np.cumsum(counts[rows])
        starts = ends - counts[rows]
        pairs = list(zip(*self.permutations))
        scratch = np.empty(max(_PERM_CHUNK, int(counts.max())), dtype=np.uint32)
        i = 0
        while i < len(rows):
            j = max(i + 1, int(np.searchsorted(ends, starts[i] + _PERM_CHUNK, side="right")))
            chunk = hashes[starts[i]:ends[j - 1]]
            work = scratch[:len(chunk)]
            offsets = starts[i:j] - starts[i]
            mins = np.empty((self.num_perm, j - i), dtype=np.uint32)
            for k, (ak, bk) in enumerate(pairs):  # uint32 arithmetic wraps mod 2^32
                np.multiply(chunk, ak, out=work)
                np.add(work, bk, out=work)
                np.minimum.reduceat(work, offsets, out=mins[k])
            out[rows[i:j]] = mins.T
            i = j
        return out


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
