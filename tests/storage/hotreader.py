"""One loader process for the shared hot cache tests (run as ``python -m tests.storage.hotreader``).

Reads a whole epoch of ``index_url`` through a ``ShardCache`` on ``hot_dir`` with a byte
budget, then writes the windows it got and its cache counters to ``out`` as JSON. With
``--shard NAME`` it only fetches that shard (after waiting for ``--start-at``, a wall-clock
time, so that several processes ask at the same moment).
"""

from __future__ import annotations

import argparse
import json
import time

from storage.cache import ShardCache
from storage.loader import Source, TokenDataset, TokenLoader


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("index_url")
    parser.add_argument("hot_dir")
    parser.add_argument("out")
    parser.add_argument("--budget", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shard", default="")
    parser.add_argument("--start-at", type=float, default=0.0)
    args = parser.parse_args()
    cache = ShardCache(hot_dir=args.hot_dir, budget_bytes=args.budget, full_wait_s=60)
    while time.time() < args.start_at:
        time.sleep(0.001)
    windows: list[list[int]] = []
    if args.shard:
        cache.local_path(args.index_url, args.shard)
    else:
        dataset = TokenDataset([Source(args.index_url)], seq_len=16, batch_size=2, seed=args.seed, cache=cache,
                               buffer_shards=1, prefetch_depth=2)
        windows = [row.tolist() for batch in TokenLoader(dataset) for row in batch["tokens"]]
    stats = cache.stats
    with open(args.out, "w") as fh:
        json.dump({"windows": windows, "misses": stats.misses, "hits": stats.hits,
                   "evictions": stats.evictions, "verified": stats.verified}, fh)


if __name__ == "__main__":
    main()
