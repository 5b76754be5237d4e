"""Storage tiers for dataset versions: hot (local NVMe), warm (shared FS / object store),
cold (archive bucket), each an fsspec URL.

A dataset version is a directory ``<tier>/<version>/`` holding the files its
``index.json`` lists. Copies between tiers are:

* complete: the shards, their documents tables and the tokenizer (index version 3) travel
  together; every name is checked first (``storage.index``: one plain file name inside the
  version, nothing that climbs out of it);
* verified: every file's sha256 is computed while it streams and compared with
  ``index.json`` before it is renamed into place (a shard's header field by field too);
* atomic: on a filesystem a shard is written to ``.partial-<name>`` and renamed (an
  object store shows an object only once its upload completes); ``index.json`` is
  copied last, so a reader (which trusts only ``index.json``) never sees a partial
  version;
* resumable: a shard already at the destination whose header checksum matches the index
  is not sent again, so a killed copy restarts where it stopped.

S3 storage class and server-side encryption pass through to every write
(``s3_storage_class``, ``s3_sse``, ``s3_sse_kms_key_id``). Credentials come from the
environment / instance profile only: the config has no key for them, and URLs are the
only thing logged.

The command line is ``python -m pipelines.tiers`` (``pipelines/tiers.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, ContextManager, Optional, Sequence

import fsspec

from storage.index import (VERSION_PATTERN, IndexFileError, VersionFile, check_version_name, validate_index,
                           vocab_size_of)
from storage.index import version_files as _index_files
from storage.shards import ShardError
from storage.tiercopy import TierError, copy_file, file_problem, in_place
from storage.tiercopy import join as _join
from storage.verify import verify_shard

_LOGGER = logging.getLogger(__name__)

# what a writer holds around its writes into a version folder, given the folder's URL
Guard = Callable[[str], ContextManager[Any]]

__all__ = ["Guard", "MissingVersionFile", "StorageConfig", "TierError", "copy_version", "delete_version", "gc", "incomplete_versions",
           "list_versions", "remove_stale_incomplete", "verify_version", "version_dirs",
           "version_files"]


class MissingVersionFile(TierError, IndexFileError):
    """A version's index.json, or a file it lists, is absent from the source tier: the
    message names the version, the file and the tier (an ``IndexFileError`` as well, so
    callers that handle damaged indexes handle this too)."""


@dataclass(frozen=True)
class StorageConfig:
    """Tier URLs (``warm`` defaults to ``<output>/tokens``) and S3 write settings."""

    hot: str = ""  # hot tier (local NVMe) versions can be promoted to; "" = none
    warm: str = ""  # where the tokenize stage writes versions; "" = ``<output>/tokens``
    cold: str = ""  # archive bucket older versions move to (``python -m pipelines.tiers gc``); "" = none
    s3_storage_class: str = ""  # e.g. STANDARD_IA, GLACIER_IR (cold), INTELLIGENT_TIERING
    s3_sse: str = ""  # AES256 or aws:kms
    s3_sse_kms_key_id: str = ""  # the KMS key of s3_sse: aws:kms
    keep_warm_versions: int = 2  # gc keeps this many newest versions in warm

    def __post_init__(self) -> None:
        if self.s3_sse not in ("", "AES256", "aws:kms"):
            raise ValueError(f"s3_sse must be AES256 or aws:kms, got {self.s3_sse!r}")
        if self.s3_sse_kms_key_id and self.s3_sse != "aws:kms":
            raise ValueError("s3_sse_kms_key_id needs s3_sse: aws:kms")
        if self.keep_warm_versions < 1:
            raise ValueError("keep_warm_versions must be >= 1")

    def url(self, tier: str, output: str) -> str:
        value = getattr(self, tier)
        if tier == "warm" and not value:
            return output.rstrip("/") + "/tokens"
        if not value:
            raise ValueError(f"storage.{tier} is not configured")
        return value.rstrip("/")


def filesystem(url: str, storage: StorageConfig) -> tuple[Any, str]:
    """(fsspec filesystem, path) with the S3 write settings applied to s3:// URLs."""
    options: dict[str, Any] = {}
    if url.startswith(("s3://", "s3a://")):
        extra = {}
        if storage.s3_storage_class:
            extra["StorageClass"] = storage.s3_storage_class
        if storage.s3_sse:
            extra["ServerSideEncryption"] = storage.s3_sse
        if storage.s3_sse_kms_key_id:
            extra["SSEKMSKeyId"] = storage.s3_sse_kms_key_id
        if extra:
            options["s3_additional_kwargs"] = extra
    return fsspec.core.url_to_fs(url, **options)


