"""Loader tokens/s from the hot cache vs mosaicml-streaming (MDS) and litdata, same tokens.

    LITDATA_DISABLE_VERSION_CHECK=1 .bench-venv-loader/bin/python -m benchmarks.bench_loader --peers [--tokens 20000000]

(`make bench-env` creates .bench-venv-loader with the peers: see docs/BENCHMARKS.md.)
Random uint16 tokens in documents of 200-4,000 tokens, written once as our shards, as
litdata chunks (its ``TokensLoader``) and as MDS samples of 2,049 tokens. Every reader
serves shuffled batches of 8 x 2,049 tokens from local disk (page cache), single process
and with 2 DataLoader workers; the ceiling is a numpy memmap window reader. Also: time to
first batch on a 1,000-shard dataset.
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
import torch
from torch.utils.data import DataLoader, IterableDataset

from storage.loader import Source, TokenDataset, TokenLoader
from storage.shards import encode_shard

SEQ = 2048
BATCH = 8


def make_tokens(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    docs, total = [], 0
    while total < n:
        length = int(rng.integers(200, 4000))
        docs.append(rng.integers(1, 32000, size=length).astype(np.uint16))
        total += length
    return docs


def write_ours(docs: list[np.ndarray], root: Path, shards: int) -> str:
    root.mkdir(parents=True)
    entries = []
    for s in range(shards):
        data, d, t, sha = encode_shard(docs[s::shards], np.dtype(np.uint16))
        (root / f"shard-{s:05d}.tfs").write_bytes(data)
        entries.append({"name": f"shard-{s:05d}.tfs", "num_docs": d, "num_tokens": t,
                        "num_bytes": len(data), "sha256": sha})
    (root / "index.json").write_text(json.dumps({"version": "bench", "shards": entries}))
    return str(root / "index.json")


class MemmapWindows(IterableDataset):
    """The ceiling: shuffled windows straight from one memmap, batched in the dataset."""

    def __init__(self, path: str, n_tokens: int) -> None:
        self.path, self.n = path, n_tokens

    def __iter__(self):
        data = np.memmap(self.path, dtype=np.uint16, mode="r", shape=(self.n,))
        starts = np.random.default_rng(0).permutation((self.n - 1) // SEQ) * SEQ
        for b in range(0, len(starts) - BATCH + 1, BATCH):
            yield torch.from_numpy(np.stack([data[s:s + SEQ + 1] for s in starts[b:b + BATCH]]).astype(np.int64))


def rate(loader, batches: int) -> float:
    it = iter(loader)
    next(it)
    t0 = time.perf_counter()
    n = 0
    for n, _ in enumerate(it, start=1):
        if n >= batches:
            break
    return n * BATCH * (SEQ + 1) / (time.perf_counter() - t0)


def _litdata_emit(item: tuple[str, int]):
    """One 1M-token piece of the corpus (module level: litdata pickles it to workers)."""
    path, i = item
    arr = np.load(path, mmap_mode="r")
    yield torch.from_numpy(np.asarray(arr[i << 20:(i + 1) << 20], dtype=np.int64))


def litdata_loader(docs: list[np.ndarray], tmp: Path, workers: int):
    from litdata import StreamingDataLoader, StreamingDataset, TokensLoader, optimize

    out = tmp / "litdata"
    if not out.exists():
        np.save(tmp / "all.npy", np.concatenate(docs))
        total = sum(len(d) for d in docs)
        optimize(fn=_litdata_emit, inputs=[(str(tmp / "all.npy"), i) for i in range((total >> 20) + 1)],
                 output_dir=str(out),
                 chunk_size=(SEQ + 1) * 1024, item_loader=TokensLoader(), num_workers=1, verbose=False)
    ds = StreamingDataset(input_dir=str(out), item_loader=TokensLoader(block_size=SEQ + 1), shuffle=True,
                          drop_last=True)
    return StreamingDataLoader(ds, batch_size=BATCH, num_workers=workers, drop_last=True)


def mds_loader(docs: list[np.ndarray], tmp: Path, workers: int):
    from streaming import MDSWriter, StreamingDataset

    out = tmp / "mds"
    if not out.exists():
        flat = np.concatenate(docs)
        with MDSWriter(out=str(out), columns={"tokens": "ndarray:uint16"}, size_limit=1 << 26) as writer:
            for s in range(0, len(flat) - SEQ - 1, SEQ):
                writer.write({"tokens": flat[s:s + SEQ + 1]})
    ds = StreamingDataset(local=str(out), shuffle=True, batch_size=BATCH)
    return DataLoader(ds, batch_size=BATCH, num_workers=workers)


def first_batch_seconds(tmp: Path) -> float:
    docs = make_tokens(1000 * 4000, seed=1)
    index = write_ours(docs, tmp / "thousand", 1000)
    t0 = time.perf_counter()
    next(iter(TokenLoader(TokenDataset([Source(index)], seq_len=SEQ, batch_size=BATCH, prefetch_depth=0))))
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=20_000_000)
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--peers", action="store_true", help="also litdata and MDS (in .bench-venv-loader)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    docs = make_tokens(args.tokens)
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        index = write_ours(docs, tmp / "ours", 32)
        flat = np.concatenate(docs)
        flat.tofile(tmp / "flat.bin")
        for workers in (0, 2):
            label = "1 process" if workers == 0 else "2 workers"
            ceiling = DataLoader(MemmapWindows(str(tmp / "flat.bin"), len(flat)), batch_size=None,
                                 num_workers=workers)
            results[f"memmap ceiling, {label}"] = rate(ceiling, args.batches)
            ours = TokenLoader(TokenDataset([Source(index)], seq_len=SEQ, batch_size=BATCH, seed=0,
                                            prefetch_depth=0), num_workers=workers)
            results[f"ours, {label}"] = rate(ours, args.batches)
            if args.peers:
                results[f"litdata TokensLoader, {label}"] = rate(litdata_loader(docs, tmp, workers), args.batches)
                results[f"mosaicml-streaming MDS, {label}"] = rate(mds_loader(docs, tmp, workers), min(args.batches, 100))
        results["time to first batch, 1,000 shards (s)"] = first_batch_seconds(tmp)
    sys.stdout.write(f"{len(flat):,} tokens, batches of {BATCH} x {SEQ + 1}, shuffled\n")
    for name, value in results.items():
        shown = f"{value:10.2f} s" if name.startswith("time") else f"{value / 1e6:10.1f} M tokens/s"
        sys.stdout.write(f"{name:<42} {shown}\n")
    sys.stdout.write(json.dumps(results) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
