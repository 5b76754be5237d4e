"""Where a lease file lives (``pipelines.lease``): a local path, S3, any Beam filesystem.

Every store reads the file with a version token (for conditional replaces) and its age:
the seconds since the file was last written, measured by the store's own clock, never by
the clock of the process that wrote it (``pipelines.lease`` judges staleness by it):

- local paths: ``time.time()`` minus the file's mtime (the reader's host; on a shared
  filesystem the mtime is the file server's, so only reader-server skew counts);
  ``O_CREAT | O_EXCL`` creates the lease, a takeover first renames the stale file away
  (only one of two racing runs can rename it), heartbeats replace the file by rename and
  remove their ``.tmp`` file when the write or the rename fails;
- ``s3://``: the ``Date`` header of the GET response minus the object's
  ``LastModified`` (both the S3 server's clock); conditional writes (``If-None-Match: *``
  to create, ``If-Match: <etag>`` to take over or beat), with the job's S3 options;
- other stores (``gs://``...): Beam's FileSystems, write, wait ``settle_s``, read back
  (the last writer wins); the age is the reader's clock minus the file's
  ``last_updated_in_seconds`` (the store's write time).
"""

from __future__ import annotations

import contextlib
import email.utils
import logging
import os
import time
import uuid
from typing import Any, NamedTuple, Optional, Protocol

_LOGGER = logging.getLogger(__name__)

__all__ = ["LEASE_NAME", "BeamStore", "LocalStore", "S3Store", "Store", "Stored", "store_for"]

LEASE_NAME = "_lease.json"


class Stored(NamedTuple):
    """A lease file as read: its bytes, a version token for conditional writes, and the
    seconds since it was written by the store's clock (None: the store cannot tell)."""

    data: bytes
    version: str
    age_s: Optional[float] = None


class Store(Protocol):
    """Where the lease file lives: read it (with a version token and its age), create it
    only if absent, replace it (the owner's heartbeat) or take it over (a stale one) only
    if it still has that version, delete it."""

    def read(self) -> Optional[Stored]: ...
    def create(self, data: bytes) -> bool: ...
    def replace(self, data: bytes, version: str) -> bool: ...
    def take_over(self, data: bytes, version: str) -> bool: ...
    def delete(self, version: str) -> None: ...


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


class LocalStore:
    """A lease file on a local (or POSIX shared) filesystem; its bytes are its version
    (every write carries a new heartbeat time)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> Optional[Stored]:
        try:
            with open(self.path, "rb") as fh:
                data = fh.read()
                mtime = os.fstat(fh.fileno()).st_mtime
        except FileNotFoundError:
            return None
        return Stored(data, data.decode("utf-8", "replace"), time.time() - mtime)

    def create(self, data: bytes) -> bool:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        return True

    def _temporary(self, data: bytes) -> str:
        """A new ``<lease>.<uuid>.tmp`` holding ``data``; removed again if the write fails
        (a full disk, a file size limit), so a failed heartbeat leaves nothing behind."""
        tmp = f"{self.path}.{uuid.uuid4().hex}.tmp"
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
        except BaseException:
            _remove_quietly(tmp)
            raise
        return tmp

    def replace(self, data: bytes, version: str) -> bool:
        """The owner's heartbeat: a new file renamed over the old one if it still has
        ``version`` (only a run whose lease expired can lose it in between)."""
        current = self.read()
        if current is None or current.version != version:
            return False
        tmp = self._temporary(data)
        try:
            os.replace(tmp, self.path)
        except BaseException:
            _remove_quietly(tmp)
            raise
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
            with contextlib.suppress(FileExistsError):
                os.link(aside, self.path)
            os.remove(aside)
            return False
        try:
            tmp = self._temporary(data)
        except BaseException:
            os.remove(aside)
            raise
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
        if current is not None and current.version == version:
            os.remove(self.path)

    def sweep(self, min_age_s: float) -> list[str]:
        """Removes ``<lease>.<uuid>.tmp`` and ``.old`` files older than ``min_age_s``:
        what a process killed in the middle of a heartbeat or a takeover left."""
        folder, name = os.path.split(self.path)
        removed = []
        try:
            entries = list(os.scandir(folder or "."))
        except FileNotFoundError:
            return removed
        for entry in entries:
            if not (entry.name.startswith(name + ".") and entry.name.endswith((".tmp", ".old"))):
                continue
            with contextlib.suppress(FileNotFoundError):
                if time.time() - entry.stat().st_mtime > min_age_s:
                    os.remove(entry.path)
                    removed.append(entry.name)
        return removed


def _server_age(response: dict[str, Any]) -> Optional[float]:
    """Seconds between an S3 object's ``LastModified`` and the response's ``Date``: both
    the server's clock, so neither the writer's nor this reader's clock plays a part."""
    date = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    modified = response.get("LastModified")
    if not date or modified is None:
        return None
    try:
        return email.utils.parsedate_to_datetime(date).timestamp() - modified.timestamp()
    except (TypeError, ValueError, AttributeError):
        return None


