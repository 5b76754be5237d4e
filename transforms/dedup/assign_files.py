"""Near-duplicate components applied to a stage's Parquet files, Arrow-native: only node
ids cross the shuffles, and each document is read once, by its own file's step.

``AssignFiles`` decides what ``assign_component`` decides after a ``CoGroupByKey`` of
every ``Doc`` with its component's root (the document whose node is its root is kept, the
others of the component are ``near_duplicate``, both carry ``dup_cluster``; a document
in no component passes unchanged), but no ``Doc`` is built and no document row is
shuffled:

1. ``Nodes``: per input file, the id (and ``quality_score`` for ``keep:
   highest_quality``) columns → each row's node (``DedupConfig.node_of``) → one
   ``NodeChunk`` per bucket of the node (crc32 of it); the file's row count as ``ROWS``;
   an unreadable file → ``failed/``;
2. ``Marks``: each edge (member → root) and each root (root → root), keyed by the bucket
   of its node;
3. ``Join``: per bucket, the rows whose node has a root → (file, ``Marks``);
4. ``ByFile`` / ``Filter``: per input file, its marks → ``dup_cluster`` set on the marked
   rows, the members that are not their root cut out as rejected rows (reason, detail).

The kept and rejected elements are ``pa.Table``s in ``DOC_SCHEMA`` / ``REJECTED_SCHEMA``
(``WriteStageOutputs(..., tables=True)``). Counters: ``records_in`` per readable row (1
per unreadable file), ``records_out`` and ``rejected_near_duplicate`` as rows are written.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Optional, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa

from transforms.dedup.components import doc_id_of
from transforms.dedup.dedup import DedupConfig, DedupReason, component_detail
from transforms.dedup.exact_files import FilterFileFn, ReadFileFn
from transforms.dedup.exact_rows import split_rows
from transforms.routing import FAILED, KEPT, REJECTED, StageOutputs

ROWS = "rows"


def bucket_of(node: str, buckets: int) -> int:
    """The join bucket of a node (the same in every process)."""
    return zlib.crc32(node.encode("utf-8", "surrogatepass")) % buckets


@dataclass(frozen=True)
class NodeChunk:
    """Rows ``rows`` of input file ``file`` and their nodes."""

    file: int
    rows: np.ndarray  # int64
    nodes: list[str]


@dataclass(frozen=True)
class Marks:
    """Rows of one input file in a component: ``rows[i]`` has node ``nodes[i]`` and the
    component's root ``roots[i]``."""

    rows: np.ndarray  # int64
    nodes: list[str]
    roots: list[str]


def table_nodes(config: DedupConfig, table: pa.Table | pa.RecordBatch) -> list[str]:
    """The node of every row of a document table."""
    ids = table.column("id").to_pylist()
    if config.keep == "highest_quality" and "quality_score" in table.schema.names:
        quality = table.column("quality_score").to_pylist()
    else:
        quality = [None] * len(ids)
    return [config.node_of(i, q) for i, q in zip(ids, quality)]


def node_chunks(file: int, first_row: int, nodes: Sequence[str], buckets: int) -> Iterator[tuple[int, NodeChunk]]:
    """(bucket, ``NodeChunk``) of consecutive rows from ``first_row`` of ``file``."""
    of = np.array([bucket_of(n, buckets) for n in nodes], dtype=np.int64)
    rows = np.arange(first_row, first_row + len(nodes), dtype=np.int64)
    for bucket in np.unique(of).tolist():
        mine = np.flatnonzero(of == bucket)
        yield bucket, NodeChunk(file, rows[mine], [nodes[i] for i in mine.tolist()])


def join_bucket(chunks: Iterable[NodeChunk], marks: Iterable[tuple[str, str]]) -> Iterator[tuple[int, Marks]]:
    """The rows of ``chunks`` whose node has a root in ``marks`` ((node, root) pairs), as
    (file, ``Marks``)."""
    root_of = dict(marks)
    if not root_of:
        return
    for chunk in chunks:
        hits = [(i, root_of[n]) for i, n in enumerate(chunk.nodes) if n in root_of]
        if hits:
            index = np.array([i for i, _ in hits], dtype=np.int64)
            yield chunk.file, Marks(chunk.rows[index], [chunk.nodes[i] for i, _ in hits], [r for _, r in hits])


