"""Small real models for clean-stage tests, trained once per test session on shared data."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from benchmarks.anomalies import build, clean_chunks
from models.anomaly import train as train_anomaly
from models.fasttext_models import train_classifier
from tests.conftest import shared
from transforms.clean.features import FEATURE_NAMES, feature_matrix
from transforms.clean.signals import compute_signals


def unwrap(text: str) -> str:
    """Joins hard-wrapped lines: one line per paragraph."""
    return re.sub(r"(?<!\n)\n(?!\n)", " ", text)


@pytest.fixture(scope="session")
def clean_models(tmp_path_factory) -> dict[str, str]:
    """Paths: lid (the real lid.176.ftz), anomaly (autoencoder), quality (fastText)."""
    text_dir = shared("text")
    tmp: Path = tmp_path_factory.mktemp("models")
    texts, kinds = build(text_dir, per_kind=10)
    # Web text has one line per paragraph: undo the books' hard wraps.
    texts = [unwrap(t) if k == "clean" else t for t, k in zip(texts, kinds)]
    anomaly = tmp / "anomaly.pt"
    train_anomaly(feature_matrix([compute_signals(t) for t in texts]), FEATURE_NAMES,
                  contamination=0.07).save(str(anomaly))
    books = [unwrap(b) for b in clean_chunks(text_dir)]
    noise = [t for t, k in zip(texts, kinds) if k != "clean"]
    rng = random.Random(0)
    shuffled = [" ".join(rng.sample(b.split(), len(b.split()))) for b in books[:200]]
    quality = tmp / "quality.bin"
    train_classifier(books[200:], shuffled + noise, str(quality), epoch=10)
    return {"lid": str(shared("models", "lid.176.ftz")), "anomaly": str(anomaly), "quality": str(quality)}
