"""The hot-tier shard cache: verified local copies under a byte budget, LRU, pinned shards.

Shards of a local dataset version are read in place. Remote ones (s3://, https://, ...)
are downloaded to a temporary name in the hot directory, checked against the sha256 in
``index.json`` and renamed; when the cache is over its byte budget the least recently
used shards that are not pinned are deleted first. Downloads retry with exponential
backoff and jitter. Shards are opened as read-only memory maps of the token payload.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Optional

import fsspec
import numpy as np

from storage.shards import HEADER_SIZE, ShardError, _HEADER

_LOGGER = logging.getLogger(__name__)


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    bytes_fetched: int = 0
    evictions: int = 0
    retries: int = 0

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class CacheFullError(RuntimeError):
    """The byte budget cannot hold the shard next to the pinned ones."""


def _is_local(url: str) -> bool:
    return fsspec.core.split_protocol(url)[0] in (None, "file", "local")


@dataclass
class ShardCache:
    hot_dir: str = field(default_factory=lambda: os.path.join(tempfile.gettempdir(), "tokenfactory-hot"))
    budget_bytes: int = 0  # 0: no limit
    verify: bool = True
    retries: int = 4
    backoff_s: float = 0.2

    def __post_init__(self) -> None:
        self.stats = CacheStats()
        self._lru: OrderedDict[str, int] = OrderedDict()  # local path -> bytes
        self._pins: dict[str, int] = {}
        self._maps: dict[str, np.ndarray] = {}
        self._indexes: dict[str, dict[str, Any]] = {}
        self._inflight: dict[str, threading.Event] = {}
        self._reserved = 0
        self._lock = threading.Lock()
        os.makedirs(self.hot_dir, exist_ok=True)
        self._remove_stale_partials()

    def _remove_stale_partials(self) -> None:
        """Partial downloads of a killed process never become shards: delete them."""
        for folder, _, files in os.walk(self.hot_dir):
            for name in files:
                if ".partial-" in name:
                    try:
                        os.remove(os.path.join(folder, name))
                    except OSError:
                        pass

    def __getstate__(self) -> dict[str, Any]:
        """Picklable for spawned DataLoader workers: settings and indexes travel, locks,
        memory maps and LRU state are rebuilt in the worker."""
        return {"hot_dir": self.hot_dir, "budget_bytes": self.budget_bytes, "verify": self.verify,
                "retries": self.retries, "backoff_s": self.backoff_s, "indexes": self._indexes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        indexes = state.pop("indexes")
        self.__init__(**state)  # type: ignore[misc]
        self._indexes = indexes

    def read_index(self, url: str) -> dict[str, Any]:
        if url not in self._indexes:
            with fsspec.open(url, "rb") as fh:
                self._indexes[url] = json.loads(fh.read())
        return self._indexes[url]

    def _entry(self, index_url: str, name: str) -> dict[str, Any]:
        for shard in self.read_index(index_url)["shards"]:
            if shard["name"] == name:
                return shard
        raise ShardError(f"{name}: not listed in {index_url}")

    def _source(self, index_url: str, name: str) -> str:
        return index_url.rsplit("/", 1)[0] + "/" + name

    def local_path(self, index_url: str, name: str, pin: bool = False) -> str:
        """A local, verified copy of the shard (downloaded into the hot tier if remote);
        ``pin=True`` pins it in the same step, so it cannot be evicted before use."""
        source = self._source(index_url, name)
        if _is_local(index_url):
            return source.split("://", 1)[-1]
        version = self.read_index(index_url).get("version", "v")
        path = os.path.join(self.hot_dir, version, name)
        with self._lock:
            if path in self._lru:
                self._lru.move_to_end(path)
                self.stats.hits += 1
                if pin:
                    self._pins[path] = self._pins.get(path, 0) + 1
                return path
            pending = self._inflight.get(path)
            if pending is None:
                self._inflight[path] = threading.Event()
        if pending is not None:  # another thread (the prefetcher) is fetching it: wait for it
            pending.wait()
            return self.local_path(index_url, name, pin)
        reserved = 0
        try:
            entry = self._entry(index_url, name)
            self._make_room(entry["num_bytes"])  # reserves the bytes under the lock
            reserved = entry["num_bytes"]
            self._download(source, path, entry)
            with self._lock:
                self._lru[path] = entry["num_bytes"]
                self.stats.misses += 1
                if pin:
                    self._pins[path] = self._pins.get(path, 0) + 1
        finally:
            with self._lock:
                self._reserved -= reserved
                self._inflight.pop(path).set()
        return path

    def _make_room(self, size: int) -> None:
        """Evicts least recently used unpinned shards until ``size`` more bytes fit, and
        reserves them (two threads downloading at once cannot overshoot the budget). When
        other downloads hold the space, waits for them (they become evictable) first."""
        for _ in range(600):
            try:
                return self._try_make_room(size)
            except CacheFullError:
                with self._lock:
                    pending = list(self._inflight.values())
                    busy = self._reserved > 0
                if not busy:
                    raise
                for event in pending:
                    event.wait(timeout=0.05)
        self._try_make_room(size)

    def _try_make_room(self, size: int) -> None:
        with self._lock:
            if not self.budget_bytes:
                self._reserved += size
                return
            used = sum(self._lru.values()) + self._reserved
            for path in list(self._lru):
                if used + size <= self.budget_bytes:
                    break
                if self._pins.get(path):
                    continue
                used -= self._lru.pop(path)
                self._maps.pop(path, None)
                os.remove(path)
                self.stats.evictions += 1
            if used + size > self.budget_bytes:
                raise CacheFullError(f"hot cache budget {self.budget_bytes} bytes cannot take {size} more "
                                     f"next to {used} bytes of pinned or downloading shards")
            self._reserved += size

    def _download(self, source: str, path: str, entry: dict[str, Any]) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        for attempt in range(self.retries + 1):
            tmp = f"{path}.partial-{os.getpid()}-{threading.get_ident()}"
            try:
                digest = hashlib.sha256()
                with fsspec.open(source, "rb") as fin, open(tmp, "wb") as fout:
                    data = fin.read()
                    fout.write(data)
                digest.update(data[HEADER_SIZE:])
                if self.verify and digest.hexdigest() != entry["sha256"]:
                    raise ShardError(f"{source}: checksum mismatch (corrupt shard)")
                os.replace(tmp, path)
                self.stats.bytes_fetched += len(data)
                return
            except ShardError:
                os.path.exists(tmp) and os.remove(tmp)
                raise
            except OSError as exc:
                os.path.exists(tmp) and os.remove(tmp)
                if attempt == self.retries:
                    raise
                self.stats.retries += 1
                wait = self.backoff_s * (2 ** attempt) * (1 + random.random())
                _LOGGER.warning("fetching %s failed (%s), retry in %.2fs", source, exc, wait)
                time.sleep(wait)

    def tokens(self, index_url: str, name: str) -> np.ndarray:
        """The shard's tokens as a read-only memory map (header checked)."""
        path = self.local_path(index_url, name)
        cached = self._maps.get(path)
        if cached is not None:
            return cached
        with open(path, "rb") as fh:
            header = fh.read(HEADER_SIZE)
        if len(header) < HEADER_SIZE:
            raise ShardError(f"{path}: truncated header")
        magic, _, width, _, n_tokens, payload_at, _, sha, _ = _HEADER.unpack(header)
        if magic != b"TFSHARD1" or sha.hex() != self._entry(index_url, name)["sha256"]:
            raise ShardError(f"{path}: not the shard index.json lists (magic or checksum differ)")
        array = np.memmap(path, dtype=f"<u{width}", mode="r", offset=payload_at, shape=(n_tokens,))
        self._maps[path] = array
        return array

    def doc_index(self, index_url: str, name: str) -> np.ndarray:
        """The shard's document boundaries (uint64), read by range without the payload."""
        key = f"{index_url}#{name}"
        cached = self._doc_indexes.get(key) if hasattr(self, "_doc_indexes") else None
        if cached is not None:
            return cached
        source = self._source(index_url, name)
        fs, path = fsspec.core.url_to_fs(source)
        header = fs.cat_file(path, start=0, end=HEADER_SIZE)
        magic, _, _, n_docs, _, _, index_at, _, _ = _HEADER.unpack(header)
        if magic != b"TFSHARD1":
            raise ShardError(f"{source}: not a token shard")
        raw = fs.cat_file(path, start=index_at, end=index_at + 8 * (n_docs + 1))
        if len(raw) != 8 * (n_docs + 1):
            raise ShardError(f"{source}: document index truncated")
        index = np.frombuffer(raw, dtype="<u8")
        if not hasattr(self, "_doc_indexes"):
            self._doc_indexes: dict[str, np.ndarray] = {}
        self._doc_indexes[key] = index
        return index

    def pin(self, paths: list[str]) -> None:
        with self._lock:
            for p in paths:
                self._pins[p] = self._pins.get(p, 0) + 1

    def unpin(self, paths: list[str]) -> None:
        with self._lock:
            for p in paths:
                self._pins[p] = max(0, self._pins.get(p, 0) - 1)

    def used_bytes(self) -> int:
        return sum(self._lru.values())


class Prefetcher:
    """A background thread that pulls the next shards of the plan into the hot cache.

    ``ahead(names)`` replaces the queue with the shards the reader will need next (in
    order, at most ``depth``); the thread downloads them while the reader works on the
    current ones. Errors are kept and raised to the reader when it reaches that shard
    (``ShardCache.local_path`` retries and verifies on its own). ``close()`` stops it.
    """

    def __init__(self, cache: ShardCache, index_url: str, depth: int = 4) -> None:
        self.cache = cache
        self.index_url = index_url
        self.depth = depth
        self._queue: list[str] = []
        self._cond = threading.Condition()
        self._stop = False
        self.errors: dict[str, BaseException] = {}
        self._thread = threading.Thread(target=self._run, name="shard-prefetch", daemon=True)
        self._thread.start()

    def ahead(self, names: list[str]) -> None:
        with self._cond:
            self._queue = list(names[:self.depth])
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                name = self._queue.pop(0)
            try:
                self.cache.local_path(self.index_url, name)
            except BaseException as exc:  # surfaced to the reader when it needs the shard
                self.errors[name] = exc

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout=5)
