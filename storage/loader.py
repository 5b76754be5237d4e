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
  tokens are served (``storage.cache``: size, header, checksum (xxh3_128, or sha256 when
  asked or the index has no xxh3_128), dtype, token ids below the vocabulary), local
  shards as well as downloaded ones. ``on_corrupt="skip"`` drops the windows of a group
  with a damaged, truncated or missing shard, whatever the damage (batches get shorter;
  ``corrupt_shards`` names them); the default raises the ``ShardError`` naming the shard.
* Prefetch: when the reader enters a group, a background thread per dataset is handed the
  stream's next ``prefetch_depth`` shards (by default the next group): it downloads and
  checks them while this group is read. The group a stream leaves is unpinned.
* A batch is one ``int64`` array; each window is copied into it once from the shard's
  memory map; ``position_ids`` are whole-batch numpy steps (``storage.plan.position_ids``).
* Sources whose indexes record different tokenizers (sha256) are refused: their ids mean
  different things.
* Epoch accounting (``epoch_tokens``): a rank's windows and tokens in an epoch, or in its
  first n batches (what a resumed state has consumed), and how many of those tokens are
  repeats of upsampled documents, by the shards' ``repeat_tokens`` in ``index.json``.
* Ranks take every R-th sample and the same number each (the remainder is dropped), so
  every rank gets the same number of batches. Inside a rank, DataLoader worker w makes
  batches w, w+W, w+2W...: the DataLoader hands batches back in exactly the rank order
  whatever W is, so ``state_dict()`` (batches consumed) resumes exactly, with any W.
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from storage.cache import ShardCache
from storage.plan import EpochTokens, Group, Source, check_same_tokenizer, mix_schedule, position_ids, \
    shard_permutation, window_locations, window_permutation, window_repeat_shares, windows_in
from storage.shards import ShardError

