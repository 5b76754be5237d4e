"""The tokenize stage: documents → sentencepiece ids (+ EOS) → globally shuffled shards.

Encoding is batched (one ``encode`` call per batch, the model loaded once per worker).
The shuffle is a pure function of (seed, document id): every document gets a shard
``hash(seed, id) % S`` and a position key inside it, so the output is the same for the
same seed and input on any runner, and every document is equally likely to land at any
place of the dataset. ``S = ceil(total bytes / target shard bytes)`` comes from a global
sum (a side input). A document is never split, so a document longer than the target
makes its shard larger than the target.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.utils import shared

from storage.shards import dtype_for_vocab, encode_shard
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


@dataclass(frozen=True)
class TokenizeConfig:
    """``model``: a given sentencepiece model (path or URL); "" = trained by the
    ``tokenizer`` stage on a uniform sample of the corpus with the settings below.

    What decides the tokens, and so the dataset version (``version_key``): the tokenizer
    (its sha256: ``model`` or the training settings through the model trained),
    ``seed``, ``append_eos``, ``target_shard_bytes``, ``dataset`` and the documents.
    ``batch_size`` only changes how many documents one ``encode`` call takes."""

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
        for key in ("train_sample_docs", "target_shard_bytes", "batch_size"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")


_HALF = (1 << 63) - 1  # every value stays a signed 64-bit int: any runner's int coder carries it


def doc_fingerprint(doc_id: str, text: str) -> tuple[int, int]:
    """A 126-bit hash of a document's id and text, as two 63-bit halves (labels and signals
    left out: they do not change its tokens)."""
    ident = doc_id.encode("utf-8")
    data = len(ident).to_bytes(8, "little") + ident + text.encode("utf-8", "surrogatepass")
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


class FingerprintDocs(beam.PTransform):
    """``Doc`` → one JSON line ``{"documents": n, "sum": hex}`` for the whole collection."""

    def expand(self, docs: beam.PCollection[Doc]) -> beam.PCollection[str]:
        return (docs | "Fingerprint" >> beam.Map(lambda d: doc_fingerprint(d.id, d.text))
                | "Sum" >> beam.CombineGlobally(SumFingerprints()))


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


class _Tokenizer:
    """A loaded sentencepiece model (weak-referenceable for ``shared.Shared``)."""

    def __init__(self, path: str) -> None:
        import sentencepiece as spm

        from models.files import local_copy

        self.sp = spm.SentencePieceProcessor(model_file=local_copy(path))
        self.eos = self.sp.eos_id()
        self.dtype = dtype_for_vocab(self.sp.get_piece_size())


class _EncodeFn(beam.DoFn):
    def __init__(self, model: str, append_eos: bool) -> None:
        self._model = model
        self._append_eos = append_eos
        self._shared = shared.Shared()

    def setup(self) -> None:
        self._tok = self._shared.acquire(lambda: _Tokenizer(self._model), tag=f"spm:{self._model}")

    def process(self, batch: list[Doc]) -> Iterator[Any]:
        tok = self._tok
        ids = tok.sp.encode([d.text for d in batch])
        for doc, pieces in zip(batch, ids):
            if not pieces:
                yield beam.pvalue.TaggedOutput(REJECTED, Rejected(doc, "empty", "no tokens"))
                continue
            if self._append_eos and tok.eos >= 0:
                pieces.append(tok.eos)
            yield doc.id, np.asarray(pieces, dtype=tok.dtype)


DOCUMENTS_SCHEMA = pa.schema([("id", pa.string()), ("shard", pa.string()), ("position", pa.int64())])


def documents_file(shard_name: str) -> str:
    """The documents table of a shard, relative to the version: ``documents/<stem>.parquet``."""
    return f"documents/{shard_name.rsplit('.', 1)[0]}.parquet"


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def write_atomic(path: str, data: bytes) -> None:
    """Writes ``path`` through a hidden temporary name beside it, then renames."""
    head, name = path.rsplit("/", 1)
    tmp = FileSystems.join(head, f".tmp-{name}")
    with FileSystems.create(tmp, compression_type=CompressionTypes.UNCOMPRESSED) as fh:
        fh.write(data)
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([tmp], [path])


class _WriteShardFn(beam.DoFn):
    """One shard per bucket: documents sorted by their shuffle key, written atomically."""

    def __init__(self, directory: str, seed: int) -> None:
        self._directory = directory
        self._seed = seed

    def process(self, element: tuple[int, Iterable[tuple[str, np.ndarray]]], shards: int) -> Iterator[dict]:
        bucket, docs = element
        ordered = sorted(docs, key=lambda d: (shuffle_key(self._seed, d[0]), d[0]))
        dtype = ordered[0][1].dtype
        data, n_docs, n_tokens, sha = encode_shard([t for _, t in ordered], dtype)
        name = f"shard-{bucket:05d}-of-{shards:05d}.tfs"
        write_atomic(FileSystems.join(self._directory, name), data)
        # The shard's documents table is written here, beside the shard, not by the driver:
        # a dataset of a billion documents never passes its ids through one process.
        documents = documents_file(name)
        table = pa.table({"id": [doc_id for doc_id, _ in ordered], "shard": [name] * len(ordered),
                          "position": list(range(len(ordered)))},
                         schema=DOCUMENTS_SCHEMA)
        table_bytes = _parquet_bytes(table)
        write_atomic(FileSystems.join(self._directory, documents), table_bytes)
        yield {"name": name, "num_docs": n_docs, "num_tokens": n_tokens, "num_bytes": len(data),
               "sha256": sha, "dtype": str(dtype), "documents": documents,
               "documents_sha256": hashlib.sha256(table_bytes).hexdigest()}


class TokenizeToShards(beam.PTransform):
    """``Doc`` → shards under ``directory`` + ``StageOutputs`` (kept = shard records)."""

    def __init__(self, config: TokenizeConfig, model: str, directory: str, stage: str = "tokenize") -> None:
        super().__init__()
        self._config = config
        self._model = model
        self._directory = directory
        self._stage = stage

    def expand(self, docs: beam.PCollection[Doc]) -> StageOutputs:
        config, stage = self._config, self._stage
        encoded = (
            docs
            | "CountIn" >> beam.ParDo(CountFn(stage, "in"))
            | "Batch" >> beam.BatchElements(min_batch_size=8, max_batch_size=config.batch_size)
            | "Encode" >> beam.ParDo(_EncodeFn(self._model, config.append_eos)).with_outputs(REJECTED, main="ids")
        )
        ids = encoded["ids"] | "CountKept" >> beam.ParDo(_CountTokensFn(stage))
        total = ids | "Bytes" >> beam.Map(lambda kv: kv[1].nbytes) | "Total" >> beam.CombineGlobally(sum)
        shards = total | "Shards" >> beam.Map(lambda b: max(1, math.ceil(b / config.target_shard_bytes)))
        shard_count = beam.pvalue.AsSingleton(shards)
        written = (
            ids
            | "Assign" >> beam.Map(lambda kv, n: (shuffle_key(config.seed + 1, kv[0]) % n, kv), n=shard_count)
            | "GroupShards" >> beam.GroupByKey()
            | "WriteShards" >> beam.ParDo(_WriteShardFn(self._directory, config.seed), shards=shard_count)
        )
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

    def process(self, kv: tuple[str, np.ndarray]) -> Iterator[tuple[str, np.ndarray]]:
        self._docs.inc()
        progress.record(self._stage, "out")
        self._tokens.inc(len(kv[1]))
        self._dist.update(len(kv[1]))
        yield kv


def eos_id_of(model: str) -> Optional[int]:
    return _Tokenizer(model).eos