def _version_dir(root: str, version: str) -> str:
    try:
        return _join(root, check_version_name(version, "--version"))
    except IndexFileError as exc:
        raise TierError(str(exc)) from None


def read_index(fs: Any, version_dir: str) -> dict[str, Any]:
    """The version's index.json, validated (``TierError`` naming it if unreadable or hostile)."""
    path = _join(version_dir, "index.json")
    with fs.open(path, "rb") as fh:
        raw = fh.read()
    try:
        return validate_index(json.loads(raw), path)
    except (ValueError, RecursionError) as exc:  # IndexFileError, JSON, UTF-8, deep nesting
        raise TierError(f"{path}: {str(exc)[:400]}") from None


def version_files(index: dict[str, Any]) -> list[VersionFile]:
    """Every file of the version but index.json (shards, documents tables, the tokenizer),
    names checked: ``TierError`` for a name outside the version."""
    try:
        return _index_files(index)
    except IndexFileError as exc:
        raise TierError(str(exc)) from None


def copy_version(version: str, src_url: str, dst_url: str, storage: StorageConfig,
                 guard: Optional[Guard] = None) -> dict[str, Any]:
    """Copies one dataset version between tiers (verified, atomic, resumable): shards,
    documents tables and the tokenizer, then index.json last. ``guard(folder URL)``, when
    given, is held around the writes into the destination folder: the writer's lease
    there (``pipelines.lease.version_writer``), so a cleanup of folders without index.json
    leaves this one alone while it is written."""
    src_fs, src_root = filesystem(src_url, storage)
    dst_fs, dst_root = filesystem(dst_url, storage)
    src_dir, dst_dir = _version_dir(src_root, version), _version_dir(dst_root, version)
    try:
        index = read_index(src_fs, src_dir)
    except FileNotFoundError:
        raise MissingVersionFile(f"version {version}: no index.json in {src_url} (not in that tier, or an "
                                 "incomplete copy; python -m pipelines.tiers status lists each tier's "
                                 "versions)") from None
    entries = {s["name"]: s for s in index["shards"]}
    sent = skipped = copied_bytes = 0
    t0 = time.perf_counter()
    with guard(_join(dst_url, version)) if guard is not None else contextlib.nullcontext():
        for f in version_files(index):
            src, dst = _join(src_dir, f.name), _join(dst_dir, f.name)
            if in_place(dst_fs, dst, f):
                skipped += 1
                continue
            try:
                copied_bytes += copy_file(src_fs, src, dst_fs, dst, f, entries.get(f.name), index.get("dtype"))
            except FileNotFoundError:
                if src_fs.exists(src):
                    raise  # the destination's (a missing bucket): not the version's fault
                raise MissingVersionFile(f"version {version}: {src_dir}/index.json lists {f.name}, which is missing "
                                         f"in {src_url}; the destination has no index.json for it (readers "
                                         "ignore it): copy the version from a tier where python -m "
                                         "pipelines.tiers verify passes, or rerun tokenize") from None
            sent += 1
        copy_file(src_fs, _join(src_dir, "index.json"), dst_fs, _join(dst_dir, "index.json"),
                  VersionFile("index.json", None, "unchecked"))
    seconds = time.perf_counter() - t0
    _LOGGER.info("copied %s from %s to %s: %d files sent, %d already there, %.1f MB in %.1fs",
                 version, src_url, dst_url, sent, skipped, copied_bytes / 1e6, seconds)
    return {"version": version, "sent": sent, "skipped": skipped, "bytes": copied_bytes, "seconds": seconds}


def _verify_file(fs: Any, path: str, f: VersionFile, entry: Optional[dict[str, Any]],
                 index: dict[str, Any]) -> Optional[str]:
    try:
        with fs.open(path, "rb") as fh:
            if f.kind == "shard" and entry is not None:
                verify_shard(fh, entry, path, index.get("dtype"), vocab_size_of(index))
            elif (problem := file_problem(fh, f)) is not None:
                return f"{path}: {problem}"
    except FileNotFoundError:
        return f"{path}: missing"
    except ShardError as exc:
        return str(exc)
    return None


