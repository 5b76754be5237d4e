"""A resumable torch ``IterableDataset`` over token-shard datasets (``index.json``).

The sample order is a pure function of (seed, epoch, the indexes): nothing about it
depends on timing, ranks' speed or the number of DataLoader workers.

* Shard order: a seeded permutation of each dataset's shards per epoch.
* Windows: shards are taken ``buffer_shards`` at a time (a "group"); the group's tokens
  are one stream cut into windows of ``seq_len + 1`` tokens at stride ``seq_len``
  (windows cross document boundaries; ``position_ids`` restart after every EOS); the
  windows of a group are permuted with their own seed. Planning needs only the token
  counts in ``index.json``, not the shards.
* Several datasets are mixed by a smooth weighted round robin; an epoch ends when the
  first dataset runs out of windows.
* ``pack="document"``: windows never cross a document; the last window of a document
  is padded with ``pad_id`` and a ``mask`` marks the real tokens; ``position_ids``
  count from the document's start (planning reads the shards' document indexes by range).
* Every shard is checked in full against ``index.json`` once per process before its
  tokens are served (``storage.cache``: size, header, sha256, dtype, token ids below the
  vocabulary), local shards as well as downloaded ones. ``on_corrupt="skip"`` drops the
  windows of a group with a damaged, truncated or missing shard, whatever the damage
  (batches get shorter; ``corrupt_shards`` names them); the default raises the
  ``ShardError`` naming the shard.
* Sources whose indexes record different tokenizers (sha256) are refused: their ids mean
  different things.
* Ranks take every R-th sample and the same number each (the remainder is dropped), so
  every rank gets the same number of batches. Inside a rank, DataLoader worker w makes
  batches w, w+W, w+2W...: the DataLoader hands batches back in exactly the rank order
  whatever W is, so ``state_dict()`` (batches consumed) resumes exactly, with any W.
"""

from __future__ import annotations

import bisect
import itertools
import logging
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from storage.cache import ShardCache
from storage.plan import Group, Source, check_same_tokenizer, mix_schedule, shard_permutation, \
    window_permutation, windows_in
from storage.shards import ShardError

__all__ = ["Group", "LoaderStats", "Source", "TokenDataset", "TokenLoader", "mix_schedule", "shard_permutation",
           "window_permutation", "windows_in"]

_LOGGER = logging.getLogger(__name__)


