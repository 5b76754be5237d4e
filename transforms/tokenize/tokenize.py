"""The tokenize stage: documents → sentencepiece ids (+ EOS) → globally shuffled shards.

Encoding is batched (one ``encode`` call per batch, the model loaded once per worker).
The shuffle is a pure function of (seed, document id): every document gets a shard
``hash(seed, id) % S`` and a position key inside it, so the output is the same for the
same seed and input on any runner, and every document is equally likely to land at any
place of the dataset. ``S = ceil(total bytes / target shard bytes)`` comes from a global
sum (a side input). A document is never split, so a document longer than the target
makes its shard larger than the target.

Upsampling: a document with ``repeats = r`` (set by the augment stage) is written as r
entries, copies 0..r-1 of one token array; its text stays once in ``docs/``. Copy 0 takes
the document's own bucket and position key (so a corpus without repeats gives the same
shards as before); copy k takes bucket ``storage.repeats.copy_bucket`` (different shards
whenever r <= S, spread evenly otherwise) and its own position key. Each shard's
documents table has a ``copy`` column (0: the document's first entry). A repeat count
outside 1..``max_repeats`` is rejected (reason ``repeats``), never a crash.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
from dataclasses import dataclass
from enum import Enum
from typing import Any, Iterable, Iterator, Optional, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.utils import shared

from storage.repeats import check_repeats, copy_bucket, merge_repeat_stats, shard_repeat_stats
from storage.shards import HEADER_SIZE, dtype_for_vocab, shard_header
from transforms import progress
from transforms.doc import Doc, Rejected
from transforms.routing import REJECTED, CountFn, StageOutputs

_LOGGER = logging.getLogger(__name__)


# sentencepiece 0.2 refuses a character_coverage outside [0.98, 1] when it trains
# (trainer_interface.cc: CHECK_RANGE(character_coverage, 0.98, 1.0)).
CHARACTER_COVERAGE_RANGE = (0.98, 1.0)
# sentencepiece reads vocab_size as an int32 (2**31 and above: "cannot parse as int") and
# its unigram trainer never ends at 2**31 - 1 (measured: 1e9 trains in 6 s, 2**31 - 1 runs
# past 100 s on 500 lines); 2**30 is below both, and far below the uint32 ids of a shard.
MAX_VOCAB_SIZE = 1 << 30
MIN_VOCAB_SIZE = 16
# byte_fallback needs the 256 byte pieces, unk, bos, eos and at least one character.
BYTE_FALLBACK_MIN_VOCAB = 256 + 3 + 1
# A cap on ``max_repeats``: far above the few repeats quality upsampling uses (DCLM and
# Nemotron-CC repeat their best tier a handful of times), low enough that one document
# cannot make a dataset a thousand times its size.
MAX_REPEATS_LIMIT = 1000


class TokenizeReason(str, Enum):
    EMPTY = "empty"  # the text encodes to no token
    REPEATS = "repeats"  # the repeat count is not an integer in 1..tokenize.max_repeats


@dataclass(frozen=True)
class TokenizeConfig:
    """``model``: a given sentencepiece model (path or URL); "" = trained by the
    ``tokenizer`` stage on a uniform sample of the corpus with the settings below.

    What decides the tokens, and so the dataset version (``version_key``): the tokenizer
    (its sha256: ``model`` or the training settings through the model trained),
    ``seed``, ``append_eos``, ``target_shard_bytes``, ``dataset`` and the documents (id,
    text and, when upsampled, repeat count and rules; ``max_repeats`` only through the
    documents it rejects). ``batch_size`` only changes how many documents one ``encode``
    call takes, ``part_bytes`` only how much of a shard its writer holds at once."""

    model: str = ""  # a sentencepiece model, path or URL; "" = train one (the tokenizer stage)
    vocab_size: int = 32000  # training: vocabulary size
    model_type: str = "bpe"  # training: bpe | unigram | char | word
    character_coverage: float = 0.9995  # training: share of characters the vocabulary covers
    byte_fallback: bool = True  # training: unknown characters become byte tokens
    train_sample_docs: int = 20000  # training: documents sampled (uniformly) to train on
    target_shard_bytes: int = 256 * 1024 * 1024  # token shard size to aim for
    seed: int = 0  # of the global shuffle of documents into shards
    append_eos: bool = True  # an end-of-sequence token after every document
    batch_size: int = 256  # documents per encode call
    dataset: str = "dataset"  # the dataset's name in index.json (part of the version key)
    # the most entries one document may be written as (its ``repeats``, set by upsampling);
    # a larger count rejects the document (rejected/tokenize, reason ``repeats``)
    max_repeats: int = 16
    # the shard writer's memory: a shard is written as parts of about this many bytes of
    # tokens, sorted and joined, so no worker holds a whole shard; the shards are the same
    # for any value
    part_bytes: int = 16 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.model_type not in ("bpe", "unigram"):
            raise ValueError(f"model_type must be bpe or unigram, got {self.model_type!r}")
        if not MIN_VOCAB_SIZE <= self.vocab_size <= MAX_VOCAB_SIZE:
            raise ValueError(f"vocab_size must be in {MIN_VOCAB_SIZE}..{MAX_VOCAB_SIZE} (2**30: sentencepiece's "
                             f"limit), got {self.vocab_size}")
        if not self.model and self.byte_fallback and self.vocab_size < BYTE_FALLBACK_MIN_VOCAB:
            raise ValueError(f"vocab_size must be >= {BYTE_FALLBACK_MIN_VOCAB} with byte_fallback (256 byte "
                             f"pieces, unk, bos, eos and one character), got {self.vocab_size}")
        low, high = CHARACTER_COVERAGE_RANGE
        if not low <= self.character_coverage <= high:
            raise ValueError(f"character_coverage must be in [{low}, {high}] (what sentencepiece accepts), "
                             f"got {self.character_coverage}")
        for key in ("train_sample_docs", "target_shard_bytes", "batch_size", "part_bytes"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        if not 1 <= self.max_repeats <= MAX_REPEATS_LIMIT:
            raise ValueError(f"max_repeats must be in 1..{MAX_REPEATS_LIMIT}, got {self.max_repeats}")


_HALF = (1 << 63) - 1  # every value stays a signed 64-bit int: any runner's int coder carries it


def doc_fingerprint(doc_id: str, text: str, repeats: int = 1, rules: Sequence[str] = ()) -> tuple[int, int]:
    """A 126-bit hash of a document's id and text, as two 63-bit halves (labels and signals
    left out: they do not change its tokens). An upsampled document (``repeats`` other than
    1, or upsampling ``rules``) also hashes its repeat count (0 stands for one the stage
    rejects) and rule names: another upsampling is another dataset version. A document
    without upsampling hashes as before, so its versions keep their keys."""
    ident = doc_id.encode("utf-8")
    data = len(ident).to_bytes(8, "little") + ident + text.encode("utf-8", "surrogatepass")
    if repeats != 1 or rules:
        names = json.dumps(sorted(set(rules))).encode("utf-8", "surrogatepass")
        data += b"\0repeats" + repeats.to_bytes(8, "little", signed=True) + names
    digest = hashlib.blake2b(data, digest_size=16).digest()
    return int.from_bytes(digest[:8], "little") & _HALF, int.from_bytes(digest[8:], "little") & _HALF


class SumFingerprints(beam.CombineFn):
    """(documents, sum of their fingerprints, each half mod 2**63): the same for the same set
    of documents in any order, on any runner. The output is (documents, the two halves as
    one 126-bit number)."""

    def create_accumulator(self) -> tuple[int, int, int]:
        return 0, 0, 0

    def add_input(self, acc: tuple[int, int, int], value: tuple[int, int]) -> tuple[int, int, int]:
        return acc[0] + 1, (acc[1] + value[0]) & _HALF, (acc[2] + value[1]) & _HALF

    def merge_accumulators(self, accs: Iterable[tuple[int, int, int]]) -> tuple[int, int, int]:
        count = low = high = 0
        for c, lo, hi in accs:
            count, low, high = count + c, (low + lo) & _HALF, (high + hi) & _HALF
        return count, low, high

    def extract_output(self, acc: tuple[int, int, int]) -> str:
        return json.dumps({"documents": acc[0], "sum": f"{(acc[2] << 63) | acc[1]:032x}"})


def fingerprint_of(doc: Doc, max_repeats: int) -> tuple[int, int]:
    """``doc_fingerprint`` of a document as the stage sees it: a repeat count it rejects
    (outside 1..``max_repeats``) hashes as 0."""
    return stage_fingerprint(doc.id, doc.text, doc.repeats, doc.repeat_rules, max_repeats)


def stage_fingerprint(doc_id: str, text: str, repeats: int, rules: Sequence[str], max_repeats: int) -> tuple[int, int]:
    """``fingerprint_of`` from a document's fields (the Arrow path has no ``Doc``)."""
    times = repeats if check_repeats(repeats, max_repeats) is None else 0
    return doc_fingerprint(doc_id, text, times, tuple(rules))


