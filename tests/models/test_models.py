"""Model wrappers: load checks, train -> save -> load -> same predictions, real accuracy."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.anomalies import build
from benchmarks.bench_langid import evaluate
from models.anomaly import AnomalyDetector
from models.fasttext_models import LanguageIdentifier, TextClassifier, train_classifier
from models.files import ModelError
from tests.cleanmodels import clean_models  # noqa: F401 (fixture)
from tests.conftest import shared


def test_language_id_accuracy_on_real_sentences():
    shared("langid", "lingua_sentences")
    rows = evaluate()
    assert len(rows) == 20
    assert np.mean([r["accuracy"] for r in rows]) > 0.97
    assert min(r["accuracy"] for r in rows) > 0.88
    assert np.mean([r["accuracy_kept"] for r in rows]) > 0.99


@pytest.mark.parametrize("text", ["", "😀😀", "a\x00b", "lone \ud800", "x" * 1_000_000])
def test_language_id_survives_hostile_text(text):
    model = LanguageIdentifier.load(str(shared("models", "lid.176.ftz")))
    (lang, score), = model.predict([text.encode("utf-8", "replace").decode("utf-8")])
    assert isinstance(lang, str) and 0.0 <= score <= 1.0


def test_missing_and_corrupt_models(tmp_path):
    with pytest.raises(ModelError, match="not found"):
        LanguageIdentifier.load(str(tmp_path / "none.ftz"))
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\x00garbage" * 100)
    with pytest.raises(ModelError, match="not a fastText model"):
        LanguageIdentifier.load(str(bad))
    with pytest.raises(ModelError, match="no trained anomaly detector"):
        AnomalyDetector.load(str(tmp_path))
    with pytest.raises(ModelError, match="label 'hq' not in model labels"):
        TextClassifier.load(str(shared("models", "lid.176.ftz")))


def test_quality_classifier_round_trip_and_accuracy(clean_models, tmp_path):
    model = TextClassifier.load(clean_models["quality"])
    books = [t for t, k in zip(*build(shared("text"), per_kind=5, seed=7)) if k == "clean"][:50]
    spam = ["cheap best price buy online discount casino " * 40, "qwe rty uio pas dfg " * 100]
    scores = model.predict(books + spam)
    assert scores[:50].mean() > 0.6 and scores[50:].max() < scores[:50].min()
    again = TextClassifier.load(clean_models["quality"]).predict(books + spam)
    assert np.array_equal(scores, again)


def test_classifier_training_needs_both_classes(tmp_path):
    with pytest.raises(ValueError, match="positive and negative"):
        train_classifier(["a text"], [], str(tmp_path / "m.bin"))


@pytest.mark.parametrize("code,label", [("nb", "no"), ("NB", "no"), ("no", "no"), ("nn", "nn"), ("iw", "he"),
                                        ("in", "id"), ("fil", "tl"), ("zh_TW", "zh"), ("zh-Hans", "zh"),
                                        (" en ", "en"), ("pt", "pt")])
def test_canonical_language(code, label):
    from models.fasttext_models import canonical_language

    assert canonical_language(code) == label


def test_every_alias_names_a_label_of_lid176():
    from models.fasttext_models import LANGUAGE_ALIASES, LanguageIdentifier

    labels = LanguageIdentifier.load(str(shared("models", "lid.176.ftz"))).labels
    assert len(labels) == 176 and set(LANGUAGE_ALIASES.values()) <= labels
    assert not set(LANGUAGE_ALIASES) & labels  # an alias never hides a real label