class TokenDataset(IterableDataset):
    """Batches of windows of ``seq_len + 1`` tokens: ``{"tokens"}`` int64, plus
    ``position_ids`` restarting after each EOS when ``eos_id`` is given (concat packing),
    or ``mask`` and ``position_ids`` (document packing)."""

    def __init__(self, sources: Sequence[Source], seq_len: int, batch_size: int, seed: int = 0,
                 buffer_shards: int = 4, rank: Optional[int] = None, world_size: Optional[int] = None,
                 cache: Optional[ShardCache] = None, eos_id: Optional[int] = None,
                 prefetch_depth: int = 4, pack: str = "concat", pad_id: int = 0,
                 on_corrupt: str = "error") -> None:
        if seq_len <= 0 or batch_size <= 0 or buffer_shards <= 0:
            raise ValueError("seq_len, batch_size and buffer_shards must be > 0")
        if pack not in ("concat", "document"):
            raise ValueError(f"pack must be concat or document, got {pack!r}")
        if on_corrupt not in ("error", "skip"):
            raise ValueError(f"on_corrupt must be error or skip, got {on_corrupt!r}")
        self.pack = pack
        self.pad_id = pad_id
        self.on_corrupt = on_corrupt
        self.corrupt_shards: set[str] = set()  # skipped under on_corrupt="skip"
        self.sources = list(sources)
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.seed = seed
        self.buffer_shards = buffer_shards
        if rank is None or world_size is None:
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                rank, world_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
            else:
                rank, world_size = 0, 1
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world size {world_size}")
        self.rank, self.world_size = rank, world_size
        self.cache = cache or ShardCache()
        self.indexes = [self.cache.read_index(s.index_url) for s in self.sources]
        check_same_tokenizer(self.sources, self.indexes)
        self.eos_id = eos_id
        self.prefetch_depth = prefetch_depth
        dtypes = {idx.get("dtype") for idx in self.indexes}
        self.bytes_per_token = 4 if "uint32" in dtypes else 2
        self.epoch = 0
        self.start_batch = 0

    # --- the plan: pure functions of (seed, epoch, indexes) ---------------------------------
    def groups(self, epoch: int) -> list[list[Group]]:
        out = []
        for stream, index in enumerate(self.indexes):
            shards = index["shards"]
            order = shard_permutation(len(shards), self.seed, epoch, stream)
            picked = [shards[i] for i in order]
            out.append([Group(stream, tuple(s["name"] for s in picked[g:g + self.buffer_shards]),
                              tuple(int(s["num_tokens"]) for s in picked[g:g + self.buffer_shards]))
                        for g in range(0, len(picked), self.buffer_shards)])
        return out

    def plan(self, epoch: int) -> list[tuple[int, int, int]]:
        """Every sample of the epoch for this rank: (stream, group, window in group)."""
        per_stream = []
        for groups in self.groups(epoch):
            samples = []
            for g, group in enumerate(groups):
                n = (windows_in(group.total, self.seq_len) if self.pack == "concat"
                     else len(self._doc_windows(group)))
                samples += [(g, int(w)) for w in window_permutation(n, self.seed, epoch, group.stream, g)]
            per_stream.append(samples)
        weights = [s.weight for s in self.sources]
        mixed = [(s, *per_stream[s][i]) for s, i in mix_schedule([len(p) for p in per_stream], weights)]
        per_rank = len(mixed) // self.world_size
        return mixed[self.rank::self.world_size][:per_rank]

    def __len__(self) -> int:
        """Full batches per rank in the current epoch."""
        return len(self.plan(self.epoch)) // self.batch_size

    # --- resume ---------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.start_batch = 0

    def state_dict(self, batches_consumed: int) -> dict[str, int]:
        return {"epoch": self.epoch, "batches": batches_consumed, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state.get("seed", self.seed) != self.seed:
            raise ValueError(f"state is for seed {state['seed']}, this dataset uses {self.seed}")
        self.epoch = int(state["epoch"])
        self.start_batch = int(state["batches"])

    # --- document-aware packing -------------------------------------------------------------
    def _doc_windows(self, group: Group) -> list[tuple[int, int, int]]:
        """(shard in group, first token of the document in the shard, start in the document,
        length of the document) of every window that stays inside one document."""
        key = (group.stream, group.shards)
        cache = self.__dict__.setdefault("_doc_window_cache", {})
        if key in cache:
            return cache[key]
        url = self.sources[group.stream].index_url
        out = []
        for i, name in enumerate(group.shards):
            try:
                bounds = self.cache.doc_index(url, name)
            except ShardError as exc:
                if self.on_corrupt == "error":
                    raise
                self._skip(group, exc)
                out = []  # the whole group is dropped, as in concat packing
                break
            for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
                length = hi - lo
                for start in range(0, max(length - 1, 0), self.seq_len):
                    out.append((i, lo, start, length))
        cache[key] = out
        return out

    def _doc_window(self, group: Group, window: int, arrays: list[np.ndarray]) -> dict[str, torch.Tensor]:
        shard, doc_start, start, length = self._doc_windows(group)[window]
        tokens = arrays[shard]
        take = min(self.seq_len + 1, length - start)
        out = np.full(self.seq_len + 1, self.pad_id, dtype=np.int64)
        out[:take] = tokens[doc_start + start:doc_start + start + take]
        mask = np.zeros(self.seq_len + 1, dtype=bool)
        mask[:take] = True
        positions = np.arange(start, start + self.seq_len + 1, dtype=np.int64)
        return {"tokens": torch.from_numpy(out), "position_ids": torch.from_numpy(positions),
                "mask": torch.from_numpy(mask)}

    # --- reading --------------------------------------------------------------------------
    def _positions(self, tokens: np.ndarray) -> np.ndarray:
        if self.eos_id is None:
            return np.arange(len(tokens), dtype=np.int64)
        ends = np.flatnonzero(tokens == self.eos_id) + 1  # a new document starts after EOS
        positions = np.arange(len(tokens), dtype=np.int64)
        starts = np.zeros(len(tokens), dtype=np.int64)
        starts[ends[ends < len(tokens)]] = ends[ends < len(tokens)]
        return positions - np.maximum.accumulate(starts)

    def _resolve(self, group: Group) -> tuple[list[np.ndarray], list[int]]:
        """The group's shard token arrays (memory maps, checked) and their cumulative
        offsets. The shards are pinned (never evicted while read) until ``_release``; if one
        fails, the ones pinned already are released before the error goes up."""
        url = self.sources[group.stream].index_url
        pinned: list[str] = []
        try:
            for name in group.shards:
                pinned.append(self.cache.local_path(url, name, pin=True))
            arrays = [self.cache.tokens(url, name) for name in group.shards]
        except ShardError:
            self.cache.unpin(pinned)
            raise
        return arrays, [0] + list(itertools.accumulate(group.tokens))  # a few ints: bisect beats numpy

    def _skip(self, group: Group, exc: Exception) -> None:
        _LOGGER.error("skipping the windows of shards %s: %s", ", ".join(group.shards), exc)
        self.corrupt_shards.update(group.shards)

    def _release(self, resolved: dict[tuple[int, int], Any], groups: list[list[Group]]) -> None:
        for (stream, group), value in resolved.items():
            if value is None:
                continue
            url = self.sources[stream].index_url
            self.cache.unpin([self.cache.path_of(url, n) for n in groups[stream][group].shards])
        resolved.clear()

    def _fill(self, row: np.ndarray, resolved: tuple[list[np.ndarray], list[int]], window: int) -> None:
        arrays, cum = resolved
        start = window * self.seq_len
        stop = start + self.seq_len + 1
        i = bisect.bisect_right(cum, start) - 1
        if stop <= cum[i + 1]:  # the common case: the window lies in one shard
            row[:] = arrays[i][start - cum[i]:stop - cum[i]]
            return
        filled = 0
        while filled < len(row):
            lo = start + filled - cum[i]
            take = min(len(row) - filled, int(cum[i + 1] - cum[i]) - lo)
            row[filled:filled + take] = arrays[i][lo:lo + take]
            filled += take
            i += 1

    def _resolved(self, key: tuple[int, int], groups: list[list[Group]],
                  resolved: dict[tuple[int, int], Any]) -> Any:
        """The resolved group, or None when one of its shards is damaged (skip mode)."""
        if key not in resolved:
            group = groups[key[0]][key[1]]
            try:
                resolved[key] = self._resolve(group)
            except ShardError as exc:
                if self.on_corrupt == "error":
                    raise
                resolved[key] = None
                self._skip(group, exc)
        return resolved[key]

    def _batch(self, samples: list[tuple[int, int, int]], groups: list[list[Group]],
               resolved: dict[tuple[int, int], Any]) -> dict[str, torch.Tensor]:
        if self.pack == "document":
            rows = []
            for s, g, w in samples:
                found = self._resolved((s, g), groups, resolved)
                if found is not None:  # None: a damaged shard, its windows are dropped
                    rows.append(self._doc_window(groups[s][g], w, found[0]))
            if not rows:
                empty = torch.zeros((0, self.seq_len + 1), dtype=torch.int64)
                return {"tokens": empty, "position_ids": empty.clone(), "mask": empty.bool()}
            return {k: torch.stack([r[k] for r in rows]) for k in rows[0]}
        out = np.empty((len(samples), self.seq_len + 1), dtype=np.int64)
        kept = 0
        for stream, group, window in samples:
            found = self._resolved((stream, group), groups, resolved)
            if found is None:
                continue  # the group has a damaged shard: its windows are dropped
            self._fill(out[kept], found, window)
            kept += 1
        out = out[:kept]
        if self.eos_id is None:  # positions are just 0..seq_len: not worth shipping
            return {"tokens": torch.from_numpy(out)}
        positions = torch.from_numpy(np.stack([self._positions(row) for row in out]))
        return {"tokens": torch.from_numpy(out), "position_ids": positions}

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        """Whole batches (the loader uses ``batch_size=None``): no per-sample collation."""
        from storage.prefetch import Prefetcher

        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info else (1, 0)
        plan = self.plan(self.epoch)
        groups = self.groups(self.epoch)
        batches = len(plan) // self.batch_size
        prefetchers = {s.index_url: Prefetcher(self.cache, s.index_url, self.prefetch_depth)
                       for s in self.sources} if self.prefetch_depth else {}
        resolved: dict[tuple[int, int], Any] = {}
        try:
            # The DataLoader takes batch k from worker k % W, so worker w makes batches
            # start + w, start + w + W, ...: the rank order is kept whatever W is.
            for batch in range(self.start_batch + worker, batches, workers):
                samples = plan[batch * self.batch_size:(batch + 1) * self.batch_size]
                if prefetchers and (batch - self.start_batch - worker) % (8 * workers) == 0:
                    # every 8 of this worker's batches: queue the shards of the next ones
                    self._prefetch(prefetchers, groups, plan, (batch + workers) * self.batch_size,
                                   16 * workers * self.batch_size)
                needed = {(stream, group) for stream, group, _ in samples}
                stale = [key for key in resolved if key not in needed]
                if stale:  # unpin the groups this batch does not read
                    self._release({key: resolved.pop(key) for key in stale}, groups)
                yield self._batch(samples, groups, resolved)
        finally:
            self._release(resolved, groups)
            for prefetcher in prefetchers.values():
                prefetcher.close()

    def _prefetch(self, prefetchers: dict[str, Any], groups: list[list[Group]],
                  plan: list[tuple[int, int, int]], start: int, span: int) -> None:
        """Queue the shards of the next ``span`` samples."""
        upcoming: dict[str, list[str]] = {url: [] for url in prefetchers}
        for stream, group, _ in plan[start:start + span]:
            url = self.sources[stream].index_url
            for name in groups[stream][group].shards:
                if name not in upcoming[url]:
                    upcoming[url].append(name)
        for url, names in upcoming.items():
            prefetchers[url].ahead(names)


@dataclass
class LoaderStats:
    """Time the consumer waited for data vs total time between its requests."""

    wait_s: float = 0.0
    total_s: float = 0.0
    batches: int = 0
    tokens: int = 0
    first_batch_s: float = 0.0  # time to first batch, kept out of the steady-state fraction
    max_wait_s: float = 0.0

    @property
    def data_wait_fraction(self) -> float:
        return self.wait_s / self.total_s if self.total_s else 0.0


class TokenLoader(DataLoader):
    """A DataLoader that counts the batches it hands out (exact resume) and measures the
    data-wait fraction (``stats``)."""

    def __init__(self, dataset: TokenDataset, **kwargs: Any) -> None:
        self.log_every = kwargs.pop("log_every", 1000)
        super().__init__(dataset, batch_size=None, **kwargs)  # the dataset yields whole batches
        self.batches = dataset.start_batch
        self.stats = LoaderStats()

    def __iter__(self) -> Iterator[Any]:
        import time

        self.batches = self.dataset.start_batch
        iterator = super().__iter__()
        last = time.perf_counter()
        while True:
            t0 = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            now = time.perf_counter()
            if self.stats.batches == 0:
                self.stats.first_batch_s = now - t0
            else:
                self.stats.wait_s += now - t0
                self.stats.total_s += now - last
                self.stats.max_wait_s = max(self.stats.max_wait_s, now - t0)
            self.stats.batches += 1
            self.stats.tokens += int(batch["tokens"].numel())
            last = now
            self.batches += 1
            if self.stats.batches % self.log_every == 0:
                self.log_stats()
            yield batch

    def log_stats(self) -> None:
        cache = self.dataset.cache.stats
        _LOGGER.info("loader: %d batches, %d tokens, data-wait %.2f%%, first batch %.3fs, "
                     "cache hit rate %.2f, %.1f MB fetched for %.1f MB consumed",
                     self.stats.batches, self.stats.tokens, 100 * self.stats.data_wait_fraction,
                     self.stats.first_batch_s, cache.hit_rate, cache.bytes_fetched / 1e6,
                     self.stats.tokens * self.dataset.bytes_per_token / 1e6)

    def state_dict(self) -> dict[str, int]:
        return self.dataset.state_dict(self.batches)

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.dataset.load_state_dict(state)
        self.batches = self.dataset.start_batch
