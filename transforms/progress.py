"""Live counts of the stages running in this process (for the driver's progress line).

``StageCounters`` and the readers record here as well as in Beam metrics. Only
in-process runners share this registry with the driver; elsewhere it stays empty.
"""

from __future__ import annotations

import threading
from collections import Counter

_LOCK = threading.Lock()
_COUNTS: dict[str, Counter] = {}


def record(stage: str, key: str, n: int = 1) -> None:
    with _LOCK:
        _COUNTS.setdefault(stage, Counter())[key] += n


def snapshot(stage: str) -> Counter:
    with _LOCK:
        return Counter(_COUNTS.get(stage, Counter()))


def reset(stage: str) -> None:
    with _LOCK:
        _COUNTS.pop(stage, None)


