"""A real labeller for label-stage tests: language of Leipzig web sentences (shared data).

The label set is ``language`` over four languages; the seed set is small on purpose (15
sentences each), so the model is unsure about a real share of the documents and the
review queue is not empty.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from models.labeller import TrainParams, train_labeller
from tests.conftest import shared

LANGS = ("de", "en", "es", "fr")
PARAMS = TrainParams(minn=2, maxn=4)


@dataclass(frozen=True)
class LabelData:
    model_dir: str  # the labeller's directory (CURRENT + versions)
    docs: str  # JSONL input: id, text, url (200 per language, shuffled)
    seed: str  # JSONL seed set: text, label
    truth: dict  # doc id -> true language


def sentences(lang: str) -> list[str]:
    path = shared("langid", "lingua_sentences", f"{lang}.txt")
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_label_data(root: Path, per_lang: int = 200, seed_per_lang: int = 15) -> LabelData:
    rows, seed, truth = [], [], {}
    for lang in LANGS:
        lines = sentences(lang)
        for i, text in enumerate(lines[:per_lang]):
            rows.append({"id": f"{lang}-{i}", "text": text, "url": f"https://example.org/{lang}/{i}"})
            truth[f"{lang}-{i}"] = lang
        seed += [{"text": t, "label": lang} for t in lines[900:900 + seed_per_lang]]
    random.Random(1).shuffle(rows)
    root.mkdir(parents=True, exist_ok=True)
    docs, seeds = root / "docs.jsonl", root / "seed.jsonl"
    docs.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    seeds.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in seed), encoding="utf-8")
    model_dir = root / "labeller" / "language"
    # 60 seed examples: a cold-start model, too few to calibrate (asked for explicitly), so
    # that the review loop has uncertain documents to queue
    train_labeller([r["text"] for r in seed], [r["label"] for r in seed], "language", LANGS,
                   str(model_dir), PARAMS, allow_uncalibrated=True)
    return LabelData(str(model_dir), str(docs), str(seeds), truth)


@pytest.fixture(scope="session")
def label_data(tmp_path_factory) -> LabelData:
    return write_label_data(tmp_path_factory.mktemp("labels"))


def label_section(model_dir: str, budget: int = 20, threshold: float = 0.9,
                  sampling: str = "uncertainty") -> dict:
    return {"review_budget": budget, "sampling": sampling,
            "sets": [{"name": "language", "values": list(LANGS), "model": model_dir,
                      "accept_threshold": threshold}]}
