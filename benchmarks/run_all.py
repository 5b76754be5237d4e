"""Runs every benchmark in turn: ``make bench`` or ``python -m benchmarks.run_all``."""

from __future__ import annotations

import sys

from benchmarks import bench_crawl, bench_extract, bench_warc

BENCHMARKS = (("extraction", bench_extract.main), ("warc reader", bench_warc.main),
              ("crawler", bench_crawl.main))


def main() -> int:
    for name, fn in BENCHMARKS:
        sys.stdout.write(f"\n== {name} ==\n")
        sys.stdout.flush()
        code = fn([])
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
