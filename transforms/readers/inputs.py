"""Files of any input format → ``RawRecord`` (main) and ``Failure`` (``failed``), in one step.

A job's inputs may mix formats (WARC, ARC, WET, JSONL, Parquet). They are read by one
DoFn that hands each file to its format's reader, so that the records of every format
leave through one output. Reading each format in its own branch and flattening the
branches would put the stage's counting steps after a ``Flatten``, which runners fuse
into every branch: Beam's Flink runner then keeps the counters of only one of the copies
(measured: a job over WARC and ARC files lost the ARC branch's ``records_in``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from typing import Any, Iterable, Iterator, Mapping, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from transforms.readers.files import FileRef
from transforms.readers.tabular import TextFields, _ReadTabularFn
from transforms.readers.warc import WarcLimits, _ReadWarcFn
from transforms.doc import RawRecord, document_id
from transforms.routing import FAILED

_LOGGER = logging.getLogger(__name__)

WARC_FORMATS = ("warc", "wet", "arc")
TABULAR_FORMATS = ("jsonl", "parquet")


ID_HASHES = "id_hashes"  # (file URL, uint64 hashes of its records' own ids): one element per file range


def own_id_hash(record_id: str) -> int:
    """64 bits of blake2b of a record's own id (what ``CountDuplicateIds`` compares)."""
    return int.from_bytes(hashlib.blake2b(record_id.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                          "little")


class _ReadInputFn(beam.DoFn):
    """``(format, FileRef)`` → the records of the file, by its format's reader, each record
    with an id of its own named by ``document_id``; last, on ``ID_HASHES``, the hashes of
    those ids (one array per file range: no element per record crosses a shuffle)."""

    def __init__(self, stage: str, limits: WarcLimits, fields: Mapping[str, TextFields]) -> None:
        self._warc = _ReadWarcFn(stage, limits)
        self._tabular = {fmt: _ReadTabularFn(stage, fmt, fields.get(fmt, TextFields()))
                         for fmt in TABULAR_FORMATS}

    def setup(self) -> None:
        self._warc.setup()
        for reader in self._tabular.values():
            reader.setup()

    def process(self, item: tuple[str, FileRef]) -> Iterator[Any]:
        fmt, ref = item
        if fmt in WARC_FORMATS:
            records = self._warc.process(ref)
        elif fmt in self._tabular:
            records = self._tabular[fmt].process(ref)
        else:
            raise ValueError(f"{ref.url}: unknown input format {fmt!r}")
        source = ref.id_source or ref.url
        hashes: list[int] = []
        for record in records:  # ids from the file's name below its input folder, not its place
            if isinstance(record, RawRecord) and record.record_id:
                hashes.append(own_id_hash(record.record_id))
                if not record.doc_id:
                    record = dataclasses.replace(record, doc_id=document_id(source, record.offset,
                                                                            record.record_id))
            yield record
        if hashes:
            yield beam.pvalue.TaggedOutput(ID_HASHES, (ref.url, np.asarray(hashes, dtype=np.uint64)))


def repeated_ids(hashes: Sequence[np.ndarray]) -> tuple[int, int]:
    """(records whose id an earlier record of the file has, ids that repeat) over the
    hash arrays of one file's ranges."""
    values = np.concatenate(list(hashes)) if hashes else np.empty(0, np.uint64)
    if not len(values):
        return 0, 0
    _, counts = np.unique(values, return_counts=True)
    repeats = counts[counts > 1]
    return int((repeats - 1).sum()), int(len(repeats))


class _CountRepeatsFn(beam.DoFn):
    """(file, its ranges' id hashes) → ``duplicate_id`` (every occurrence of an id after
    the first) and ``duplicate_id_keys`` (the ids that repeat)."""

    def __init__(self, stage: str) -> None:
        self._stage = stage

    def setup(self) -> None:
        self._repeats = Metrics.counter(self._stage, "duplicate_id")
        self._ids = Metrics.counter(self._stage, "duplicate_id_keys")

    def process(self, item: tuple[str, Iterable[np.ndarray]]) -> Iterable[None]:
        repeats, ids = repeated_ids(list(item[1]))
        if repeats:
            self._repeats.inc(repeats)
            self._ids.inc(ids)
            _LOGGER.warning("%s: %d records repeat the id of an earlier record (%d ids); every one is "
                            "kept, with its own document id", item[0], repeats, ids)
        return ()


class CountDuplicateIds(beam.PTransform):
    """``ID_HASHES`` → nothing; counts, as ``duplicate_id`` of ``stage``, the records whose
    own id another record of the same input already has (``duplicate_id_keys``: how many
    ids repeat). Nothing is dropped: document ids are unique by construction
    (``transforms.doc.document_id``); the count tells the user their ids are not. What
    crosses the shuffle is one array of 8-byte hashes per file range, grouped by file (a
    file's hashes meet in one worker: 8 bytes a record)."""

    def __init__(self, stage: str) -> None:
        super().__init__()
        self._stage = stage

    def expand(self, hashes: beam.PCollection[tuple[str, np.ndarray]]) -> beam.PCollection[None]:
        return (hashes
                | "PerFile" >> beam.GroupByKey()
                | "CountRepeats" >> beam.ParDo(_CountRepeatsFn(self._stage)))


class ReadInputs(beam.PTransform):
    """``(format, FileRef)`` pairs → ``RawRecord`` (``records``) and ``Failure`` (``failed``).

    Counting is the readers' own: damaged spans and unreadable files count as
    ``records_in`` and ``failed_<error>`` of ``stage``, records that go on as
    ``records_read``, skipped WARC records as ``skipped_<type>``; records whose id repeats
    in their input as ``duplicate_id`` (``CountDuplicateIds``).
    """

    def __init__(self, stage: str, limits: WarcLimits = WarcLimits(),
                 fields: Mapping[str, TextFields] | None = None) -> None:
        super().__init__()
        self._stage = stage
        self._limits = limits
        self._fields = dict(fields or {})

    def expand(self, files: beam.PCollection[tuple[str, FileRef]]) -> beam.pvalue.DoOutputsTuple:
        read = files | "ReadRecords" >> beam.ParDo(
            _ReadInputFn(self._stage, self._limits, self._fields)
        ).with_outputs(FAILED, ID_HASHES, main="records")
        _ = read[ID_HASHES] | "DuplicateIds" >> CountDuplicateIds(self._stage)
        return read
