"""Token-shard format: round trip, numpy-only reading, corruption detected and named."""

from __future__ import annotations

import io
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


def _with_header(data: bytes, **fields) -> bytes:
    """The shard's bytes with some header fields changed (the rest, payload and index kept)."""
    import dataclasses

    from storage.shards import ShardHeader

    out = bytearray(data)
    dataclasses.replace(ShardHeader.unpack(data), **fields).pack_into(out)
    return bytes(out)


def test_each_header_field_is_checked_alone():
    """A header wrong in one field only, the size still right (checksum off, as for a shard
    read by range): the version, the token width, the payload offset and the index offset
    are each refused on their own; a shard of exactly the header's size is truncated."""
    data = encode_shard([np.array([1, 2, 3], np.uint16), np.array([4, 5, 6], np.uint16)], np.dtype(np.uint16))[0]
    assert decode_shard(_with_header(data), verify=False).num_docs == 2
    with pytest.raises(ShardError, match="s: unsupported version 2 or token width 2"):
        decode_shard(_with_header(data, version=2), "s", verify=False)
    # width 3 with 6 tokens: the payload is 18 bytes as for 9 uint16 tokens, so the size fits
    three = _with_header(data[:HEADER_SIZE], num_tokens=6, width=3, index_at=HEADER_SIZE + 18)
    three += data[HEADER_SIZE:HEADER_SIZE + 18] + np.asarray([0, 3, 6], "<u8").tobytes()
    assert len(three) == HEADER_SIZE + 6 * 3 + 8 * 3
    with pytest.raises(ShardError, match="unsupported version 1 or token width 3"):
        decode_shard(three, "s", verify=False)
    for field, value in (("payload_at", HEADER_SIZE + 2), ("index_at", HEADER_SIZE + 10)):
        with pytest.raises(ShardError, match="truncated or corrupt"):
            decode_shard(_with_header(data, **{field: value}), "s", verify=False)
    with pytest.raises(ShardError, match=f"s: {HEADER_SIZE} bytes, expected {HEADER_SIZE + 12 + 24}"):
        decode_shard(data[:HEADER_SIZE], "s")


def test_empty_documents_decode_and_tokens_are_the_payload_only():
    """Empty documents (equal consecutive bounds) are valid; ``tokens`` is exactly the
    payload, without the index bytes after it."""
    original = [np.array([7, 8], np.uint16), np.zeros(0, np.uint16), np.zeros(0, np.uint16),
                np.array([9], np.uint16)]
    data, n_docs, n_tokens, _ = encode_shard(original, np.dtype(np.uint16))
    shard = decode_shard(data, "s")
    assert shard.num_docs == n_docs == 4 and n_tokens == 3
    assert shard.tokens.tolist() == [7, 8, 9] and shard.index.tolist() == [0, 2, 2, 2, 3]
    assert [shard.doc(i).tolist() for i in range(4)] == [[7, 8], [], [], [9]]


class _ReadOnly:
    """A file object with ``read`` only (no ``readinto``), returning at most ``step`` bytes
    per call, as some object-store file objects do."""

    def __init__(self, data: bytes, step: int) -> None:
        self._data, self._at, self._step = data, 0, step

    def read(self, size: int = -1) -> bytes:
        size = self._step if size < 0 else min(size, self._step)
        part = self._data[self._at:self._at + size]
        self._at += len(part)
        return part


