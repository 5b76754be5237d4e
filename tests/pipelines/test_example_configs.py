"""The example configs run end to end as shipped (FnApiRunner), into a temporary output:
Dolma JSONL (nested fields by dotted path) and FineWeb Parquet, over examples/data."""

from __future__ import annotations

import glob
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.run import main as run_main
from tests.conftest import ROOT, shared


def run_example(name: str, output: Path) -> str:
    shared("models", "lid.176.ftz")  # the examples' language-ID model (skips where absent)
    out = io.StringIO()
    code = run_main(["--config", str(ROOT / "configs" / name), "--output", str(output), "--no-progress",
                     "--no-report", "--log-level", "WARNING"], out=out)
    assert code == 0, out.getvalue()
    return out.getvalue()


def rows(output: Path, folder: str) -> list[dict]:
    return [r for f in sorted(glob.glob(str(output / folder / "*.parquet"))) for r in pq.read_table(f).to_pylist()]


@pytest.fixture(scope="module")
def dolma_lines() -> list[dict]:
    return [json.loads(line) for line in (ROOT / "examples" / "data" / "dolma-sample.jsonl").read_text().splitlines()]


def test_the_dolma_jsonl_example(tmp_path, monkeypatch, dolma_lines):
    monkeypatch.chdir(ROOT)  # the config's paths are relative to the repository
    printed = run_example("jsonl.yaml", tmp_path / "out")
    docs = {d["source_id"]: d for d in rows(tmp_path / "out", "docs/extract")}
    assert len(docs) == len(dolma_lines) == 6
    for line in dolma_lines:  # metadata.url, created and metadata.language read by name
        doc = docs[line["id"]]
        assert (doc["url"], doc["fetched_at"]) == (line["metadata"].get("url", ""), line["created"])
    assert "noted:    missing_url=1" in printed  # cc-0004 has no metadata.url
    assert "rejected: duplicate_text=1" in printed  # cc-0005 repeats cc-0002
    kept = {d["source_id"]: d["lang"] for d in rows(tmp_path / "out", "docs/dedup_minhash")}
    assert kept["cc-0003"] == "de" and "cc-0005" not in kept and "cc-0002" in kept


def test_the_parquet_example(tmp_path, monkeypatch, dolma_lines):
    monkeypatch.chdir(ROOT)
    source = pq.read_table(ROOT / "examples" / "data" / "fineweb-sample.parquet").to_pylist()
    assert [r["text"] for r in source] == [d["text"] for d in dolma_lines]  # the samples hold the same documents
    printed = run_example("parquet.yaml", tmp_path / "out")
    docs = {d["id"]: d for d in rows(tmp_path / "out", "docs/extract")}
    assert {(d["url"], d["fetched_at"]) for d in docs.values()} == {(r["url"], r["date"]) for r in source}
    assert "missing_" not in printed  # default-named and flat fields: nothing counted
    index = json.loads(Path(glob.glob(str(tmp_path / "out" / "tokens" / "*" / "index.json"))[0]).read_text())
    assert index["num_docs"] == len(rows(tmp_path / "out", "docs/dedup_minhash")) == 4
