"""The tokenizer and tokenize stages: train (or take) a sentencepiece model, write shards.

``tokenizer`` (only when ``tokenize.model`` is empty): trains sentencepiece on a uniform
sample of the last document stage and writes ``<output>/tokenizer/tokenizer.model``.

``tokenize``: a dataset version ``<output>/tokens/<version>/`` is self-contained and
immutable. Its name is ``v<UTC time>-<key>``, ``key`` = ``version_key``: a hash of what
decides the tokens (the tokenizer's sha256, the token-affecting settings, the id and text
of every kept document, its repeat count and rules when upsampled, the index format;
labels and signals play no part). The driver

1. removes version folders without index.json (leftovers of killed runs): all of them
   when this process holds the output's lease (``pipelines.lease``: then no other run
   writes this output), else only those in which nothing was written for
   ``INCOMPLETE_MAX_AGE_S`` (24 h: a run writes its folder only while its shards are
   written, so one silent for a day belongs to no living run); never one whose writer
   lease (``<version>/_writer.json``: a tier copy from another output or process) is live;
2. fingerprints the documents (a small Beam pipeline: count and sum of 128-bit hashes of
   id and text) and computes the key. If a complete version has that key, it is reused
   as is (a rerun after a review import, a forced rerun): no shard is written again;
3. otherwise copies the tokenizer into the version (``tokenizer.model``: the workers
   encode with that copy, so the version records exactly the model that made its tokens),
   runs the Beam pipeline that writes the shards, each with its documents table beside it
   (``documents/<shard>.parquet``, written by the worker: no list of every document passes
   through the driver), and the rejected documents (``rejected/``), then writes, last,
   ``index.json`` (index version 3: shards, checksums, the tokenizer's file, sha256, vocab
   size and special ids, the key, the stage counters, the lineage, and the upsampling:
   ``repeat_docs`` and ``repeat_tokens`` overall and per shard, entries and tokens beyond
   each document's first copy, and ``upsampling``, tokens before and after per rule);
4. points ``tokens/CURRENT`` at the version, copies its rejected documents to
   ``rejected/tokenize/`` and, with ``storage.warm``, copies the version there.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from datetime import datetime, timezone
from typing import Any, Optional

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from models.progress import Working
from pipelines.beam_runs import counter_totals, run_pipeline
from pipelines.manifest import read_manifest, read_text, write_text_atomic
from pipelines.outputs import WriteParquet
from storage.index import INDEX_VERSION, MAX_TOKEN_ID, check_version_name
from storage.repeats import upsampling_summary
from transforms.doc import REJECTED_SCHEMA, rejected_to_row
from transforms.tokenize.tokenize import (FingerprintFiles, TokenizeConfig, TokenizeToShards, version_key,
                                          write_atomic)

_LOGGER = logging.getLogger(__name__)

TOKENIZER_FILE = "tokenizer.model"  # the version's own copy of its tokenizer
CURRENT = "CURRENT"  # tokens/CURRENT: the version the last tokenize run produced or reused
INCOMPLETE_MAX_AGE_S = 24 * 3600


def tokenizer_path(output: str) -> str:
    return FileSystems.join(output, "tokenizer", "tokenizer.model")


def train_tokenizer(config: TokenizeConfig, texts: list[str], out_path: str) -> dict[str, Any]:
    """Trains sentencepiece on ``texts`` and writes the model atomically to ``out_path``.

    The model is written to memory (``model_writer``), not to a temporary file: the
    trainer records its output path in the model, which made the bytes of two identical
    trainings differ. A vocabulary too small for the corpus's characters is a
    ``ValueError`` naming ``tokenize.vocab_size`` and the size needed."""
    import io

    import sentencepiece as spm

    if not texts:
        raise ValueError("no documents to train the tokenizer on (empty corpus)")
    buffer = io.BytesIO()
    try:
        with Working(f"tokenizer training ({config.vocab_size:,} pieces, {len(texts):,} documents)"):
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(t.replace("\n", " ") for t in texts), model_writer=buffer,
                vocab_size=config.vocab_size, model_type=config.model_type,
                character_coverage=config.character_coverage, byte_fallback=config.byte_fallback,
                input_sentence_size=0, num_threads=2, minloglevel=2, hard_vocab_limit=False,
                max_sentence_length=1 << 16)
    except RuntimeError as exc:
        needed = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", str(exc))
        if needed:
            raise ValueError(f"tokenize.vocab_size: {needed.group(1)} is smaller than the {needed.group(2)} "
                             "pieces this corpus needs (its characters at this character_coverage, the "
                             "256 byte pieces with byte_fallback, unk, bos, eos)") from None
        raise ValueError(f"sentencepiece refused the tokenize settings: {exc}") from None
    data = buffer.getvalue()
    write_atomic(out_path, data)
    return {"documents": len(texts), "sha256": hashlib.sha256(data).hexdigest()}


def tokenizer_facts(data: bytes, source: str) -> dict[str, Any]:
    """sha256, vocabulary size and special ids of a sentencepiece model's bytes (-1: none)."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=data)
    vocab = sp.get_piece_size()
    if not 0 < vocab <= MAX_TOKEN_ID + 1:
        raise ValueError(f"{source}: vocabulary of {vocab} pieces does not fit uint32 token ids")
    return {"sha256": hashlib.sha256(data).hexdigest(), "vocab_size": vocab, "eos_id": sp.eos_id(),
            "bos_id": sp.bos_id(), "pad_id": sp.pad_id(), "unk_id": sp.unk_id()}