class FingerprintDocs(beam.PTransform):
    """``Doc`` → one JSON line ``{"documents": n, "sum": hex}`` for the whole collection."""

    def __init__(self, max_repeats: int = TokenizeConfig.max_repeats) -> None:
        super().__init__()
        self._max_repeats = max_repeats

    def expand(self, docs: beam.PCollection[Doc]) -> beam.PCollection[str]:
        cap = self._max_repeats
        return (docs | "Fingerprint" >> beam.Map(lambda d: fingerprint_of(d, cap))
                | "Sum" >> beam.CombineGlobally(SumFingerprints()))


_FINGERPRINT_COLUMNS = ("id", "text", "repeats", "repeat_rules")


class _FileFingerprintFn(beam.DoFn):
    """A Parquet file of ``Doc`` rows → (rows, fingerprint sum low, high): the columns
    ``fingerprint_of`` reads, a batch at a time, without building a ``Doc``."""

    def __init__(self, max_repeats: int) -> None:
        self._max_repeats = max_repeats

    def process(self, path: str) -> Iterator[tuple[int, int, int]]:
        with FileSystems.open(path, mime_type="application/octet-stream",
                              compression_type=CompressionTypes.UNCOMPRESSED) as fh:
            parquet = pq.ParquetFile(fh)
            present = set(parquet.schema_arrow.names)
            columns = [c for c in _FINGERPRINT_COLUMNS if c in present]
            count = low = high = 0
            for batch in parquet.iter_batches(batch_size=8192, columns=columns):
                n = batch.num_rows
                values = {c: batch.column(c).to_pylist() for c in columns}
                ids, texts = values["id"], values.get("text", [None] * n)
                repeats, rules = values.get("repeats", [None] * n), values.get("repeat_rules", [None] * n)
                for i in range(n):  # doc_from_row's defaults for missing values, then fingerprint_of
                    lo, hi = stage_fingerprint(ids[i], texts[i] or "", 1 if repeats[i] is None else int(repeats[i]),
                                               rules[i] or (), self._max_repeats)
                    low, high = (low + lo) & _HALF, (high + hi) & _HALF
                count += n
        yield count, low, high


