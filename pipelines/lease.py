"""One run at a time per output: a lease file with an owner and a heartbeat.

Two runs on the same output clear each other's stages and share ``work/<stage>`` (one
trial published a token version whose near-duplicates were never removed), so
``pipelines.run`` takes ``<output>/_lease.json`` before its first stage and gives it
back after the last; the tier commands that write (``pipelines.tiers promote``, ``demote``,
``gc``) take it too, since the tokenize stage of a run removes the version folders without
index.json it finds. The lease names its owner (a random id, host, pid, the command with
its secrets masked: ``storage.redact.redact_command``) and is rewritten every
``ttl_s / 4`` seconds by a heartbeat thread.

A lease not rewritten for ``ttl_s`` (a run killed with -9, a lost machine) is stale and
may be taken over. Its age is measured by the store's own clock (``pipelines.lease_stores``:
a local file's mtime, an S3 object's ``LastModified`` against the response's ``Date``),
never by the ``heartbeat_at`` the owner wrote: an owner whose clock runs behind would
otherwise lose a live lease, and one whose clock runs ahead (or that wrote NaN or
infinity) would hold it forever. A lease whose times are not finite or whose TTL is not
in (0, ``MAX_TTL_S``] is impossible and counts as stale. A second run on a live lease is
refused with a message naming the owner; ``acquire(break_lease=True)``
(``--break-lease``) takes a live lease anyway and logs the owner it broke, which stops at
its next stage boundary (``LeaseLost``).

A process that writes a dataset version folder (a tier copy) holds a lease of the same
kind inside it, ``<version>/_writer.json`` (``version_writer``): the cleanup of version
folders without index.json takes that lease before it deletes a folder, so it never
deletes one that a live process is writing.

The stores and their atomicity are in ``pipelines.lease_stores``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Optional

from pipelines.lease_stores import LEASE_NAME, BeamStore, LocalStore, S3Store, Store, Stored, store_for
from storage.redact import redact_command, redact_text

_LOGGER = logging.getLogger(__name__)

__all__ = ["DEFAULT_TTL_S", "LEASE_NAME", "MAX_TTL_S", "WRITER_NAME", "BeamStore", "Lease", "LeaseHeld",
           "LeaseLost", "LocalStore", "OutputLease", "S3Store", "Store", "Stored", "output_lease", "store_for",
           "version_writer"]

DEFAULT_TTL_S = 120.0
MAX_TTL_S = 24 * 3600.0  # a longer TTL is no lease but a lock nobody can tell from a dead one
WRITER_NAME = "_writer.json"  # the lease of the process writing a version folder


class LeaseHeld(RuntimeError):
    """Another live run holds the output."""


class LeaseLost(RuntimeError):
    """This run's lease was taken over (its heartbeat stopped for longer than the TTL)."""


@dataclass(frozen=True)
class Lease:
    owner: str
    host: str
    pid: int
    command: str
    acquired_at: float
    heartbeat_at: float
    ttl_s: float

    def plausible(self) -> bool:
        """Finite times and a TTL in (0, MAX_TTL_S]; NaN or infinity would never expire."""
        return (math.isfinite(self.acquired_at) and math.isfinite(self.heartbeat_at)
                and 0 < self.ttl_s <= MAX_TTL_S)

    def stale(self, now: float, age_s: Optional[float] = None) -> bool:
        """Whether the lease may be taken over: impossible, or not rewritten for ``ttl_s``
        by the store's clock (``age_s``). Without a store clock the owner's heartbeat time
        is compared with ``now``, and one more than ``ttl_s`` in the future is impossible."""
        if not self.plausible():
            return True
        if age_s is not None and math.isfinite(age_s):
            return age_s > self.ttl_s
        return abs(now - self.heartbeat_at) > self.ttl_s

    def describe(self, now: float, age_s: Optional[float] = None) -> str:
        """Who holds it and how fresh it is; the command's secrets are masked (a lease
        written before they were masked at the source shows none either)."""
        if not self.plausible():
            beat = f"an impossible heartbeat (heartbeat_at {self.heartbeat_at!r}, ttl_s {self.ttl_s!r})"
        else:
            clock = "" if age_s is None else " by the store's clock"
            seconds = now - self.heartbeat_at if age_s is None else age_s
            beat = f"last heartbeat {max(seconds, 0.0):.0f}s ago{clock}, expires after {self.ttl_s:.0f}s"
        return f"run {self.owner[:8]} (pid {self.pid} on {self.host}, {redact_text(self.command)!r}), {beat}"

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @staticmethod
    def decode(data: bytes) -> Optional["Lease"]:
        """The lease in ``data``, None for a damaged file (treated as stale)."""
        try:
            raw = json.loads(data)
            return Lease(owner=str(raw["owner"]), host=str(raw["host"]), pid=int(raw["pid"]),
                         command=str(raw["command"]), acquired_at=float(raw["acquired_at"]),
                         heartbeat_at=float(raw["heartbeat_at"]), ttl_s=float(raw["ttl_s"]))
        except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
            return None