def _read_records(directory: str) -> list[dict[str, Any]]:
    match = FileSystems.match([FileSystems.join(directory, "*")])[0]
    records = []
    for meta in match.metadata_list:
        with FileSystems.open(meta.path, compression_type=CompressionTypes.UNCOMPRESSED) as fh:
            records.extend(json.loads(line) for line in fh.read().decode("utf-8").splitlines() if line)
    return records


def _read_bytes(path: str) -> bytes:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as fh:
        return fh.read()


def version_folders(tokens_dir: str) -> dict[str, dict[str, Any]]:
    """Version folders under ``tokens_dir`` (files one level down): whether each has
    index.json and the newest modification time of its files (None: unknown)."""
    found: dict[str, dict[str, Any]] = {}
    prefix = tokens_dir.rstrip("/") + "/"
    for meta in FileSystems.match([FileSystems.join(tokens_dir, "*", "*")])[0].metadata_list:
        rest = meta.path[len(prefix):] if meta.path.startswith(prefix) else ""
        if "/" not in rest:
            continue
        name, file = rest.split("/", 1)
        info = found.setdefault(name, {"complete": False, "newest": 0.0})
        info["complete"] = info["complete"] or file == "index.json"
        stamp = float(getattr(meta, "last_updated_in_seconds", 0.0) or 0.0)
        info["newest"] = None if info["newest"] is None or not stamp else max(info["newest"], stamp)
    return found


def remove_version_folder(folder: str, beam_args: Any = (), why: str = "a killed run's leftover") -> bool:
    """Deletes a version folder without index.json unless a live process writes it: the
    folder's writer lease (``<folder>/_writer.json``, held by a tier copy while it writes)
    is taken first, so a live writer keeps its folder (False) and a writer that comes
    after is refused instead of writing into a folder being deleted."""
    from pipelines.lease import LeaseHeld, version_writer

    try:
        claim = version_writer(folder, beam_args, command=f"tokenize: removing {why}", heartbeat=False).acquire()
    except LeaseHeld as held:
        _LOGGER.info("keeping %s (no index.json yet): %s", folder, held)
        return False
    try:
        _LOGGER.warning("removing %s: no index.json, %s", folder, why)
        FileSystems.delete([folder])
    finally:
        claim.release()
    return True


def remove_stale_versions(tokens_dir: str, now: float, max_age_s: float = INCOMPLETE_MAX_AGE_S,
                          beam_args: Any = ()) -> list[str]:
    """Deletes version folders without index.json whose newest file is older than
    ``max_age_s`` (a folder whose file times are unknown is kept; ``max_age_s=0``: all)
    and which no live process writes (``remove_version_folder``)."""
    removed = []
    for name, info in sorted(version_folders(tokens_dir).items()):
        if info["complete"] or (max_age_s > 0 and (info["newest"] is None or now - info["newest"] < max_age_s)):
            continue
        if remove_version_folder(FileSystems.join(tokens_dir, name), beam_args):
            removed.append(name)
    return removed


