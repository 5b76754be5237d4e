"""The labeller: calibration maths, training, versions, loading errors."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from models.files import ModelError
from models.labeller import (CURRENT, MIN_CALIBRATION_EXAMPLES, examples_for_holdout, is_holdout, Labeller, TrainParams, apply_temperature, auto_accept,
                             fit_temperature, reliability, train_labeller)
from pipelines.labeller import read_examples
from tests.labelmodels import LANGS, PARAMS, label_data, sentences  # noqa: F401  (fixture)


def test_fit_temperature_undoes_known_overconfidence():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2.0, size=(4000, 5))
    calibrated = apply_temperature(np.exp(logits) / np.exp(logits).sum(1, keepdims=True), 1.0)
    truth = np.array([rng.choice(5, p=p) for p in calibrated])
    overconfident = apply_temperature(calibrated, 0.5)  # sharpened: T=2 undoes it
    t = fit_temperature(overconfident, truth)
    assert 1.7 < t < 2.3
    assert fit_temperature(calibrated, truth) == pytest.approx(1.0, abs=0.15)


def test_reliability_and_ece():
    conf = np.array([0.95] * 100 + [0.55] * 100)
    correct = np.array([True] * 95 + [False] * 5 + [True] * 55 + [False] * 45)
    rel = reliability(conf, correct)
    assert rel["ece"] == pytest.approx(0.0, abs=1e-9)
    assert [b["count"] for b in rel["bins"]] == [100, 100]
    over = reliability(np.full(100, 0.99), np.array([True] * 50 + [False] * 50))
    assert over["ece"] == pytest.approx(0.49)


def test_auto_accept_picks_lowest_threshold_meeting_precision():
    conf = np.array([0.99, 0.98, 0.97, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3])
    correct = np.array([1, 1, 1, 1, 1, 0, 1, 0, 0, 0], dtype=bool)
    result = auto_accept(conf, correct, 0.85)
    assert result["threshold"] == 0.6 and result["fraction"] == 0.7
    assert result["precision"] == pytest.approx(6 / 7, abs=1e-4)
    assert auto_accept(conf, correct, 1.0)["fraction"] == 0.5
    assert auto_accept(conf, np.zeros(10, dtype=bool), 0.9)["fraction"] == 0.0


@pytest.mark.parametrize("conf,correct,target,expected", [
    ([0.9, 0.8, 0.8], [1, 1, 0], 0.9, (0.9, 1 / 3, 1.0)),  # the tie at 0.8 cannot be split
    ([0.9, 0.8, 0.8], [1, 1, 0], 0.6, (0.8, 1.0, 0.6667)),
    ([0.8, 0.8, 0.8], [1, 1, 0], 0.9, (1.01, 0.0, 0.0)),
    ([0.95, 0.9, 0.9, 0.7], [1, 1, 1, 0], 0.9, (0.9, 0.75, 1.0)),
])
def test_auto_accept_never_reports_a_set_no_threshold_accepts(conf, correct, target, expected):
    result = auto_accept(np.array(conf), np.array(correct, dtype=bool), target)
    assert (result["threshold"], result["fraction"], result["precision"]) == pytest.approx(expected, abs=1e-4)
    if result["fraction"]:
        assert result["precision"] >= target  # the docstring's promise


def test_train_save_load_same_predictions_and_versions(tmp_path):
    texts, labels = [], []
    for lang in LANGS:
        lines = sentences(lang)[:80]
        texts += lines
        labels += [lang] * len(lines)
    model_dir = str(tmp_path / "language")
    trained, meta = train_labeller(texts, labels, "language", LANGS, model_dir, PARAMS)
    assert meta["holdout_examples"] >= 30 and meta["reliability_calibrated"]["accuracy"] > 0.8
    assert open(os.path.join(model_dir, CURRENT)).read().strip() == meta["version"]
    loaded = Labeller.load(model_dir, name="language", values=LANGS)
    probe = [s for lang in LANGS for s in sentences(lang)[500:510]]
    np.testing.assert_allclose(loaded.predict_proba(probe), trained.predict_proba(probe), rtol=1e-6)
    assert loaded.predict_proba(probe).sum(axis=1) == pytest.approx(np.ones(len(probe)))
    accuracy = np.mean(loaded.predict_proba(probe).argmax(1) == np.repeat(np.arange(4), 10))
    assert accuracy > 0.85
    # a second version leaves the first in place and becomes CURRENT
    _, meta2 = train_labeller(texts[::2], labels[::2], "language", LANGS, model_dir, PARAMS)
    assert meta2["version"] != meta["version"]
    assert Labeller.load(model_dir).version == meta2["version"]
    assert Labeller.load(model_dir, version=meta["version"]).version == meta["version"]


def test_load_errors_name_the_problem(tmp_path, label_data):
    with pytest.raises(ModelError, match="CURRENT missing"):
        Labeller.load(str(tmp_path / "nothing"))
    with pytest.raises(ModelError, match="taxonomy differs"):
        Labeller.load(label_data.model_dir, values=("de", "en", "it", "fr"))
    with pytest.raises(ModelError, match="label set"):
        Labeller.load(label_data.model_dir, name="topic")
    broken = tmp_path / "broken"
    (broken / "v1").mkdir(parents=True)
    (broken / CURRENT).write_text("v1\n")
    (broken / "v1" / "meta.json").write_text(json.dumps({"name": "x", "values": ["a", "b"], "version": "v1"}))
    (broken / "v1" / "model.bin").write_bytes(b"not a model")
    with pytest.raises(ModelError, match="not a fastText model"):
        Labeller.load(str(broken))


def test_training_input_errors(tmp_path):
    with pytest.raises(ValueError, match="outside the taxonomy"):
        train_labeller(["a b", "c d"], ["de", "xx"], "language", LANGS, None, TrainParams())
    with pytest.raises(ValueError, match="at least two values"):
        train_labeller(["a b", "c d"], ["de", "de"], "language", LANGS, None, TrainParams())
    bad = tmp_path / "seed.jsonl"
    bad.write_text('{"text": "x", "label": "de"}\n{"text": 3}\nnot json\n')
    with pytest.raises(ValueError, match=r"seed.jsonl:2"):
        read_examples(str(bad))


def test_hostile_texts(label_data):
    model = Labeller.load(label_data.model_dir)
    texts = ["", " \r\n\t ", "a\x00b", "x" * 10_000_000, "\ud800 lone surrogate", "😀" * 100, "ok"]
    proba = model.predict_proba(texts)
    assert proba.shape == (len(texts), len(LANGS))
    assert np.allclose(proba.sum(axis=1), 1.0)
    # no evidence, no confidence: blank documents get the uniform distribution
    assert np.allclose(proba[0], 1 / len(LANGS)) and np.allclose(proba[1], 1 / len(LANGS))


def test_too_few_examples_to_calibrate_refuse_or_warn_when_allowed(caplog):
    """Fewer than MIN_CALIBRATION_EXAMPLES held out: refused, naming the set, the counts by label
    and how many more examples to add;
    allowed explicitly, the model keeps temperature 1 and a warning says it is uncalibrated."""
    texts = [s for lang in LANGS for s in sentences(lang)[:25]]  # 100 examples, ~20 held out
    labels = [lang for lang in LANGS for _ in range(25)]
    with pytest.raises(ValueError, match=r"label set 'language': 100 examples put \d+ in the hash-chosen 20% "
                                         r"held out .* at least 30 are needed \(by label: ") as refused:
        train_labeller(texts, labels, "language", LANGS, None, PARAMS)
    held = sum(is_holdout(t, lab, 0.2, PARAMS.seed) for t, lab in zip(texts, labels))
    more = examples_for_holdout(30 - held, 0.2)
    message = str(refused.value)
    assert f"Add about {more} more labelled examples (about {-(-more // len(LANGS))} of each label)" in message
    for lang in LANGS:
        n_held = sum(is_holdout(t, lang, 0.2, PARAMS.seed) for t in sentences(lang)[:25])
        assert f"{lang} 25 ({n_held} held out)" in message
    with caplog.at_level("WARNING", logger="models.labeller"):
        _, meta = train_labeller(texts, labels, "language", LANGS, None, PARAMS, allow_uncalibrated=True)
    assert meta["holdout_examples"] < MIN_CALIBRATION_EXAMPLES and meta["temperature"] == 1.0
    assert meta["reliability_calibrated"] is None and "UNCALIBRATED" in caplog.text


def test_examples_for_holdout_is_the_binomial_quantile():
    """The fewest examples whose held-out count reaches the need with 95% odds: 193 for
    30 at 20% (the expectation alone, 150, falls short about half the time)."""
    assert examples_for_holdout(30, 0.2) == 193
    assert examples_for_holdout(1, 0.2) == 14  # 1 - 0.8^14 = 0.956; 0.8^13 leaves 0.945
    assert examples_for_holdout(0, 0.2) == 0 and examples_for_holdout(-3, 0.2) == 0
    assert examples_for_holdout(5, 0.0) == -1
    assert examples_for_holdout(30, 0.2, confidence=0.5) == 149  # about the mean
