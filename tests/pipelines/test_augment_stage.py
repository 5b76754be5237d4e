"""The augment stage in a job: planned from the stage table, run, counted, resumed."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.config import ConfigError, load_config
from pipelines.run import main


def _job(tmp_path: Path, augment: str) -> str:
    data = tmp_path / "docs.jsonl"
    if not data.exists():
        data.write_text("".join(json.dumps({"id": f"d{i}", "text": f"Document number {i} has some words.",
                                            "lang": "en"}) + "\n" for i in range(40)))
    config = tmp_path / "job.yaml"
    config.write_text(f"""
output: {tmp_path / 'out'}
inputs:
  - {{format: jsonl, path: "{data}"}}
augment:
{augment}
beam_args: ["--runner=FnApiRunner"]
""")
    return str(config)


UPSAMPLE = """
  upsample:
    - {name: sampled, repeat: 3, when: {sample_rate: 0.25, seed: 3}}
"""


def test_upsampling_stage_annotates_every_document_and_reconciles(tmp_path):
    from transforms.augment.select import in_sample

    out = io.StringIO()
    assert main(["--config", _job(tmp_path, UPSAMPLE), "--log-level", "ERROR", "--no-progress"], out=out) == 0
    row = next(line for line in out.getvalue().splitlines() if line.startswith("augment"))
    assert row.split()[:6] == ["augment", "40", "40", "0", "0", "in=out+r+f"]
    docs = pq.read_table(tmp_path / "out" / "docs" / "augment").to_pylist()
    repeats = {d["source_id"]: (d["repeats"], tuple(d["repeat_rules"])) for d in docs}
    expected = {d["source_id"]: ((3, ("sampled",)) if in_sample(d["id"], 0.25, 3) else (1, ())) for d in docs}
    assert sorted(expected) == sorted(f"d{i}" for i in range(40))
    assert repeats == expected
    upsampled = sum(r == 3 for r, _ in repeats.values())
    assert 4 <= upsampled <= 18
    report = json.loads((tmp_path / "out" / "report" / "report.json").read_text())["augment"]
    assert report["rows"] == [{"group": "original", "documents": 40, "tokens": None, "rejected": {},
                               "chars": sum(len(f"Document number {i} has some words.") for i in range(40))}]
    assert report["upsample_rules"] == {"sampled": {"documents": upsampled, "extra_copies": 2 * upsampled}}
    assert report["extra_copies"] == 2 * upsampled
    page = (tmp_path / "out" / "report" / "report.html").read_text()
    assert "<h2 id=\"s-augment\">Augmentation</h2>" in page and f"sampled: {upsampled:,} documents" in page
    again = io.StringIO()
    assert main(["--config", _job(tmp_path, UPSAMPLE), "--log-level", "ERROR", "--no-progress", "--no-report"],
                out=again) == 0
    assert next(line for line in again.getvalue().splitlines()
                if line.startswith("augment")).endswith("resumed (manifest matched)")


@pytest.mark.parametrize("augment, message", [
    ("  upsample: [{name: a, repeat: 1}]", "augment.upsample[0]: upsample rule 'a': repeat must be at least 2"),
    ("  max_repeats: 2\n  upsample: [{name: a, repeat: 3}]", "repeats more than max_repeats"),
    ("  rephrase: {model: m, endpoint: 'http://u:p@h:1'}", "endpoint: no credentials, query or fragment"),
    ("  upsample: [{name: a, repeat: 2, when: {labels: [science]}}]", "'set=value'"),
    ("  rephrase: {model: m, endpoint: 'http://127.0.0.1:9'}", "augment.rephrase needs a clean: section"),
])
def test_bad_augment_sections_are_config_errors(tmp_path, augment, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_config(_job(tmp_path, augment))
