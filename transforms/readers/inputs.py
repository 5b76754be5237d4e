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
from typing import Any, Iterable, Iterator, Mapping

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.readers.files import FileRef
from transforms.readers.tabular import TextFields, _ReadTabularFn
from transforms.readers.warc import WarcLimits, _ReadWarcFn
from transforms.doc import RawRecord, document_id
from transforms.routing import FAILED

_LOGGER = logging.getLogger(__name__)

WARC_FORMATS = ("warc", "wet", "arc")
TABULAR_FORMATS = ("jsonl", "parquet")


class _ReadInputFn(beam.DoFn):
    """``(format, FileRef)`` → the records of the file, by its format's reader."""

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
        for record in records:  # ids from the file's name below its input folder, not its place
            if isinstance(record, RawRecord) and record.record_id and not record.doc_id:
                record = dataclasses.replace(record, doc_id=document_id(source, record.offset, record.record_id))
            yield record


def own_id_key(record: RawRecord) -> list[bytes]:
    """The key of the record's own id in its input (16 bytes of blake2b over file and id:
    a short shuffle key), none for a record without an id of its own."""
    if not record.record_id:
        return []
    data = record.source.encode("utf-8", "surrogatepass") + b"\x00" + \
        record.record_id.encode("utf-8", "surrogatepass")
    return [hashlib.blake2b(data, digest_size=16).digest()]


class _CountRepeatsFn(beam.DoFn):
    """(key, occurrences) → ``duplicate_id`` counts every occurrence after the first."""

    def __init__(self, stage: str) -> None:
        self._stage = stage

    def setup(self) -> None:
        self._repeats = Metrics.counter(self._stage, "duplicate_id")
        self._inputs = Metrics.counter(self._stage, "duplicate_id_keys")

    def process(self, item: tuple[bytes, int]) -> Iterable[None]:
        if item[1] > 1:
            self._repeats.inc(item[1] - 1)
            self._inputs.inc()
        return ()


class CountDuplicateIds(beam.PTransform):
    """``RawRecord`` → nothing; counts, as ``duplicate_id`` of ``stage``, the records whose
    own id another record of the same input already has (``duplicate_id_keys``: how many
    ids repeat). Nothing is dropped: document ids are unique by construction
    (``transforms.doc.document_id``); the count tells the user their ids are not."""

    def __init__(self, stage: str) -> None:
        super().__init__()
        self._stage = stage

    def expand(self, records: beam.PCollection[RawRecord]) -> beam.PCollection[None]:
        return (records
                | "IdKeys" >> beam.FlatMap(own_id_key)
                | "Ones" >> beam.Map(lambda key: (key, 1))
                | "PerId" >> beam.CombinePerKey(sum)
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
        ).with_outputs(FAILED, main="records")
        _ = read.records | "DuplicateIds" >> CountDuplicateIds(self._stage)
        return read