class _SumPartials(SumFingerprints):
    """``SumFingerprints`` over per-file partial sums (rows, low, high)."""

    def add_input(self, acc: tuple[int, int, int], value: tuple[int, int, int]) -> tuple[int, int, int]:
        return acc[0] + value[0], (acc[1] + value[1]) & _HALF, (acc[2] + value[2]) & _HALF


class FingerprintFiles(beam.PTransform):
    """Parquet files of ``Doc`` rows → ``FingerprintDocs``' one JSON line, the files read
    Arrow-native (a file per element: no ``Doc`` and no element per document)."""

    def __init__(self, files: Sequence[str], max_repeats: int = TokenizeConfig.max_repeats) -> None:
        super().__init__()
        self._files = list(files)
        self._max_repeats = max_repeats

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection[str]:
        return (pbegin
                | "Files" >> beam.Create(self._files)
                | "PerFile" >> beam.ParDo(_FileFingerprintFn(self._max_repeats))
                | "Sum" >> beam.CombineGlobally(_SumPartials()))


def version_key(config: TokenizeConfig, tokenizer_sha256: str, docs: int, docs_sum: int,
                index_version: int) -> str:
    """The sha256 of what decides a version's tokens and layout: the tokenizer, the
    token-affecting settings, the documents (count and fingerprint sum) and the index format.
    Equal keys mean byte-identical shards, so the version is reused, not written again."""
    payload = {"tokenizer_sha256": tokenizer_sha256, "seed": config.seed, "append_eos": config.append_eos,
               "target_shard_bytes": config.target_shard_bytes, "dataset": config.dataset,
               "documents": docs, "documents_fingerprint": f"{docs_sum:032x}", "index_version": index_version}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def shuffle_key(seed: int, doc_id: str) -> int:
    """A 64-bit pseudo-random key of the document for this seed."""
    return int.from_bytes(hashlib.blake2b(f"{seed}:{doc_id}".encode(), digest_size=8).digest(), "big")


