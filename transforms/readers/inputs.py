"""Files of any input format → ``RawRecord`` (main) and ``Failure`` (``failed``), in one step.

A job's inputs may mix formats (WARC, ARC, WET, JSONL, Parquet). They are read by one
DoFn that hands each file to its format's reader, so that the records of every format
leave through one output. Reading each format in its own branch and flattening the
branches would put the stage's counting steps after a ``Flatten``, which runners fuse
into every branch: Beam's Flink runner then keeps the counters of only one of the copies
(measured: a job over WARC and ARC files lost the ARC branch's ``records_in``).
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

import apache_beam as beam

from transforms.readers.files import FileRef
from transforms.readers.tabular import TextFields, _ReadTabularFn
from transforms.readers.warc import WarcLimits, _ReadWarcFn
from transforms.routing import FAILED

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
            yield from self._warc.process(ref)
        elif fmt in self._tabular:
            yield from self._tabular[fmt].process(ref)
        else:
            raise ValueError(f"{ref.url}: unknown input format {fmt!r}")


class ReadInputs(beam.PTransform):
    """``(format, FileRef)`` pairs → ``RawRecord`` (``records``) and ``Failure`` (``failed``).

    Counting is the readers' own: damaged spans and unreadable files count as
    ``records_in`` and ``failed_<error>`` of ``stage``, records that go on as
    ``records_read``, skipped WARC records as ``skipped_<type>``.
    """

    def __init__(self, stage: str, limits: WarcLimits = WarcLimits(),
                 fields: Mapping[str, TextFields] | None = None) -> None:
        super().__init__()
        self._stage = stage
        self._limits = limits
        self._fields = dict(fields or {})

    def expand(self, files: beam.PCollection[tuple[str, FileRef]]) -> beam.pvalue.DoOutputsTuple:
        return files | "ReadRecords" >> beam.ParDo(
            _ReadInputFn(self._stage, self._limits, self._fields)
        ).with_outputs(FAILED, main="records")