def verify_version(url: str, version: str, storage: StorageConfig) -> list[str]:
    """Problems found, empty when the version is sound: a missing or unreadable index.json,
    and per file listed (shards, documents tables, tokenizer): missing, truncated, a damaged
    header, a checksum mismatch, token ids outside the vocabulary."""
    fs, root = filesystem(url, storage)
    directory = _version_dir(root, version)
    try:
        index = read_index(fs, directory)
        files = version_files(index)
    except FileNotFoundError:
        what = "incomplete version" if fs.exists(directory) else "no such version"
        return [f"{directory}/index.json: missing ({what})"]
    except TierError as exc:
        return [str(exc)]
    entries = {s["name"]: s for s in index["shards"]}
    problems = []
    for f in files:
        problem = _verify_file(fs, _join(directory, f.name), f, entries.get(f.name), index)
        if problem:
            problems.append(problem)
    return problems


def version_dirs(url: str, storage: StorageConfig) -> list[str]:
    """Every folder under a tier named like a version, with or without index.json, sorted."""
    fs, root = filesystem(url, storage)
    try:
        entries = fs.ls(root, detail=True)
    except FileNotFoundError:
        return []
    names = (e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e.get("type") == "directory")
    return sorted(n for n in names if VERSION_PATTERN.fullmatch(n))


def incomplete_versions(url: str, storage: StorageConfig) -> list[str]:
    """Version folders without index.json: a write or a copy that was killed (or runs now)."""
    fs, root = filesystem(url, storage)
    return [v for v in version_dirs(url, storage) if not fs.exists(_join(root, v, "index.json"))]


def _mtime(info: dict[str, Any]) -> Optional[float]:
    """A file's modification time (seconds since the epoch) from an fsspec info dict."""
    for key in ("mtime", "LastModified", "updated", "last_modified", "created"):
        value = info.get(key)
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, datetime):
            return value.replace(tzinfo=value.tzinfo or timezone.utc).timestamp()
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None


def remove_stale_incomplete(url: str, storage: StorageConfig, min_age_s: float,
                            keep: Sequence[str] = (), now: Optional[float] = None) -> list[str]:
    """Deletes the version folders without index.json in which nothing was written for
    ``min_age_s`` seconds (newest file's modification time): leftovers of killed runs. A
    folder whose times cannot be read, or named in ``keep``, is left alone."""
    fs, root = filesystem(url, storage)
    now = time.time() if now is None else now
    removed = []
    for version in incomplete_versions(url, storage):
        if version in keep:
            continue
        directory = _join(root, version)
        infos = list(fs.find(directory, detail=True, withdirs=True).values()) or [fs.info(directory)]
        times = [_mtime(i) for i in infos]
        if not times or any(t is None for t in times) or now - max(times) < min_age_s:  # type: ignore[type-var]
            continue
        fs.rm(directory, recursive=True)
        _LOGGER.warning("removed %s: no index.json and nothing written for %.0f h (a killed run's leftover)",
                        directory, (now - max(times)) / 3600)  # type: ignore[type-var]
        removed.append(version)
    return removed


def list_versions(url: str, storage: StorageConfig) -> list[str]:
    """Complete versions (with index.json) under a tier, oldest first."""
    fs, root = filesystem(url, storage)
    return [v for v in version_dirs(url, storage) if fs.exists(_join(root, v, "index.json"))]


def delete_version(url: str, version: str, storage: StorageConfig) -> None:
    """Removes index.json first (the version disappears for readers), then the rest."""
    fs, root = filesystem(url, storage)
    directory = _version_dir(root, version)
    fs.rm(_join(directory, "index.json"))
    fs.rm(directory, recursive=True)


def gc(output: str, storage: StorageConfig, guard: Optional[Guard] = None) -> list[dict[str, Any]]:
    """Archive policy: warm keeps the newest ``keep_warm_versions``; older versions are
    copied to cold (verified; ``guard`` as for ``copy_version``) and then removed from warm."""
    warm, cold = storage.url("warm", output), storage.url("cold", output)
    moved = []
    for version in list_versions(warm, storage)[:-storage.keep_warm_versions]:
        result = copy_version(version, warm, cold, storage, guard)
        if verify_version(cold, version, storage):
            raise TierError(f"{version}: verification in the cold tier failed; warm copy kept")
        delete_version(warm, version, storage)
        moved.append(result)
    return moved