def test_verify_reads_file_objects_without_readinto_and_with_short_reads(monkeypatch):
    import storage.verify as verify

    original = docs(6, seed=4)
    data, d, t, sha = encode_shard(original, np.dtype(np.uint16))
    entry = {"num_docs": d, "num_tokens": t, "num_bytes": len(data), "sha256": sha}
    monkeypatch.setattr(verify, "BLOCK", 64)  # many blocks, each filled by several short reads
    for step in (7, 64, 1 << 20):
        header = verify.verify_shard(_ReadOnly(data, step), entry, "s", "uint16", 32000)
        assert (header.num_docs, header.num_tokens) == (d, t)
        bad = bytearray(data)
        bad[-20] ^= 1
        with pytest.raises(ShardError, match=r"^s: checksum mismatch \(sha256; corrupt shard: its bytes are not "
                                             r"the ones index.json lists\)"):
            verify.verify_shard(_ReadOnly(bytes(bad), step), entry, "s", "uint16", 32000)
        with pytest.raises(ShardError, match="truncated or overlong"):
            verify.verify_shard(_ReadOnly(data[:-8], step), entry, "s", "uint16", 32000)


def test_fast_checksum_is_the_entrys_xxh3_128_where_it_records_one():
    """``checksum="fast"`` checks the entry's xxh3_128 (and then not the sha256), falls back
    to the sha256 for an entry without one; ``"sha256"``/``True`` check only the sha256."""
    import xxhash

    import storage.verify as verify

    data, d, t, sha = encode_shard(docs(6, seed=5), np.dtype(np.uint16))
    fast = xxhash.xxh3_128(data[HEADER_SIZE:]).hexdigest()
    entry = {"num_docs": d, "num_tokens": t, "num_bytes": len(data), "sha256": sha, "xxh3_128": fast}
    for checksum in ("fast", "sha256", True, False):
        verify.verify_shard(io.BytesIO(data), entry, "s", "uint16", 32000, checksum)
    bad = bytearray(data)
    bad[HEADER_SIZE + 2] ^= 4  # one bit of a token (its id stays below the vocabulary)
    for checksum, key in (("fast", "xxh3_128"), ("sha256", "sha256"), (True, "sha256")):
        with pytest.raises(ShardError, match=rf"^s: checksum mismatch \({key};"):
            verify.verify_shard(io.BytesIO(bytes(bad)), entry, "s", "uint16", 32000, checksum)
    verify.verify_shard(io.BytesIO(bytes(bad)), entry, "s", "uint16", 32000, False)  # no checksum asked for
    # which digest each mode compares: a wrong xxh3_128 fails only "fast", a wrong sha256 only
    # the sha256 (the header's copy of it stays right: it is checked apart)
    wrong_fast = {**entry, "xxh3_128": "0" * 32}
    with pytest.raises(ShardError, match=r"checksum mismatch \(xxh3_128;"):
        verify.verify_shard(io.BytesIO(data), wrong_fast, "s", "uint16", 32000, "fast")
    verify.verify_shard(io.BytesIO(data), wrong_fast, "s", "uint16", 32000, "sha256")
    older = {k: v for k, v in entry.items() if k != "xxh3_128"}  # written before the field
    with pytest.raises(ShardError, match=r"checksum mismatch \(sha256;"):
        verify.verify_shard(io.BytesIO(bytes(bad)), older, "s", "uint16", 32000, "fast")
    with pytest.raises(ValueError, match="checksum must be one of"):
        verify.verify_shard(io.BytesIO(data), entry, "s", "uint16", 32000, "md5")


def _entry(data: bytes, **fields) -> dict:
    """The index.json entry of a shard's bytes (``fields`` changed)."""
    from storage.shards import ShardHeader

    h = ShardHeader.unpack(data)
    return {"num_docs": h.num_docs, "num_tokens": h.num_tokens, "num_bytes": len(data), "sha256": h.sha256,
            **fields}


