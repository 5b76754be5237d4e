"""Manifests: atomic write, read back, resume matching, clearing a stage."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.manifest import (
    Manifest,
    StageCounts,
    clear_stage,
    list_files,
    outputs_exist,
    parquet_rows,
    read_manifest,
    write_manifest,
)
from pipelines.run import main
from tests.conftest import shared


def manifest(tmp_path, outputs) -> Manifest:
    return Manifest(stage="extract", config_hash="c", inputs_fingerprint="f", code_version="v",
                    counts=StageCounts(3, 1, 1, 1, {"empty": 1}, {"ValueError": 1}),
                    inputs=["a"], outputs=outputs, started_at="s", finished_at="e", runner="r")


def test_write_read_match(tmp_path):
    out = str(tmp_path)
    part = tmp_path / "docs" / "extract" / "part-00000-of-00001.parquet"
    part.parent.mkdir(parents=True)
    pq.write_table(pa.table({"x": [1, 2, 3]}), part)
    m = manifest(tmp_path, [str(part)])
    write_manifest(out, m)
    assert not (tmp_path / "manifests" / "extract.json.tmp").exists()
    back = read_manifest(out, "extract")
    assert back == m and back.counts.reconciles
    assert back.matches("c", "f", "v") and not back.matches("c", "other", "v")
    assert not back.matches("c", "f", "v2")
    assert outputs_exist(back) and parquet_rows(list_files(str(part.parent), "*.parquet")) == 3
    clear_stage(out, "extract")
    assert read_manifest(out, "extract") is None and not part.exists()


def test_unreadable_manifest_is_ignored(tmp_path):
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "extract.json").write_text("{not json")
    assert read_manifest(str(tmp_path), "extract") is None


def test_leftovers_of_a_crashed_run_are_cleared(tmp_path):
    """No manifest (the run died before writing it): old shards must not survive the rerun."""
    out = tmp_path / "out"
    stale = out / "docs" / "extract" / "part-00000-of-00003.parquet"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"partial garbage")
    config = tmp_path / "job.yaml"
    config.write_text(f"output: {out}\ninputs:\n  - format: warc\n"
                      f"    path: {shared('warc', 'warcio_example.warc.gz')}\n")
    assert main(["--config", str(config), "--log-level", "WARNING"], out=io.StringIO()) == 0
    assert not stale.exists()
    manifest_data = json.loads((out / "manifests" / "extract.json").read_text())
    assert manifest_data["counts"]["out"] == 1 and len(manifest_data["outputs"]) == 3
