"""The pure work of bench_scale's stages, measured in one process on the same documents.

    .venv/bin/python -m benchmarks.scale_work CORPUS.jsonl [--limit N]

What a stage cannot avoid, with the project's own functions and no runner: read its input
file, compute what decides, write its output as Parquet (zstd, as the stages do). Per stage:

* extract: ``iter_jsonl`` (JSON parse, the record) and ``extract_record`` (text
  normalisation, the id) of every line; the documents as a ``DOC_SCHEMA`` table, written.
* dedup_exact: the id, URL and text columns read; ``url_keys``/``text_keys`` (the
  normalisation and 128-bit keys + check), ``decide`` on each (smallest id kept); the kept
  rows filtered and written.
* dedup_minhash: the texts read; ``MinHasher.signatures`` (the job's 112 permutations, 5-word
  shingles), the 14 band keys of each, documents sharing a band joined (union-find over the
  candidate pairs, the smallest id kept per component); the kept rows written.
* tokenize: the texts read; sentencepiece ``encode`` (the job's model, one thread), EOS
  appended, ``encode_shard`` per 256 MiB of tokens, written.

Each stage's CPU is ``time.process_time`` of this process around that step alone, modules
imported before (the input of the next step is what this one wrote). bench_scale divides it by the stage's
CPU in the engine run (its process tree, sampled per stage) for the "framework share".
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import sentencepiece as spm

from benchmarks import SHARED_DATA
from storage.shards import encode_shard
from transforms.dedup.dedup import MinHashConfig
from transforms.dedup.exact_keys import text_keys, url_keys
from transforms.dedup.minhash import band_keys
from transforms.doc import DOC_SCHEMA, Doc, doc_to_row
from transforms.extract.extract import ExtractConfig, extract_record
from transforms.readers.tabular import TextFields, iter_jsonl

ROOT = Path(__file__).resolve().parents[1]
MODEL = SHARED_DATA / "models" / "mistral_tokenizer.model.v1.model"
STAGES = ("extract", "dedup_exact", "dedup_minhash", "tokenize")


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


BATCH = 10_000  # documents held at once where a step can stream (memory stays flat at 1M)


def _write(table: pa.Table, path: Path) -> None:
    pq.write_table(table, path, compression="zstd")


def extract(corpus: Path, out: Path, limit: int = 0) -> int:
    config, fields, rows, written = ExtractConfig(min_chars=1), TextFields(), [], 0
    with pq.ParquetWriter(out, DOC_SCHEMA, compression="zstd") as writer:
        for n, record in enumerate(iter_jsonl(str(corpus), fields, "extract")):
            if limit and n >= limit:
                break
            doc = extract_record(record, config)
            if isinstance(doc, Doc):
                rows.append(doc_to_row(doc))
            if len(rows) == BATCH:
                writer.write_table(pa.Table.from_pylist(rows, schema=DOC_SCHEMA))
                written, rows = written + len(rows), []
        if rows:
            writer.write_table(pa.Table.from_pylist(rows, schema=DOC_SCHEMA))
    return written + len(rows)


def _smallest_first(ids: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Rows kept: per group (an int label per row), the row with the smallest id."""
    order = np.lexsort((ids, groups))
    first = np.ones(len(order), dtype=bool)
    first[1:] = groups[order][1:] != groups[order][:-1]
    keep = np.zeros(len(order), dtype=bool)
    keep[order[first]] = True
    return keep


def dedup_exact(src: Path, out: Path) -> int:
    table = pq.read_table(src)
    ids = np.array(table.column("id").to_pylist(), dtype=object)
    keep = np.ones(len(ids), dtype=bool)
    has, keys = url_keys(table.column("url").to_pylist())
    if len(keys):
        _, group = np.unique(keys, axis=0, return_inverse=True)
        rows = np.flatnonzero(has)
        keep[rows] = _smallest_first(ids[rows].astype(str), group.ravel())
    texts = table.column("text").to_pylist()
    _, group = np.unique(text_keys(texts), axis=0, return_inverse=True)
    keep &= _smallest_first(ids.astype(str), group.ravel())
    _write(table.filter(pa.array(keep)), out)
    return int(keep.sum())


def dedup_minhash(src: Path, out: Path) -> int:
    config = MinHashConfig()
    bands, rows = config.layout()
    hasher = config.hasher()
    table = pq.read_table(src)
    ids = table.column("id").to_pylist()
    texts = table.column("text")
    signatures = np.concatenate([hasher.signatures(texts.slice(i, BATCH).to_pylist())
                                 for i in range(0, len(ids), BATCH)] or [np.zeros((0, config.num_perm), np.uint32)])
    parent = list(range(len(ids)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[bytes, int] = {}
    for d in range(len(ids)):
        for key in band_keys(signatures[d], bands, rows):
            other = first.setdefault(key, d)
            if other != d:
                a, b = find(d), find(other)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    roots = np.array([find(i) for i in range(len(ids))])
    keep = _smallest_first(np.array(ids, dtype=str), roots)
    _write(table.filter(pa.array(keep)), out)
    return int(keep.sum())


def tokenize(src: Path, out: Path) -> int:
    sp = spm.SentencePieceProcessor(model_file=str(MODEL), num_threads=1)
    eos = sp.eos_id()
    dtype = np.dtype(np.uint16) if sp.get_piece_size() <= 1 << 16 else np.dtype(np.uint32)
    docs, size, shards, tokens = [], 0, 0, 0
    for batch in pq.ParquetFile(src).iter_batches(batch_size=BATCH, columns=["text"]):
        for ids in sp.encode(batch.column("text").to_pylist(), num_threads=1):
            docs.append(np.array(ids + [eos], dtype=dtype))
            size += len(ids) + 1
            if size * dtype.itemsize >= 256 << 20:
                out.with_name(f"{out.name}-{shards}").write_bytes(encode_shard(docs, dtype)[0])
                shards, tokens, docs, size = shards + 1, tokens + size, [], 0
    if docs:
        out.with_name(f"{out.name}-{shards}").write_bytes(encode_shard(docs, dtype)[0])
    return tokens + size


def work_cpu(corpus: Path, limit: int = 0) -> dict[str, dict[str, float]]:
    """stage -> {"cpu_s", "out"}: each stage's pure work on the output of the one before."""
    with tempfile.TemporaryDirectory(prefix="scale_work-") as tmp:
        d = Path(tmp)
        steps = [("extract", lambda: extract(corpus, d / "extract.parquet", limit)),
                 ("dedup_exact", lambda: dedup_exact(d / "extract.parquet", d / "exact.parquet")),
                 ("dedup_minhash", lambda: dedup_minhash(d / "exact.parquet", d / "minhash.parquet")),
                 ("tokenize", lambda: tokenize(d / "minhash.parquet", d / "tokens"))]
        result = {}
        for stage, step in steps:
            cpu, out = _timed(step)
            result[stage] = {"cpu_s": round(cpu, 2), "out": out}
        return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--limit", type=int, default=0, help="the first N documents only")
    args = parser.parse_args(argv)
    sys.stdout.write(json.dumps(work_cpu(args.corpus, args.limit)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