def apply_marks(table: pa.Table, positions: np.ndarray, nodes: Sequence[str],
                roots: Sequence[str]) -> tuple[pa.Table, pa.Table]:
    """(kept rows, rejected rows) of a conformed table whose rows ``positions`` are in a
    component: each of them gets its ``dup_cluster``; those that are not their root are
    rejected as ``near_duplicate``."""
    if not len(positions):
        return split_rows(table, positions, [], [])
    cluster = table.column("dup_cluster").to_pylist()
    for p, root in zip(positions.tolist(), roots):
        cluster[p] = doc_id_of(root)
    index = table.schema.get_field_index("dup_cluster")
    table = table.set_column(index, table.schema.field(index), pa.array(cluster, type=pa.string()))
    members = [k for k, (n, r) in enumerate(zip(nodes, roots)) if n != r]
    rejected = positions[np.array(members, dtype=np.int64)]
    return split_rows(table, rejected, [DedupReason.NEAR_DUPLICATE.value] * len(members),
                      [component_detail(roots[k]) for k in members])


class _FileNodesFn(ReadFileFn):
    """(file index, path) → (bucket, ``NodeChunk``) and (file index, row count) as
    ``ROWS``; an unreadable file → ``FAILED``."""

    def columns(self, names: list[str]) -> Optional[list[str]]:
        return ["id"] + ["quality_score"] * (self._config.keep == "highest_quality" and "quality_score" in names)

    def read(self, batch: pa.RecordBatch, file: int, first_row: int) -> list[tuple[int, NodeChunk]]:
        return list(node_chunks(file, first_row, table_nodes(self._config, batch), self._buckets))

    def count(self, file: int, rows: int) -> Any:
        return beam.pvalue.TaggedOutput(ROWS, (file, rows))

    def emit(self, parts: list[list[tuple[int, NodeChunk]]]) -> Iterator[Any]:
        return (chunk for part in parts for chunk in part)


class _FilterFileFn(FilterFileFn):
    """``Marks`` → every marked row gets its ``dup_cluster``; those that are not their
    component's root are rejected as ``near_duplicate``."""

    MARKS = Marks
    WHAT = "nodes"

    def columns(self, marks: list[Marks]) -> tuple[np.ndarray, list[Any]]:
        rows = np.concatenate([m.rows for m in marks] + [np.zeros(0, dtype=np.int64)])
        nodes = np.array([n for m in marks for n in m.nodes], dtype=object)
        roots = np.array([r for m in marks for r in m.roots], dtype=object)
        return rows, [nodes, roots]

    def split(self, table: pa.Table, positions: np.ndarray, columns: list[Any]) -> tuple[pa.Table, pa.Table]:
        nodes, roots = columns
        return apply_marks(table, positions, nodes.tolist(), roots.tolist())


class AssignFiles(beam.PTransform):
    """(PBegin, the final edges as (node, root)) → ``StageOutputs`` of Arrow tables: the
    components applied to the Parquet ``files`` with only node ids shuffled (``buckets``
    groups)."""

    def __init__(self, files: Sequence[str], config: DedupConfig, stage: str = "dedup_minhash",
                 buckets: int = 1) -> None:
        super().__init__()
        if buckets < 1:
            raise ValueError(f"buckets must be >= 1, got {buckets}")
        self._files, self._config, self._stage, self._buckets = list(files), config, stage, buckets

    def expand(self, edges: beam.PCollection[tuple[str, str]]) -> StageOutputs:
        buckets = self._buckets
        pipeline = edges.pipeline
        nodes = (pipeline
                 | "Files" >> beam.Create(list(enumerate(self._files)))
                 | "Nodes" >> beam.ParDo(_FileNodesFn(self._config, self._stage, buckets)).with_outputs(
                     FAILED, ROWS, main="chunks"))
        roots = edges | "Roots" >> beam.Map(lambda e: (e[1], e[1])) | "OneEach" >> beam.Distinct()
        marks = ((edges, roots) | "AllMarks" >> beam.Flatten()
                 | "MarkBuckets" >> beam.Map(lambda e: (bucket_of(e[0], buckets), e)))
        chunks = nodes["chunks"]
        joined = ({"chunks": chunks, "marks": marks} | "Join" >> beam.CoGroupByKey()
                  | "Marked" >> beam.FlatMap(lambda kv: join_bucket(kv[1]["chunks"], kv[1]["marks"])))
        written = ((nodes[ROWS], joined) | "RowsAndMarks" >> beam.Flatten()
                   | "ByFile" >> beam.GroupByKey()
                   | "Filter" >> beam.ParDo(_FilterFileFn(self._files, self._stage)).with_outputs(REJECTED, main=KEPT))
        return StageOutputs(kept=written[KEPT], rejected=written[REJECTED], failed=nodes[FAILED])
