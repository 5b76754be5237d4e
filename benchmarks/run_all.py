"""Runs the benchmarks that need only the project's venv: ``make bench``.

The peer comparisons that need other packages run from the venvs ``make bench-env``
creates: ``benchmarks.bench_clean`` and ``benchmarks.bench_pipeline`` from ``.bench-venv``
(datatrove), ``benchmarks.bench_loader --peers`` from ``.bench-venv-loader``
(mosaicml-streaming, litdata); ``benchmarks.bench_dedup_scale`` takes minutes.
"""

from __future__ import annotations

import sys

from benchmarks import (bench_anomaly, bench_crawl, bench_dedup_quality, bench_extract, bench_langid,
                        bench_langid_mixed, bench_loader, bench_minhash, bench_tiers, bench_tokenize, bench_upsample,
                        bench_warc)

BENCHMARKS = (
    ("extraction", bench_extract.main, []),
    ("warc reader", bench_warc.main, []),
    ("crawler", bench_crawl.main, []),
    ("language id", lambda argv: bench_langid.main(), []),
    ("language id, mixed documents", bench_langid_mixed.main, []),
    ("anomaly detector", bench_anomaly.main, []),
    ("minhash signatures", bench_minhash.main, []),
    ("near-duplicate quality", bench_dedup_quality.main, []),
    ("tokenize", bench_tokenize.main, []),
    ("upsampling: tokens per epoch", bench_upsample.main, []),
    ("tier copies", bench_tiers.main, []),
    ("loader (ours vs memmap)", bench_loader.main, ["--tokens", "20000000"]),
)


def main() -> int:
    for name, fn, argv in BENCHMARKS:
        sys.stdout.write(f"\n== {name} ==\n")
        sys.stdout.flush()
        code = fn(argv)
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
