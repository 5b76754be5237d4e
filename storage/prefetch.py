"""The prefetcher: a thread that pulls the shards a reader needs next into the cache."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storage.cache import ShardCache

_LOGGER = logging.getLogger(__name__)

__all__ = ["Prefetcher"]


class Prefetcher:
    """A background thread that pulls the next shards of the plan into the hot cache
    (and checks them: local shards are verified there too, off the reader's path).

    ``ahead(names)`` replaces the queue with the shards the reader will need next (in
    order, at most ``depth``); the thread fetches and checks them while the reader works on
    the current ones (the loader calls it when it enters a group, with the next group's
    shards). A shard the reader asks for while this thread works on it is waited for, not
    fetched twice (``CacheStats.waited``). An error is logged; the reader meets it again
    itself when it reaches that shard (``ShardCache.local_path``). ``close()``
    stops it.
    """

    def __init__(self, cache: "ShardCache", index_url: str, depth: int = 4) -> None:
        self.cache = cache
        self.index_url = index_url
        self.depth = depth
        self._queue: list[str] = []
        self._cond = threading.Condition()
        self._stop = False
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
            except Exception as exc:  # the reader fetches it again and raises (or skips) then
                _LOGGER.warning("prefetch of %s from %s failed: %s", name, self.index_url, exc)

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout=5)
