"""MinHash signatures per second per core: ours vs datasketch 2.0 in its fastest configuration.

    .venv/bin/python -m benchmarks.bench_minhash [--docs 2000] [--rounds 5]

~3 KB documents cut from the books in ../shared/data/text, 112 permutations, 5-word
shingles. Both sides get the same normalisation and the same shingles: datasketch is fed
``shingle_strings`` of the words of our batch normaliser (the fastest way we have to
make them; its time counts on datasketch's side, as ours counts on ours). datasketch
rows: a new ``MinHash`` per document (permutations re-derived each time), and
``MinHash.bulk`` (one set of permutations for every document) with its default SHA-1 and
with ``hashfunc=zlib.crc32`` (the cheapest 32-bit hash a Python call can give it; the
baseline). Ours: ``compat`` (SHA-1 per shingle: values identical to datasketch's SHA-1
rows, checked here), ``crc32`` (bench only: the compat path with zlib.crc32 per shingle,
values identical to datasketch's crc32 row, checked here) and ``fast`` (the default).
CPU time of one core; the configurations run interleaved, ``--rounds`` rounds; best
of the rounds and the median.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import zlib
from pathlib import Path
from typing import Callable

import numpy as np
from datasketch import MinHash

from benchmarks import SHARED_DATA
from transforms.dedup.minhash import MinHasher, fmix32, normalized_batch, shingle_strings

ROOT = Path(__file__).resolve().parents[1]
PERM = 112
BATCH = 256  # dedup.minhash.batch_size


def documents(n: int) -> list[str]:
    text = "".join(p.read_text(encoding="utf-8") for p in sorted((SHARED_DATA / "text").glob("*.txt")))
    docs = [text[i:i + 3000] for i in range(0, len(text) - 3000, 3000)]
    return (docs * (n // len(docs) + 1))[:n]


def shingles(docs: list[str]) -> list[list[bytes]]:
    """The shingles both sides hash: 5-word shingles of the normalised words."""
    out = []
    for i in range(0, len(docs), BATCH):
        buf, _ = normalized_batch(docs[i:i + BATCH])
        out += [shingle_strings(part.split(), 5) for part in buf.tobytes().split(b"\0")]
    return out


def datasketch_new_each(docs: list[str]) -> list[np.ndarray]:
    out = []
    for doc_shingles in shingles(docs):
        m = MinHash(num_perm=PERM)
        m.update_batch(doc_shingles)
        out.append(m.hashvalues)
    return out


def datasketch_bulk(docs: list[str], **kwargs) -> list[np.ndarray]:
    return [m.hashvalues for m in MinHash.bulk(shingles(docs), num_perm=PERM, **kwargs)]


def ours_crc32(hasher: MinHasher, docs: list[str]) -> np.ndarray:
    """Our batch permutation step on zlib.crc32 of the same shingle strings."""
    parts = []
    for i in range(0, len(docs), BATCH):
        batch = shingles(docs[i:i + BATCH])
        raw = np.fromiter((zlib.crc32(s) for doc in batch for s in doc), dtype=np.uint32)
        parts.append(hasher.minimums(fmix32(raw), np.array([len(doc) for doc in batch])))
    return np.concatenate(parts)


def ours(hasher: MinHasher, docs: list[str]) -> np.ndarray:
    return np.concatenate([hasher.signatures(docs[i:i + BATCH]) for i in range(0, len(docs), BATCH)])


def cpu_seconds(fn: Callable[[], object]) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    docs = documents(args.docs)
    fast, compat = MinHasher(num_perm=PERM), MinHasher(num_perm=PERM, compat=True)
    if not np.array_equal(np.array(datasketch_bulk(docs[:200])), compat.signatures(docs[:200])):
        raise SystemExit("compat signatures differ from datasketch's")
    if not np.array_equal(np.array(datasketch_bulk(docs[:200], hashfunc=zlib.crc32)), ours_crc32(fast, docs[:200])):
        raise SystemExit("crc32 signatures differ from datasketch's")
    configs: dict[str, Callable[[], object]] = {
        "datasketch MinHash() per document, SHA-1": lambda: datasketch_new_each(docs),
        "datasketch MinHash.bulk, SHA-1": lambda: datasketch_bulk(docs),
        "datasketch MinHash.bulk, crc32 (fastest)": lambda: datasketch_bulk(docs, hashfunc=zlib.crc32),
        "normalisation + shingle strings alone": lambda: shingles(docs),
        "ours, compat (SHA-1, = datasketch)": lambda: ours(compat, docs),
        "ours, crc32 per shingle (= datasketch)": lambda: ours_crc32(fast, docs),
        "ours, fast (default)": lambda: ours(fast, docs),
    }
    fast.signatures(docs[:10])  # builds the code point table (once per process)
    times: dict[str, list[float]] = {name: [] for name in configs}
    for _ in range(args.rounds):
        for name, fn in configs.items():
            times[name].append(cpu_seconds(fn))
    base = "datasketch MinHash.bulk, crc32 (fastest)"
    n = len(docs)
    sys.stdout.write(f"{n} documents of ~3 KB, {PERM} permutations, 5-word shingles, {args.rounds} rounds "
                     "(best / median)\n")
    result = {}
    for name, values in times.items():
        best, median = min(values), statistics.median(values)
        result[name] = {"docs_per_s_best": n / best, "docs_per_s_median": n / median,
                        "x_fastest_datasketch_best": min(times[base]) / best,
                        "x_fastest_datasketch_median": statistics.median(times[base]) / median}
        sys.stdout.write(f"{name:<44} {n / best:8.0f} / {n / median:8.0f} docs/s  "
                         f"{min(times[base]) / best:5.2f}x / {statistics.median(times[base]) / median:5.2f}x\n")
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