@pytest.mark.parametrize("header,entry,dtype,message", [
    ({}, {}, None, None),
    ({}, {}, "uint16", None),
    ({}, {"dtype": "uint16"}, "uint32", None),  # the entry's dtype (tokenize writes it) before the index's
    ({"magic": b"PK\x03\x04\0\0\0\0"}, {}, None, r"not a token shard \(magic b'PK"),
    ({"version": 2}, {}, None, "header format version 2, expected 1"),
    ({}, {}, "uint32", "header token width 2 bytes, index.json says uint32"),
    ({}, {"dtype": "uint32"}, None, "header token width 2 bytes, index.json says uint32"),
    ({"width": 3}, {}, None, "header token width 3 bytes, index.json says uint16 or uint32"),
    ({"num_docs": 3}, {}, None, "header num_docs 3, index.json says 2"),
    ({"num_tokens": 7}, {}, None, "header num_tokens 7, index.json says 6"),
    ({"payload_at": HEADER_SIZE + 2}, {}, None, f"header offsets {HEADER_SIZE + 2}/{HEADER_SIZE + 12} do not match"),
    ({"index_at": HEADER_SIZE + 10}, {}, None, f"header offsets {HEADER_SIZE}/{HEADER_SIZE + 10} do not match 6 "
                                               "tokens of 2 bytes"),
    ({"reserved": b"\0" * 15 + b"\1"}, {}, None, "reserved header bytes are not zero"),
    ({"sha256": "ab" * 32}, {}, None, r"header checksum abababababab\.\.\., index.json says [0-9a-f]{12}\.\.\. "
                                      r"\(not the shard"),
    ({}, {"num_bytes": 1000}, None, rf"index.json says 1000 bytes, its header implies {HEADER_SIZE + 12 + 24}"),
], ids=["ok", "ok-index-dtype", "ok-entry-dtype", "magic", "version", "index-dtype", "entry-dtype", "width",
        "num_docs", "num_tokens", "payload_at", "index_at", "reserved", "sha256", "num_bytes"])
def test_check_header_refuses_each_field_alone_naming_it(header, entry, dtype, message):
    """``storage.verify.check_header`` (what the cache and the range reads trust): every
    field wrong on its own, against the index entry, is refused with its own message."""
    from storage.verify import check_header

    data = encode_shard([np.array([1, 2, 3], np.uint16), np.array([4, 5, 6], np.uint16)], np.dtype(np.uint16))[0]
    changed = _with_header(data, **header)[:HEADER_SIZE]
    if message is None:
        assert check_header(changed, _entry(data, **entry), "s", dtype).num_tokens == 6
        return
    with pytest.raises(ShardError, match=f"^s: {message}"):
        check_header(changed, _entry(data, **entry), "s", dtype)


def test_check_header_and_document_index_edges():
    from storage.verify import check_document_index, check_header

    data = encode_shard([np.array([1, 2], np.uint16)], np.dtype(np.uint16))[0]
    with pytest.raises(ShardError, match=rf"^s: 50 bytes, shorter than the {HEADER_SIZE}-byte header \(truncated shard\)"):
        check_header(data[:50], _entry(data), "s")
    with pytest.raises(ShardError, match="^s: document index does not run from 0 to 0 tokens"):
        check_document_index(np.zeros(0, dtype=np.uint64), 0, "s")
    check_document_index(np.asarray([0, 2, 2, 5], dtype=np.uint64), 5, "s")  # an empty document
    check_document_index(np.asarray([0], dtype=np.uint64), 0, "s")  # no documents
    with pytest.raises(ShardError, match="^shard: checksum mismatch"):  # the default name
        flipped = bytearray(data)
        flipped[HEADER_SIZE] ^= 1
        decode_shard(bytes(flipped))