__all__ = ["EpochTokens", "Group", "LoaderStats", "Source", "TokenDataset", "TokenLoader", "mix_schedule",
           "position_ids", "shard_permutation", "window_permutation", "windows_in"]

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
                              tuple(int(s["num_tokens"]) for s in picked[g:g + self.buffer_shards]),
                              tuple(int(s.get("repeat_tokens", 0)) for s in picked[g:g + self.buffer_shards]))
                        for g in range(0, len(picked), self.buffer_shards)])
        return out

    def plan_rows(self, epoch: int) -> np.ndarray:
        """Every sample of the epoch for this rank: (samples, 3) int64 rows of (stream,
        group, window in group)."""
        per_stream = []
        for stream, groups in enumerate(self.groups(epoch)):
            counts = [windows_in(g.total, self.seq_len) if self.pack == "concat" else len(self._doc_windows(g))
                      for g in groups]
            windows = [window_permutation(n, self.seed, epoch, stream, g) for g, n in enumerate(counts)]
            per_stream.append(np.stack([np.full(sum(counts), stream), np.repeat(np.arange(len(groups)), counts),
                                        np.concatenate(windows) if windows else np.zeros(0, np.int64)],
                                       axis=1).astype(np.int64))
        if len(per_stream) == 1:
            mixed = per_stream[0]
        else:
            order = np.array(mix_schedule([len(p) for p in per_stream], [s.weight for s in self.sources]),
                             dtype=np.int64).reshape(-1, 2)
            mixed = np.zeros((len(order), 3), dtype=np.int64)
            for stream, rows in enumerate(per_stream):
                mine = order[:, 0] == stream
                mixed[mine] = rows[order[mine, 1]]
        per_rank = len(mixed) // self.world_size
        return mixed[self.rank::self.world_size][:per_rank]

    def plan(self, epoch: int) -> list[tuple[int, int, int]]:
        """``plan_rows`` as (stream, group, window in group) tuples."""
        return [tuple(row) for row in self.plan_rows(epoch).tolist()]

    def __len__(self) -> int:
        """Full batches per rank in the current epoch."""
        return len(self.plan_rows(self.epoch)) // self.batch_size

    def epoch_tokens(self, epoch: Optional[int] = None, batches: Optional[int] = None) -> EpochTokens:
        """This rank's windows and tokens in epoch ``epoch`` (default: the current one), in
        its first ``batches`` batches (default: all ``len(self)``; a state's ``batches``
        gives what a resumed run has consumed), and the repeat tokens among them
        (``EpochTokens``). Planned, not read: a pure function of (seed, epoch, indexes);
        windows of a group skipped as damaged while reading are still counted."""
        epoch = self.epoch if epoch is None else epoch
        plan = self.plan_rows(epoch)
        full = len(plan) // self.batch_size
        if batches is not None and (isinstance(batches, bool) or not isinstance(batches, int) or batches < 0):
            raise ValueError(f"batches must be an integer >= 0, got {batches!r}")
        batches = full if batches is None else min(batches, full)
        rows, groups = plan[:batches * self.batch_size], self.groups(epoch)
        if self.pack == "concat":
            shares = window_repeat_shares(window_locations(rows, groups, self.seq_len), groups)
            targets = np.full(len(rows), self.seq_len, dtype=np.float64)
        else:
            found = [(groups[s][g], self._doc_windows(groups[s][g])[w]) for s, g, w in rows.tolist()]
            shares = np.array([group.repeat_share(w[0]) for group, w in found], dtype=np.float64)
            targets = np.array([min(self.seq_len, w[3] - w[2] - 1) for _, w in found], dtype=np.float64)
        return EpochTokens(epoch=epoch, batches=batches, samples=len(rows), tokens=int(targets.sum()),
                           repeat_tokens=int(round(float((targets * shares).sum()))))

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
    def _resolve(self, group: Group) -> tuple[list[np.ndarray], list[int]]:
        """The group's shard token arrays (memory maps, checked) and their cumulative
        offsets. The shards are pinned (never evicted while read) until ``_release``; if one
        fails, the ones pinned already are released before the error goes up."""
        url = self.sources[group.stream].index_url
        pinned: list[str] = []
        try:
            for name in group.shards:
                pinned.append(self.cache.local_path(url, name, pin=True))
            # plain ndarray views of the maps: slicing an np.memmap runs Python code (__array_finalize__)
            arrays = [self.cache.tokens(url, name).view(np.ndarray) for name in group.shards]
        except ShardError:
            self.cache.unpin(pinned)
            raise
        return arrays, [0] + list(itertools.accumulate(group.tokens))

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

    def _fill_across(self, row: np.ndarray, arrays: list[np.ndarray], cum: list[int], i: int, lo: int) -> None:
        """A window that starts ``lo`` tokens into shard ``i`` of its group and runs on
        into the next shards."""
        filled = 0
        while filled < len(row):
            take = min(len(row) - filled, int(cum[i + 1] - cum[i]) - lo)
            row[filled:filled + take] = arrays[i][lo:lo + take]
            filled += take
            i, lo = i + 1, 0

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

    def _enter(self, key: tuple[int, int], groups: list[list[Group]], resolved: dict[tuple[int, int], Any],
               prefetchers: dict[str, Any]) -> Any:
        """The first sample of a group: its stream's previous group is unpinned (a stream's
        samples come group after group, so it is not read again), the prefetcher is
        given the next ``prefetch_depth`` shards of the stream (the next group, while this
        one is read), and the group is resolved."""
        stream, group = key  # (a damaged group's None stays: it is not tried again this epoch)
        self._release({k: resolved.pop(k) for k in [k for k, v in resolved.items() if k[0] == stream and v]}, groups)
        url = self.sources[stream].index_url
        if url in prefetchers:
            later = groups[stream][group + 1:group + 1 + self.prefetch_depth]
            prefetchers[url].ahead([name for g in later for name in g.shards][:self.prefetch_depth])
        return self._resolved(key, groups, resolved)

    def _batch(self, rows: list[list[int]], keys: list[tuple[int, int]], groups: list[list[Group]],
               resolved: dict[tuple[int, int], Any], prefetchers: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Concat packing: ``rows`` of ``window_locations``; each window copied once from
        its shard's map into the int64 batch."""
        width = self.seq_len + 1
        out = np.empty((len(rows), width), dtype=np.int64)
        last = -1
        for k, (number, shard, lo) in enumerate(rows):
            if number != last:
                last, key = number, keys[number]
                found = resolved[key] if key in resolved else self._enter(key, groups, resolved, prefetchers)
                if found is None:  # a damaged shard (skip mode): the batch without its group's windows
                    return self._batch([r for r in rows if resolved.get(keys[r[0]], ()) is not None], keys,
                                       groups, resolved, prefetchers)
                arrays, cum = found
            if shard >= 0:  # the common case: the window lies in one shard
                out[k] = arrays[shard][lo:lo + width]  # the one copy (and widening to int64)
            else:
                self._fill_across(out[k], arrays, cum, -1 - shard, lo)
        if self.eos_id is None:  # positions are just 0..seq_len: not worth shipping
            return {"tokens": torch.from_numpy(out)}
        return {"tokens": torch.from_numpy(out), "position_ids": torch.from_numpy(position_ids(out, self.eos_id))}

    def _document_batch(self, samples: list[list[int]], keys: list[tuple[int, int]], groups: list[list[Group]],
                        resolved: dict[tuple[int, int], Any], prefetchers: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Document packing: ``samples`` of the plan; padded windows inside one document,
        with mask and positions."""
        rows = []
        for stream, group, window in samples:
            key = (stream, group)
            found = resolved[key] if key in resolved else self._enter(key, groups, resolved, prefetchers)
            if found is not None:  # None: a damaged shard, its windows are dropped
                rows.append(self._doc_window(groups[stream][group], window, found[0]))
        if not rows:
            empty = torch.zeros((0, self.seq_len + 1), dtype=torch.int64)
            return {"tokens": empty, "position_ids": empty.clone(), "mask": empty.bool()}
        return {k: torch.stack([r[k] for r in rows]) for k in rows[0]}

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        """Whole batches (the loader uses ``batch_size=None``): no per-sample collation."""
        from storage.prefetch import Prefetcher

        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info else (1, 0)
        plan = self.plan_rows(self.epoch)
        groups = self.groups(self.epoch)
        keys = [(stream, g) for stream, stream_groups in enumerate(groups) for g in range(len(stream_groups))]
        if self.pack == "concat":
            table, make = window_locations(plan, groups, self.seq_len), self._batch
        else:
            table, make = plan, self._document_batch
        batches = len(plan) // self.batch_size
        prefetchers = {s.index_url: Prefetcher(self.cache, s.index_url, self.prefetch_depth)
                       for s in self.sources} if self.prefetch_depth else {}
        resolved: dict[tuple[int, int], Any] = {}
        try:
            # The DataLoader takes batch k from worker k % W, so worker w makes batches
            # start + w, start + w + W, ...: the rank order is kept whatever W is.
            size = self.batch_size
            for batch in range(self.start_batch + worker, batches, workers):
                yield make(table[batch * size:(batch + 1) * size].tolist(), keys, groups, resolved, prefetchers)
        finally:
            self._release(resolved, groups)
            for prefetcher in prefetchers.values():
                prefetcher.close()


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

    def _direct(self) -> bool:
        """True when DataLoader's own iterator would add nothing: one process, the default
        conversion (the batches are tensors already) and no pinning. Its single-process
        iterator costs ~20 us a batch (a profiler record, the conversion) for nothing:
        ~30% of a 0-worker epoch's CPU from the page cache (docs/BENCHMARKS.md)."""
        return (self.num_workers == 0 and not self.pin_memory
                and self.collate_fn is torch.utils.data._utils.collate.default_convert)

    def __iter__(self) -> Iterator[Any]:
        clock, stats = time.perf_counter, self.stats
        self.batches = self.dataset.start_batch
        iterator = iter(self.dataset) if self._direct() else super().__iter__()
        last = clock()
        while True:
            t0 = clock()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            now = clock()
            if stats.batches == 0:
                stats.first_batch_s = now - t0
            else:
                wait = now - t0
                stats.wait_s += wait
                stats.total_s += now - last
                if wait > stats.max_wait_s:
                    stats.max_wait_s = wait
            stats.batches += 1
            stats.tokens += batch["tokens"].numel()
            last = now
            self.batches += 1
            if stats.batches % self.log_every == 0:
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
