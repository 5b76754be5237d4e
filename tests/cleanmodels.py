"""Small real models for clean-stage tests, trained once per test session on shared data."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Sequence

import pytest

from benchmarks.anomalies import build, clean_chunks
from models.anomaly import DetectorParams, train_detector
from models.autoencoder import AutoencoderParams
from models.fasttext_models import LanguageIdentifier, train_classifier
from models.textlm import LMParams
from tests.conftest import shared
from transforms.clean.coherence import cross_signals
from transforms.clean.features import FEATURE_NAMES, FEATURE_SET, feature_matrix
from transforms.clean.signals import compute_signals

# A small language model: the decisions (calibration, combination, threshold) are the
# production ones; only the sizes and the training budget are cut for test time.
SMALL = DetectorParams(lm=LMParams(vocab_size=1000, dim=32, max_tokens=128, steps=120, batch_size=16),
                       representation=AutoencoderParams(hidden=(16, 4), steps=300))


def unwrap(text: str) -> str:
    """Joins hard-wrapped lines: one line per paragraph."""
    return re.sub(r"(?<!\n)\n(?!\n)", " ", text)


def train_small_detector(reference: Sequence[str], corpus: Sequence[str], model_dir: str,
                         params: DetectorParams = SMALL, seed: int = 0) -> object:
    """A detector trained on real text with lid.176 languages, saved under ``model_dir``."""
    lid = LanguageIdentifier.load(str(shared("models", "lid.176.ftz")))
    ref_langs = [lang for lang, _ in lid.predict(list(reference))]
    corpus_langs = [lang for lang, _ in lid.predict(list(corpus))]
    detector = train_detector(list(reference), ref_langs, feature_matrix([compute_signals(t) for t in reference]),
                              list(corpus), corpus_langs, feature_matrix([compute_signals(t) for t in corpus]),
                              FEATURE_NAMES, FEATURE_SET, params, seed,
                              reference_cross=cross_signals(list(reference), ref_langs, lid.predict),
                              corpus_cross=cross_signals(list(corpus), corpus_langs, lid.predict))
    detector.save(model_dir)
    return detector


_TRAINED: dict[str, str] = {}  # one training per test process, whichever module asks first


@pytest.fixture(scope="session")
def clean_models(tmp_path_factory) -> dict[str, str]:
    """Paths: lid (the real lid.176.ftz), anomaly (detector directory), quality (fastText).
    Each test module imports this fixture (a separate fixture to pytest), so the models
    are cached here and trained once per process."""
    if not _TRAINED:
        _TRAINED.update(_train_clean_models(tmp_path_factory))
    return dict(_TRAINED)


def _train_clean_models(tmp_path_factory) -> dict[str, str]:
    text_dir = shared("text")
    tmp: Path = tmp_path_factory.mktemp("models")
    texts, kinds = build(text_dir, per_kind=10)
    # Web text has one line per paragraph: undo the books' hard wraps.
    texts = [unwrap(t) if k == "clean" else t for t, k in zip(texts, kinds)]
    books = [unwrap(b) for b in clean_chunks(text_dir)]
    train_small_detector(books[200:], texts, str(tmp / "anomaly"))
    noise = [t for t, k in zip(texts, kinds) if k != "clean"]
    rng = random.Random(0)
    shuffled = [" ".join(rng.sample(b.split(), len(b.split()))) for b in books[:200]]
    quality = tmp / "quality.bin"
    train_classifier(books[200:], shuffled + noise, str(quality), epoch=10)
    return {"lid": str(shared("models", "lid.176.ftz")), "anomaly": str(tmp / "anomaly"), "quality": str(quality)}