def test_verify_shard_size_and_vocabulary_edges(monkeypatch):
    """What ``verify_shard`` reads at the edges: a file longer than its entry by whole
    blocks (its extra bytes start exactly at a block boundary), a file cut inside a token
    (named as truncated, not a numpy error), the document index never read as tokens,
    and a vocabulary of one id."""
    import io

    import storage.verify as verify

    def entry(data: bytes) -> dict:
        return {**_entry(data), "num_bytes": len(data)}

    monkeypatch.setattr(verify, "BLOCK", 8)  # 4 tokens + 2 index bounds: 8 + 16 bytes, 3 blocks
    data = encode_shard([np.array([1, 2, 3, 4], np.uint16)], np.dtype(np.uint16))[0]
    e = entry(data)
    assert verify.verify_shard(io.BytesIO(data), e, "s", "uint16", 5).num_tokens == 4
    total = len(data) - HEADER_SIZE
    with pytest.raises(ShardError, match=rf"^s: {len(data) + 8}\+ bytes, index.json says {len(data)} "
                                         r"\(truncated or overlong shard\)"):
        verify.verify_shard(io.BytesIO(data + b"\0" * 8), e, "s", "uint16", 5)
    assert total % 8 == 0
    for cut in (1, 3, 5, 8):  # inside the first token, the second, the third; at a block end
        with pytest.raises(ShardError, match=rf"^s: {HEADER_SIZE + cut} bytes, index.json says {len(data)} "
                                             r"\(truncated or overlong shard\)"):
            verify.verify_shard(io.BytesIO(data[:HEADER_SIZE + cut]), e, "s", "uint16", 5)
    # 1,500 tokens below a vocabulary of 1,000, 8 bytes a block: the index's bounds (0, 1500)
    # are not token ids
    many = encode_shard([np.arange(1500, dtype=np.uint16) % 1000], np.dtype(np.uint16))[0]
    assert verify.verify_shard(io.BytesIO(many), entry(many), "s", "uint16", 1000).num_tokens == 1500
    zeros = encode_shard([np.zeros(3, np.uint16)], np.dtype(np.uint16))[0]
    verify.verify_shard(io.BytesIO(zeros), entry(zeros), "s", "uint16", 1)  # id 0 of a 1-id vocabulary
    with pytest.raises(ShardError, match="^s: token id 4 is outside the vocabulary of 1 ids"):
        verify.verify_shard(io.BytesIO(data), e, "s", "uint16", 1)


def test_file_sha256_hashes_everything_left_block_by_block(monkeypatch):
    import hashlib
    import io

    import storage.verify as verify

    payload = bytes(range(256)) * 5
    monkeypatch.setattr(verify, "BLOCK", 64)
    for step in (7, 64, 1 << 20):  # short reads too
        assert verify.file_sha256(_ReadOnly(payload, step)) == hashlib.sha256(payload).hexdigest()
    fh = io.BytesIO(payload)
    fh.seek(100)
    assert verify.file_sha256(fh) == hashlib.sha256(payload[100:]).hexdigest()
    assert verify.file_sha256(io.BytesIO(b"")) == hashlib.sha256(b"").hexdigest()


def test_documents_of_any_integer_type_are_cast_to_the_shard_dtype():
    """Token ids often come as int64 (numpy's default) or int32 arrays: the shard holds
    them in its own dtype, the same bytes as from uint16 arrays."""
    ids = [[5, 1, 65535], [], [7]]
    want = encode_shard([np.array(d, np.uint16) for d in ids], np.dtype(np.uint16))
    for kind in (np.int64, np.int32, np.uint32):
        got = encode_shard([np.array(d, kind) for d in ids], np.dtype(np.uint16))
        assert bytes(got[0]) == bytes(want[0]) and got[1:] == want[1:]


def test_verify_shard_checks_the_document_index_of_a_consistent_shard():
    """A shard whose checksum matches its entry but whose document index decreases (written
    so by a broken writer) is refused, naming it."""
    import hashlib
    import io

    from storage.shards import shard_header
    from storage.verify import verify_shard

    body = np.array([1, 2, 3, 4], "<u2").tobytes() + np.asarray([0, 3, 2, 4], "<u8").tobytes()
    sha = hashlib.sha256(body).hexdigest()
    data = shard_header(2, 3, 4, sha) + body
    entry = {"num_docs": 3, "num_tokens": 4, "num_bytes": len(data), "sha256": sha}
    with pytest.raises(ShardError, match=r"^s: document index decreases \(corrupt\)"):
        verify_shard(io.BytesIO(data), entry, "s", "uint16")