class OutputLease:
    """The lease of one run on one output: ``acquire()`` or raise ``LeaseHeld``; a
    heartbeat thread keeps it (``heartbeat=False``: none, for a hold of a few seconds);
    ``check()`` raises ``LeaseLost`` once it was taken over; ``release()`` deletes it if
    it is still ours. ``subject`` names what it guards in messages."""

    def __init__(self, store: Store, ttl_s: float = DEFAULT_TTL_S, command: str = "",
                 clock: Any = time.time, subject: str = "the output", heartbeat: bool = True) -> None:
        if not 0 < ttl_s <= MAX_TTL_S:
            raise ValueError(f"lease ttl_s must be > 0 and at most {MAX_TTL_S:.0f}, got {ttl_s}")
        self.store, self.ttl_s, self.clock, self.subject = store, ttl_s, clock, subject
        self.heartbeat = heartbeat
        now = clock()
        shown = redact_text(command) if command else redact_command(sys.argv)
        self.lease = Lease(owner=uuid.uuid4().hex, host=socket.gethostname(), pid=os.getpid(),
                           command=shown[:300], acquired_at=now, heartbeat_at=now, ttl_s=ttl_s)
        self._version: Optional[str] = None
        self._lost: Optional[str] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _version_after_write(self, data: bytes) -> Optional[str]:
        current = self.store.read()
        held = Lease.decode(current.data) if current is not None else None
        if current is None or held is None or held.owner != self.lease.owner:
            return None
        return current.version

    def acquire(self, break_lease: bool = False) -> "OutputLease":
        """Takes the lease: creates it, or takes over a stale one (a live one too with
        ``break_lease``, logging its owner); ``LeaseHeld`` naming the owner otherwise."""
        data = self.lease.encode()
        if not self.store.create(data):
            current = self.store.read()
            if current is None:  # released between our create and our read: try once more
                if not self.store.create(data):
                    raise LeaseHeld(f"the lease of {self.subject} changed hands while it was being taken; "
                                    "try again")
            else:
                self._take(current, data, break_lease)
        elif break_lease:
            _LOGGER.info("--break-lease: %s had no lease to break", self.subject)
        self._version = self._version_after_write(data)
        if self._version is None:
            raise LeaseHeld(f"another run wrote the lease of {self.subject} at the same time; try again")
        sweep = getattr(self.store, "sweep", None)
        if sweep is not None:
            sweep(self.ttl_s)  # temporary files of heartbeats a kill -9 interrupted
        if self.heartbeat:
            self._thread = threading.Thread(target=self._beat, name="output-lease", daemon=True)
            self._thread.start()
        return self

    def _take(self, current: Stored, data: bytes, break_lease: bool) -> None:
        held = Lease.decode(current.data)
        now = self.clock()
        what = held.describe(now, current.age_s) if held is not None else "a damaged lease file"
        live = held is not None and not held.stale(now, current.age_s)
        if live and not break_lease:
            raise LeaseHeld(f"{self.subject} is in use by {what}; wait for it to end, or, if that run is "
                            "gone, for the lease to expire (or end it now with --break-lease)")
        if not self.store.take_over(data, current.version):
            raise LeaseHeld(f"another run took over the lease of {what} first")
        if live:
            _LOGGER.warning("%s: broke the live lease of %s (--break-lease); if that run still runs, it "
                            "stops at its next stage boundary", self.subject, what)
        else:
            _LOGGER.warning("%s: took over the stale lease of %s", self.subject, what)

    def beat(self) -> None:
        """Writes a new heartbeat if the lease is still ours; else marks it lost."""
        if self._lost or self._version is None:
            return
        self.lease = Lease(**{**asdict(self.lease), "heartbeat_at": self.clock()})
        data = self.lease.encode()
        if not self.store.replace(data, self._version):
            current = self.store.read()
            held = Lease.decode(current.data) if current is not None else None
            self._lost = (held.describe(self.clock(), current.age_s) if held is not None and current is not None
                          else "nobody (the lease file is gone)")
            _LOGGER.error("this run's lease on %s was taken over by %s", self.subject, self._lost)
            return
        self._version = self._version_after_write(data)
        if self._version is None:
            self._lost = "another run (it wrote the lease after our heartbeat)"

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl_s / 4):
            try:
                self.beat()
            except Exception:  # a store error: the next beat tries again; the TTL allows 3 misses
                _LOGGER.warning("lease heartbeat failed", exc_info=True)

    def check(self) -> None:
        if self._lost:
            raise LeaseLost(f"this run's lease on {self.subject} was taken over by {self._lost}: "
                            f"stopping before the next stage so two runs do not write the same output")

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self._version is not None and not self._lost:
            try:
                self.store.delete(self._version)
            except Exception:
                _LOGGER.warning("could not delete the lease (it expires after %.0fs)", self.ttl_s, exc_info=True)
        self._version = None

    def __enter__(self) -> "OutputLease":
        """Acquires the lease unless ``acquire()`` already did (``with lease.acquire(...)``)."""
        return self if self._version is not None else self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def version_writer(folder: str, beam_args: Any = (), command: str = "", heartbeat: bool = True) -> OutputLease:
    """The lease of the one process that writes (or removes) the version folder
    ``folder``: ``<folder>/_writer.json``. ``beam_args``: a list of pipeline options or
    a ``PipelineOptions`` (the S3 client's settings)."""
    return OutputLease(store_for(folder, beam_args, WRITER_NAME), command=command, subject=f"version folder {redact_text(folder)}",
                       heartbeat=heartbeat)


def output_lease(output: str, beam_args: Any = (), command: str = "") -> OutputLease:
    """The lease of ``<output>/_lease.json`` with the job's pipeline options."""
    return OutputLease(store_for(output, beam_args), command=command)
