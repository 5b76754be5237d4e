"""The shard cache: verified shards, local ones in place, remote ones in the shared hot tier.

Shards of a local dataset version are read in place; remote ones (s3://, https://, ...)
are downloaded into the hot directory (``storage.hotdir``: shared by every process of the
machine under one byte budget, LRU, shards in use pinned, atomic rename). Every shard is
checked against its ``index.json`` entry once per process before its tokens are served
(``storage.verify``: size, every header field, a checksum of payload and document index
(the index's xxh3_128 by default, ``checksum="sha256"`` for the cryptographic one), token
ids below the vocabulary, the dtype), local or downloaded, and again when the file
under that name changes: its inode, size, mtime or ctime (``_stamp``; docs/SHARD_FORMAT.md
says what this does and does not detect). Any damage is a ``ShardError`` naming the shard. Downloads retry
with exponential backoff and jitter (a missing file is not retried). Tokens are served as
read-only memory maps.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import random
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import fsspec
import numpy as np

from storage.hotdir import CacheFullError, HotDir
from storage.index import IndexFileError, check_shard_name, validate_index, vocab_size_of
from storage.shards import HEADER_SIZE, ShardError, ShardHeader
from storage.verify import CHECKSUMS, check_document_index, check_header, verify_shard

_LOGGER = logging.getLogger(__name__)

__all__ = ["CacheFullError", "CacheStats", "ShardCache"]


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0  # downloads made by this process
    bytes_fetched: int = 0
    evictions: int = 0
    retries: int = 0
    verified: int = 0  # shards checked in full by this process
    verify_s: float = 0.0  # time spent checking them
    # The reader's requests (local_path with pin=True), by what they found:
    ready: int = 0  # the shard fetched and checked already (by the prefetcher or earlier)
    waited: int = 0  # another thread (the prefetcher) fetching or checking it: waited for that
    cold: int = 0  # neither: this request fetched or checked it itself

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


def _is_local(url: str) -> bool:
    return fsspec.core.split_protocol(url)[0] in (None, "file", "local")


def _stamp(path: str) -> tuple[int, int, int, int]:
    """What identifies the file checked: (inode, size, mtime_ns, ctime_ns). A write into
    the file sets its ctime even when the writer puts the mtime back (``touch -r``,
    ``rsync --inplace -t``, ``cp --preserve``) and nobody can set a ctime, so the check is
    redone after any change the filesystem records (hot files are never touched by the
    cache itself: their last use is a mark beside them, ``storage.hotdir``)."""
    st = os.stat(path)
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass
class ShardCache:
    hot_dir: str = field(default_factory=lambda: os.path.join(tempfile.gettempdir(), "tokenfactory-hot"))
    budget_bytes: int = 0  # 0: no limit
    verify: bool = True  # False: header, size and document index only, no checksum or vocabulary pass
    # "fast": the index's xxh3_128 where it records one (~8x cheaper; catches damage and a
    # wrong file), else its sha256; "sha256": always the sha256 (also against a forger who
    # can rewrite shards but not index.json)
    checksum: str = "fast"
    retries: int = 4
    backoff_s: float = 0.2
    full_wait_s: float = 120.0  # how long to wait for other processes to free the budget

    def __post_init__(self) -> None:
        if self.checksum not in CHECKSUMS:
            raise ValueError(f"ShardCache checksum must be one of {CHECKSUMS}, got {self.checksum!r}")
        self.stats = CacheStats()
        self._maps: dict[str, np.ndarray] = {}  # pinned shards only
        self._indexes: dict[str, dict[str, Any]] = {}
        self._entries: dict[str, dict[str, dict[str, Any]]] = {}
        self._checked: dict[str, tuple[tuple[int, int, int, int], ShardHeader]] = {}  # path -> (stamp, header)
        self._local_pins: dict[str, int] = {}
        self._inflight: dict[str, threading.Event] = {}
        self._doc_indexes: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()
        self.hot = HotDir(self.hot_dir, self.budget_bytes)
        removed = self.hot.remove_stale_partials()
        if removed:
            _LOGGER.info("removed %d stale partial downloads from %s", removed, self.hot.root)

    @property
    def _checksum(self) -> str | bool:
        return self.checksum if self.verify else False

    @property
    def _pins(self) -> dict[str, int]:
        """Pin counts of this process (local and hot shards)."""
        pins = {p: n for p, n in self._local_pins.items() if n}
        pins.update({p: self.hot.pinned(p) for p in list(self.hot._pins)})
        return pins

    def _pinned(self, path: str) -> bool:
        return bool(self._local_pins.get(path) or self.hot.pinned(path))

    def __getstate__(self) -> dict[str, Any]:
        """Picklable for spawned DataLoader workers: settings and indexes travel; locks,
        memory maps, pins and checks are per process and rebuilt in the worker."""
        return {"hot_dir": self.hot_dir, "budget_bytes": self.budget_bytes, "verify": self.verify,
                "checksum": self.checksum, "retries": self.retries, "backoff_s": self.backoff_s,
                "full_wait_s": self.full_wait_s,
                "indexes": self._indexes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        indexes = state.pop("indexes")
        self.__init__(**state)  # type: ignore[misc]
        self._indexes = indexes

    # --- the index ------------------------------------------------------------------------
    def read_index(self, url: str) -> dict[str, Any]:
        """The validated index (every name checked before it becomes a path)."""
        if url not in self._indexes:
            try:
                with fsspec.open(url, "rb") as fh:
                    index = json.loads(fh.read())
            except FileNotFoundError:
                raise IndexFileError(f"{url}: no such index.json (a version is readable once tokenize has "
                                     "written its index.json, last; check the path)") from None
            except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, deep nesting
                raise IndexFileError(f"{url}: not JSON ({type(exc).__name__}: {str(exc)[:200]})") from None
            self._indexes[url] = validate_index(index, url)
        return self._indexes[url]

    def _entry(self, index_url: str, name: str) -> dict[str, Any]:
        check_shard_name(name, index_url)
        entries = self._entries.get(index_url)
        if entries is None:
            entries = {s["name"]: s for s in self.read_index(index_url)["shards"]}
            self._entries[index_url] = entries
        if name not in entries:
            raise ShardError(f"{name}: not listed in {index_url}")
        return entries[name]

    def _source(self, index_url: str, name: str) -> str:
        """The shard ``name`` beside ``index_url`` (a bare ``index.json``: in this folder)."""
        return index_url.rsplit("/", 1)[0] + "/" + name if "/" in index_url else name

    def _hot_path(self, index_url: str, name: str) -> str:
        version = self.read_index(index_url).get("version", "v")  # validated: one component
        tag = hashlib.sha256(index_url.encode()).hexdigest()[:8]  # two datasets never share a folder
        return os.path.join(self.hot.root, f"{version}-{tag}", name)

    # --- verified local paths ---------------------------------------------------------------
    def local_path(self, index_url: str, name: str, pin: bool = False) -> str:
        """A local, verified copy of the shard (downloaded into the hot tier if remote);
        ``pin=True`` pins it in the same step, so no process evicts it before use."""
        entry = self._entry(index_url, name)
        local = _is_local(index_url)
        path = self._source(index_url, name).split("://", 1)[-1] if local else self._hot_path(index_url, name)
        waited = worked = False
        while True:
            with self._lock:
                pending = self._inflight.get(path)
                if pending is None:
                    self._inflight[path] = threading.Event()
            if pending is not None:  # another thread (the prefetcher) works on it: wait
                waited = True
                pending.wait()
                continue
            try:
                before = self._checked.get(path)
                if local:
                    self._check_file(path, index_url, entry, name)
                else:
                    self._fetch(index_url, name, entry, path)
                worked = worked or self._checked.get(path) is not before  # checked anew here
                if not pin:
                    return path
                if local:
                    with self._lock:
                        self._local_pins[path] = self._local_pins.get(path, 0) + 1
                    self._count_request(waited, worked)
                    return path
                if self.hot.pin(path):
                    checked = self._checked.get(path)
                    if checked is not None and self.hot.pinned_inode(path) == checked[0][0]:
                        self._count_request(waited, worked)
                        return path
                    self.hot.unpin(path)  # replaced since it was checked: check the new file
            finally:
                with self._lock:
                    self._inflight.pop(path).set()
            with self._lock:  # evicted by another process between the check and the pin
                self._checked.pop(path, None)

    def _count_request(self, waited: bool, worked: bool) -> None:
        """One reader request: it fetched or checked the shard itself (cold), else waited
        for another thread's work (waited), else found it done (ready)."""
        if worked:
            self.stats.cold += 1
        elif waited:
            self.stats.waited += 1
        else:
            self.stats.ready += 1

    def _check_file(self, path: str, index_url: str, entry: dict[str, Any], name: str) -> ShardHeader:
        """Checks the file at ``path`` in full once per process, and again when its stamp
        (inode, size, mtime, ctime) changes; a memory map of the file as it was is dropped."""
        try:
            stamp = _stamp(path)
        except FileNotFoundError:
            raise ShardError(f"{name}: missing ({path}, listed in {index_url})") from None
        known = self._checked.get(path)
        if known is not None and known[0] == stamp:
            return known[1]
        if known is not None:
            _LOGGER.info("%s changed since it was checked (%s): checking it again", name, path)
            self._checked.pop(path, None)
            self._maps.pop(path, None)
        index = self.read_index(index_url)
        t0 = time.perf_counter()
        try:
            with open(path, "rb") as fh:
                header = verify_shard(fh, entry, f"{name} ({path})", index.get("dtype"),
                                      vocab_size_of(index) if self.verify else None, self._checksum)
        except FileNotFoundError:
            raise ShardError(f"{name}: missing ({path}, listed in {index_url})") from None
        self.stats.verified += 1
        self.stats.verify_s += time.perf_counter() - t0
        self._checked[path] = (stamp, header)
        return header

    def _fetch(self, index_url: str, name: str, entry: dict[str, Any], path: str) -> None:
        """Makes ``path`` a checked copy: present already (any process's), or downloaded."""
        deadline = time.monotonic() + self.full_wait_s
        while True:
            if os.path.exists(path):
                try:
                    self._check_file(path, index_url, entry, name)
                    self.stats.hits += 1
                    self.hot.touch(path)
                    return
                except ShardError as exc:
                    if not os.path.exists(path):
                        continue  # evicted meanwhile
                    if not self.hot.discard(path):
                        raise
                    _LOGGER.warning("removed a bad cached copy, downloading again: %s", exc)
            try:
                reservation = self.hot.reserve(path, int(entry["num_bytes"]))
            except CacheFullError:
                if time.monotonic() > deadline or not self._others_may_free(int(entry["num_bytes"])):
                    raise
                time.sleep(0.05)
                continue
            if reservation is None:  # another process downloads it: wait, then use its copy
                self.hot.wait_for(path)
                continue
            try:
                header = self._download(self._source(index_url, name), reservation.partial, index_url,
                                        entry, name)
                self.hot.commit(reservation)
            except BaseException:
                self.hot.abort(reservation)
                raise
            self.stats.misses += 1
            self.stats.evictions = self.hot.evictions
            try:
                self._checked[path] = (_stamp(path), header)
            except FileNotFoundError:  # evicted by another process the moment it appeared
                continue
            return

    def _others_may_free(self, size: int) -> bool:
        """False when this process's own pins leave no room for ``size`` bytes: then no
        other process can free enough, and waiting would never end."""
        own = 0
        for path in list(self.hot._pins):
            try:
                own += os.path.getsize(path)
            except FileNotFoundError:
                pass
        return own + size <= self.budget_bytes

    def _download(self, source: str, partial: str, index_url: str, entry: dict[str, Any],
                  name: str) -> ShardHeader:
        """Downloads ``source`` into the reserved ``partial``, checked before it is written."""
        index = self.read_index(index_url)
        for attempt in range(self.retries + 1):
            try:
                with fsspec.open(source, "rb") as fin:
                    data = fin.read()
                t0 = time.perf_counter()
                header = verify_shard(io.BytesIO(data), entry, source, index.get("dtype"),
                                      vocab_size_of(index) if self.verify else None, self._checksum)
                self.stats.verified += 1
                self.stats.verify_s += time.perf_counter() - t0
                with open(partial, "r+b") as fout:
                    fout.write(data)
                    fout.truncate(len(data))
                self.stats.bytes_fetched += len(data)
                return header
            except FileNotFoundError:
                raise ShardError(f"{name}: missing at {source} (listed in {index_url})") from None
            except OSError as exc:
                if attempt == self.retries:
                    raise
                self.stats.retries += 1
                wait = self.backoff_s * (2 ** attempt) * (1 + random.random())
                _LOGGER.warning("fetching %s failed (%s), retry in %.2fs", source, exc, wait)
                time.sleep(wait)

    # --- reading ----------------------------------------------------------------------------
    def tokens(self, index_url: str, name: str) -> np.ndarray:
        """The shard's tokens as a read-only memory map (kept while the shard is pinned)."""
        for _ in range(3):
            path = self.local_path(index_url, name)
            cached = self._maps.get(path)
            if cached is not None:
                return cached
            checked = self._checked.get(path)
            if checked is None:  # dropped by another thread meanwhile: check it again
                continue
            header = checked[1]
            dtype = np.dtype(f"<u{header.width}")
            if header.num_tokens == 0:
                return np.zeros(0, dtype=dtype)
            try:
                array = np.memmap(path, dtype=dtype, mode="r", offset=HEADER_SIZE, shape=(header.num_tokens,))
            except FileNotFoundError:  # evicted by another process (it was not pinned): again
                self._checked.pop(path, None)
                continue
            except (ValueError, OSError) as exc:
                raise ShardError(f"{name} ({path}): cannot map its tokens: {exc}") from exc
            if self._pinned(path):
                self._maps[path] = array
            return array
        raise ShardError(f"{name}: evicted three times while being opened (hot budget too small?)")

    def doc_index(self, index_url: str, name: str) -> np.ndarray:
        """The shard's document boundaries (uint64), read by range without the payload;
        header and boundaries checked against the index entry."""
        key = f"{index_url}#{name}"
        cached = self._doc_indexes.get(key)
        if cached is not None:
            return cached
        entry = self._entry(index_url, name)
        source = self._source(index_url, name)
        try:
            fs, path = fsspec.core.url_to_fs(source)
            header = check_header(fs.cat_file(path, start=0, end=HEADER_SIZE), entry, source,
                                  self.read_index(index_url).get("dtype"))
            want = 8 * (header.num_docs + 1)
            raw = fs.cat_file(path, start=header.index_at, end=header.index_at + want)
        except FileNotFoundError:
            raise ShardError(f"{name}: missing at {source} (listed in {index_url})") from None
        if len(raw) != want:
            raise ShardError(f"{source}: document index truncated ({len(raw)} of {want} bytes)")
        index = np.frombuffer(raw, dtype="<u8")
        check_document_index(index, header.num_tokens, source)
        self._doc_indexes[key] = index
        return index

    def path_of(self, index_url: str, name: str) -> str:
        """Where the shard is (or will be) read from, without fetching or checking it."""
        self._entry(index_url, name)
        if _is_local(index_url):
            return self._source(index_url, name).split("://", 1)[-1]
        return self._hot_path(index_url, name)

    def pin(self, paths: list[str]) -> None:
        for p in paths:
            if p.startswith(self.hot.root + os.sep):
                if not self.hot.pin(p):
                    raise ShardError(f"{p}: cannot pin a shard that is not in the hot cache")
            else:
                with self._lock:
                    self._local_pins[p] = self._local_pins.get(p, 0) + 1

    def unpin(self, paths: list[str]) -> None:
        for p in paths:
            if p.startswith(self.hot.root + os.sep):
                last = self.hot.unpin(p)
            else:
                with self._lock:
                    count = max(0, self._local_pins.get(p, 0) - 1)
                    self._local_pins[p] = count
                last = count == 0
            if last:
                self._maps.pop(p, None)  # an unpinned map would keep an evicted file's space

    def used_bytes(self) -> int:
        """Bytes in the shared hot folder (every process's shards and downloads)."""
        return self.hot.used_bytes()
