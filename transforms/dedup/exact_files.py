"""Exact dedup over a stage's Parquet files, Arrow-native: only keys cross the shuffles.

``ExactDedupFiles`` decides what ``ExactDedup`` decides (URL duplicates, then text
duplicates among the URL survivors, the first by ``DedupConfig.node`` kept, the same
reasons and details), but no ``Doc`` is built and no document row is shuffled:

1. ``Keys``: per input file, the key columns (id, url, text, quality_score when
   ``keep: highest_quality``) → 192-bit URL and text keys (``exact_keys``) → a few
   ``KeyChunk``s per file, one per bucket of the key; an unreadable file → ``failed/``;
2. ``GroupUrl`` / ``DecideUrl``: per URL bucket, duplicates → ``Rejections`` per file,
   survivors re-bucketed by text key; documents without a URL go to the text step directly;
3. ``GroupText`` / ``DecideText``: the same over the text keys;
4. ``ByFile`` / ``Filter``: per input file, its rejections → a row mask over the file's
   batches → kept rows and rejected rows (with reason and detail) as Arrow tables.

The outputs are ``StageOutputs`` whose kept and rejected elements are ``pa.Table``s in
``DOC_SCHEMA`` / ``REJECTED_SCHEMA`` (``pipelines.outputs.WriteStageOutputs(..., tables=True)`` writes them);
failed elements are ``Failure`` records. Counters: ``records_in`` per readable row (and 1
per unreadable file), ``records_out`` and ``rejected_<reason>`` as rows are written.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Iterator, Optional, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.dedup.dedup import FRAGMENT_COUNTER, FRAGMENT_PATTERN, DedupConfig, DedupReason
from transforms.dedup.exact_keys import (KEY_WORDS, KeyChunk, Rejections, by_bucket, concat, decide,
                                         rejections_by_file, text_keys, url_keys)
from transforms.dedup.exact_rows import conform, split_rows
from transforms.routing import FAILED, KEPT, REJECTED, StageCounters, StageOutputs, make_failure

_LOGGER = logging.getLogger(__name__)

URL, TEXT, ROWS = "url", "text", "rows"
BATCH_ROWS = 32 * 1024  # rows read per batch (the text column of one batch: ~40 MB at 1.2 KB)
_READ_ERRORS = (OSError, ValueError, KeyError, pa.ArrowException)


def _open(path: str) -> pq.ParquetFile:
    return pq.ParquetFile(FileSystems.open(path, mime_type="application/octet-stream",
                                           compression_type=CompressionTypes.UNCOMPRESSED))


def _key_chunk(config: DedupConfig, batch: pa.RecordBatch, file: int, first_row: int) -> tuple[KeyChunk, np.ndarray]:
    """The ``KeyChunk`` of one batch of file ``file``, and which of its rows have a URL."""
    n = batch.num_rows
    names = batch.schema.names
    column = lambda name: batch.column(name).to_pylist() if name in names else [None] * n  # noqa: E731
    has_url, url = np.zeros(n, dtype=bool), None
    if config.exact_url:
        has_url, keys = url_keys(column("url"))
        url = np.zeros((n, KEY_WORDS), dtype=np.uint64)
        url[has_url] = keys
    text = text_keys([t or "" for t in column("text")]) if config.exact_text else None
    quality = None
    if config.keep == "highest_quality":
        quality = np.array([0.0 if q is None else q for q in column("quality_score")], dtype=np.float64)
    chunk = KeyChunk(files=np.full(n, file, dtype=np.uint32), rows=np.arange(first_row, first_row + n, dtype=np.int64),
                     ids=batch.column("id").cast(pa.string()), url=url, text=text, quality=quality)
    return chunk, has_url


class ReadFileFn(beam.DoFn):
    """(file index, path) → what ``read`` makes of the file's batches (only the ``columns``
    it names are read; None: the file's row count alone), after the file's row count as
    ``count``; an unreadable file → one ``FAILED`` record naming it and what was wrong."""

    def __init__(self, config: DedupConfig, stage: str, buckets: int) -> None:
        self._config, self._stage, self._buckets = config, stage, buckets

    def setup(self) -> None:
        self._counters = StageCounters(self._stage)

    def columns(self, names: list[str]) -> Optional[list[str]]:
        raise NotImplementedError

    def read(self, batch: pa.RecordBatch, file: int, first_row: int) -> Any:
        raise NotImplementedError

    def count(self, file: int, rows: int) -> Any:
        raise NotImplementedError

    def emit(self, parts: list[Any]) -> Iterator[Any]:
        raise NotImplementedError

    def process(self, element: tuple[int, str]) -> Iterator[Any]:
        file, path = element
        parts: list[Any] = []
        try:
            parquet = _open(path)
            rows = parquet.metadata.num_rows
            columns = self.columns(parquet.schema_arrow.names)
            if columns is not None:
                first = 0
                for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=columns):
                    parts.append(self.read(batch, file, first))
                    first += batch.num_rows
        except _READ_ERRORS as err:
            self._counters.record_in()
            self._counters.failed(type(err).__name__)
            yield beam.pvalue.TaggedOutput(FAILED, make_failure(
                self._stage, f"{path}: unreadable input: {err}", path, -1, b"", type(err).__name__))
            return
        self._counters.record_in(rows)
        yield self.count(file, rows)
        yield from self.emit(parts)


class _FileKeysFn(ReadFileFn):
    """(file index, path) → (bucket, ``KeyChunk``) for the first step (tagged ``URL`` or
    ``TEXT``) and (file index, its row count) as the main output."""

    def columns(self, names: list[str]) -> Optional[list[str]]:
        config = self._config
        if not (config.exact_url or config.exact_text):
            return None
        wanted = ["id"] + ["url"] * config.exact_url + ["text"] * config.exact_text
        wanted += ["quality_score"] * (config.keep == "highest_quality")
        return [c for c in wanted if c == "id" or c in names]

    def read(self, batch: pa.RecordBatch, file: int, first_row: int) -> tuple[KeyChunk, np.ndarray]:
        return _key_chunk(self._config, batch, file, first_row)

    def count(self, file: int, rows: int) -> Any:
        return file, rows  # the main output

    def emit(self, parts: list[tuple[KeyChunk, np.ndarray]]) -> Iterator[Any]:
        return self._first_step(parts)

    def _first_step(self, chunks: list[tuple[KeyChunk, np.ndarray]]) -> Iterator[Any]:
        if not chunks:
            return
        chunk = concat([c for c, _ in chunks])
        has_url = np.concatenate([h for _, h in chunks])
        if self._config.exact_url:
            with_url = chunk.take(np.flatnonzero(has_url))
            for bucket, part in by_bucket(with_url, with_url.url, self._buckets):
                yield beam.pvalue.TaggedOutput(URL, (bucket, part))
        if self._config.exact_text:  # never URL duplicates: straight to the text step
            rest = chunk.take(np.flatnonzero(~has_url), url=False)
            for bucket, part in by_bucket(rest, rest.text, self._buckets):
                yield beam.pvalue.TaggedOutput(TEXT, (bucket, part))


class _DecideFn(beam.DoFn):
    """(bucket, ``KeyChunk``s) → (file, ``Rejections``) tagged ``REJECTED``; with
    ``then_text``, the survivors as (text bucket, ``KeyChunk``)."""

    def __init__(self, config: DedupConfig, reason: DedupReason, buckets: int, then_text: bool) -> None:
        self._config, self._reason, self._buckets, self._then_text = config, reason, buckets, then_text

    def process(self, group: tuple[int, Iterable[KeyChunk]]) -> Iterator[Any]:
        chunk = concat(list(group[1]))
        keys = chunk.url if self._reason is DedupReason.DUPLICATE_URL else chunk.text
        node_of = self._config.node_of
        ids = chunk.ids.to_pylist()  # one pass: decide ranks most rows of a duplicate-heavy bucket
        rejected, kept_by = decide(keys, lambda i: node_of(ids[i], chunk.quality_of(i)))
        for file, marks in rejections_by_file(chunk, rejected, kept_by, self._reason.value):
            yield beam.pvalue.TaggedOutput(REJECTED, (file, marks))
        if self._then_text:
            survivors = np.ones(len(chunk), dtype=bool)
            survivors[rejected] = False
            rest = chunk.take(np.flatnonzero(survivors), url=False)
            yield from by_bucket(rest, rest.text, self._buckets)


class FilterFileFn(beam.DoFn):
    """(file index, [its row count, marks...]) → the file's kept rows (``pa.Table``, main
    output) and rejected rows (``pa.Table`` tagged ``REJECTED``), batch by batch. A
    subclass says which elements are its marks (``MARKS``), turns them into row numbers
    and per-row columns (``columns``) and splits one conformed batch (``split``)."""

    MARKS: type = object
    WHAT = "marks"  # what the file's row count was taken for, in the mismatch error

    def __init__(self, files: Sequence[str], stage: str) -> None:
        self._files, self._stage = list(files), stage

    def setup(self) -> None:
        self._counters = StageCounters(self._stage)

    def columns(self, marks: list[Any]) -> tuple[np.ndarray, list[Any]]:
        """(int64 row numbers, per-row columns: numpy or Arrow arrays)."""
        raise NotImplementedError

    def split(self, table: pa.Table, positions: np.ndarray, columns: list[Any]) -> tuple[pa.Table, pa.Table]:
        """(kept rows, rejected rows) of ``table`` given its marked ``positions``."""
        raise NotImplementedError

    def process(self, group: tuple[int, Iterable[Any]]) -> Iterator[Any]:
        file, items = group
        items = list(items)
        counts = [i for i in items if isinstance(i, int)]
        if len(counts) != 1:
            raise RuntimeError(f"{self._files[file]}: {len(counts)} row counts for one input file")
        rows, columns = self.columns([i for i in items if isinstance(i, self.MARKS)])
        order = np.argsort(rows, kind="stable")
        rows = rows[order]
        columns = [c.take(order) if isinstance(c, pa.Array) else c[order] for c in columns]
        seen = 0
        for batch in _open(self._files[file]).iter_batches(batch_size=BATCH_ROWS):
            lo, hi = np.searchsorted(rows, [seen, seen + batch.num_rows])
            kept, dropped = self.split(conform(batch), rows[lo:hi] - seen, [c[lo:hi] for c in columns])
            seen += batch.num_rows
            if kept.num_rows:
                self._counters.kept_many(kept.num_rows)
                yield kept
            if dropped.num_rows:
                for reason, n in zip(*np.unique(dropped.column("reason").to_numpy(zero_copy_only=False),
                                                return_counts=True)):
                    self._counters.rejected_many(str(reason), int(n))
                fragments = fragment_duplicates(dropped)
                if fragments:
                    self._counters.inc(FRAGMENT_COUNTER, fragments)
                yield beam.pvalue.TaggedOutput(REJECTED, dropped)
        if seen != counts[0]:
            raise RuntimeError(f"{self._files[file]}: read {seen} rows, its {self.WHAT} were computed over {counts[0]}")


def fragment_duplicates(rejected: pa.Table) -> int:
    """Rows of ``rejected`` dropped as ``duplicate_url`` whose URL has a non-empty ``#fragment``."""
    if "url" not in rejected.column_names or "reason" not in rejected.column_names:
        return 0
    urls = pc.filter(rejected.column("url"), pc.equal(rejected.column("reason"), DedupReason.DUPLICATE_URL.value))
    return int(pc.sum(pc.match_substring_regex(urls, FRAGMENT_PATTERN)).as_py() or 0)


