"""Loader tokens/s from the page cache: ours vs a one-copy numpy memmap ceiling with the same
sample order, and vs mosaicml-streaming (MDS) and litdata.

    LITDATA_DISABLE_VERSION_CHECK=1 .bench-venv-loader/bin/python -m benchmarks.bench_loader --peers
    .venv/bin/python -m benchmarks.bench_loader --s3      # + the 50 ms S3 rows (moto, in .venv)

(`make bench-env` creates .bench-venv-loader with the peers: see docs/BENCHMARKS.md.)
Random uint16 tokens in documents of 200-4,000 tokens, each closed by EOS (id 0), written
once as our 32 shards, as one flat file for the ceiling, as litdata chunks (its
``TokensLoader``) and as MDS samples of 2,049 tokens. Batches of 8 x 2,049.

* The ceiling (``MemmapCeiling``): one ``np.memmap`` of the shards' tokens laid out in the
  epoch's shard order, read in exactly our sample order (asserted: its batches equal
  ours), each window copied once into the int64 batch; with ``eos_id`` it computes
  ``position_ids`` with the same function as ours (``storage.plan.position_ids``).
* Shuffles: "grouped" is our default (windows shuffled within groups of 4 of the 32
  shards, the groups in a shuffled shard order); "global" is every window of the epoch in
  one permutation (ours with ``buffer_shards=32``).
* Timing: a whole epoch, rate = tokens after the first batch / time after the first
  batch (the first batch is the time to first batch). Ours runs as a trainer runs it:
  ``TokenLoader``, default prefetch (depth 4) and the shard check on; each round uses a
  new ``ShardCache``, so every shard's sha256 check (once per process) falls inside the
  epoch ("first epoch": the prefetch thread checks the next group while this one is read,
  the first group is in the time to first batch); "next epoch" is a second epoch in the
  same process (shards checked already). 2 DataLoader workers: each worker is a process
  and checks the shards it reads (all of them) in its first epoch; "next epoch" there
  uses persistent workers. Peers are timed over ``--peer-batches`` batches.
* Rounds interleave the readers, the same rounds for every reader; best of ``--rounds`` and
  the median. Single process, also the median rate per second of the whole process's CPU
  time over the epoch, first batch included ("cpu"): on a machine shared with other jobs
  it moves far less than the wall clock, and it counts every thread (the prefetch
  thread's shard checks included; an earlier version counted the main thread only and
  hid them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import numpy as np
import torch
import xxhash
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from storage.cache import ShardCache
from storage.loader import Source, TokenDataset, TokenLoader
from storage.plan import position_ids
from storage.shards import HEADER_SIZE, decode_shard, encode_shard

SEQ = 2048
BATCH = 8
EOS = 0
SHARDS = 32


def make_tokens(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    docs, total = [], 0
    while total < n:
        length = int(rng.integers(200, 4000))
        docs.append(np.append(rng.integers(1, 32000, size=length - 1), EOS).astype(np.uint16))
        total += length
    return docs


def write_ours(docs: list[np.ndarray], root: Path, shards: int) -> str:
    root.mkdir(parents=True)
    entries = []
    for s in range(shards):
        data, d, t, sha = encode_shard(docs[s::shards], np.dtype(np.uint16))
        (root / f"shard-{s:05d}.tfs").write_bytes(data)
        entries.append({"name": f"shard-{s:05d}.tfs", "num_docs": d, "num_tokens": t, "num_bytes": len(data),
                        "sha256": sha, "xxh3_128": xxhash.xxh3_128(data[HEADER_SIZE:]).hexdigest()})
    (root / "index.json").write_text(json.dumps({"version": "bench", "shards": entries}))
    return str(root / "index.json")


def ours(index: str, buffer_shards: int, eos: bool, prefetch_depth: int = 4) -> TokenDataset:
    return TokenDataset([Source(index)], seq_len=SEQ, batch_size=BATCH, seed=0, buffer_shards=buffer_shards,
                        eos_id=EOS if eos else None, cache=ShardCache(), prefetch_depth=prefetch_depth)


def write_ceiling(dataset: TokenDataset, root: Path, path: Path) -> np.ndarray:
    """Writes the epoch-0 token stream (every group contiguous) to ``path``; returns the
    offset in it of every sample of ``dataset``'s plan, in plan order."""
    groups = dataset.groups(0)[0]
    with open(path, "wb") as fh:
        for group in groups:
            for name in group.shards:
                fh.write(decode_shard((root / name).read_bytes()).tokens.astype(np.uint16).tobytes())
    base = np.concatenate(([0], np.cumsum([g.total for g in groups])))
    plan = np.array(dataset.plan(0), dtype=np.int64).reshape(-1, 3)
    return base[plan[:, 1]] + plan[:, 2] * SEQ


