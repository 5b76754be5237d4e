"""Token-shard format: round trip, numpy-only reading, corruption detected and named."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from storage.shards import (HEADER_SIZE, ShardError, decode_shard, dtype_for_vocab, encode_shard,
                            header_sha256)


def docs(n: int = 5, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 32000, size=rng.integers(1, 300)).astype(np.uint16) for _ in range(n)]


@pytest.mark.parametrize("vocab,dtype", [(32000, np.uint16), (65536, np.uint16), (65537, np.uint32),
                                         (256000, np.uint32)])
def test_dtype_for_vocab(vocab, dtype):
    assert dtype_for_vocab(vocab) == np.dtype(dtype)


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32])
def test_round_trip(dtype):
    original = [d.astype(dtype) for d in docs(7)]
    data, n_docs, n_tokens, sha = encode_shard(original, np.dtype(dtype))
    shard = decode_shard(data, "s")
    assert (n_docs, n_tokens) == (7, sum(len(d) for d in original))
    assert all(np.array_equal(shard.doc(i), d) for i, d in enumerate(original))
    assert header_sha256(data) == sha and len(data) == HEADER_SIZE + n_tokens * np.dtype(dtype).itemsize + 8 * 8


def test_readable_with_numpy_alone():
    """The recipe of docs/SHARD_FORMAT.md, verbatim."""
    original = docs(3)
    data, *_ = encode_shard(original, np.dtype(np.uint16))
    magic, version, width, n_docs, n_tokens, payload_at, index_at = struct.unpack_from("<8sIIQQQQ", data)
    tokens = np.frombuffer(data, dtype=f"<u{width}", count=n_tokens, offset=payload_at)
    index = np.frombuffer(data, dtype="<u8", count=n_docs + 1, offset=index_at)
    assert magic == b"TFSHARD1" and version == 1
    assert np.array_equal(tokens[index[1]:index[2]], original[1])


def test_empty_shard_and_single_huge_document():
    data, n_docs, n_tokens, _ = encode_shard([], np.dtype(np.uint16))
    assert decode_shard(data).num_docs == 0 and n_tokens == 0
    huge = np.arange(2_000_000, dtype=np.uint32)
    data, *_ = encode_shard([huge], np.dtype(np.uint32))
    assert np.array_equal(decode_shard(data).doc(0), huge)


def test_flipped_byte_truncation_and_garbage_are_named():
    data, *_ = encode_shard(docs(4), np.dtype(np.uint16))
    flipped = bytearray(data)
    flipped[HEADER_SIZE + 10] ^= 0x01
    with pytest.raises(ShardError, match="shard-7.tfs: checksum mismatch"):
        decode_shard(bytes(flipped), "shard-7.tfs")
    assert decode_shard(bytes(flipped), verify=False).num_docs == 4  # only the checksum catches it
    with pytest.raises(ShardError, match="truncated"):
        decode_shard(data[:-5], "x")
    with pytest.raises(ShardError, match="not a token shard"):
        decode_shard(b"PK\x03\x04" + data[4:], "x")
    with pytest.raises(ShardError, match="shorter than"):
        decode_shard(b"", "x")


def test_bytes_are_the_documented_layout():
    """Header fields, payload and index spelled out from docs/SHARD_FORMAT.md: the
    one-buffer writer must give exactly these bytes."""
    import hashlib

    original = docs(6, seed=3) + [np.zeros(0, dtype=np.uint16)]
    data, n_docs, n_tokens, sha = encode_shard(original, np.dtype(np.uint16))
    payload = np.concatenate(original).astype("<u2").tobytes()
    index = np.concatenate([[0], np.cumsum([len(d) for d in original])]).astype("<u8").tobytes()
    digest = hashlib.sha256(payload + index).digest()
    header = struct.pack("<8sIIQQQQ32s16s", b"TFSHARD1", 1, 2, 7, n_tokens, HEADER_SIZE,
                         HEADER_SIZE + len(payload), digest, b"\0" * 16)
    assert bytes(data) == header + payload + index and sha == digest.hex() and n_docs == 7


def test_writing_a_shard_holds_one_shard_beside_its_documents():
    """The tokenize writer holds a whole shard bucket; building the shard must add about
    one shard of memory (it added ~4 when it concatenated, copied and joined)."""
    import tracemalloc

    original = docs(2000, seed=1)
    size = sum(d.nbytes for d in original)
    tracemalloc.start()
    try:
        data, *_ = encode_shard(original, np.dtype(np.uint16))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(data) >= size and peak < 1.25 * size + (1 << 16)


def _with_index(data: bytes, index: list[int]) -> bytes:
    """The shard's bytes with its document index replaced (same length)."""
    return data[:len(data) - 8 * len(index)] + np.asarray(index, dtype="<u8").tobytes()


@pytest.mark.parametrize("index", [[1, 2, 5], [0, 2, 4], [0, 6, 5]], ids=["start", "end", "decreases"])
def test_each_document_index_rule_is_checked_alone(index):
    """Start at 0, end at num_tokens, never decrease: each broken on its own (the checksum
    off, as for a shard read by range) is refused by both decode_shard and the range check."""
    from storage.verify import check_document_index

    data = encode_shard([np.array([1, 2], np.uint16), np.array([3, 4, 5], np.uint16)], np.dtype(np.uint16))[0]
    assert decode_shard(_with_index(data, [0, 2, 5]), verify=False).num_docs == 2
    with pytest.raises(ShardError, match="document index is inconsistent"):
        decode_shard(_with_index(data, index), verify=False)
    with pytest.raises(ShardError, match=r"shard-x: document index (does not run from 0 to 5|decreases)"):
        check_document_index(np.asarray(index, dtype=np.uint64), 5, "shard-x")
