"""Writing a stage's outputs: ``docs/``, ``rejected/``, ``failed/`` as Parquet.

Beam's ``WriteToParquet`` writes every shard to a temporary directory and renames it
into place when the bundle commits, so a crashed or retried worker never leaves a
partial ``part-NNNNN-of-MMMMM.parquet`` behind.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

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


# Rows reach Beam's Parquet writer as Arrow tables of this many bytes (Beam's default is
# 64 MiB). On portable runners a table can cross from the SDK worker to the runner as
# one element: Flink's job server then held several tables of 60-135 MB in its heap
# (4.2 GB of JVM at 100k documents, and "Serialized size exceeds JVM heap space" under
# -Xmx1g). 8 MiB keeps elements small and row groups of a useful size.
ROW_GROUP_BYTES = 8 << 20


class WriteParquet(beam.PTransform):
    """Elements → ``<directory>/part-NNNNN-of-MMMMM.parquet`` via ``to_row``."""

    def __init__(self, directory: str, schema: pa.Schema, to_row: Callable[[Any], dict]) -> None:
        super().__init__()
        self._directory = directory
        self._schema = schema
        self._to_row = to_row

    def expand(self, pcoll: beam.PCollection[Any]) -> beam.PCollection[str]:  # the files written
        return (
            pcoll
            | "ToRows" >> beam.Map(self._to_row)
            | "Write" >> beam.io.WriteToParquet(
                FileSystems.join(self._directory, "part"),
                self._schema,
                file_name_suffix=".parquet",
                shard_name_template="-SSSSS-of-NNNNN",
                codec="zstd",
                row_group_buffer_size=ROW_GROUP_BYTES,
            )
        )


class WriteStageOutputs(beam.PTransform):
    """``StageOutputs`` → ``docs/<stage>/``, ``rejected/<stage>/``, ``failed/<stage>/``."""

    def __init__(self, output: str, stage: str, write_kept: bool = True,
                 languages: tuple[str, ...] = ()) -> None:
        super().__init__()
        self._output = output
        self._stage = stage
        self._write_kept = write_kept
        self._languages = languages

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
            outputs.kept | "WriteDocs" >> WriteParquet(docs_dir, DOC_SCHEMA, doc_to_row)
        outputs.rejected | "WriteRejected" >> WriteParquet(
            join(self._output, "rejected", self._stage), REJECTED_SCHEMA, rejected_to_row)
        outputs.failed | "WriteFailed" >> WriteParquet(
            join(self._output, "failed", self._stage), FAILED_SCHEMA, failure_to_row)
        return beam.pvalue.PDone(outputs.rejected.pipeline)


def fetch_log_row(entry: FetchLogEntry) -> dict:
    return dataclasses.asdict(entry)