class MemmapCeiling(IterableDataset):
    """The ceiling: windows at ``starts`` of one memmap, each copied once into the int64
    batch (batch b from worker b % W, as ours)."""

    def __init__(self, path: str, n_tokens: int, starts: np.ndarray, eos: bool) -> None:
        self.path, self.n, self.starts, self.eos = path, n_tokens, starts, eos

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info else (1, 0)
        data = np.memmap(self.path, dtype=np.uint16, mode="r", shape=(self.n,)).view(np.ndarray)  # slices as ours
        for b in range(worker, len(self.starts) // BATCH, workers):
            out = np.empty((BATCH, SEQ + 1), dtype=np.int64)
            for row, start in enumerate(self.starts[b * BATCH:(b + 1) * BATCH].tolist()):
                out[row] = data[start:start + SEQ + 1]
            if self.eos:
                yield {"tokens": torch.from_numpy(out), "position_ids": torch.from_numpy(position_ids(out, EOS))}
            else:
                yield {"tokens": torch.from_numpy(out)}


def epoch_rate(loader: Any, limit: Optional[int] = None) -> tuple[float, float, float]:
    """(tokens/s after the first batch, seconds to the first batch, tokens per second of
    the whole process's CPU time, first batch included) over one epoch (or ``limit``
    batches). The CPU rate is what other jobs on a shared machine disturb least; it counts
    every thread of this process (our prefetch thread's checks included), not the
    DataLoader's worker processes (used with 1 process only)."""
    c0 = time.process_time()
    t0 = time.perf_counter()
    it = iter(loader)
    first = next(it)
    tokens = first["tokens"].numel() if isinstance(first, dict) else first.numel()
    t1 = time.perf_counter()
    after = 0
    for n, batch in enumerate(it, start=1):
        after += batch["tokens"].numel() if isinstance(batch, dict) else batch.numel()
        if limit and n >= limit:
            break
    cpu = time.process_time() - c0
    return after / (time.perf_counter() - t1), t1 - t0, (tokens + after) / max(cpu, 1e-9)


def same_batches(a: Any, b: Any, count: int = 20) -> bool:
    for x, y, _ in zip(a, b, range(count)):
        if x.keys() != y.keys() or not all(torch.equal(x[k], y[k]) for k in x):
            return False
    return True


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


def readers(index: str, root: Path, tmp: Path, workers: int) -> dict[str, Callable[[], tuple[float, float, float]]]:
    """name -> one timed epoch; the ceilings are checked to give our batches."""
    out: dict[str, Callable[[], tuple[float, float, float]]] = {}
    for shuffle, buffer_shards in (("grouped", 4), ("global", SHARDS)):
        flat = tmp / f"ceiling-{shuffle}.bin"
        starts = write_ceiling(ours(index, buffer_shards, False), root, flat)
        for eos in (False, True):
            tag = f"{shuffle}{', eos_id' if eos else ''}"

            def ceiling(eos: bool = eos, starts: np.ndarray = starts, flat: Path = flat) -> DataLoader:
                return DataLoader(MemmapCeiling(str(flat), flat.stat().st_size // 2, starts, eos), batch_size=None,
                                  num_workers=workers)

            def first(eos: bool = eos, buffer_shards: int = buffer_shards) -> tuple[float, float, float]:
                return epoch_rate(TokenLoader(ours(index, buffer_shards, eos), num_workers=workers))

            def again(eos: bool = eos, buffer_shards: int = buffer_shards) -> tuple[float, float, float]:
                loader = TokenLoader(ours(index, buffer_shards, eos), num_workers=workers,
                                     persistent_workers=workers > 0)
                epoch_rate(loader)
                return epoch_rate(loader)

            if not same_batches(iter(ceiling()), iter(TokenLoader(ours(index, buffer_shards, eos)))):
                raise SystemExit(f"the ceiling's batches differ from ours ({tag})")
            out[f"memmap ceiling | {tag}"] = lambda ceiling=ceiling: epoch_rate(ceiling())
            if workers == 0:  # the same loop without DataLoader's per-batch machinery (TokenLoader skips it)
                out[f"memmap loop | {tag}"] = lambda ceiling=ceiling: epoch_rate(ceiling().dataset)
            out[f"ours, first epoch | {tag}"] = first
            out[f"ours, next epoch | {tag}"] = again
    return out


def s3_rows(tmp: Path, latency_s: float) -> dict[str, dict[str, float]]:
    """Data-wait with the shards on moto S3, ``latency_s`` added to every read, a consumer
    at 100,000 tokens/s; prefetch depth 4 (default) and 0; the check on."""
    import os
    import socket
    import urllib.request

    import boto3
    import fsspec

    import storage.cache as cache_mod

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1",
                       "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"})
    try:
        for _ in range(150):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}", timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        rng = np.random.default_rng(0)
        docs = [np.append(rng.integers(1, 30000, size=int(rng.integers(500, 3000)) - 1), EOS).astype(np.uint16)
                for _ in range(300)]
        write_ours(docs, tmp / "s3", 5)
        boto3.client("s3").create_bucket(Bucket="bench")
        fsspec.filesystem("s3").put(str(tmp / "s3"), "s3://bench/v", recursive=True)
        real_open = cache_mod.fsspec.open

        def slow_open(*args: Any, **kwargs: Any) -> Any:
            time.sleep(latency_s)
            return real_open(*args, **kwargs)

        cache_mod.fsspec.open = slow_open
        rows = {}
        for depth in (4, 0):
            cache = ShardCache(hot_dir=str(tmp / f"hot{depth}"))
            loader = TokenLoader(TokenDataset([Source("s3://bench/v/index.json")], seq_len=SEQ, batch_size=BATCH,
                                              cache=cache, buffer_shards=1, prefetch_depth=depth, eos_id=EOS))
            for batch in loader:
                time.sleep(batch["tokens"].numel() / 100_000)
            rows[f"prefetch depth {depth}"] = {"data_wait": loader.stats.data_wait_fraction,
                                               "first_batch_s": loader.stats.first_batch_s,
                                               "ready": cache.stats.ready, "waited": cache.stats.waited,
                                               "cold": cache.stats.cold}
        cache_mod.fsspec.open = real_open
        return rows
    finally:
        server.terminate()
        server.wait(timeout=10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=100_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", default="0,2", help="DataLoader worker counts to run")
    parser.add_argument("--peers", action="store_true", help="also litdata and MDS (in .bench-venv-loader)")
    parser.add_argument("--peer-batches", type=int, default=300)
    parser.add_argument("--s3", action="store_true", help="the S3 + latency rows (needs moto: .venv)")
    parser.add_argument("--latency", type=float, default=0.05)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    docs = make_tokens(args.tokens)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        index = write_ours(docs, tmp / "ours", SHARDS)
        for workers in (int(w) for w in args.workers.split(",")):
            label = "1 process" if workers == 0 else f"{workers} workers"
            runs = readers(index, tmp / "ours", tmp, workers)
            if args.peers:
                runs["litdata TokensLoader | own global shuffle"] = \
                    lambda w=workers: epoch_rate(litdata_loader(docs, tmp, w), args.peer_batches)
                runs["mosaicml-streaming MDS | own shuffle"] = \
                    lambda w=workers: epoch_rate(mds_loader(docs, tmp, w), min(args.peer_batches, 100))
            times: dict[str, list[tuple[float, float, float]]] = {name: [] for name in runs}
            for _ in range(args.rounds):
                for name, run in runs.items():
                    times[name].append(run())
            for name, values in times.items():
                rates = [r for r, _, _ in values]
                results[f"{label} | {name}"] = {"best": max(rates), "median": statistics.median(rates),
                                                "first_batch_s": statistics.median(f for _, f, _ in values),
                                                "cpu_median": statistics.median(c for _, _, c in values)}
        results["time to first batch, 1,000 shards (s)"] = first_batch_seconds(tmp)
        if args.s3:
            results["s3"] = s3_rows(tmp, args.latency)
    sys.stdout.write(f"{sum(len(d) for d in docs):,} tokens, batches of {BATCH} x {SEQ + 1}, {args.rounds} rounds "
                     "(M tokens/s best / median; x = ours / ceiling, same shuffle and eos setting, best / median;"
                     " cpu = the same ratio of median whole-process CPU rates, first batch included, 1 process; the loop = the"
                     " ceiling's dataset iterated without DataLoader)\n")
    for name, value in results.items():
        if not isinstance(value, dict) or "best" not in value:
            continue
        label, reader, setting = name.split(" | ")
        ceiling = results.get(f"{label} | memmap ceiling | {setting}")
        ratio = (f"  {value['best'] / ceiling['best']:.2f}x / {value['median'] / ceiling['median']:.2f}x"
                 if ceiling and reader.startswith("ours") else "")
        if ratio and label == "1 process":
            loop = results[f"{label} | memmap loop | {setting}"]
            ratio += (f"  cpu {value['cpu_median'] / ceiling['cpu_median']:.2f}x"
                      f" (vs the loop {value['cpu_median'] / loop['cpu_median']:.2f}x)")
        sys.stdout.write(f"{label:<10} {reader:<26} {setting:<24} {value['best'] / 1e6:7.1f} / "
                         f"{value['median'] / 1e6:7.1f}{ratio}\n")
    sys.stdout.write(json.dumps(results) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