class _FilterFileFn(FilterFileFn):
    """``Rejections`` → rows rejected with their reason and "duplicate of <kept id>"."""

    MARKS = Rejections
    WHAT = "keys"

    def columns(self, marks: list[Rejections]) -> tuple[np.ndarray, list[Any]]:
        rows = np.concatenate([m.rows for m in marks] + [np.zeros(0, dtype=np.int64)])
        reasons = np.concatenate([np.full(len(m.rows), m.reason, dtype=object) for m in marks] + [np.zeros(0, object)])
        kept = pa.concat_arrays([m.kept for m in marks] + [pa.array([], pa.string())])
        return rows, [reasons, kept]

    def split(self, table: pa.Table, positions: np.ndarray, columns: list[Any]) -> tuple[pa.Table, pa.Table]:
        reasons, kept = columns
        return split_rows(table, positions, reasons.tolist(), [f"duplicate of {k}" for k in kept.to_pylist()])


class ExactDedupFiles(beam.PTransform):
    """``PBegin`` → ``StageOutputs`` of Arrow tables: ``ExactDedup``'s decisions over the
    Parquet ``files`` of a previous stage, with only keys shuffled (``buckets`` groups
    per step)."""

    def __init__(self, files: Sequence[str], config: DedupConfig, stage: str = "dedup_exact",
                 buckets: int = 1) -> None:
        super().__init__()
        if buckets < 1:
            raise ValueError(f"buckets must be >= 1, got {buckets}")
        self._files, self._config, self._stage, self._buckets = list(files), config, stage, buckets

    def expand(self, pbegin: beam.pvalue.PBegin) -> StageOutputs:
        config, buckets = self._config, self._buckets
        keyed = (pbegin
                 | "Files" >> beam.Create(list(enumerate(self._files)))  # reshuffled: spread over workers
                 | "Keys" >> beam.ParDo(_FileKeysFn(config, self._stage, buckets)).with_outputs(
                     FAILED, URL, TEXT, main=ROWS))
        marks = [keyed[ROWS]]
        to_text = [keyed[TEXT]]
        if config.exact_url:
            url = (keyed[URL]
                   | "GroupUrl" >> beam.GroupByKey()
                   | "DecideUrl" >> beam.ParDo(_DecideFn(config, DedupReason.DUPLICATE_URL, buckets,
                                                         config.exact_text)).with_outputs(REJECTED, main=TEXT))
            marks.append(url[REJECTED])
            to_text.append(url[TEXT])
        if config.exact_text:
            text = (tuple(to_text)
                    | "ToText" >> beam.Flatten()
                    | "GroupText" >> beam.GroupByKey()
                    | "DecideText" >> beam.ParDo(_DecideFn(config, DedupReason.DUPLICATE_TEXT, buckets,
                                                           False)).with_outputs(REJECTED, main=TEXT))
            marks.append(text[REJECTED])
        written = (tuple(marks)
                   | "AllMarks" >> beam.Flatten()
                   | "ByFile" >> beam.GroupByKey()
                   | "Filter" >> beam.ParDo(_FilterFileFn(self._files, self._stage)).with_outputs(REJECTED, main=KEPT))
        return StageOutputs(kept=written[KEPT], rejected=written[REJECTED], failed=keyed[FAILED])
