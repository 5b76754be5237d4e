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


@dataclass(frozen=True)
class TokenizeConfig:
    """``model``: a given sentencepiece model (path or URL); "" = trained by the
    ``tokenizer`` stage on a uniform sample of the corpus with the settings below."""

    model: str = ""
    vocab_size: int = 32000
    model_type: str = "bpe"
    character_coverage: float = 0.9995
    byte_fallback: bool = True
    train_sample_docs: int = 20000
    target_shard_bytes: int = 256 * 1024 * 1024
    seed: int = 0
    append_eos: bool = True
    batch_size: int = 256
    dataset: str = "dataset"

    def __post_init__(self) -> None:
        if self.model_type not in ("bpe", "unigram"):
            raise ValueError(f"model_type must be bpe or unigram, got {self.model_type!r}")
        if self.vocab_size < 16 or self.target_shard_bytes <= 0 or self.batch_size <= 0:
            raise ValueError("vocab_size must be >= 16; target_shard_bytes and batch_size > 0")
        if not 0.9 <= self.character_coverage <= 1.0:
            raise ValueError(f"character_coverage must be in [0.9, 1], got {self.character_coverage}")


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
        write_atomic(FileSystems.join(self._directory, documents), _parquet_bytes(table))
        yield {"name": name, "num_docs": n_docs, "num_tokens": n_tokens, "num_bytes": len(data),
               "sha256": sha, "dtype": str(dtype), "documents": documents}


class TokenizeToShards(beam.PTransform):
    """``Doc`` → shards under ``directory`` + ``StageOutputs`` (kept = shard records)."""

    def __init__(self, config: TokenizeConfig, model: str, directory: str, stage: str = "tokenize") -> None:
        super().__init__()
        self._config = config
        self._model = model
        self._directory = directory
        self._stage = stage

    def expand(self, docs: beam.PCollection) -> StageOutputs:
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
