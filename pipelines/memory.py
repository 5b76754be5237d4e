"""Bounding the C allocator's memory in the processes that run Beam SDK workers.

glibc's malloc gives each thread that allocates its own arena, up to 8 per core, and an
arena returns memory to the system only from the top of its heap: memory freed below a
live block stays resident. An SDK worker runs bundles on a pool of threads that grows
with the bundles (22 to 60 threads in one Spark run), so the process keeps the sum of
every arena's high-water mark. Measured on Spark local[2] at 150,000 documents
(docs/BENCHMARKS.md, "Engines past one machine's memory"): the driver that hosts the
LOOPBACK worker held 880 MB in dedup_minhash with 80 MB of live Python objects
(tracemalloc); with two arenas its per-stage peaks fell by 23-53% at the same speed.

``cap_malloc_arenas`` caps the arenas of this process (glibc's ``mallopt``; arenas that
exist already stay), ``worker_environment`` sets ``MALLOC_ARENA_MAX`` for the processes
it starts (glibc reads it at start-up). A ``MALLOC_ARENA_MAX`` the user set wins.
"""

from __future__ import annotations

import ctypes
import logging
import os
import tempfile
from typing import Mapping, MutableMapping

_LOGGER = logging.getLogger(__name__)

MALLOC_ARENAS = 2  # two lock domains: the SDK's data and work threads do not serialize on one
_M_ARENA_MAX = -8  # glibc <malloc.h>
ENV_VAR = "MALLOC_ARENA_MAX"


def _libc() -> "ctypes.CDLL | None":
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt, libc.malloc_info  # noqa: B018 (glibc only)
    except (OSError, AttributeError):
        return None
    return libc


def cap_malloc_arenas(arenas: int = MALLOC_ARENAS, environ: Mapping[str, str] = os.environ) -> bool:
    """Caps this process's malloc arenas at ``arenas``; False where the C library is not
    glibc or the user chose with ``MALLOC_ARENA_MAX`` (which glibc applied at start-up)."""
    if arenas < 1:
        raise ValueError(f"arenas must be at least 1, got {arenas}")
    libc = _libc()
    if libc is None or environ.get(ENV_VAR):
        return False
    done = bool(libc.mallopt(_M_ARENA_MAX, arenas))
    _LOGGER.debug("malloc arenas capped at %d: %s", arenas, done)
    return done


def worker_environment(environ: MutableMapping[str, str], arenas: int = MALLOC_ARENAS) -> MutableMapping[str, str]:
    """``environ`` with ``MALLOC_ARENA_MAX`` for processes started from it (kept if set)."""
    environ.setdefault(ENV_VAR, str(arenas))
    return environ


def arena_count() -> int:
    """The malloc arenas of this process (glibc's ``malloc_info``); 0 elsewhere."""
    libc = _libc()
    if libc is None:
        return 0
    libc.fopen.restype = ctypes.c_void_p
    with tempfile.NamedTemporaryFile(suffix=".xml") as tmp:
        handle = libc.fopen(tmp.name.encode(), b"w")
        if not handle:
            return 0
        libc.malloc_info(0, ctypes.c_void_p(handle))
        libc.fclose(ctypes.c_void_p(handle))
        return open(tmp.name, encoding="utf-8").read().count("<heap nr=")
