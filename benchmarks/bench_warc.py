"""WARC reader records/s per core: our reader vs the bare warcio loop it is built on.

    .venv/bin/python -m benchmarks.bench_warc [--copies 40] [--uncompressed]

The corpus is the real WARC files in ../shared/data/warc (Common Crawl, dolma's wget
crawl, warcio's samples) concatenated ``--copies`` times in memory (each record is its
own gzip member, so concatenation is a valid WARC). Our reader additionally checks every
record for truncation, decodes HTTP headers into ``RawRecord`` fields and keeps offsets;
FastWARC (resiliparse's C++ reader) is shown for reference. ``--uncompressed`` reads the
same records as one uncompressed WARC, where ours also checks every ``WARC-Block-Digest``
(gzip members carry a CRC-32 instead; issue 36) and the loop does not.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import sys
import time
from pathlib import Path
from typing import Callable

from fastwarc.warc import ArchiveIterator as FastIterator
from fastwarc.warc import WarcRecordType
from warcio.archiveiterator import ArchiveIterator

from benchmarks import SHARED_DATA
from transforms.doc import RawRecord
from transforms.readers.warc import WarcLimits, iter_warc

ROOT = Path(__file__).resolve().parents[1]
FILES = ("resiliparse_warcfile.warc.gz", "dolma_sample-0000.warc.gz", "cc_whirlwind.warc.gz")


def ours(data: bytes) -> int:
    return sum(isinstance(i, RawRecord) for i in iter_warc(io.BytesIO(data), "bench", WarcLimits(), "b"))


def bare_warcio(data: bytes) -> int:
    n = 0
    for record in ArchiveIterator(io.BytesIO(data)):
        if record.rec_type in ("response", "resource", "conversion"):
            record.content_stream().read()
            n += 1
    return n


def fastwarc(data: bytes) -> int:
    n = 0
    wanted = WarcRecordType.response | WarcRecordType.resource | WarcRecordType.conversion
    for record in FastIterator(io.BytesIO(data), record_types=wanted, parse_http=True):
        record.reader.read()
        n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", default=str(SHARED_DATA / "warc"))
    parser.add_argument("--copies", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--uncompressed", action="store_true",
                        help="the records as an uncompressed WARC (ours checks block digests there)")
    args = parser.parse_args(argv)
    one = b"".join((Path(args.data) / name).read_bytes() for name in FILES)
    if args.uncompressed:
        one = gzip.decompress(one)
    data = one * args.copies
    readers: dict[str, Callable[[bytes], int]] = {
        "warcio loop (baseline)": bare_warcio, "ours: iter_warc": ours, "fastwarc (reference)": fastwarc,
    }
    seconds = {name: 0.0 for name in readers}
    counts = {}
    for _ in range(args.rounds):
        for name, fn in readers.items():
            t0 = time.process_time()
            counts[name] = fn(data)
            seconds[name] += time.process_time() - t0
    mb = len(data) * args.rounds / 1e6
    base = counts["warcio loop (baseline)"] * args.rounds / seconds["warcio loop (baseline)"]
    kind = "uncompressed" if args.uncompressed else "gzipped"
    sys.stdout.write(f"{len(data) / 1e6:.1f} MB of {kind} WARC, {counts['ours: iter_warc']} "
                     f"document records, {args.rounds} rounds, CPU time of one core\n")
    results = []
    for name in readers:
        rate = counts[name] * args.rounds / seconds[name]
        sys.stdout.write(f"{name:<24} {rate:9.0f} records/s {mb / seconds[name]:7.1f} MB/s "
                         f"{rate / base:5.2f}x baseline\n")
        results.append({"reader": name, "records_per_s": rate, "mb_per_s": mb / seconds[name]})
    sys.stdout.write(json.dumps(results) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
