"""One run at a time per output: a lease file with an owner and a heartbeat.

Two runs on the same output clear each other's stages and share ``work/<stage>`` (one
trial published a token version whose near-duplicates were never removed), so
``pipelines.run`` takes ``<output>/_lease.json`` before its first stage and gives it
back after the last. The lease names its owner (a random id, host, pid, command) and
is rewritten every ``ttl_s / 4`` seconds by a heartbeat thread; a lease whose heartbeat
is older than ``ttl_s`` (a run killed with -9, a lost machine) is stale and may be taken
over. A second run on a live lease is refused with a message naming the owner.

Atomicity, per store:
- local paths: ``O_CREAT | O_EXCL`` creates the lease, a takeover first renames the
  stale file away (only one of two racing runs can rename it), heartbeats replace the
  file by rename.
- ``s3://``: conditional writes (``If-None-Match: *`` to create, ``If-Match: <etag>`` to
  take over or beat), with the job's S3 options (endpoint, credentials, region).
- other stores (``gs://``...): Beam's FileSystems with write, wait ``settle_s``, read
  back; the last writer wins and every heartbeat re-reads the owner, so a run that lost
  a race stops at its next stage boundary (``LeaseLost``).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Optional, Protocol

_LOGGER = logging.getLogger(__name__)

LEASE_NAME = "_lease.json"
DEFAULT_TTL_S = 120.0


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

    def stale(self, now: float) -> bool:
        return now - self.heartbeat_at > self.ttl_s

    def describe(self, now: float) -> str:
        return (f"run {self.owner[:8]} (pid {self.pid} on {self.host}, {self.command!r}), "
                f"last heartbeat {now - self.heartbeat_at:.0f}s ago, expires after {self.ttl_s:.0f}s")

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
        except (ValueError, KeyError, TypeError):
            return None


class Store(Protocol):
    """Where the lease file lives: read it (with a version token), create it only if
    absent, replace it (the owner's heartbeat) or take it over (a stale one) only if it
    still has that version, delete it."""

    def read(self) -> Optional[tuple[bytes, str]]: ...
    def create(self, data: bytes) -> bool: ...
    def replace(self, data: bytes, version: str) -> bool: ...
    def take_over(self, data: bytes, version: str) -> bool: ...
    def delete(self, version: str) -> None: ...


class LocalStore:
    """A lease file on a local (or POSIX shared) filesystem; its bytes are its version
    (every write carries a new heartbeat time)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> Optional[tuple[bytes, str]]:
        try:
            with open(self.path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return None
        return data, data.decode("utf-8", "replace")

    def create(self, data: bytes) -> bool:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        return True

    def replace(self, data: bytes, version: str) -> bool:
        """The owner's heartbeat: a new file renamed over the old one if it still has
        ``version`` (only a run whose lease expired can lose it in between)."""
        current = self.read()
        if current is None or current[1] != version:
            return False
        tmp = f"{self.path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, self.path)
        return True

    def take_over(self, data: bytes, version: str) -> bool:
        """Moves the file with ``version`` aside (of two racing runs only one can), checks
        that what it moved is that version (else puts it back), then writes ``data``."""
        aside = f"{self.path}.{uuid.uuid4().hex}.old"
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return False
        with open(aside, "rb") as fh:
            moved = fh.read().decode("utf-8", "replace")
        if moved != version:  # it changed after we read it: put it back unless a new one is there
            try:
                os.link(aside, self.path)
            except FileExistsError:
                pass
            os.remove(aside)
            return False
        tmp = f"{self.path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
        try:
            os.link(tmp, self.path)  # fails if another run created one meanwhile
        except FileExistsError:
            return False
        finally:
            os.remove(tmp)
            os.remove(aside)
        return True

    def delete(self, version: str) -> None:
        current = self.read()
        if current is not None and current[1] == version:
            os.remove(self.path)


class S3Store:
    """A lease object on S3 with conditional writes (If-None-Match / If-Match)."""

    def __init__(self, url: str, client: Any) -> None:
        bucket, _, key = url.split("://", 1)[1].partition("/")
        self.bucket, self.key, self.client = bucket, key, client

    def _refused(self, exc: Exception) -> bool:
        code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
        return code in ("PreconditionFailed", "ConditionalRequestConflict", "412", "409")

    def read(self) -> Optional[tuple[bytes, str]]:
        try:
            got = self.client.get_object(Bucket=self.bucket, Key=self.key)
        except self.client.exceptions.NoSuchKey:
            return None
        return got["Body"].read(), got["ETag"]

    def create(self, data: bytes) -> bool:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self.key, Body=data, IfNoneMatch="*")
        except Exception as exc:
            if self._refused(exc):
                return False
            raise
        return True

    def replace(self, data: bytes, version: str) -> bool:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self.key, Body=data, IfMatch=version)
        except Exception as exc:
            if self._refused(exc) or "NoSuchKey" in str(exc):
                return False
            raise
        return True

    take_over = replace

    def delete(self, version: str) -> None:
        current = self.read()
        if current is not None and current[1] == version:
            self.client.delete_object(Bucket=self.bucket, Key=self.key)


