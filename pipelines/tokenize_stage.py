"""The tokenizer and tokenize stages: train (or take) a sentencepiece model, write shards.

``tokenizer`` (only when ``tokenize.model`` is empty): trains sentencepiece on a uniform
sample of the last document stage and writes ``<output>/tokenizer/tokenizer.model``.

``tokenize``: a Beam pipeline writes the shards of a new, immutable dataset version
``<output>/tokens/<version>/``, each shard with its documents table beside it
(``documents/<shard>.parquet``: document id → shard, position; written by the worker that
wrote the shard, so no list of every document passes through the driver); then the
driver writes, last, ``index.json``: every shard with its counts, bytes,
checksum and tier, the tokenizer's sha256, the dataset version and its lineage (config
hash and the manifests of the input stage). Readers trust only what ``index.json`` lists.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.outputs import WriteParquet
from storage.manifest import read_manifest, write_text_atomic
from transforms.doc import REJECTED_SCHEMA, rejected_to_row
from transforms.tokenize.tokenize import TokenizeConfig, TokenizeToShards

_LOGGER = logging.getLogger(__name__)

INDEX_VERSION = 2  # 2: a documents table per shard (1: one documents/part-00000-of-00001.parquet)


def tokenizer_path(output: str) -> str:
    return FileSystems.join(output, "tokenizer", "tokenizer.model")


def train_tokenizer(config: TokenizeConfig, texts: list[str], out_path: str) -> dict[str, Any]:
    """Trains sentencepiece on ``texts`` and writes the model atomically to ``out_path``.

    The model is written to memory (``model_writer``), not to a temporary file: the
    trainer records its output path in the model, which made the bytes of two identical
    trainings differ."""
    import io

    import sentencepiece as spm

    if not texts:
        raise ValueError("no documents to train the tokenizer on (empty corpus)")
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(t.replace("\n", " ") for t in texts), model_writer=buffer,
        vocab_size=config.vocab_size, model_type=config.model_type,
        character_coverage=config.character_coverage, byte_fallback=config.byte_fallback,
        input_sentence_size=0, num_threads=2, minloglevel=2, hard_vocab_limit=False,
        max_sentence_length=1 << 16)
    data = buffer.getvalue()
    tmp_out = out_path + ".tmp"
    with FileSystems.create(tmp_out, compression_type=CompressionTypes.UNCOMPRESSED) as fh:
        fh.write(data)
    if FileSystems.exists(out_path):
        FileSystems.delete([out_path])
    FileSystems.rename([tmp_out], [out_path])
    import hashlib

    return {"documents": len(texts), "sha256": hashlib.sha256(data).hexdigest()}


def _read_records(directory: str) -> list[dict[str, Any]]:
    match = FileSystems.match([FileSystems.join(directory, "*")])[0]
    records = []
    for meta in match.metadata_list:
        with FileSystems.open(meta.path, compression_type=CompressionTypes.UNCOMPRESSED) as fh:
            records.extend(json.loads(line) for line in fh.read().decode("utf-8").splitlines() if line)
    return records


class TokenizeDriver:
    def __init__(self, config: TokenizeConfig, output: str, files: list[str], read_docs: Any,
                 upstream_stage: str, config_hash: str, tier: str = "warm",
                 storage: Any = None) -> None:
        self.storage = storage
        self.tokenizer_sha256 = ""
        self.config = config
        self.output = output
        self.files = files
        self.read_docs = read_docs
        self.upstream_stage = upstream_stage
        self.config_hash = config_hash
        self.tier = tier
        self.model = config.model or tokenizer_path(output)
        created = datetime.now(timezone.utc)
        self.version = f"v{created:%Y%m%dT%H%M%S}-{config_hash[:8]}"
        self.created_at = created.strftime("%Y-%m-%dT%H:%M:%SZ")
        self.directory = FileSystems.join(output, "tokens", self.version)
        self.work = FileSystems.join(output, "work", "tokenize")

    def _build(self, pipeline: beam.Pipeline) -> None:
        outputs = (pipeline | "ReadDocs" >> self.read_docs(self.files)
                   | "Tokenize" >> TokenizeToShards(self.config, self.model, self.directory))
        (outputs.kept | "Records" >> beam.Map(json.dumps)
         | "WriteRecords" >> beam.io.WriteToText(FileSystems.join(self.work, "shards")))
        outputs.rejected | "WriteRejected" >> WriteParquet(
            FileSystems.join(self.output, "rejected", "tokenize"), REJECTED_SCHEMA, rejected_to_row)

    def run(self, options: PipelineOptions) -> dict[str, int]:
        from apache_beam.metrics.metric import MetricsFilter

        from models.files import local_copy, sha256_file

        if FileSystems.exists(self.work):
            FileSystems.delete([self.work])
        pipeline = beam.Pipeline(options=options)
        self._build(pipeline)
        result = pipeline.run()
        result.wait_until_finish()
        records = sorted(_read_records(self.work), key=lambda r: r["name"])
        self.tokenizer_sha256 = sha256_file(local_copy(self.model))
        import sentencepiece as spm

        self.vocab_size = spm.SentencePieceProcessor(model_file=local_copy(self.model)).get_piece_size()
        self._write_index(records, self.tokenizer_sha256)
        if self.storage is not None and self.storage.warm:
            from storage.tiers import copy_version

            # New versions land in the warm tier (verified copy, index.json last).
            copy_version(self.version, FileSystems.join(self.output, "tokens"), self.storage.warm,
                         self.storage)
        totals: dict[str, int] = {"shards": len(records)}
        for c in result.metrics().query(MetricsFilter().with_namespace("tokenize"))["counters"]:
            value = c.committed if c.committed is not None else c.attempted
            totals[c.key.metric.name] = totals.get(c.key.metric.name, 0) + int(value or 0)
        return totals

    def info(self) -> dict[str, object]:
        return {"dataset_version": self.version, "tokenizer": self.model,
                "tokenizer_sha256": self.tokenizer_sha256}

    def _write_index(self, records: list[dict[str, Any]], tokenizer_sha: str) -> None:
        upstream = read_manifest(self.output, self.upstream_stage)
        index = {
            "format": "tokenfactory.tokens", "index_version": INDEX_VERSION,
            "dataset": self.config.dataset, "version": self.version, "created_at": self.created_at,
            "tokenizer": {"path": self.model, "sha256": tokenizer_sha},
            "vocab_size": self.vocab_size,
            "dtype": records[0]["dtype"] if records else None, "seed": self.config.seed,
            "eos_appended": self.config.append_eos,
            "num_shards": len(records), "num_docs": sum(r["num_docs"] for r in records),
            "num_tokens": sum(r["num_tokens"] for r in records),
            "shards": [{k: r[k] for k in ("name", "num_docs", "num_tokens", "num_bytes", "sha256", "documents")}
                       | {"tier": self.tier} for r in records],
            "lineage": {"config_hash": self.config_hash, "input_stage": self.upstream_stage,
                        "input_fingerprint": upstream.inputs_fingerprint if upstream else None,
                        "input_finished_at": upstream.finished_at if upstream else None},
        }
        write_text_atomic(FileSystems.join(self.directory, "index.json"), json.dumps(index, indent=2))


def latest_version_files(output: str) -> list[str]:
    """index.json and shards of the newest dataset version under ``<output>/tokens/``."""
    match = FileSystems.match([FileSystems.join(output, "tokens", "*", "index.json")])[0]
    if not match.metadata_list:
        return []
    index = sorted(m.path for m in match.metadata_list)[-1]
    directory = index.rsplit("/", 1)[0]
    with FileSystems.open(index, compression_type=CompressionTypes.UNCOMPRESSED) as fh:
        names = [s["name"] for s in json.loads(fh.read())["shards"]]
    return [FileSystems.join(directory, n) for n in names] + [index]