def holds_output_lease(output: str) -> bool:
    """True when this very process holds ``<output>/_lease.json`` (live heartbeat)."""
    import os
    import socket
    import time

    from pipelines.lease import LEASE_NAME, Lease

    try:
        text = read_text(FileSystems.join(output, LEASE_NAME))
    except Exception as exc:  # an unreadable lease store: fall back to the safety age
        _LOGGER.warning("cannot read the output's lease (%s): incomplete versions kept for %.0f h",
                        exc, INCOMPLETE_MAX_AGE_S / 3600)
        return False
    lease = Lease.decode(text.encode()) if text else None
    return (lease is not None and lease.pid == os.getpid() and lease.host == socket.gethostname()
            and not lease.stale(time.time()))


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
        self.tokens_dir = FileSystems.join(output, "tokens")
        self.work = FileSystems.join(output, "work", "tokenize")
        self.version = ""
        self.directory = ""
        self.reused = False
        self.upsampling: dict[str, Any] = {}

    def _fingerprint(self, options: PipelineOptions) -> tuple[int, int]:
        """(documents, fingerprint sum) of the input documents: a Beam pipeline."""
        out = FileSystems.join(self.work, "fingerprint")

        def build(pipeline: beam.Pipeline) -> None:
            (pipeline | "Fingerprint" >> FingerprintFiles(self.files, self.config.max_repeats)
             | "Write" >> beam.io.WriteToText(FileSystems.join(out, "part")))

        run_pipeline(options, build)
        [line] = _read_records(out)
        return int(line["documents"]), int(line["sum"], 16)

    def _build(self, pipeline: beam.Pipeline) -> None:
        model = FileSystems.join(self.directory, TOKENIZER_FILE)
        outputs = (pipeline | "ReadDocs" >> self.read_docs(self.files)
                   | "Tokenize" >> TokenizeToShards(self.config, model, self.directory,
                                                   parts=FileSystems.join(self.work, "parts")))
        (outputs.kept | "Records" >> beam.Map(json.dumps)
         | "WriteRecords" >> beam.io.WriteToText(FileSystems.join(self.work, "shards", "part")))
        outputs.rejected | "WriteRejected" >> WriteParquet(
            FileSystems.join(self.directory, "rejected"), REJECTED_SCHEMA, rejected_to_row)

    def run(self, options: PipelineOptions) -> dict[str, int]:
        from models.files import local_copy

        created = datetime.now(timezone.utc)
        remove_stale_versions(self.tokens_dir, created.timestamp(),
                              0.0 if holds_output_lease(self.output) else INCOMPLETE_MAX_AGE_S, options)
        if FileSystems.exists(self.work):
            FileSystems.delete([self.work])
        with open(local_copy(self.model), "rb") as fh:
            tokenizer_bytes = fh.read()
        tokenizer = tokenizer_facts(tokenizer_bytes, self.model)
        self.tokenizer_sha256 = tokenizer["sha256"]
        docs, docs_sum = self._fingerprint(options)
        key = version_key(self.config, tokenizer["sha256"], docs, docs_sum, INDEX_VERSION)
        folders = version_folders(self.tokens_dir)
        reuse = self._find(key, folders)
        if reuse is not None:
            self.version, self.reused = reuse, True
            self.directory = FileSystems.join(self.tokens_dir, self.version)
            index = json.loads(_read_bytes(FileSystems.join(self.directory, "index.json")))
            totals = dict(index.get("tokenize_counters") or {"shards": index["num_shards"]})
            self.upsampling = index.get("upsampling") or upsampling_summary(index["shards"])
            _LOGGER.info("tokenize: version %s has the same tokens (key %s): reused", self.version, key[:12])
            totals["version_reused"] = 1  # the run's table says so (a --force run rewrites nothing)
        else:
            for name in [n for n in folders if n.endswith("-" + key[:12]) and not folders[n]["complete"]]:
                remove_version_folder(FileSystems.join(self.tokens_dir, name), options, "an earlier attempt")
            self.version = check_version_name(f"v{created:%Y%m%dT%H%M%S}-{key[:12]}")
            self.directory = FileSystems.join(self.tokens_dir, self.version)
            write_atomic(FileSystems.join(self.directory, TOKENIZER_FILE), tokenizer_bytes)
            totals = self._tokenize(options)
            records = _read_records(FileSystems.join(self.work, "shards"))
            self.upsampling = upsampling_summary(records)
            self._write_index(records, tokenizer, key, created, totals)
        write_text_atomic(FileSystems.join(self.tokens_dir, CURRENT), self.version + "\n")
        self._publish_rejected()
        if self.storage is not None and self.storage.warm:
            from pipelines.lease import version_writer
            from storage.tiers import copy_version

            # New versions land in the warm tier (verified copy, index.json last), the
            # folder there held by this writer's lease while it is written.
            copy_version(self.version, self.tokens_dir, self.storage.warm, self.storage,
                         lambda folder: version_writer(folder, options, "tokenize: copy to storage.warm"))
        return totals

    def _find(self, key: str, folders: dict[str, dict[str, Any]]) -> Optional[str]:
        """The complete version whose index records ``key``, if any."""
        for name in sorted(n for n in folders if n.endswith("-" + key[:12]) and folders[n]["complete"]):
            text = read_text(FileSystems.join(self.tokens_dir, name, "index.json")) or "{}"
            if json.loads(text).get("content_key") == key:
                return name
        return None

    def _tokenize(self, options: PipelineOptions) -> dict[str, int]:
        result = run_pipeline(options, self._build)
        return {"shards": len(_read_records(FileSystems.join(self.work, "shards"))),
                **counter_totals(result, "tokenize")}

    def _publish_rejected(self) -> None:
        """The version's rejected documents, copied to ``rejected/tokenize/`` (the stage's
        rejected output; a reused version brings the ones it was made with)."""
        match = FileSystems.match([FileSystems.join(self.directory, "rejected", "*.parquet")])[0]
        sources = sorted(m.path for m in match.metadata_list)
        if not sources:
            return
        target = FileSystems.join(self.output, "rejected", "tokenize")
        if not FileSystems.exists(target):
            FileSystems.mkdirs(target)
        FileSystems.copy(sources, [FileSystems.join(target, s.rsplit("/", 1)[-1]) for s in sources])

    def info(self) -> dict[str, object]:
        return {"dataset_version": self.version, "tokenizer": self.model,
                "tokenizer_sha256": self.tokenizer_sha256, "version_reused": self.reused,
                "upsampling": self.upsampling}

    def _write_index(self, records: list[dict[str, Any]], tokenizer: dict[str, Any], key: str,
                     created: datetime, totals: dict[str, int]) -> None:
        records = sorted(records, key=lambda r: r["name"])
        upstream = read_manifest(self.output, self.upstream_stage)
        index = {
            "format": "tokenfactory.tokens", "index_version": INDEX_VERSION,
            "dataset": self.config.dataset, "version": self.version,
            "created_at": created.strftime("%Y-%m-%dT%H:%M:%SZ"), "content_key": key,
            # The version's own copy only: where it was taken from is a path outside the
            # version (relative to the run's working directory); the manifest records it.
            "tokenizer": {"file": TOKENIZER_FILE, **tokenizer},
            "vocab_size": tokenizer["vocab_size"],
            "dtype": records[0]["dtype"] if records else None, "seed": self.config.seed,
            "eos_appended": self.config.append_eos,
            "num_shards": len(records), "num_docs": sum(r["num_docs"] for r in records),
            "num_tokens": sum(r["num_tokens"] for r in records),
            "repeat_docs": self.upsampling["repeat_docs"], "repeat_tokens": self.upsampling["repeat_tokens"],
            "upsampling": self.upsampling,
            "shards": [{k: r[k] for k in ("name", "num_docs", "num_tokens", "num_bytes", "sha256",
                                          "xxh3_128", "documents", "documents_sha256", "repeat_docs", "repeat_tokens")}
                       | {"tier": self.tier} for r in records],
            "tokenize_counters": dict(sorted(totals.items())),
            "lineage": {"config_hash": self.config_hash, "input_stage": self.upstream_stage,
                        "input_fingerprint": upstream.inputs_fingerprint if upstream else None,
                        "input_finished_at": upstream.finished_at if upstream else None},
        }
        write_text_atomic(FileSystems.join(self.directory, "index.json"), json.dumps(index, indent=2))


def current_version(output: str) -> Optional[str]:
    """The version ``tokens/CURRENT`` names, else the newest complete one by name."""
    text = read_text(FileSystems.join(output, "tokens", CURRENT))
    if text and text.strip():
        return check_version_name(text.strip(), f"{output}/tokens/{CURRENT}")
    match = FileSystems.match([FileSystems.join(output, "tokens", "*", "index.json")])[0]
    paths = sorted(m.path for m in match.metadata_list)
    return paths[-1].rsplit("/", 2)[-2] if paths else None


def latest_version_files(output: str) -> list[str]:
    """Every file of the current dataset version (``tokens/CURRENT``), index.json last."""
    version = current_version(output)
    if version is None:
        return []
    from storage.index import version_files

    directory = FileSystems.join(output, "tokens", version)
    index = json.loads(_read_bytes(FileSystems.join(directory, "index.json")))
    return [FileSystems.join(directory, f.name) for f in version_files(index, directory)] + \
        [FileSystems.join(directory, "index.json")]
