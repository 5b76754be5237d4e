"""A process that races for an output's lease (tests/pipelines/test_lease.py): a module of
its own so that a spawned child imports only the lease code."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

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


HOLD = """
import sys
from pipelines.lease import LocalStore, OutputLease
lease = OutputLease(LocalStore(sys.argv[1]), ttl_s=600, command=sys.argv[2]).acquire()
print(lease.lease.owner, flush=True)
sys.stdin.read()
lease.release()
"""


@contextlib.contextmanager
def held_lease(path: Path, command: str) -> Iterator[str]:
    """The lease file ``path`` held live by another process (``command`` in it) for the
    block; yields its owner id."""
    root = Path(__file__).resolve().parents[1]
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path), command], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=root)
    try:
        yield holder.stdout.readline().strip()
    finally:
        holder.communicate("", timeout=60)
