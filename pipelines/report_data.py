"""Reading a run's Parquet outputs batch by batch, and the histograms the run report
(``pipelines.report``, ``pipelines.report_anomaly``) bins them into.

Only the wanted columns of ``BATCH_ROWS`` rows at a time are held, so the report's memory
does not grow with the corpus.
"""

from __future__ import annotations

import logging
from typing import Any, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipelines.manifest import list_files

_LOGGER = logging.getLogger(__name__)

BATCH_ROWS = 65_536


class Histogram:
    """Counts per bin and per series, fed batch by batch; out-of-range values are
    counted in the first/last bin and reported as ``below``/``above``."""

    def __init__(self, edges: np.ndarray, log: bool = False) -> None:
        self.edges = np.asarray(edges, dtype=np.float64)
        self.log = log
        self.counts: dict[str, np.ndarray] = {}
        self.below = self.above = self.n = 0
        self.total = 0.0
        self.lo, self.hi = float("inf"), float("-inf")

    def add(self, values: np.ndarray, series: str) -> None:
        v = np.asarray(values, dtype=np.float64)
        v = v[np.isfinite(v)]
        if not v.size:
            return
        self.n += int(v.size)
        self.total += float(v.sum())
        self.lo, self.hi = min(self.lo, float(v.min())), max(self.hi, float(v.max()))
        self.below += int((v < self.edges[0]).sum())
        self.above += int((v > self.edges[-1]).sum())
        clipped = np.clip(v, self.edges[0], self.edges[-1])
        counts = np.histogram(clipped, bins=self.edges)[0]
        self.counts[series] = self.counts.get(series, np.zeros(len(self.edges) - 1, np.int64)) + counts

    def to_json(self) -> dict[str, Any]:
        return {"edges": [float(e) for e in self.edges], "log": self.log,
                "counts": {k: [int(c) for c in v] for k, v in self.counts.items()},
                "n": self.n, "below": self.below, "above": self.above,
                "min": self.lo if self.n else None, "max": self.hi if self.n else None,
                "mean": self.total / self.n if self.n else None}


def _open(path: str) -> Any:
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def iter_batches(paths: Sequence[str], columns: Sequence[str]) -> Iterator[pa.RecordBatch]:
    """Record batches of the wanted columns (those the file has) of Parquet files."""
    for path in paths:
        with _open(path) as fh:
            pf = pq.ParquetFile(fh)
            wanted = [c for c in columns if c in pf.schema_arrow.names]
            if wanted:
                yield from pf.iter_batches(batch_size=BATCH_ROWS, columns=wanted)


def stage_files(output: str, kind: str, stage: str) -> list[str]:
    directory = FileSystems.join(output, kind, stage)
    return list_files(directory, "*.parquet") + list_files(directory, "*/*.parquet")