def copy_shuffle_key(seed: int, doc_id: str, copy: int) -> int:
    """The position key of copy ``copy`` of a document in its shard: copy 0's is the
    document's own ``shuffle_key``, each later copy's its own pseudo-random key."""
    if copy == 0:
        return shuffle_key(seed, doc_id)
    data = f"{seed}:copy{copy}:".encode() + doc_id.encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


Encoded = tuple[str, np.ndarray, int, tuple[str, ...]]  # (doc id, tokens, repeats, rules)
# The documents of one encode batch as one element (what crosses the steps and shuffles
# after encoding; one element per document cost more in the runner than the work):
# (ids, tokens of all of them concatenated, offsets (document i is
# tokens[offsets[i]:offsets[i + 1]]), repeats, rules).
EncodedChunk = tuple[list[str], np.ndarray, np.ndarray, list[int], list[tuple[str, ...]]]
Entry = tuple[str, int, np.ndarray, int, tuple[str, ...]]  # (doc id, copy, tokens, repeats, rules)


def place_copies(seed: int, encoded: Encoded, shards: int) -> Iterator[tuple[int, Entry]]:
    """(bucket, entry) of every copy of an encoded document: copy 0 in the document's own
    bucket ``shuffle_key(seed + 1, id) % shards``, copy k in ``copy_bucket`` of it. The
    rule names travel with copy 0 only (they are counted there)."""
    doc_id, tokens, repeats, rules = encoded
    first = shuffle_key(seed + 1, doc_id) % shards
    for copy in range(repeats):
        yield copy_bucket(first, copy, repeats, shards), (doc_id, copy, tokens, repeats, rules if copy == 0 else ())


class _Tokenizer:
    """A loaded sentencepiece model (weak-referenceable for ``shared.Shared``)."""

    def __init__(self, path: str) -> None:
        import sentencepiece as spm

        from models.files import local_copy

        self.sp = spm.SentencePieceProcessor(model_file=local_copy(path))
        self.eos = self.sp.eos_id()
        self.dtype = dtype_for_vocab(self.sp.get_piece_size())


