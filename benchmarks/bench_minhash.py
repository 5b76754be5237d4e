"""MinHash signatures per second per core: ours vs ``datasketch.MinHash(num_perm=112)``.

    .venv/bin/python -m benchmarks.bench_minhash [--docs 2000]

~3 KB documents cut from the books in ../shared/data/text. Both sides get the same
normalisation and 5-word shingles; datasketch hashes them with ``update_batch`` one
document at a time, ours computes a batch of signatures at once (``fast``; ``compat``,
bit-identical to datasketch, shown too). CPU time of one core, best of 3 rounds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from datasketch import MinHash

from transforms.dedup.minhash import MinHasher, normalized_words, shingle_strings

ROOT = Path(__file__).resolve().parents[1]


def documents(n: int) -> list[str]:
    text = "".join(p.read_text(encoding="utf-8") for p in sorted((ROOT.parent / "shared" / "data" / "text").glob("*.txt")))
    docs = [text[i:i + 3000] for i in range(0, len(text) - 3000, 3000)]
    return (docs * (n // len(docs) + 1))[:n]


def datasketch_run(docs: list[str]) -> None:
    for doc in docs:
        m = MinHash(num_perm=112)
        m.update_batch(shingle_strings(normalized_words(doc), 5))


def best(fn, rounds: int = 3) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=2000)
    args = parser.parse_args(argv)
    docs = documents(args.docs)
    fast, compat = MinHasher(num_perm=112), MinHasher(num_perm=112, compat=True)
    t_ds = best(lambda: datasketch_run(docs))
    t_fast = best(lambda: [fast.signatures(docs[i:i + 256]) for i in range(0, len(docs), 256)])
    t_compat = best(lambda: [compat.signatures(docs[i:i + 256]) for i in range(0, len(docs), 256)])
    n = len(docs)
    sys.stdout.write(f"{n} documents of ~3 KB, 112 permutations, 5-word shingles\n")
    sys.stdout.write(f"datasketch MinHash.update_batch   {n / t_ds:8.0f} docs/s  1.00x\n")
    sys.stdout.write(f"ours, compat (identical values)   {n / t_compat:8.0f} docs/s  {t_ds / t_compat:.2f}x\n")
    sys.stdout.write(f"ours, fast (default)              {n / t_fast:8.0f} docs/s  {t_ds / t_fast:.2f}x\n")
    sys.stdout.write(json.dumps({"datasketch": n / t_ds, "compat": n / t_compat, "fast": n / t_fast}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
