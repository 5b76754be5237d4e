"""Stage manifests: written last, they mark a stage complete and make reruns resume.

``manifests/<stage>.json`` records the counts, the config hash, the input fingerprint,
the output files and the code version. A rerun skips a stage whose manifest has the
same config hash, input fingerprint and code version and whose listed outputs all
exist; otherwise the stage's old outputs are deleted before it runs again, so a
directory never mixes shards of two runs. All I/O goes through Beam's ``FileSystems``
(local paths, ``gs://``, ``s3://``...), like the stage outputs themselves.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Optional, Sequence

import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

_LOGGER = logging.getLogger(__name__)

MANIFEST_VERSION = 1


@dataclass(frozen=True)
class StageCounts:
    """in == out + rejected + failed, by construction of every stage."""

    records_in: int
    out: int
    rejected: int
    failed: int
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    failed_by_error: dict[str, int] = field(default_factory=dict)

    @property
    def reconciles(self) -> bool:
        return self.records_in == self.out + self.rejected + self.failed


@dataclass(frozen=True)
class Manifest:
    stage: str
    config_hash: str
    inputs_fingerprint: str
    code_version: str
    counts: StageCounts
    inputs: list[str]
    outputs: list[str]
    started_at: str
    finished_at: str
    runner: str
    extra: dict[str, Any] = field(default_factory=dict)
    version: int = MANIFEST_VERSION

    def matches(self, config_hash: str, inputs_fingerprint: str, code_version: str) -> bool:
        return (self.config_hash, self.inputs_fingerprint, self.code_version) == (
            config_hash, inputs_fingerprint, code_version)


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def code_version() -> str:
    """The package version, plus the git commit when run from a checkout."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        base = version("tokenfactory")
    except PackageNotFoundError:
        base = "0+unknown"
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        sha = subprocess.run(["git", "-C", here, "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=5, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha = ""
    return f"{base}+{sha}" if sha else base


def manifest_path(output: str, stage: str) -> str:
    return FileSystems.join(output, "manifests", f"{stage}.json")


def stage_dirs(output: str, stage: str) -> list[str]:
    return [FileSystems.join(output, kind, stage) for kind in ("docs", "rejected", "failed")]


def read_text(path: str) -> Optional[str]:
    if not FileSystems.exists(path):
        return None
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as fh:
        return fh.read().decode("utf-8")


def write_text_atomic(path: str, text: str) -> None:
    """Writes to ``<path>.tmp`` and renames: readers see the old file or the new one."""
    tmp = path + ".tmp"
    with FileSystems.create(tmp, compression_type=CompressionTypes.UNCOMPRESSED) as fh:
        fh.write(text.encode("utf-8"))
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([tmp], [path])


def read_manifest(output: str, stage: str) -> Optional[Manifest]:
    text = read_text(manifest_path(output, stage))
    if text is None:
        return None
    try:
        data = json.loads(text)
        data["counts"] = StageCounts(**data["counts"])
        return Manifest(**data)
    except (ValueError, TypeError, KeyError) as exc:
        _LOGGER.warning("ignoring unreadable manifest for %s: %s", stage, exc)
        return None


def write_manifest(output: str, manifest: Manifest) -> None:
    write_text_atomic(manifest_path(output, manifest.stage),
                      json.dumps(asdict(manifest), indent=2, sort_keys=True))


def list_files(directory: str, pattern: str = "*") -> list[str]:
    """Files under ``directory`` matching ``pattern`` (not recursive), sorted."""
    match = FileSystems.match([FileSystems.join(directory, pattern)])[0]
    return sorted(m.path for m in match.metadata_list
                  if not os.path.basename(m.path).startswith("."))


def outputs_exist(manifest: Manifest) -> bool:
    return all(FileSystems.exists(path) for path in manifest.outputs)


def clear_stage(output: str, stage: str) -> None:
    """Deletes the stage's manifest first, then its outputs."""
    path = manifest_path(output, stage)
    if FileSystems.exists(path):
        FileSystems.delete([path])
    for directory in stage_dirs(output, stage):
        if FileSystems.exists(directory):
            FileSystems.delete([directory])


def parquet_rows(paths: Sequence[str]) -> int:
    """Total row count of Parquet files, read from their footers."""
    total = 0
    for path in paths:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as fh:
            total += pq.ParquetFile(fh).metadata.num_rows
    return total
