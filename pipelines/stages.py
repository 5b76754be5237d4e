"""The stage graphs: what each stage reads, how its Beam graph is wired, what it writes.

Each stage runs as its own Beam pipeline so that a finished stage is a durable,
resumable checkpoint (its Parquet outputs plus its manifest). ``plan_<stage>(config,
upstream)`` computes the config hash and the input fingerprint used for resume; ``build``
wires the graph. ``upstream`` is the document stage it reads, chosen from the stage table
(``pipelines.stage_specs``); the crawl and extract stages read no documents and get "".
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import apache_beam as beam
import fsspec
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.io.filesystems import FileSystems

from pipelines.manifest import list_files, read_manifest
from pipelines.outputs import FETCH_LOG_SCHEMA, WriteParquet, WriteStageOutputs, fetch_log_row
from transforms.clean.clean import Clean
from transforms.crawl.crawler import Crawl
from transforms.dedup.exact_files import ExactDedupFiles
from transforms.doc import FAILED_SCHEMA, REJECTED_SCHEMA, Doc, doc_from_row, failure_to_row, rejected_to_row
from transforms.extract.extract import ExtractText
from transforms.readers.files import FileRef, match_pattern, split_ranges, storage_options_for
from transforms.readers.inputs import ReadInputs
from transforms.readers.warc import WarcLimits
from transforms.routing import FAILED, StageOutputs

if TYPE_CHECKING:
    from pipelines.config import JobConfig

_LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class StagePlan:
    """Everything the runner needs to decide on, run and record one stage."""

    name: str
    config_hash: str
    inputs: tuple[str, ...]
    fingerprint: str
    build: Callable[[beam.Pipeline], None]
    # A stage made of several pipelines runs itself and returns its counter totals.
    runner: Optional[Callable[[PipelineOptions], dict[str, int]]] = None
    # Facts the stage learnt while running, recorded in its manifest (e.g. a model hash).
    info: Optional[Callable[[], dict[str, object]]] = None
    input_bytes: Optional[int] = None  # known input size: the progress line shows an ETA
    # Files it wrote besides docs/, rejected/ and failed/, listed in its manifest (given
    # its counter totals).
    outputs: Optional[Callable[[dict[str, int]], list[str]]] = None


def _fingerprint(items: Sequence[object]) -> str:
    return hashlib.sha256(json.dumps(list(items), sort_keys=True, default=str).encode()).hexdigest()


def crawl_seeds(config: JobConfig) -> tuple[str, ...]:
    """Seeds from the config plus the seeds file (one URL per line, # comments)."""
    section = config.crawl
    if section is None:
        return ()
    seeds = list(section.seeds)
    if section.seeds_file:
        with fsspec.open(section.seeds_file, "rt", encoding="utf-8", compression="infer",
                         **storage_options_for(section.seeds_file)) as fh:
            seeds.extend(line.strip() for line in fh
                         if line.strip() and not line.lstrip().startswith("#"))
    return tuple(seeds)


def plan_crawl(config: JobConfig, upstream: str) -> StagePlan:
    section = config.crawl
    if section is None:
        raise ValueError("crawl stage planned without a crawl section")
    seeds = crawl_seeds(config)
    crawl_config = section.to_crawl_config(seeds)
    output = config.output

    def build(pipeline: beam.Pipeline) -> None:
        join = FileSystems.join
        result = (
            pipeline
            | "Seeds" >> beam.Create(list(seeds))
            | "Crawl" >> Crawl(crawl_config, join(output, "crawl", "warc"))
        )
        result.fetch_log | "WriteFetchLog" >> WriteParquet(
            join(output, "crawl", "fetch_log"), FETCH_LOG_SCHEMA, fetch_log_row)
        result.frontier | "WriteFrontier" >> beam.io.WriteToText(
            join(output, "crawl", "frontier", "frontier"), file_name_suffix=".txt",
            shard_name_template="-SSSSS-of-NNNNN")
        result.rejected | "WriteRejected" >> WriteParquet(
            join(output, "rejected", "crawl"), REJECTED_SCHEMA, rejected_to_row)
        result.failed | "WriteFailed" >> WriteParquet(
            join(output, "failed", "crawl"), FAILED_SCHEMA, failure_to_row)

    def outputs(totals: dict[str, int]) -> list[str]:
        crawl_dir = FileSystems.join(output, "crawl")
        return [path for sub, pattern in (("warc", "*.warc.gz"), ("fetch_log", "*.parquet"),
                                          ("frontier", "*.txt"))
                for path in list_files(f"{crawl_dir}/{sub}", pattern)]

    return StagePlan(
        name="crawl",
        config_hash=config.section_hash("crawl"),
        inputs=tuple(seeds[:100]),
        fingerprint=_fingerprint(seeds),
        build=build,
        outputs=outputs,
    )


def _extract_inputs(config: JobConfig) -> list[tuple[str, FileRef]]:
    """(format, file) of every configured input and of the crawl's WARC files, each file
    once (the first pattern that matches it decides its format)."""
    files: list[tuple[str, FileRef]] = []
    seen: set[str] = set()
    for spec in config.inputs:
        for ref in match_pattern(spec.path):
            if ref.url in seen:  # read twice, its documents would be doubled (same ids)
                _LOGGER.warning("%s is matched by more than one input pattern; read once, as %s",
                                ref.url, next(f for f, r in files if r.url == ref.url))
                continue
            seen.add(ref.url)
            files.append((spec.format, ref))
    if config.crawl is not None:
        crawl_manifest = read_manifest(config.output, "crawl")
        if crawl_manifest is None and "crawl" in config.active_stages():
            raise RuntimeError("extract needs the crawl stage's output; run the crawl stage first")
        pattern = FileSystems.join(config.output, "crawl", "warc", "*.warc.gz")
        metadata = FileSystems.match([pattern])[0].metadata_list
        files.extend(
            ("warc", FileRef(url=m.path, size=m.size_in_bytes, version=str(m.last_updated_in_seconds),
                             id_source="crawl/warc/" + m.path.replace("\\", "/").rsplit("/", 1)[-1]))
            for m in sorted(metadata, key=lambda m: m.path)
            if not m.path.rsplit("/", 1)[-1].startswith(".")
        )
    return _unique_id_sources(files)


def _unique_id_sources(files: list[tuple[str, FileRef]]) -> list[tuple[str, FileRef]]:
    """The files with their ``id_source`` (their path below their pattern's folder), but
    the URL for files whose name another file of the job has too (``a/*.jsonl`` and
    ``b/*.jsonl`` both hold ``x.jsonl``): document ids stay unique by construction."""
    names: dict[str, int] = {}
    for _, ref in files:
        names[ref.id_source] = names.get(ref.id_source, 0) + 1
    return [(fmt, ref if names[ref.id_source] == 1 and ref.id_source else dataclasses.replace(ref, id_source=ref.url))
            for fmt, ref in files]


def configured_input_bytes(config: JobConfig) -> int:
    """The size of the configured inputs (what an engine's partitions are sized for; the
    crawl's WARC files, not known before it runs, are not counted)."""
    return sum(ref.size for spec in config.inputs for ref in match_pattern(spec.path) if ref.size > 0)


def plan_extract(config: JobConfig, upstream: str) -> StagePlan:
    files = _extract_inputs(config)
    fields_by_format = {spec.format: spec.fields() for spec in config.inputs}
    limits = WarcLimits(config.read.max_payload_bytes, config.read.max_failed_raw_bytes)
    stage = "extract"

    def build(pipeline: beam.Pipeline) -> None:
        read = (
            pipeline
            | "Files" >> beam.Create([(fmt, part) for fmt, ref in files
                                      for part in (split_ranges(ref, config.read.split_bytes)
                                                   if fmt == "jsonl" else [ref])])
            | "Spread" >> beam.Reshuffle()
            | "Read" >> ReadInputs(stage, limits, fields_by_format)
        )
        outputs = read.records | "Extract" >> ExtractText(config.extract, stage)
        merged = StageOutputs(
            kept=outputs.kept,
            rejected=outputs.rejected,
            failed=(outputs.failed, read[FAILED]) | "AllFailures" >> beam.Flatten(),
        )
        merged | "WriteOutputs" >> WriteStageOutputs(config.output, stage)

    return StagePlan(
        name=stage,
        config_hash=config.section_hash("extract", "read", "inputs"),
        inputs=tuple(ref.url for _, ref in files),
        fingerprint=_fingerprint([(fmt, ref.url, ref.size, ref.version) for fmt, ref in files]),
        build=build,
        input_bytes=sum(ref.size for _, ref in files if ref.size > 0) or None,
    )


def upstream_docs(config: JobConfig, stage: str) -> tuple[list[str], str]:
    """(docs files, fingerprint) of the finished ``stage`` this one reads, from its manifest."""
    manifest = read_manifest(config.output, stage)
    if manifest is None:
        raise RuntimeError(f"needs the {stage!r} stage's output under {config.output}; run it first")
    files = [path for path in manifest.outputs if f"/docs/{stage}/" in path.replace("\\", "/")]
    return files, _fingerprint([stage, manifest.config_hash, manifest.inputs_fingerprint,
                                manifest.finished_at, files])


class ReadDocs(beam.PTransform):
    """Parquet files of ``Doc`` rows (a previous stage's ``docs/``) → ``PCollection[Doc]``."""

    def __init__(self, files: Sequence[str]) -> None:
        super().__init__()
        self._files = list(files)

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection[Doc]:
        if not self._files:
            return pbegin | "NoDocs" >> beam.Create([])
        return (
            pbegin
            | "DocFiles" >> beam.Create(self._files)
            | "ReadRows" >> beam.io.ReadAllFromParquet()
            | "ToDocs" >> beam.Map(doc_from_row)
        )


def plan_clean(config: JobConfig, upstream: str) -> StagePlan:
    clean = config.clean
    if clean is None:
        raise ValueError("clean stage planned without a clean section")
    from models.files import local_copy, sha256_file

    files, fingerprint = upstream_docs(config, upstream)
    models = [sha256_file(local_copy(p)) for p in (clean.langid.model, clean.quality.model) if p]
    if clean.anomaly.model:  # a directory of versions: the chosen version's metadata (file hashes inside)
        from models.anomaly import read_current

        version = clean.anomaly.version or read_current(clean.anomaly.model)
        models.append(sha256_file(local_copy(f"{clean.anomaly.model.rstrip('/')}/{version}/meta.json")))
    stage = "clean"
    queue = _anomaly_queue(config, stage)

    def build(pipeline: beam.Pipeline) -> None:
        outputs = pipeline | "ReadDocs" >> ReadDocs(files) | "Clean" >> Clean(clean, stage)
        languages = clean.langid.languages if clean.langid.route_by_language else ()
        outputs | "WriteOutputs" >> WriteStageOutputs(config.output, stage, languages=languages)
        if queue is not None:
            queue(outputs.kept)

    return StagePlan(
        name=stage,
        config_hash=config.section_hash("clean"),
        inputs=tuple(files),
        fingerprint=_fingerprint([fingerprint, models]),
        build=build,
        info=(lambda: {"anomaly_review_queue": queue.directory}) if queue is not None else None,
    )


class _AnomalyQueue:
    """The clean stage's anomaly review queue (``pipelines/anomaly_review.py``): the
    ``review_budget`` highest-scoring kept documents of the detector's doubtful band."""

    def __init__(self, config: JobConfig, stage: str, band: tuple[float, float]) -> None:
        from datetime import datetime, timezone

        from pipelines.anomaly_review import queue_dir_name
        from pipelines.review import review_dir

        self.anomaly, self.stage, self.band = config.clean.anomaly, stage, band  # type: ignore[union-attr]
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
        self.directory = FileSystems.join(review_dir(config.output), queue_dir_name(stamp))

    def write(self, docs: list) -> int:
        from pipelines.anomaly_review import write_anomaly_queue

        if docs:
            write_anomaly_queue(self.directory, docs, self.anomaly, self.band)
        beam.metrics.Metrics.counter(self.stage, "anomaly_review_queued").inc(len(docs))
        return len(docs)

    def __call__(self, kept: beam.PCollection) -> None:
        from pipelines.anomaly_review import in_band

        band, budget = self.band, self.anomaly.review_budget
        (kept | "AnomalyReviewBand" >> beam.Filter(in_band, band)
         | "AnomalyReviewTop" >> beam.combiners.Top.Of(budget, key=lambda d: (d.anomaly_score, d.id))
         | "WriteAnomalyQueue" >> beam.Map(self.write))


def _anomaly_queue(config: JobConfig, stage: str) -> Optional[_AnomalyQueue]:
    from pipelines.anomaly_review import review_band

    band = review_band(config.clean.anomaly) if config.clean is not None else None
    return _AnomalyQueue(config, stage, band) if band is not None else None


def plan_dedup_exact(config: JobConfig, upstream: str) -> StagePlan:
    dedup = config.dedup
    if dedup is None:
        raise ValueError("dedup stage planned without a dedup section")
    files, fingerprint = upstream_docs(config, upstream)
    stage = "dedup_exact"
    # one key bucket per input file, up to 1024: a bucket's keys are ~40 bytes a document
    buckets = min(max(len(files), 1), 1024)

    def build(pipeline: beam.Pipeline) -> None:
        outputs = pipeline | "Exact" >> ExactDedupFiles(files, dedup, stage, buckets)
        outputs | "WriteOutputs" >> WriteStageOutputs(config.output, stage, tables=True)

    return StagePlan(name=stage, config_hash=config.section_hash("dedup"), inputs=tuple(files),
                     fingerprint=_fingerprint([fingerprint]), build=build)


def plan_dedup_minhash(config: JobConfig, upstream: str) -> StagePlan:
    dedup = config.dedup
    if dedup is None:
        raise ValueError("dedup stage planned without a dedup section")
    from pipelines.dedup_stage import NearDedupDriver

    files, fingerprint = upstream_docs(config, upstream)
    previous = read_manifest(config.output, "dedup_minhash")
    own = str(previous.extra.get("index_part", "")) if previous is not None and dedup.index else ""
    driver = NearDedupDriver(dedup, config.output, files, ReadDocs, own_index_part=own)
    index = driver.index_files()  # earlier runs' parts, not the one this output wrote
    return StagePlan(name="dedup_minhash", config_hash=config.section_hash("dedup"), inputs=tuple(files),
                     fingerprint=_fingerprint([fingerprint, sorted(index)]), build=lambda p: None,
                     runner=driver.run,
                     info=lambda: {"index_part": driver.index_part} if dedup.index else {})


def plan_label(config: JobConfig, upstream: str) -> StagePlan:
    from datetime import datetime, timezone

    from models.labeller import resolve_version
    from pipelines.review import review_dir, review_files, write_queue
    from transforms.label.label import LabelDocs

    label = config.label
    if label is None:
        raise ValueError("label stage planned without a label section")
    files, fingerprint = upstream_docs(config, upstream)
    versions = [resolve_version(s.model, s.version) for s in label.sets]
    reviews = review_files(config.output)  # accepted human labels, read inside the pipeline
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    queue_dir = FileSystems.join(review_dir(config.output), f"queue-{stamp}")
    stage = "label"

    def write(docs: list) -> int:
        if docs:
            write_queue(queue_dir, docs, label)
        beam.metrics.Metrics.counter(stage, "review_queued").inc(len(docs))
        return len(docs)

    def build(pipeline: beam.Pipeline) -> None:
        outputs, queue = (pipeline | "ReadDocs" >> ReadDocs(files)
                          | "Label" >> LabelDocs(label, (), stage, review_files=reviews))
        outputs | "WriteOutputs" >> WriteStageOutputs(config.output, stage)
        queue | "WriteQueue" >> beam.Map(write)

    return StagePlan(
        name=stage, config_hash=config.section_hash("label"), inputs=tuple(files),
        fingerprint=_fingerprint([fingerprint, versions, reviews]), build=build,
        info=lambda: {"model_versions": dict(zip([s.name for s in label.sets], versions)),
                      "review_files": len(reviews), "review_queue": queue_dir})


def augment_cache_dir(config: JobConfig) -> str:
    """Where the rephrasing's responses are cached: ``rephrase.cache_dir`` or
    ``<output>/cache/augment`` (outside the stage's outputs: a rerun reuses them)."""
    rephrase = config.augment.rephrase if config.augment is not None else None
    if rephrase is not None and rephrase.cache_dir:
        return rephrase.cache_dir
    return FileSystems.join(config.output, "cache", "augment")


def plan_augment(config: JobConfig, upstream: str) -> StagePlan:
    from transforms.augment.augment import Augment

    augment = config.augment
    if augment is None:
        raise ValueError("augment stage planned without an augment section")
    files, fingerprint = upstream_docs(config, upstream)
    minhash = config.dedup.minhash if config.dedup is not None else None
    cache_dir = augment_cache_dir(config)
    stage = "augment"
    # The generations pass the clean checks and the near-duplicate check: those sections
    # are part of what the stage computes.
    sections = ("augment", "clean", "dedup") if augment.rephrase is not None else ("augment",)

    def build(pipeline: beam.Pipeline) -> None:
        outputs = (pipeline | "ReadDocs" >> ReadDocs(files)
                   | "Augment" >> Augment(augment, stage, clean=config.clean, minhash=minhash, cache_dir=cache_dir))
        outputs | "WriteOutputs" >> WriteStageOutputs(config.output, stage)

    return StagePlan(name=stage, config_hash=config.section_hash(*sections), inputs=tuple(files),
                     fingerprint=_fingerprint([fingerprint]), build=build,
                     info=lambda: {"cache": cache_dir} if augment.rephrase is not None else {})


def plan_tokenizer(config: JobConfig, upstream: str) -> StagePlan:
    from pipelines.tokenize_stage import tokenizer_path, train_tokenizer

    tokenize = config.tokenize
    if tokenize is None:
        raise ValueError("tokenizer stage planned without a tokenize section")
    files, fingerprint = upstream_docs(config, upstream)
    out = tokenizer_path(config.output)

    def runner(options: PipelineOptions) -> dict[str, int]:
        from pipelines.corpus import sample_docs

        texts = [d.text for d in sample_docs(config, upstream, tokenize.train_sample_docs, tokenize.seed)]
        meta = train_tokenizer(tokenize, texts, out)
        return {"records_in": meta["documents"], "records_out": meta["documents"]}

    return StagePlan(name="tokenizer", config_hash=config.section_hash("tokenize"), inputs=tuple(files),
                     fingerprint=_fingerprint([fingerprint]), build=lambda p: None, runner=runner,
                     outputs=lambda totals: [f"{config.output.rstrip('/')}/tokenizer/tokenizer.model"])


def plan_tokenize(config: JobConfig, upstream: str) -> StagePlan:
    from pipelines.tokenize_stage import TokenizeDriver, latest_version_files

    tokenize = config.tokenize
    if tokenize is None:
        raise ValueError("tokenize stage planned without a tokenize section")
    files, fingerprint = upstream_docs(config, upstream)
    driver = TokenizeDriver(tokenize, config.output, files, ReadDocs, upstream,
                            config.section_hash("tokenize", "storage"), storage=config.storage)
    model_manifest = read_manifest(config.output, "tokenizer") if not tokenize.model else None
    return StagePlan(name="tokenize", config_hash=config.section_hash("tokenize", "storage"), inputs=tuple(files),
                     fingerprint=_fingerprint([fingerprint, model_manifest.finished_at if model_manifest else tokenize.model]),
                     build=lambda p: None, runner=driver.run, info=driver.info,
                     outputs=lambda totals: (latest_version_files(config.output)
                                             if totals.get("shards") is not None else []))