class S3Store:
    """A lease object on S3 with conditional writes (If-None-Match / If-Match)."""

    def __init__(self, url: str, client: Any) -> None:
        bucket, _, key = url.split("://", 1)[1].partition("/")
        self.bucket, self.key, self.client = bucket, key, client

    def _refused(self, exc: Exception) -> bool:
        code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
        return code in ("PreconditionFailed", "ConditionalRequestConflict", "412", "409")

    def read(self) -> Optional[Stored]:
        try:
            got = self.client.get_object(Bucket=self.bucket, Key=self.key)
        except self.client.exceptions.NoSuchKey:
            return None
        return Stored(got["Body"].read(), got["ETag"], _server_age(got))

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
        if current is not None and current.version == version:
            self.client.delete_object(Bucket=self.bucket, Key=self.key)


class BeamStore:
    """Any Beam filesystem: write, wait ``settle_s``, read back (last writer wins)."""

    def __init__(self, url: str, settle_s: float = 2.0) -> None:
        self.url, self.settle_s = url, settle_s

    def read(self) -> Optional[Stored]:
        from apache_beam.io.filesystems import FileSystems

        if not FileSystems.exists(self.url):
            return None
        with FileSystems.open(self.url, compression_type="uncompressed") as fh:
            data = fh.read()
        try:
            found = FileSystems.match([self.url])[0].metadata_list
            written = float(getattr(found[0], "last_updated_in_seconds", 0.0) or 0.0) if found else 0.0
        except Exception:  # a filesystem without metadata: the heartbeat time decides
            written = 0.0
        return Stored(data, data.decode("utf-8", "replace"), time.time() - written if written else None)

    def _write(self, data: bytes) -> bool:
        from apache_beam.io.filesystems import FileSystems

        with FileSystems.create(self.url, compression_type="uncompressed") as fh:
            fh.write(data)
        time.sleep(self.settle_s)
        current = self.read()
        return current is not None and current.data == data

    def create(self, data: bytes) -> bool:
        return self.read() is None and self._write(data)

    def replace(self, data: bytes, version: str) -> bool:
        current = self.read()
        return current is not None and current.version == version and self._write(data)

    take_over = replace

    def delete(self, version: str) -> None:
        from apache_beam.io.filesystems import FileSystems

        current = self.read()
        if current is not None and current.version == version:
            FileSystems.delete([self.url])


def _s3_client(beam_args: Any) -> Any:
    """A boto3 S3 client with the job's S3 options (the ones Beam's S3 filesystem uses);
    ``beam_args``: a list of pipeline options or a ``PipelineOptions``."""
    import boto3
    from apache_beam.options.pipeline_options import PipelineOptions, S3Options

    options = beam_args if isinstance(beam_args, PipelineOptions) else PipelineOptions(list(beam_args))
    opts = options.view_as(S3Options)
    kwargs = {"endpoint_url": opts.s3_endpoint_url, "region_name": opts.s3_region_name,
              "aws_access_key_id": opts.s3_access_key_id, "aws_secret_access_key": opts.s3_secret_access_key,
              "aws_session_token": opts.s3_session_token}
    if opts.s3_verify is not None:
        kwargs["verify"] = opts.s3_verify
    if opts.s3_disable_ssl:
        kwargs["use_ssl"] = False
    return boto3.client("s3", **{k: v for k, v in kwargs.items() if v is not None})


def store_for(folder: str, beam_args: Any, name: str = LEASE_NAME) -> Store:
    """The store of the lease file ``name`` in ``folder`` (an output, a version folder);
    ``beam_args`` as for ``_s3_client``."""
    url = f"{folder.rstrip('/')}/{name}"
    if "://" not in folder or folder.startswith("file://"):
        return LocalStore(url.split("://", 1)[-1])
    if folder.startswith(("s3://", "s3a://")):
        return S3Store(url, _s3_client(beam_args))
    return BeamStore(url)
