"""When ``pipelines.anomaly train`` reuses a trained detector (pipelines/anomaly.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from models.anomaly import DetectorParams
from models.textlm import LMParams
from pipelines.anomaly import training_key, trained_version

CORPUS = ["first page text", "second page text"]
REFERENCE = ["a reference book"]


def key(**change: object) -> str:
    args = {"corpus": CORPUS, "reference": REFERENCE, "params": DetectorParams(), "seed": 0,
            "clean_hash": "c1", "code": "0.1+abc"}
    args.update(change)
    return training_key(**args)  # type: ignore[arg-type]


def test_the_key_changes_with_every_input() -> None:
    base = key()
    assert key() == base  # deterministic
    changed = [
        key(corpus=CORPUS + ["third"]), key(corpus=["first page text!", CORPUS[1]]),
        key(reference=[]), key(reference=["another book"]),
        key(corpus=CORPUS[:1], reference=[CORPUS[1]] + REFERENCE),  # a text moved across the boundary
        key(params=DetectorParams(lm=LMParams(steps=301))), key(params=DetectorParams(flag_rate=0.1)),
        key(seed=1), key(clean_hash="c2"), key(code="0.1+abd"),
    ]
    assert base not in changed and len(set(changed)) == len(changed)


def write_version(model_dir: Path, version: str, key_value: object, files: bool = True) -> None:
    base = model_dir / version
    base.mkdir(parents=True)
    (base / "meta.json").write_text(json.dumps({"training": {"key": key_value}}))
    if files:
        for name in ("tokenizer.model", "lm.pt", "autoencoders.pt"):
            (base / name).write_bytes(b"x")
    (model_dir / "CURRENT").write_text(version + "\n")


def test_only_the_current_version_with_the_same_key_and_its_files_is_reused(tmp_path: Path) -> None:
    assert trained_version(str(tmp_path / "none"), "k") == ""
    write_version(tmp_path / "m", "v1", "k")
    assert trained_version(str(tmp_path / "m"), "k") == "v1"
    assert trained_version(str(tmp_path / "m"), "other") == ""
    write_version(tmp_path / "n", "v1", "k", files=False)
    assert trained_version(str(tmp_path / "n"), "k") == ""  # a version whose files are gone
    write_version(tmp_path / "o", "v1", None)
    assert trained_version(str(tmp_path / "o"), "k") == ""  # trained before keys existed
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "CURRENT").write_text("v9\n")
    assert trained_version(str(tmp_path / "p"), "k") == ""  # CURRENT names a missing version


@pytest.mark.parametrize("meta", ["not json", "[1, 2]", '{"training": "x"}'])
def test_a_damaged_meta_is_never_reused(tmp_path: Path, meta: str) -> None:
    write_version(tmp_path / "m", "v1", "k")
    (tmp_path / "m" / "v1" / "meta.json").write_text(meta)
    assert trained_version(str(tmp_path / "m"), "k") == ""