class BeamStore:
    """Any Beam filesystem: write, wait ``settle_s``, read back (last writer wins)."""

    def __init__(self, url: str, settle_s: float = 2.0) -> None:
        self.url, self.settle_s = url, settle_s

    def read(self) -> Optional[tuple[bytes, str]]:
        from apache_beam.io.filesystems import FileSystems

        if not FileSystems.exists(self.url):
            return None
        with FileSystems.open(self.url, compression_type="uncompressed") as fh:
            data = fh.read()
        return data, data.decode("utf-8", "replace")

    def _write(self, data: bytes) -> bool:
        from apache_beam.io.filesystems import FileSystems

        with FileSystems.create(self.url, compression_type="uncompressed") as fh:
            fh.write(data)
        time.sleep(self.settle_s)
        current = self.read()
        return current is not None and current[0] == data

    def create(self, data: bytes) -> bool:
        return self.read() is None and self._write(data)

    def replace(self, data: bytes, version: str) -> bool:
        current = self.read()
        return current is not None and current[1] == version and self._write(data)

    take_over = replace

    def delete(self, version: str) -> None:
        from apache_beam.io.filesystems import FileSystems

        current = self.read()
        if current is not None and current[1] == version:
            FileSystems.delete([self.url])


def _s3_client(beam_args: list[str]) -> Any:
    """A boto3 S3 client with the job's S3 options (the ones Beam's S3 filesystem uses)."""
    import boto3
    from apache_beam.options.pipeline_options import PipelineOptions, S3Options

    opts = PipelineOptions(beam_args).view_as(S3Options)
    kwargs = {"endpoint_url": opts.s3_endpoint_url, "region_name": opts.s3_region_name,
              "aws_access_key_id": opts.s3_access_key_id, "aws_secret_access_key": opts.s3_secret_access_key,
              "aws_session_token": opts.s3_session_token}
    if opts.s3_verify is not None:
        kwargs["verify"] = opts.s3_verify
    if opts.s3_disable_ssl:
        kwargs["use_ssl"] = False
    return boto3.client("s3", **{k: v for k, v in kwargs.items() if v is not None})


def store_for(output: str, beam_args: list[str]) -> Store:
    url = f"{output.rstrip('/')}/{LEASE_NAME}"
    if "://" not in output or output.startswith("file://"):
        return LocalStore(url.split("://", 1)[-1])
    if output.startswith(("s3://", "s3a://")):
        return S3Store(url, _s3_client(beam_args))
    return BeamStore(url)


class OutputLease:
    """The lease of one run on one output: ``acquire()`` or raise ``LeaseHeld``; a
    heartbeat thread keeps it; ``check()`` raises ``LeaseLost`` once it was taken over;
    ``release()`` deletes it if it is still ours."""

    def __init__(self, store: Store, ttl_s: float = DEFAULT_TTL_S, command: str = "",
                 clock: Any = time.time) -> None:
        if not ttl_s > 0:
            raise ValueError(f"lease ttl_s must be > 0, got {ttl_s}")
        self.store, self.ttl_s, self.clock = store, ttl_s, clock
        now = clock()
        self.lease = Lease(owner=uuid.uuid4().hex, host=socket.gethostname(), pid=os.getpid(),
                           command=command or " ".join(sys.argv)[:300], acquired_at=now,
                           heartbeat_at=now, ttl_s=ttl_s)
        self._version: Optional[str] = None
        self._lost: Optional[str] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _version_after_write(self, data: bytes) -> Optional[str]:
        current = self.store.read()
        if current is None or Lease.decode(current[0]) is None or Lease.decode(current[0]).owner != self.lease.owner:
            return None
        return current[1]

    def acquire(self) -> "OutputLease":
        data = self.lease.encode()
        if not self.store.create(data):
            current = self.store.read()
            if current is None:  # released between our create and our read: try once more
                if not self.store.create(data):
                    raise LeaseHeld("the output's lease changed hands while it was being taken; try again")
            else:
                held = Lease.decode(current[0])
                now = self.clock()
                if held is not None and not held.stale(now):
                    raise LeaseHeld(f"the output is in use by {held.describe(now)}; wait for it to end, "
                                    f"or, if that run is gone, for the lease to expire")
                what = held.describe(now) if held is not None else "a damaged lease file"
                if not self.store.take_over(data, current[1]):
                    raise LeaseHeld(f"another run took over the stale lease of {what} first")
                _LOGGER.warning("took over the stale lease of %s", what)
        self._version = self._version_after_write(data)
        if self._version is None:
            raise LeaseHeld("another run wrote the output's lease at the same time; try again")
        self._thread = threading.Thread(target=self._beat, name="output-lease", daemon=True)
        self._thread.start()
        return self

    def beat(self) -> None:
        """Writes a new heartbeat if the lease is still ours; else marks it lost."""
        if self._lost or self._version is None:
            return
        self.lease = Lease(**{**asdict(self.lease), "heartbeat_at": self.clock()})
        data = self.lease.encode()
        if not self.store.replace(data, self._version):
            current = self.store.read()
            held = Lease.decode(current[0]) if current is not None else None
            self._lost = held.describe(self.clock()) if held is not None else "nobody (the lease file is gone)"
            _LOGGER.error("this run's lease on the output was taken over by %s", self._lost)
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
            raise LeaseLost(f"this run's lease on the output was taken over by {self._lost}: "
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
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
