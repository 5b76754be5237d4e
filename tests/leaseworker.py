"""A process that races for an output's lease (tests/pipelines/test_lease.py): a module of
its own so that a spawned child imports only the lease code."""

from __future__ import annotations

import time
from typing import Any

from pipelines.lease import LeaseHeld, LocalStore, OutputLease


def take_over(path: str, start: float, queue: Any) -> None:
    """Waits for ``start`` (so every racer begins at once), then tries to take the lease."""
    while time.time() < start:
        time.sleep(0.001)
    try:
        lease = OutputLease(LocalStore(path), ttl_s=60).acquire()
        queue.put("won " + lease.lease.owner)
        time.sleep(1.0)
        lease._stop.set()
    except LeaseHeld:
        queue.put("refused")
