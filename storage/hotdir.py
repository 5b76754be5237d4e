"""The hot cache directory, shared safely by every process of a machine (8 ranks, their
DataLoader workers) under one byte budget.

Layout: ``<hot>/_cache/<version>-<url hash>/<shard>.tfs`` (the ``_cache`` folder keeps the
cache apart from versions promoted into the hot tier, which it never counts or evicts).

Coordination is by ``flock`` (POSIX advisory locks: released by the kernel when a process
dies, so a killed rank never leaves a lock behind):

* ``_cache/.lock``, exclusive, is held for every change of the directory (reserve, commit,
  abort, evict, pin): no two processes evict, count or rename at once.
* a download goes to ``<shard>.partial``, created under that lock, locked exclusively by its
  writer for its whole life and sized at once to the shard's size (``ftruncate``), so the
  space it will take counts against the budget in every process from the start. Another
  process wanting the same shard waits for it instead of downloading it again. A partial
  whose lock can be taken has no living writer: it is stale and is removed (at start) or
  taken over.
* a pinned shard (being read) is held with a shared lock on an open descriptor; eviction
  takes a shard only if it can lock it exclusively without waiting, so shards in use by any
  process are never removed. Least recently used first: a hit sets the mtime of a mark
  beside the shard (``<stem>.lru``), never the shard's own: a shard's inode is not changed
  after its rename into place, so any change of its status time (ctime) is a change of the
  file that readers re-check (``storage.cache``). Caches written before the marks keep
  their shards' mtimes as the last use.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Iterator, Optional

_LOGGER = logging.getLogger(__name__)

__all__ = ["CACHE_FOLDER", "PARTIAL", "CacheFullError", "HotDir", "Reservation"]

CACHE_FOLDER = "_cache"
PARTIAL = ".partial"
USED = ".lru"  # <stem>.lru beside <stem>.tfs: its mtime is the shard's last use


class CacheFullError(RuntimeError):
    """The byte budget cannot hold the shard next to the pinned and downloading ones."""


@dataclass
class Reservation:
    """A download in progress: ``partial`` is locked by this process and sized already."""

    path: str
    partial: str
    fd: int
    size: int


@dataclass(frozen=True)
class _Entry:
    path: str
    size: int
    mtime: float
    partial: bool


def _try_lock(fd: int, kind: int) -> bool:
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return False
        raise


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _marker(path: str) -> str:
    """The last-use mark of the shard at ``path``."""
    return (path[:-len(".tfs")] if path.endswith(".tfs") else path) + USED


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except FileNotFoundError:
        return 0.0


class HotDir:
    """One process's handle on the shared cache folder (see the module docstring)."""

    def __init__(self, hot_dir: str, budget_bytes: int = 0) -> None:
        self.root = os.path.join(hot_dir, CACHE_FOLDER)
        self.budget_bytes = budget_bytes
        os.makedirs(self.root, exist_ok=True)
        self._lock_path = os.path.join(self.root, ".lock")
        self._thread_lock = threading.Lock()
        self._pins: dict[str, tuple[int, int]] = {}  # path -> (descriptor, count)
        self.evictions = 0

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The folder lock: threads of this process, then processes (flock)."""
        with self._thread_lock:
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # releases the flock

    def _scan(self) -> list[_Entry]:
        out = []
        for folder, _, files in os.walk(self.root):
            for name in files:
                if not (name.endswith(".tfs") or name.endswith(".tfs" + PARTIAL)):
                    continue
                path = os.path.join(folder, name)
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    continue
                partial = name.endswith(PARTIAL)
                used = st.st_mtime if partial else max(st.st_mtime, _mtime(_marker(path)))
                out.append(_Entry(path, st.st_size, used, partial))
        return out

    def used_bytes(self) -> int:
        """Bytes of complete and reserved (downloading) shards, all processes together."""
        with self.locked():
            return sum(e.size for e in self._scan())

    def remove_stale_partials(self) -> int:
        """Deletes partial downloads no living process writes (their lock is free), and
        last-use marks whose shard is gone."""
        removed = 0
        with self.locked():
            for entry in self._scan():
                if entry.partial and self._take_if_free(entry.path):
                    removed += 1
            for folder, _, files in os.walk(self.root):
                for name in files:
                    if name.endswith(USED) and not os.path.exists(os.path.join(folder, name[:-len(USED)] + ".tfs")):
                        _remove(os.path.join(folder, name))
        return removed

    def _take_if_free(self, path: str) -> bool:
        """Removes ``path`` if no process holds a lock on it (under the folder lock)."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            if not _try_lock(fd, fcntl.LOCK_EX):
                return False
            _remove(path)
            if not path.endswith(PARTIAL):
                _remove(_marker(path))
            return True
        finally:
            os.close(fd)

    def _evict_for(self, size: int, ignore: str = "") -> None:
        """Removes least recently used unpinned shards until ``size`` more bytes fit."""
        if not self.budget_bytes:
            return
        entries = [e for e in self._scan() if e.path != ignore]
        used = sum(e.size for e in entries)
        for entry in sorted((e for e in entries if not e.partial), key=lambda e: (e.mtime, e.path)):
            if used + size <= self.budget_bytes:
                break
            if entry.path in self._pins or not self._take_if_free(entry.path):
                continue  # pinned here, or by another process
            used -= entry.size
            self.evictions += 1
        if used + size > self.budget_bytes:
            raise CacheFullError(f"hot cache budget {self.budget_bytes} bytes ({self.root}) cannot take "
                                 f"{size} more next to {used} bytes of pinned or downloading shards")

    def reserve(self, path: str, size: int) -> Optional[Reservation]:
        """A locked, sized ``<path>.partial`` to download into, after evicting what is needed;
        None when the shard is complete already or another living process downloads it."""
        partial = path + PARTIAL
        with self.locked():
            if os.path.exists(path):
                return None
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(partial, os.O_RDWR | os.O_CREAT, 0o644)
            if not _try_lock(fd, fcntl.LOCK_EX):
                os.close(fd)
                return None  # a living process writes it
            try:
                self._evict_for(size, ignore=partial)
                os.ftruncate(fd, size)
            except BaseException:
                _remove(partial)
                os.close(fd)
                raise
            return Reservation(path, partial, fd, size)

    def commit(self, reservation: Reservation) -> None:
        """The verified partial becomes the shard (atomic rename), then its lock is released."""
        with self.locked():
            try:
                os.replace(reservation.partial, reservation.path)
            finally:
                os.close(reservation.fd)

    def abort(self, reservation: Reservation) -> None:
        with self.locked():
            _remove(reservation.partial)
            os.close(reservation.fd)

    def wait_for(self, path: str, poll_s: float = 0.02) -> None:
        """Returns once no living process writes ``<path>.partial``."""
        partial = path + PARTIAL
        while True:
            try:
                fd = os.open(partial, os.O_RDONLY)
            except FileNotFoundError:
                return
            try:
                if _try_lock(fd, fcntl.LOCK_SH):
                    return
            finally:
                os.close(fd)
            time.sleep(poll_s)

    def pin(self, path: str) -> bool:
        """Holds ``path`` against eviction by any process; False if it is gone."""
        with self.locked():
            if path in self._pins:
                fd, count = self._pins[path]
                self._pins[path] = (fd, count + 1)
                return True
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                return False
            fcntl.flock(fd, fcntl.LOCK_SH)  # evictors lock only under the folder lock: no wait
            self._pins[path] = (fd, 1)
            return True

    def unpin(self, path: str) -> bool:
        """Drops one pin; True when it was the last one of this process."""
        with self.locked():
            if path not in self._pins:
                return False
            fd, count = self._pins[path]
            if count > 1:
                self._pins[path] = (fd, count - 1)
                return False
            del self._pins[path]
            os.close(fd)
            return True

    def pinned(self, path: str) -> int:
        return self._pins.get(path, (0, 0))[1]

    def pinned_inode(self, path: str) -> Optional[int]:
        """The inode this process holds pinned under ``path`` (None if not pinned)."""
        pin = self._pins.get(path)
        return os.fstat(pin[0]).st_ino if pin else None

    def discard(self, path: str) -> bool:
        """Removes a bad cached shard unless another process holds it."""
        with self.locked():
            if path in self._pins:
                return False
            return self._take_if_free(path)

    def touch(self, path: str) -> None:
        """Marks a hit: the shard becomes the most recently used (its mark's mtime is set;
        the shard's inode is left alone, see the module docstring)."""
        marker = _marker(path)
        try:
            os.utime(marker)
        except FileNotFoundError:
            if os.path.exists(path):  # a mark left by an eviction meanwhile goes at the next start
                with open(marker, "ab"):
                    pass

    def close(self) -> None:
        with self.locked():
            for fd, _ in self._pins.values():
                os.close(fd)
            self._pins.clear()
