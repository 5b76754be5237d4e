"""The near-duplicate stage driver: several Beam pipelines, one stage.

1. ``edges-000``: band values of the documents (and of earlier runs' index), a chunk per
   bundle and group (``transforms.dedup.band_chunks``) → bucket edges;
2. the connected components: up to ``minhash.driver_max_edges`` edges in this driver
   (union-find over ``edges-000``, written as ``edges-001``: each node's edge to its
   component's root, what the rounds converge to), else large-star / small-star rounds,
   one pipeline each, ``edges-NNN`` → ``edges-NNN+1``, until the edge set is unchanged
   (edge count and an order-free checksum);
3. each input file's rows with their component root (``transforms.dedup.assign_files``:
   node ids cross the shuffle, each file is read and written Arrow-native by one step) →
   kept / ``near_duplicate``; the kept documents' band keys extend the signature index
   (``dedup.index``).

Intermediate edges live under ``<output>/work/dedup_minhash/`` (deleted on rerun).
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any, Callable, Iterator

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.beam_runs import counter_totals, largest_value, run_pipeline
from pipelines.outputs import WriteParquet, WriteStageOutputs
from transforms.dedup.components import StarRound, components_union_find, edge_checksum
from transforms.dedup.assign_files import AssignFiles, table_nodes
from transforms.dedup.band_chunks import BandChunks, ChunkEdges, key_chunk, parts_for
from transforms.dedup.dedup import BandKeys, DedupConfig

_LOGGER = logging.getLogger(__name__)

EDGE_SCHEMA = pa.schema([("a", pa.string()), ("b", pa.string())])
INDEX_SCHEMA = pa.schema([("node", pa.string()), ("band_key", pa.binary())])


def _total_bytes(patterns: list[str]) -> int:
    """The bytes of the files ``patterns`` match (0 where they cannot be listed)."""
    try:
        return sum(m.size_in_bytes for r in FileSystems.match(patterns) for m in r.metadata_list)
    except Exception:  # noqa: BLE001 - only sizes the groups; the read reports a real problem
        return 0


def _edge_row(edge: tuple[str, str]) -> dict[str, str]:
    return {"a": edge[0], "b": edge[1]}


class _EdgeStatsFn(beam.DoFn):
    def __init__(self, namespace: str) -> None:
        self._count = Metrics.counter(namespace, "edges")
        self._sum = Metrics.counter(namespace, "edge_checksum")

    def process(self, edge: tuple[str, str]) -> Any:
        self._count.inc()
        self._sum.inc(edge_checksum(edge) >> 33)  # 31 bits: sums of billions fit in int64
        yield edge


def earlier_run_key(item: tuple[str, dict[str, Any]]) -> tuple[bytes, str]:
    """(band key, node) of an index row read from ``<index>/<part>/part-*.parquet``: the
    node marked as an earlier run's (``0`` first: it sorts before, so it is kept) with its
    part before its id, so documents of two earlier runs never merge into one node
    whatever their ids (``part:id`` names the kept document in a rejection)."""
    path, row = item
    part = path.replace("\\", "/").rsplit("/", 2)[-2]
    head, doc_id = row["node"][1:].split("|", 1)
    return row["band_key"], f"0{head}|{part}:{doc_id}"


def _earlier_run_chunk(item: tuple[str, dict[str, Any]], rows: int, parts: int) -> Any:
    return key_chunk(*earlier_run_key(item), rows, parts)


def read_edge_files(paths: list[str]) -> Iterator[tuple[str, str]]:
    """The edges of Parquet files of ``EDGE_SCHEMA`` (read in this process)."""
    for path in paths:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as fh:
            table = pq.read_table(fh, columns=["a", "b"])
        yield from zip(table.column("a").to_pylist(), table.column("b").to_pylist())


def write_table(path: str, table: pa.Table) -> None:
    """``table`` as one Parquet file at ``path`` (any Beam filesystem)."""
    with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as fh:
        pq.write_table(table, fh)


def _read_edges(pipeline: beam.Pipeline, directory: str) -> beam.PCollection:
    pattern = FileSystems.join(directory, "*.parquet")
    return (pipeline | "ReadEdges" >> beam.io.ReadFromParquet(pattern, validate=False)
            | "ToEdges" >> beam.Map(lambda r: (r["a"], r["b"])))


def _edge_stats(result: Any) -> tuple[int, int]:
    """(edge count, edge checksum) of a pipeline that wrote edges."""
    totals = counter_totals(result, "dedup_edges")
    return totals.get("edges", 0), totals.get("edge_checksum", 0)


def _match_all(pattern: str) -> list[str]:
    return [m.path for m in FileSystems.match([pattern])[0].metadata_list]


class NearDedupDriver:
    """Runs the near-duplicate stage; ``run`` returns the stage's counter totals."""

    def __init__(self, config: DedupConfig, output: str, doc_files: list[str], read_docs: Any,
                 stage: str = "dedup_minhash", own_index_part: str = "") -> None:
        self.config = config
        self.output = output
        self.doc_files = doc_files
        self.read_docs = read_docs
        self.stage = stage
        self.work = FileSystems.join(output, "work", stage)
        self.rounds = 0
        self.edges = 0
        self.largest_group = 0  # the most members one star group held (hot-key check)
        # The index part this job output wrote the last time the stage ran (from its
        # manifest): a rerun replaces it and never matches the documents against it,
        # else every document would be "a duplicate of an earlier run" of itself.
        self.own_index_part = own_index_part
        self.index_part = datetime.now(timezone.utc).strftime("run-%Y%m%dT%H%M%S%f")

    def _edges_dir(self, k: int) -> str:
        return FileSystems.join(self.work, f"edges-{k:03d}")

    def index_files(self) -> list[str]:
        if not self.config.index:
            return []
        match = FileSystems.match([FileSystems.join(self.config.index, "*", "part-*.parquet")])[0]
        own = f"/{self.own_index_part}/" if self.own_index_part else None
        return sorted(m.path for m in match.metadata_list
                      if own is None or own not in m.path.replace("\\", "/"))

    def _build_edges(self, pipeline: beam.Pipeline) -> None:
        config, minhash = self.config, self.config.minhash
        bands, rows = minhash.layout()
        parts = parts_for(_total_bytes(self.doc_files), minhash.salts)
        docs = pipeline | "ReadDocs" >> self.read_docs(self.doc_files)
        nodes = docs | "Nodes" >> beam.Map(lambda d: (config.node(d), d.text))
        chunks = nodes | "Chunks" >> BandChunks(minhash.hasher(), bands, rows, parts, minhash.batch_size)
        if config.index:  # the band keys, read back by _extend_index: a job without an index writes none
            (nodes | "Keys" >> BandKeys(minhash)
             | "WriteKeys" >> WriteParquet(FileSystems.join(self.work, "band_keys"), INDEX_SCHEMA,
                                           lambda kv: {"node": kv[1], "band_key": kv[0]}))
        index_files = self.index_files()
        if index_files:
            old = (pipeline | "IndexFiles" >> beam.Create(index_files)
                   | "ReadIndex" >> beam.io.ReadAllFromParquet(with_filename=True)
                   | "OldKeys" >> beam.Map(_earlier_run_chunk, rows, parts))
            chunks = (chunks, old) | "WithIndex" >> beam.Flatten()
        (chunks | "Edges" >> ChunkEdges()
         | "Stats" >> beam.ParDo(_EdgeStatsFn("dedup_edges"))
         | "WriteEdges" >> WriteParquet(self._edges_dir(0), EDGE_SCHEMA, _edge_row))

    def _build_round(self, k: int) -> Callable[[beam.Pipeline], None]:
        def build(pipeline: beam.Pipeline) -> None:
            (_read_edges(pipeline, self._edges_dir(k))
             | "Round" >> StarRound(hot_degree=self.config.minhash.hot_degree)
             | "Stats" >> beam.ParDo(_EdgeStatsFn("dedup_edges"))
             | "WriteEdges" >> WriteParquet(self._edges_dir(k + 1), EDGE_SCHEMA, _edge_row))
        return build

    def _build_final(self, final: int) -> Callable[[beam.Pipeline], None]:
        config, stage = self.config, self.stage
        buckets = min(max(len(self.doc_files), 1), 1024)

        def build(pipeline: beam.Pipeline) -> None:
            edges = _read_edges(pipeline, self._edges_dir(final))
            outputs = edges | "Assign" >> AssignFiles(self.doc_files, config, stage, buckets)
            outputs | "Write" >> WriteStageOutputs(self.output, stage, tables=True)
            if config.index:
                self._extend_index(pipeline, outputs.kept)
        return build

    def _extend_index(self, pipeline: beam.Pipeline, kept: beam.PCollection) -> None:
        config = self.config
        run = self.index_part
        keys = (pipeline | "ReadKeys" >> beam.io.ReadFromParquet(
            FileSystems.join(self.work, "band_keys", "*.parquet"), validate=False)
            | "KeyByNode" >> beam.Map(lambda r: (r["node"], r["band_key"])))
        kept_nodes = kept | "KeptNodes" >> beam.FlatMap(lambda t: [(n, True) for n in table_nodes(config, t)])
        ({"keys": keys, "kept": kept_nodes} | "JoinKept" >> beam.CoGroupByKey()
         | "KeptKeys" >> beam.FlatMap(lambda kv: [(kv[0], k) for k in kv[1]["keys"]] if kv[1]["kept"] else [])
         | "WriteIndex" >> WriteParquet(FileSystems.join(config.index, run), INDEX_SCHEMA,
                                        lambda nk: {"node": nk[0], "band_key": nk[1]}))

    def run_rounds(self, options: PipelineOptions, previous: tuple[int, int]) -> int:
        """Star rounds from ``edges-000`` until a round leaves the edges unchanged (count
        and checksum); returns the number of rounds run (the last one is ``edges-<k>``)."""
        k = 0
        while k < self.config.minhash.max_rounds:
            result = run_pipeline(options, self._build_round(k))
            k += 1
            current = _edge_stats(result)
            self.largest_group = max(self.largest_group, largest_value(result, "star_group_size"))
            _LOGGER.info("dedup round %d: %d edges", k, current[0])
            if current == previous:
                break
            previous = current
        else:
            _LOGGER.warning("connected components did not converge in %d rounds", k)
        self.rounds, self.edges = k, previous[0]
        return k

    def run(self, options: PipelineOptions) -> dict[str, int]:
        if FileSystems.exists(self.work):
            FileSystems.delete([self.work])
        if self.config.index and self.own_index_part:
            stale = [p for p in _match_all(FileSystems.join(self.config.index, self.own_index_part, "*"))]
            if stale:
                _LOGGER.info("dedup index: replacing this output's earlier part %s", self.own_index_part)
                FileSystems.delete(stale)
            try:  # the emptied folder, where the filesystem has folders
                FileSystems.delete([FileSystems.join(self.config.index, self.own_index_part)])
            except Exception:  # object stores have no folder left to delete
                pass
        first = _edge_stats(run_pipeline(options, self._build_edges))
        if first[0] <= self.config.minhash.driver_max_edges:
            k, driver = self.components_in_driver(), 1
        else:
            k, driver = self.run_rounds(options, first), 0
        result = run_pipeline(options, self._build_final(k))
        return {"cc_rounds": self.rounds, "cc_in_driver": driver, "edges": self.edges,
                "largest_star_group": self.largest_group, **counter_totals(result, self.stage)}

    def components_in_driver(self) -> int:
        """Reads ``edges-000``, writes each node's edge to its component's root as
        ``edges-001`` (one file; no rounds run); returns 1, the edges' generation."""
        roots = components_union_find(read_edge_files(_match_all(FileSystems.join(self._edges_dir(0), "*.parquet"))))
        table = pa.table({"a": list(roots), "b": list(roots.values())}, schema=EDGE_SCHEMA)
        write_table(FileSystems.join(self._edges_dir(1), "part-00000-of-00001.parquet"), table)
        self.rounds, self.edges = 0, len(roots)
        _LOGGER.info("dedup components in the driver: %d edges to %d roots", len(roots), len(set(roots.values())))
        return 1
