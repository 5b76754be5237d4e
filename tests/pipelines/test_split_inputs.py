"""A large JSONL input is read as byte ranges by many workers: the documents are those
of a whole-file read, on FnApiRunner and with two worker processes."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.run import main


def _config(tmp_path: Path, name: str, data: Path, split: int, runner: list[str]) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"""
output: {tmp_path / name}
inputs:
  - {{format: jsonl, path: "{data}"}}
stages: [extract]
read: {{split_bytes: {split}}}
beam_args: {json.dumps(runner)}
""")
    return str(path)


def _ids(out: Path) -> list[str]:
    return sorted(r["id"] for f in (out / "docs" / "extract").glob("*.parquet")
                  for r in pq.read_table(f, columns=["id"]).to_pylist())


@pytest.mark.parametrize("runner", [["--runner=FnApiRunner"],
                                    ["--runner=FnApiRunner", "--direct_running_mode=multi_processing",
                                     "--direct_num_workers=2"]])
def test_split_read_equals_whole_read(tmp_path, runner):
    data = tmp_path / "docs.jsonl"
    with data.open("w") as fh:
        for i in range(3000):
            obj = {"text": f"Document {i} says something about item {i * 7 % 101}."}
            if i % 2:
                obj["id"] = f"doc-{i}"
            fh.write(json.dumps(obj) + "\n")
    size = data.stat().st_size
    assert main(["--config", _config(tmp_path, "whole", data, 10 * size, runner), "--log-level", "ERROR"],
                out=io.StringIO()) == 0
    assert main(["--config", _config(tmp_path, "split", data, 4096, runner), "--log-level", "ERROR"],
                out=io.StringIO()) == 0
    whole, split = _ids(tmp_path / "whole"), _ids(tmp_path / "split")
    assert len(whole) == 3000 and split == whole
    manifest = json.loads((tmp_path / "split" / "manifests" / "extract.json").read_text())
    assert manifest["counts"]["records_in"] == 3000
