"""LSH buckets a chunk at a time: what crosses the shuffle is band values, not one element
per (band key, document).

Each bundle's signatures are cut into their bands; the band values (``rows`` uint32 each)
of many documents go to their group ``(band, part)`` as one ``BandChunk`` (numpy values and
the documents' nodes), ``part`` = the band's first value modulo ``parts``, so equal band
values always meet in one group. A group's chunks are concatenated, sorted by band values
and node, and every member of a run of equal values is linked to the run's smallest node
(``chunk_edges``, vectorised). The components are the ones the per-key path gives
(``BandKeys`` + ``BucketEdges``: the same buckets, the same smallest node); the edges are
direct stars, without the per-salt minima in between.

Memory: a group holds about ``documents / parts`` entries of ``rows * 4`` bytes and a node
name; the stage sets ``parts`` from its input size (``parts_for``). All members of one
band value are in one group: a bucket shared by millions of pages costs that group
~100 bytes a member (the per-key path splits such a bucket under ``salts``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.transforms.window import GlobalWindows

from transforms.dedup.minhash import _EMPTY, MinHasher

__all__ = ["BandChunk", "BandChunks", "ChunkEdges", "chunk_edges", "key_chunk", "parts_for"]

FLUSH_ROWS = 1 << 16  # band entries a bundle buffers before it sends its chunks on
BYTES_PER_PART = 256 << 20  # input bytes per part of a band (parts_for)


@dataclass(frozen=True)
class BandChunk:
    """One band of ``len(nodes)`` signatures: ``values`` is (n, rows) uint32."""

    values: np.ndarray
    nodes: tuple[str, ...]


def parts_for(input_bytes: int, least: int) -> int:
    """Groups per band: ``least`` (the config's ``salts``), more for inputs past
    ``least * BYTES_PER_PART`` bytes, so a group stays ~256 MB of input's worth of entries."""
    return max(least, math.ceil(input_bytes / BYTES_PER_PART))


def cut(signatures: np.ndarray, nodes: Sequence[str], bands: int, rows: int,
        parts: int) -> Iterator[tuple[tuple[int, int], BandChunk]]:
    """``((band, part), chunk)`` of every band of non-empty ``signatures`` (one per node)."""
    full = ~(signatures == _EMPTY).all(axis=1)
    if not full.all():
        signatures = signatures[full]
        nodes = [n for n, f in zip(nodes, full.tolist()) if f]
    if not len(nodes):
        return
    for band in range(bands):
        values = signatures[:, band * rows:(band + 1) * rows]
        part = values[:, 0] % np.uint32(parts)
        order = np.argsort(part, kind="stable")
        bounds = np.flatnonzero(np.diff(part[order])) + 1
        for rows_of in np.split(order, bounds):
            yield (band, int(part[rows_of[0]])), BandChunk(np.ascontiguousarray(values[rows_of]),
                                                           tuple(nodes[i] for i in rows_of.tolist()))


def key_chunk(key: bytes, node: str, rows: int, parts: int) -> tuple[tuple[int, int], BandChunk]:
    """The chunk of one ``band_keys`` key (band byte + values; an earlier run's index row)."""
    values = np.frombuffer(key[1:], dtype=np.uint32).reshape(1, rows)
    return (key[0], int(values[0, 0] % np.uint32(parts))), BandChunk(values.copy(), (node,))


def chunk_edges(chunks: Iterable[BandChunk]) -> list[tuple[str, str]]:
    """(node, smallest node) for every member of a run of equal band values that is not
    its smallest node (a node listed twice gives its edge twice: the stage's Distinct)."""
    chunks = list(chunks)
    values = np.concatenate([c.values for c in chunks])
    if len(values) < 2:
        return []
    names, ranks = np.unique(np.array([n for c in chunks for n in c.nodes], dtype=object), return_inverse=True)
    ranks = ranks.ravel()
    order = np.lexsort((ranks,) + tuple(values[:, c] for c in range(values.shape[1] - 1, -1, -1)))
    ordered, rank = values[order], ranks[order]
    starts = np.ones(len(order), dtype=bool)
    starts[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    smallest = rank[starts][np.cumsum(starts) - 1]
    linked = np.flatnonzero(rank != smallest)
    return [(names[a], names[b]) for a, b in zip(rank[linked].tolist(), smallest[linked].tolist())]


class _BandChunksFn(beam.DoFn):
    """Batches of (node, text) → ``((band, part), BandChunk)``, buffered over the bundle
    (sent on every ``FLUSH_ROWS`` entries and at its end)."""

    def __init__(self, hasher: MinHasher, bands: int, rows: int, parts: int) -> None:
        self._hasher, self._bands, self._rows, self._parts = hasher, bands, rows, parts

    def start_bundle(self) -> None:
        self._buffer: dict[tuple[int, int], list[BandChunk]] = {}
        self._buffered = 0

    def process(self, batch: list[tuple[str, str]]) -> Iterator[tuple[tuple[int, int], BandChunk]]:
        signatures = self._hasher.signatures([text for _, text in batch])
        for key, chunk in cut(signatures, [node for node, _ in batch], self._bands, self._rows, self._parts):
            self._buffer.setdefault(key, []).append(chunk)
            self._buffered += len(chunk.nodes)
        if self._buffered >= FLUSH_ROWS:
            yield from self._drain()

    def finish_bundle(self) -> Iterator[Any]:
        for element in self._drain():
            yield GlobalWindows.windowed_value(element)

    def _drain(self) -> Iterator[tuple[tuple[int, int], BandChunk]]:
        for key, chunks in sorted(self._buffer.items()):
            yield key, chunks[0] if len(chunks) == 1 else BandChunk(
                np.concatenate([c.values for c in chunks]), tuple(n for c in chunks for n in c.nodes))
        self._buffer, self._buffered = {}, 0


class BandChunks(beam.PTransform):
    """``PCollection[(node, text)]`` → ``PCollection[((band, part), BandChunk)]``."""

    def __init__(self, hasher: MinHasher, bands: int, rows: int, parts: int, batch_size: int) -> None:
        super().__init__()
        self._fn = _BandChunksFn(hasher, bands, rows, parts)
        self._batch_size = batch_size

    def expand(self, nodes: beam.PCollection[tuple[str, str]]) -> beam.PCollection[tuple[tuple[int, int], BandChunk]]:
        return (nodes
                | "Batch" >> beam.BatchElements(min_batch_size=8, max_batch_size=self._batch_size)
                | "Chunks" >> beam.ParDo(self._fn))


class ChunkEdges(beam.PTransform):
    """``PCollection[((band, part), BandChunk)]`` → distinct star edges (node, smallest node)."""

    def expand(self, chunks: beam.PCollection[tuple[tuple[int, int], BandChunk]]) -> beam.PCollection[tuple[str, str]]:
        return (chunks
                | "Group" >> beam.GroupByKey()
                | "Link" >> beam.FlatMap(lambda group: chunk_edges(group[1]))
                | "Distinct" >> beam.Distinct())
