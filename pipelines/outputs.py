"""Writing a stage's outputs: ``docs/``, ``rejected/``, ``failed/`` as Parquet.

Each bundle writes one file into a hidden temporary folder of the destination; when every
bundle has committed, one finalize step renames the files that committed bundles reported
to ``part-NNNNN-of-MMMMM.parquet`` and removes the folder (with whatever failed or retried
attempts left in it), so a crashed or retried worker never leaves a partial part behind.

Why not Beam's ``WriteToParquet``: its write step takes a side input (``AsSingleton`` of
the sink's initialisation), and the portable job servers' fuser ends a fused stage before
a side-input consumer. Every row written then crossed from the SDK worker to the runner
and back (measured on Flink: 80 MB of rows sent for 80 MB written; with this writer 712
bytes), which made the JVM hold the stage's output, and Flink's batch runner, which
reads a bundle's output only after the bundle's response, deadlocked once a bundle's
output passed ~1 GB (3M documents, parallelism 2; docs/BENCHMARKS.md).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from typing import Any, Callable, Iterable, Iterator, Optional

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindows

from transforms.crawl.fetcher import FetchLogEntry
from transforms.doc import (
    DOC_SCHEMA,
    FAILED_SCHEMA,
    REJECTED_SCHEMA,
    doc_to_row,
    failure_to_row,
    rejected_to_row,
)
from transforms.routing import StageOutputs

_LOGGER = logging.getLogger(__name__)

FETCH_LOG_SCHEMA = pa.schema(
    [
        ("url", pa.string()),
        ("attempt", pa.int32()),
        ("status", pa.int32()),
        ("bytes", pa.int64()),
        ("content_type", pa.string()),
        ("error", pa.string()),
        ("elapsed_ms", pa.float64()),
        ("fetched_at", pa.string()),
        ("redirect_to", pa.string()),
        ("depth", pa.int32()),
    ]
)


# A bundle's rows are written as row groups of about this many bytes of Arrow data (Beam's
# WriteToParquet buffered 64 MiB by default; 8 MiB keeps a writer's buffer small and row
# groups of a useful size). Rows become Arrow batches BATCH_ROWS at a time.
ROW_GROUP_BYTES = 8 << 20
BATCH_ROWS = 1000
CODEC = "zstd"


def part_name(directory: str, index: int, total: int) -> str:
    """``<directory>/part-00003-of-00010.parquet``."""
    return FileSystems.join(directory, f"part-{index:05d}-of-{total:05d}.parquet")


class _WriteBundleFiles(beam.DoFn):
    """Elements → ``to_row`` → one Parquet file per bundle in ``temp_dir``; emits its path
    when the bundle finishes (a bundle without elements writes nothing)."""

    def __init__(self, temp_dir: str, schema: pa.Schema, to_row: Callable[[Any], dict],
                 row_group_bytes: int = ROW_GROUP_BYTES, batch_rows: int = BATCH_ROWS) -> None:
        self._temp_dir, self._schema, self._to_row = temp_dir, schema, to_row
        self._row_group_bytes, self._batch_rows = row_group_bytes, batch_rows

    def start_bundle(self) -> None:
        self._rows: list[dict] = []
        self._batches: list[pa.RecordBatch] = []
        self._batch_bytes = 0
        self._path: Optional[str] = None
        self._file: Any = None
        self._writer: Optional[pq.ParquetWriter] = None

    def process(self, element: Any) -> None:
        self._rows.append(self._to_row(element))
        if len(self._rows) >= self._batch_rows:
            self._to_batch()

    def _to_batch(self) -> None:
        if self._rows:
            batch = pa.RecordBatch.from_pylist(self._rows, schema=self._schema)
            self._rows = []
            self._batches.append(batch)
            self._batch_bytes += batch.nbytes
        if self._batch_bytes >= self._row_group_bytes:
            self._write_row_group()

    def _write_row_group(self) -> None:
        if not self._batches:
            return
        if self._writer is None:
            # a hidden name: never counted as a stage's output, even if left behind
            self._path = FileSystems.join(self._temp_dir, f".{uuid.uuid4().hex}.parquet")
            self._file = FileSystems.create(self._path, mime_type="application/octet-stream",
                                            compression_type=CompressionTypes.UNCOMPRESSED)
            self._writer = pq.ParquetWriter(self._file, self._schema, compression=CODEC)
        self._writer.write_table(pa.Table.from_batches(self._batches, schema=self._schema))
        self._batches, self._batch_bytes = [], 0

    def finish_bundle(self) -> Iterator[Any]:
        self._to_batch()
        self._write_row_group()
        if self._writer is not None:
            self._writer.close()
            self._file.close()
            yield GlobalWindows.windowed_value(self._path)


class _WriteBundleTables(_WriteBundleFiles):
    """``pa.Table`` elements (already in ``schema``) → one Parquet file per bundle, as
    ``_WriteBundleFiles`` writes rows."""

    def __init__(self, temp_dir: str, schema: pa.Schema, row_group_bytes: int = ROW_GROUP_BYTES) -> None:
        super().__init__(temp_dir, schema, dict, row_group_bytes)

    def process(self, element: pa.Table) -> None:
        for batch in element.to_batches():
            self._batches.append(batch)
            self._batch_bytes += batch.nbytes
        if self._batch_bytes >= self._row_group_bytes:
            self._write_row_group()


def finalize_parts(directory: str, temp_dir: str, schema: pa.Schema, written: Iterable[str]) -> list[str]:
    """The files committed bundles wrote → ``part-i-of-n`` in ``directory``, in sorted
    order of their temporary names; no file at all → one empty part (the schema, 0 rows),
    so a stage with nothing rejected still has its folder and file. Safe to run again
    after a retry: a file already renamed (gone from ``temp_dir``, its part there) is
    skipped. The temporary folder is removed last (failed attempts' files with it)."""
    paths = sorted(set(written))
    finals = [part_name(directory, i, len(paths)) for i in range(len(paths))]
    for src, dst in zip(paths, finals):
        if FileSystems.exists(src):
            FileSystems.rename([src], [dst])
        elif not FileSystems.exists(dst):
            raise IOError(f"{src}: a committed bundle's file is missing and {dst} was not written")
    if not paths:
        finals = [part_name(directory, 0, 1)]
        with FileSystems.create(finals[0], mime_type="application/octet-stream",
                                compression_type=CompressionTypes.UNCOMPRESSED) as out:
            pq.write_table(schema.empty_table(), out, compression=CODEC)
    try:  # what failed attempts left (on object stores the folder is only a prefix of them)
        left = [m.path for m in FileSystems.match([FileSystems.join(temp_dir, "*")])[0].metadata_list]
        if left:
            FileSystems.delete(left)
        if FileSystems.exists(temp_dir):
            FileSystems.delete([temp_dir])
    except IOError as err:
        _LOGGER.warning("could not remove %s (hidden names: never read as output): %s", temp_dir, err)
    return finals


class WriteParquet(beam.PTransform):
    """Elements → ``<directory>/part-NNNNN-of-MMMMM.parquet`` via ``to_row`` (``to_row``
    None: the elements are ``pa.Table``s in ``schema``): one file per bundle, renamed into
    place by one finalize step (no side input, so the write fuses into the stage that
    makes the rows on every runner)."""

    def __init__(self, directory: str, schema: pa.Schema, to_row: Optional[Callable[[Any], dict]]) -> None:
        super().__init__()
        self._directory = directory
        self._schema = schema
        self._to_row = to_row

    def expand(self, pcoll: beam.PCollection[Any]) -> beam.PCollection[str]:  # the files written
        temp_dir = FileSystems.join(self._directory, f".temp-{uuid.uuid4().hex}")
        write = (_WriteBundleTables(temp_dir, self._schema) if self._to_row is None
                 else _WriteBundleFiles(temp_dir, self._schema, self._to_row))
        return _commit(pcoll | "WriteBundles" >> beam.ParDo(write), self._directory, temp_dir, self._schema)


def _commit(written: beam.PCollection[str], directory: str, temp_dir: str, schema: pa.Schema) -> beam.PCollection[str]:
    """The bundles' files → ``part-i-of-n`` by one finalize step, which runs once even
    when no bundle wrote a file (a marker joins the paths)."""
    marker = written.pipeline | "Once" >> beam.Create([""])
    return (
        (written, marker)
        | "WithMarker" >> beam.Flatten()
        | "OneKey" >> beam.Map(lambda path: (None, path))
        | "Together" >> beam.GroupByKey()
        | "Finalize" >> beam.FlatMap(
            lambda group: finalize_parts(directory, temp_dir, schema, (p for p in group[1] if p)))
    )


class WriteStageOutputs(beam.PTransform):
    """``StageOutputs`` → ``docs/<stage>/``, ``rejected/<stage>/``, ``failed/<stage>/``.
    ``tables``: the kept and rejected elements are ``pa.Table``s already in ``DOC_SCHEMA``
    and ``REJECTED_SCHEMA`` (the Arrow paths), written as they are."""

    def __init__(self, output: str, stage: str, write_kept: bool = True,
                 languages: tuple[str, ...] = (), tables: bool = False) -> None:
        super().__init__()
        if tables and languages:
            raise ValueError("per-language folders need Doc elements, not tables")
        self._output = output
        self._stage = stage
        self._write_kept = write_kept
        self._languages = languages
        self._tables = tables

    def expand(self, outputs: StageOutputs) -> beam.pvalue.PDone:
        join = FileSystems.join
        docs_dir = join(self._output, "docs", self._stage)
        if self._write_kept and self._languages:
            # docs/<stage>/<lang>/part-...; any other language goes to docs/<stage>/other/.
            names = list(self._languages) + ["other"]
            index = {lang: i for i, lang in enumerate(self._languages)}
            parts = outputs.kept | "ByLanguage" >> beam.Partition(
                lambda doc, n: index.get(doc.lang, n - 1), len(names))
            for name, part in zip(names, parts):
                part | f"WriteDocs[{name}]" >> WriteParquet(join(docs_dir, name), DOC_SCHEMA, doc_to_row)
        elif self._write_kept:
            outputs.kept | "WriteDocs" >> WriteParquet(docs_dir, DOC_SCHEMA, None if self._tables else doc_to_row)
        outputs.rejected | "WriteRejected" >> WriteParquet(
            join(self._output, "rejected", self._stage), REJECTED_SCHEMA, None if self._tables else rejected_to_row)
        outputs.failed | "WriteFailed" >> WriteParquet(
            join(self._output, "failed", self._stage), FAILED_SCHEMA, failure_to_row)
        return beam.pvalue.PDone(outputs.rejected.pipeline)


def fetch_log_row(entry: FetchLogEntry) -> dict:
    return dataclasses.asdict(entry)