class _EncodeFn(beam.DoFn):
    """Batches of ``Doc`` → one ``EncodedChunk`` of the batch's encoded documents; a bad
    repeat count or an empty encoding → rejected."""

    def __init__(self, model: str, append_eos: bool, max_repeats: int, stage: str = "tokenize") -> None:
        self._model = model
        self._append_eos = append_eos
        self._max_repeats = max_repeats
        self._stage = stage
        self._shared = shared.Shared()

    def setup(self) -> None:
        self._tok = self._shared.acquire(lambda: _Tokenizer(self._model), tag=f"spm:{self._model}")
        self._by_origin: dict[str, Any] = {}

    def _count_origin(self, counts: dict[str, int]) -> None:
        """Tokens (each document once) of the original documents and of each rephrasing
        template's synthetic ones: ``tokens_original``, ``tokens_template_<name>``."""
        for name, tokens in counts.items():
            counter = self._by_origin.get(name)
            if counter is None:
                counter = self._by_origin[name] = beam.metrics.Metrics.counter(self._stage, name)
            counter.inc(tokens)

    def process(self, batch: list[Doc]) -> Iterator[Any]:
        tok = self._tok
        kept = []
        for doc in batch:
            problem = check_repeats(doc.repeats, self._max_repeats)
            if problem is None:
                kept.append(doc)
            else:
                yield beam.pvalue.TaggedOutput(REJECTED, Rejected(doc, TokenizeReason.REPEATS.value, problem))
        ids = tok.sp.encode([d.text for d in kept]) if kept else []
        docs, pieces_of, origin = [], [], {}
        for doc, pieces in zip(kept, ids):
            if not pieces:
                yield beam.pvalue.TaggedOutput(REJECTED, Rejected(doc, TokenizeReason.EMPTY.value, "no tokens"))
                continue
            if self._append_eos and tok.eos >= 0:
                pieces.append(tok.eos)
            template = doc.provenance.template if doc.provenance is not None else ""
            name = f"tokens_template_{template}" if template else "tokens_original"
            origin[name] = origin.get(name, 0) + len(pieces)
            docs.append(doc)
            pieces_of.append(pieces)
        if docs:
            self._count_origin(origin)
            offsets = np.zeros(len(docs) + 1, dtype=np.int64)
            np.cumsum([len(p) for p in pieces_of], out=offsets[1:])
            tokens = np.fromiter(itertools.chain.from_iterable(pieces_of), dtype=tok.dtype, count=int(offsets[-1]))
            yield ([d.id for d in docs], tokens, offsets, [d.repeats for d in docs],
                   [tuple(d.repeat_rules) for d in docs])


# ``copy``: which entry of its document (0: the first; 1.. the repeats of an upsampled one).
# Tables written before upsampling have no ``copy`` column: read it as 0.
DOCUMENTS_SCHEMA = pa.schema([("id", pa.string()), ("shard", pa.string()), ("position", pa.int64()),
                              ("copy", pa.int64())])


def documents_file(shard_name: str) -> str:
    """The documents table of a shard, relative to the version: ``documents/<stem>.parquet``."""
    return f"documents/{shard_name.rsplit('.', 1)[0]}.parquet"


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def write_atomic(path: str, data: bytes | memoryview) -> None:
    """Writes ``path`` through a hidden temporary name beside it, then renames."""
    write_atomic_chunks(path, [data])


def write_atomic_chunks(path: str, chunks: Iterable[bytes | memoryview]) -> None:
    """Writes the ``chunks`` to ``path`` through a hidden temporary name beside it, then
    renames; an error while the chunks are made leaves ``path`` as it was."""
    head, name = path.rsplit("/", 1)
    tmp = FileSystems.join(head, f".tmp-{name}")
    with FileSystems.create(tmp, compression_type=CompressionTypes.UNCOMPRESSED) as fh:
        for chunk in chunks:
            fh.write(chunk)
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([tmp], [path])


# Parts of a shard: the writer of a shard never holds more than about ``part_bytes`` of
# its tokens. Entries go to (bucket, part) groups, the part being the top bits of their
# position key, so parts in order are the shard's entries in order; each part is sorted
# and written to ``<parts>/<bucket>-<part>.tokens`` (the payload piece) and
# ``.parquet`` (ids, copies, lengths); one step per shard then streams the pieces into
# the shard (checksum first, then header, pieces and index) and writes its documents
# table. A shard is byte-identical for any ``part_bytes``. Before parts, Beam handed a
# shard's whole group to one worker as one list (Spark's runner, measured: the driver
# hosting the SDK worker grew from 3.0 to 4.9 GB in tokenize from 1M to 3M documents).
MAX_PART_BITS = 12  # at most 4,096 parts per shard
PART_SCHEMA = pa.schema([("id", pa.string()), ("copy", pa.int64()), ("length", pa.int64())])
_CHUNK = 8 << 20  # bytes read from a piece at a time when joining


