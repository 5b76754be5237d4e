"""MinHash-LSH near-duplicate quality against brute-force Jaccard on 10,000 documents.

    .venv/bin/python -m benchmarks.bench_dedup_quality [--base 3000 --copies 7000]

Base documents: 150-word chunks of the books in ../shared/data/text (real text).
Near-duplicates: copies of random base documents with realistic edits at a random rate
(word substitutions, deletions and insertions, a swapped pair of sentences, a header or
footer line added). Truth: exact Jaccard of the 5-word shingle sets (same normalisation
as the stage) for every pair sharing at least one shingle (an inverted index makes the
brute force tractable). Measured: pairs put in the same LSH bucket, and pairs in the
same connected component (what the stage deduplicates), against the pairs with Jaccard
>= 0.7, 0.8, 0.9.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

from benchmarks import SHARED_DATA
from transforms.dedup.components import components_in_memory
from transforms.dedup.minhash import MinHasher, band_keys, is_empty, normalized_words

ROOT = Path(__file__).resolve().parents[1]
FILLERS = ("the", "a", "of", "and", "in", "very", "also", "then", "just", "indeed")


def base_documents(n: int, words_per_doc: int = 150) -> list[str]:
    words: list[str] = []
    for path in sorted((SHARED_DATA / "text").glob("*.txt")):
        words.extend(path.read_text(encoding="utf-8").split())
    docs = [" ".join(words[i:i + words_per_doc]) for i in range(0, len(words) - words_per_doc, words_per_doc)]
    return docs[:n]


def edit(text: str, rate: float, rng: random.Random) -> str:
    words = text.split()
    out = []
    for w in words:
        r = rng.random()
        if r < rate / 3:
            out.append(rng.choice(FILLERS))  # substitution
        elif r < 2 * rate / 3:
            continue  # deletion
        elif r < rate:
            out += [w, rng.choice(FILLERS)]  # insertion
        else:
            out.append(w)
    text = " ".join(out)
    sentences = text.split(". ")
    if len(sentences) > 3 and rng.random() < 0.5:
        i = rng.randrange(len(sentences) - 1)
        sentences[i], sentences[i + 1] = sentences[i + 1], sentences[i]
    text = ". ".join(sentences)
    if rng.random() < 0.3:
        text = rng.choice(["Share this article. ", "Advertisement. "]) + text + " Read more."
    return text


def shingle_sets(texts: list[str], n: int = 5) -> list[set[bytes]]:
    sets = []
    for text in texts:
        words = normalized_words(text)
        sets.append({b" ".join(words[i:i + n]) for i in range(max(1, len(words) - n + 1))} if words else set())
    return sets


def true_pairs(sets: list[set[bytes]], threshold: float) -> dict[tuple[int, int], float]:
    index: dict[bytes, list[int]] = defaultdict(list)
    for i, s in enumerate(sets):
        for sh in s:
            index[sh].append(i)
    candidates = set()
    for ids in index.values():
        if 1 < len(ids) < 200:  # a shingle shared by hundreds is boilerplate, not evidence
            candidates.update(itertools.combinations(ids, 2))
    out = {}
    for a, b in candidates:
        j = len(sets[a] & sets[b]) / len(sets[a] | sets[b])
        if j >= threshold:
            out[(a, b)] = j
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base", type=int, default=3000)
    parser.add_argument("--copies", type=int, default=7000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    base = base_documents(args.base)
    texts = list(base)
    for _ in range(args.copies):
        texts.append(edit(rng.choice(base), rng.uniform(0.0, 0.15), rng))
    t0 = time.perf_counter()
    sets = shingle_sets(texts)
    truth = true_pairs(sets, 0.5)
    t_truth = time.perf_counter() - t0
    t0 = time.perf_counter()
    hasher = MinHasher(num_perm=112)
    signatures = hasher.signatures(texts)
    buckets: dict[bytes, list[int]] = defaultdict(list)
    for i, sig in enumerate(signatures):
        if not is_empty(sig):
            for key in band_keys(sig, 14, 8):
                buckets[key].append(i)
    candidate = {p for ids in buckets.values() for p in itertools.combinations(sorted(set(ids)), 2)}
    edges = [(f"{a:06d}", f"{b:06d}") for a, b in candidate]
    roots = components_in_memory(edges)
    comp = {int(k): int(v) for k, v in roots.items()}
    t_lsh = time.perf_counter() - t0
    sys.stdout.write(f"{len(texts)} documents ({len(base)} base, {args.copies} edited copies); "
                     f"truth {t_truth:.1f}s, LSH + components {t_lsh:.1f}s; "
                     f"{len(candidate)} candidate pairs\n")
    sys.stdout.write(f"{'Jaccard >=':>10} {'true pairs':>10} {'bucket P':>9} {'bucket R':>9} "
                     f"{'comp R':>7}\n")
    results = []
    for t in (0.7, 0.8, 0.9):
        pos = {p for p, j in truth.items() if j >= t}
        hit = pos & candidate
        precision = len({p for p in candidate if truth.get(p, 0.0) >= t}) / max(len(candidate), 1)
        recall = len(hit) / max(len(pos), 1)
        same = sum(1 for a, b in pos if comp.get(a, a) == comp.get(b, b))
        results.append({"threshold": t, "true_pairs": len(pos), "bucket_precision": precision,
                        "bucket_recall": recall, "component_recall": same / max(len(pos), 1)})
        sys.stdout.write(f"{t:>10} {len(pos):>10} {precision:9.3f} {recall:9.3f} {same / max(len(pos), 1):7.3f}\n")
    below = sum(1 for p in candidate if truth.get(p, 0.0) < 0.5)
    sys.stdout.write(f"candidate pairs below Jaccard 0.5: {below}\n")
    sys.stdout.write(json.dumps(results) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
