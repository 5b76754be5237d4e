"""Tokenize stage tokens/s per core vs raw ``SentencePieceProcessor.encode``, same documents.

    .venv/bin/python -m benchmarks.bench_tokenize [--docs 3000]

~3 KB documents from the books in ../shared/data/text, the Mistral tokenizer (32,000
pieces) from ../shared/data/models. Raw: ``encode`` of the list of texts in batches of
256 on one thread. Ours: the stage's encode step as the DoFn runs it (batch encode, EOS,
uint16 arrays). Shard write MB/s: encoding one shard of all documents (header, index,
sha256) and writing it to local disk.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import sentencepiece as spm

from benchmarks import SHARED_DATA
from storage.shards import encode_shard

ROOT = Path(__file__).resolve().parents[1]
MODEL = SHARED_DATA / "models" / "mistral_tokenizer.model.v1.model"


def documents(n: int) -> list[str]:
    text = "".join(p.read_text(encoding="utf-8") for p in sorted((SHARED_DATA / "text").glob("*.txt")))
    docs = [text[i:i + 3000] for i in range(0, len(text) - 3000, 3000)]
    return (docs * (n // len(docs) + 1))[:n]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=3000)
    args = parser.parse_args(argv)
    texts = documents(args.docs)
    sp = spm.SentencePieceProcessor(model_file=str(MODEL), num_threads=1)
    eos = sp.eos_id()

    def raw() -> int:
        return sum(len(ids) for i in range(0, len(texts), 256) for ids in sp.encode(texts[i:i + 256]))

    def ours() -> tuple[int, list[np.ndarray]]:
        arrays = []
        for i in range(0, len(texts), 256):
            for ids in sp.encode(texts[i:i + 256]):
                ids.append(eos)
                arrays.append(np.asarray(ids, dtype=np.uint16))
        return sum(len(a) for a in arrays), arrays

    best_raw = best_ours = float("inf")
    for _ in range(3):
        t0 = time.process_time(); n_raw = raw(); best_raw = min(best_raw, time.process_time() - t0)
        t0 = time.process_time(); n_ours, arrays = ours(); best_ours = min(best_ours, time.process_time() - t0)
    t0 = time.perf_counter()
    data, *_ = encode_shard(arrays, np.dtype(np.uint16))
    with tempfile.NamedTemporaryFile(delete=False) as fh:
        fh.write(data)
    write_s = time.perf_counter() - t0
    os.unlink(fh.name)
    sys.stdout.write(f"{len(texts)} documents, {n_raw:,} tokens\n")
    sys.stdout.write(f"raw SentencePieceProcessor.encode   {n_raw / best_raw:12,.0f} tokens/s\n")
    sys.stdout.write(f"ours: stage encode step (+EOS)      {n_ours / best_ours:12,.0f} tokens/s "
                     f"({best_raw / best_ours:.0%} of raw)\n")
    sys.stdout.write(f"shard encode + write                {len(data) / write_s / 1e6:12,.0f} MB/s\n")
    sys.stdout.write(json.dumps({"raw": n_raw / best_raw, "ours": n_ours / best_ours,
                                 "shard_mb_s": len(data) / write_s / 1e6}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