def part_bits(target_shard_bytes: int, part_bytes: int) -> int:
    """Bits of the position key that pick a shard's part: enough parts of ``part_bytes``
    for a shard of ``target_shard_bytes`` (a power of two, at most ``2**MAX_PART_BITS``)."""
    parts = -(-target_shard_bytes // part_bytes)
    return min(MAX_PART_BITS, (parts - 1).bit_length())


PartEntry = tuple[int, str, int, np.ndarray, int, tuple[str, ...]]  # (position key, id, copy, tokens, repeats, rules)
# The entries of one (bucket, part) group from one chunk: (position keys, ids, copies,
# tokens concatenated, offsets, repeats, rules); ``part_entries`` gives them back one by one.
PartChunk = tuple[list[int], list[str], list[int], np.ndarray, np.ndarray, list[int], list[tuple[str, ...]]]


def encoded_docs(chunk: EncodedChunk) -> Iterator[Encoded]:
    """The documents of a chunk, each as (id, tokens, repeats, rules)."""
    ids, tokens, offsets, repeats, rules = chunk
    for i, doc_id in enumerate(ids):
        yield doc_id, tokens[offsets[i]:offsets[i + 1]], repeats[i], rules[i]


def place_parts(seed: int, encoded: Encoded, shards: int, bits: int) -> Iterator[tuple[int, PartEntry]]:
    """(group, entry) of every copy of an encoded document: the group is its bucket
    (``place_copies``) and the top ``bits`` bits of its position key, as one integer
    ``bucket << bits | part``."""
    for bucket, (doc_id, copy, tokens, repeats, rules) in place_copies(seed, encoded, shards):
        key = copy_shuffle_key(seed, doc_id, copy)
        yield bucket << bits | key >> (64 - bits), (key, doc_id, copy, tokens, repeats, rules)


def place_chunk(seed: int, chunk: EncodedChunk, shards: int, bits: int) -> Iterator[tuple[int, PartChunk]]:
    """``place_parts`` of every document of a chunk, the entries of each group packed
    into one ``PartChunk`` (groups in the order first met)."""
    groups: dict[int, list[PartEntry]] = {}
    for encoded in encoded_docs(chunk):
        for group, entry in place_parts(seed, encoded, shards, bits):
            groups.setdefault(group, []).append(entry)
    for group, entries in groups.items():
        offsets = np.zeros(len(entries) + 1, dtype=np.int64)
        np.cumsum([len(e[3]) for e in entries], out=offsets[1:])
        yield group, ([e[0] for e in entries], [e[1] for e in entries], [e[2] for e in entries],
                      np.concatenate([e[3] for e in entries]), offsets, [e[4] for e in entries],
                      [e[5] for e in entries])


def part_entries(packed: Iterable[PartChunk]) -> Iterator[PartEntry]:
    """The entries of a group's ``PartChunk``s, one by one."""
    for keys, ids, copies, tokens, offsets, repeats, rules in packed:
        for i, key in enumerate(keys):
            yield key, ids[i], copies[i], tokens[offsets[i]:offsets[i + 1]], repeats[i], rules[i]


def parts_paths(parts: str, bucket: int, part: int) -> tuple[str, str]:
    """The payload piece and the table of one part of a shard."""
    stem = FileSystems.join(parts, f"{bucket:05d}-{part:05d}")
    return stem + ".tokens", stem + ".parquet"


class _WritePartFn(beam.DoFn):
    """One part of a shard: its entries sorted by position key (then id and copy: a total
    order), the tokens written as one piece, ids/copies/lengths as a table; yields
    (bucket, the part's record)."""

    def __init__(self, parts: str, bits: int) -> None:
        self._parts = parts
        self._bits = bits

    def process(self, element: tuple[int, Iterable[PartChunk]]) -> Iterator[tuple[int, dict]]:
        group, packed = element
        bucket, part = group >> self._bits, group & ((1 << self._bits) - 1)
        ordered = sorted(part_entries(packed), key=lambda e: (e[0], e[1], e[2]))
        dtype = ordered[0][3].dtype.newbyteorder("<")
        lengths = [len(e[3]) for e in ordered]
        payload = np.concatenate([e[3] for e in ordered]).astype(dtype, copy=False)
        tokens_path, table_path = parts_paths(self._parts, bucket, part)
        write_atomic(tokens_path, memoryview(payload).cast("B"))
        table = pa.table({"id": [e[1] for e in ordered], "copy": [e[2] for e in ordered], "length": lengths},
                         schema=PART_SCHEMA)
        write_atomic(table_path, _parquet_bytes(table))
        yield bucket, {"part": part, "num_docs": len(ordered), "num_tokens": int(payload.size),
                       "width": dtype.itemsize, "dtype": str(ordered[0][3].dtype),
                       **shard_repeat_stats([(n, e[2], e[4], e[5]) for n, e in zip(lengths, ordered)])}


def _read_chunks(path: str) -> Iterator[bytes]:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as fh:
        while chunk := fh.read(_CHUNK):
            yield chunk


class _JoinPartsFn(beam.DoFn):
    """One shard from its parts, in part order: the checksum of the pieces and the index
    first, then header, pieces and index streamed to the shard (written atomically), then
    its documents table. Holds the shard's ids and lengths, never its tokens."""

    def __init__(self, directory: str, parts: str) -> None:
        self._directory = directory
        self._parts = parts

    def process(self, element: tuple[int, Iterable[dict]], shards: int) -> Iterator[dict]:
        bucket, records = element
        records = sorted(records, key=lambda r: r["part"])
        pieces = [parts_paths(self._parts, bucket, r["part"]) for r in records]
        tables = [pq.read_table(table, schema=PART_SCHEMA) for _, table in pieces]
        lengths = np.concatenate([t.column("length").to_numpy() for t in tables]).astype("<u8")
        index = np.zeros(len(lengths) + 1, dtype="<u8")
        np.cumsum(lengths, out=index[1:])
        n_docs, n_tokens, width = len(lengths), int(index[-1]), records[0]["width"]
        if n_tokens != sum(r["num_tokens"] for r in records) or any(r["width"] != width for r in records):
            raise ValueError(f"shard {bucket}: its parts under {self._parts} disagree with their records")
        digest, fast = hashlib.sha256(), xxhash.xxh3_128()  # fast: what a loader checks (storage.verify)
        for tokens, _ in pieces:
            for chunk in _read_chunks(tokens):
                digest.update(chunk)
                fast.update(chunk)
        digest.update(index.tobytes())
        fast.update(index.tobytes())
        sha = digest.hexdigest()
        name = f"shard-{bucket:05d}-of-{shards:05d}.tfs"

        def stream() -> Iterator[bytes]:
            again = hashlib.sha256()
            yield shard_header(width, n_docs, n_tokens, sha)
            for tokens, _ in pieces:
                for chunk in _read_chunks(tokens):
                    again.update(chunk)
                    yield chunk
            again.update(index.tobytes())
            if again.hexdigest() != sha:  # a piece changed between the two reads
                raise ValueError(f"{name}: the parts under {self._parts} changed while the shard was written")
            yield index.tobytes()

        write_atomic_chunks(FileSystems.join(self._directory, name), stream())
        # The shard's documents table is written here, beside the shard, not by the driver:
        # a dataset of a billion documents never passes its ids through one process.
        documents = documents_file(name)
        table = pa.table({"id": pa.concat_arrays([t.column("id").combine_chunks() for t in tables]),
                          "shard": [name] * n_docs, "position": np.arange(n_docs, dtype=np.int64),
                          "copy": pa.concat_arrays([t.column("copy").combine_chunks() for t in tables])},
                         schema=DOCUMENTS_SCHEMA)
        table_bytes = _parquet_bytes(table)
        write_atomic(FileSystems.join(self._directory, documents), table_bytes)
        yield {"name": name, "num_docs": n_docs, "num_tokens": n_tokens,
               "num_bytes": HEADER_SIZE + n_tokens * width + 8 * (n_docs + 1),
               "sha256": sha, "xxh3_128": fast.hexdigest(), "dtype": records[0]["dtype"], "documents": documents,
               "documents_sha256": hashlib.sha256(table_bytes).hexdigest(), **merge_repeat_stats(records)}


def _remove_parts(_: Any, parts: str) -> None:
    """Runs once every shard is written (after a global count of them): the parts go."""
    if FileSystems.exists(parts):
        FileSystems.delete([parts])


class TokenizeToShards(beam.PTransform):
    """``Doc`` → shards under ``directory`` + ``StageOutputs`` (kept = shard records).
    The shards are written in parts of about ``config.part_bytes`` (see ``place_parts``)
    under ``parts``, which the last step removes."""

    def __init__(self, config: TokenizeConfig, model: str, directory: str, stage: str = "tokenize",
                 parts: str = "") -> None:
        super().__init__()
        self._config = config
        self._model = model
        self._directory = directory
        self._stage = stage
        # where a shard's parts wait to be joined ("": ``<directory>/.parts``); removed at the end
        self._parts = parts or FileSystems.join(directory, ".parts")

    def expand(self, docs: beam.PCollection[Doc]) -> StageOutputs:
        config, stage = self._config, self._stage
        encoded = (
            docs
            | "CountIn" >> beam.ParDo(CountFn(stage, "in"))
            | "Batch" >> beam.BatchElements(min_batch_size=8, max_batch_size=config.batch_size)
            | "Encode" >> beam.ParDo(_EncodeFn(self._model, config.append_eos, config.max_repeats, stage))
            .with_outputs(REJECTED, main="ids")
        )
        ids = encoded["ids"] | "CountKept" >> beam.ParDo(_CountTokensFn(stage))
        total = ids | "Bytes" >> beam.Map(chunk_bytes) | "Total" >> beam.CombineGlobally(sum)
        shards = total | "Shards" >> beam.Map(lambda b: max(1, math.ceil(b / config.target_shard_bytes)))
        shard_count = beam.pvalue.AsSingleton(shards)
        bits, parts = part_bits(config.target_shard_bytes, config.part_bytes), self._parts
        written = (
            ids
            | "Assign" >> beam.FlatMap(lambda c, n: place_chunk(config.seed, c, n, bits), n=shard_count)
            | "GroupParts" >> beam.GroupByKey()
            | "WriteParts" >> beam.ParDo(_WritePartFn(parts, bits))
            | "GroupShards" >> beam.GroupByKey()
            | "JoinParts" >> beam.ParDo(_JoinPartsFn(self._directory, parts), shards=shard_count)
        )
        _ = (written | "CountShards" >> beam.combiners.Count.Globally()
             | "RemoveParts" >> beam.Map(_remove_parts, parts=parts))
        return StageOutputs(
            kept=written,
            rejected=encoded[REJECTED] | "CountRejected" >> beam.ParDo(CountFn(stage, "rejected")),
            failed=docs.pipeline | "NoFailures" >> beam.Create([]),
        )


class _CountTokensFn(beam.DoFn):
    def __init__(self, stage: str) -> None:
        from apache_beam.metrics import Metrics

        self._stage = stage
        self._docs = Metrics.counter(stage, "records_out")
        self._tokens = Metrics.counter(stage, "tokens")
        self._dist = Metrics.distribution(stage, "tokens_per_doc")
        self._repeat_docs = Metrics.counter(stage, "repeat_docs")
        self._repeat_tokens = Metrics.counter(stage, "repeat_tokens")

    def process(self, chunk: EncodedChunk) -> Iterator[EncodedChunk]:
        lengths = np.diff(chunk[2])
        repeats = np.asarray(chunk[3], dtype=np.int64)
        self._docs.inc(len(lengths))
        progress.record(self._stage, "out", len(lengths))
        self._tokens.inc(int(lengths.sum()))
        for tokens in lengths.tolist():
            self._dist.update(tokens)
        extra = repeats > 1  # entries and tokens beyond the first copy; never counted without repeats
        if extra.any():
            self._repeat_docs.inc(int((repeats[extra] - 1).sum()))
            self._repeat_tokens.inc(int((lengths[extra] * (repeats[extra] - 1)).sum()))
        yield chunk


def chunk_bytes(chunk: EncodedChunk) -> int:
    """The bytes of a chunk's tokens with every copy: what the shards will hold of it."""
    return int((np.diff(chunk[2]) * np.asarray(chunk[3], dtype=np.int64)).sum()) * chunk[1].itemsize


def eos_id_of(model: str) -> Optional[int]:
    return _Tokenizer(model).eos
