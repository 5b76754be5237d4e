"""The learned anomaly detector (models/anomaly.py, textlm.py, autoencoder.py): the language
model trains and scores, artifacts round-trip through ``torch.load(weights_only=True)``, the
threshold is the one calibrated from the target flag rate, bad artifacts are ModelErrors."""

from __future__ import annotations

import dataclasses
import json
import random
import shutil

import numpy as np
import pytest
import torch

from benchmarks.anomalies import build, clean_chunks, planted_new
from benchmarks.bench_anomaly import auroc
from models.anomaly import (
    ARTIFACT_KIND,
    ARTIFACT_VERSION,
    CURRENT,
    DETECTORS,
    AnomalyDetector,
    DetectorParams,
    combine,
    read_current,
)
from models.autoencoder import AutoencoderParams, train_autoencoder
from models.files import ModelError
from models.textlm import LMParams, train_lm, unigram_nll
from pipelines.report_anomaly import DETECTOR_FIELDS
from tests.cleanmodels import SMALL, clean_models, unwrap  # noqa: F401 (fixture)
from tests.conftest import shared
from transforms.clean.coherence import cross_signals
from transforms.clean.features import FEATURE_NAMES, FEATURE_SET, feature_matrix
from transforms.clean.signals import compute_signals


@pytest.fixture(scope="module")
def books() -> list[str]:
    return [unwrap(c) for c in clean_chunks(shared("text"))]


def test_language_model_trains_and_scores_junk_above_held_out_prose(books):
    lm = train_lm(books[40:240], LMParams(vocab_size=800, dim=32, max_tokens=128, steps=400, batch_size=16))
    rng = random.Random(0)
    junk = [planted_new(kind, rng, books[:40]) for kind in ("encoded", "tables", "markup") for _ in range(5)]
    out = lm.score(books[:20] + junk + [""])
    assert out.shape == (36, 3 + 32) and np.isfinite(out).all()
    assert not out[-1].any()  # no token: zeros
    labels = np.array([0] * 20 + [1] * 15)
    assert auroc(out[:35, 0], labels) > 0.9  # NLL per byte
    # the unigram column: the buffer's NLL of the scored tokens per byte
    ids = lm.token_ids(books[:1])[0]
    buffer, sizes = lm.net.unigram_nll.numpy(), lm.net.piece_bytes.numpy()
    assert out[0, 2] == pytest.approx(buffer[ids].sum() / sizes[ids].sum(), rel=1e-5)
    # shuffled words keep their unigram cost and raise the model's: the context score (model
    # minus unigram) ranks word salad above the same texts in order, perplexity alone hardly
    salad = lm.score([planted_new("word_salad", rng, [b]) for b in books[:20]])
    assert abs(salad[:, 2].mean() - out[:20, 2].mean()) < 0.05 * out[:20, 2].mean()
    ordered = np.array([0] * 20 + [1] * 20)
    context = auroc(np.concatenate([out[:20, 0] - out[:20, 2], salad[:, 0] - salad[:, 2]]), ordered)
    assert context > 0.8 and context > auroc(np.concatenate([out[:20, 0], salad[:, 0]]), ordered) + 0.1
    again = lm.score(books[:3])
    assert np.allclose(again, out[:3], atol=1e-5)  # deterministic in eval mode
    # the first score_tokens tokens are scored, whatever the training window
    assert lm.params.score_tokens == 128 and lm.batch_tensor(books[:2]).shape == (2, 1 + 128)
    short = dataclasses.replace(lm, params=dataclasses.replace(lm.params, score_tokens=16))
    ids = short.batch_tensor(books[:2])
    assert ids.shape == (2, 17) and (ids[:, 1:] != lm.net.pad_id).all()
    assert ids[0, 1:].tolist() == lm.token_ids(books[:1])[0][:16]


def test_unigram_nll_is_add_one_smoothed_with_a_free_padding_id():
    # counts 1+1, 1+2, 1+1, 1+0 of 8: the unseen piece 3 costs log 8, the padding id nothing
    expected = -np.log(np.array([2, 3, 2, 1]) / 8.0)
    assert unigram_nll([[0, 1, 1], [2]], 4).tolist() == pytest.approx(expected.tolist() + [0.0])


def test_report_plots_every_detector():
    assert DETECTOR_FIELDS == DETECTORS


def test_language_model_params_validate():
    with pytest.raises(ValueError, match="vocab_size"):
        LMParams(vocab_size=100)
    with pytest.raises(ValueError, match="dilations"):
        LMParams(dilations=())
    with pytest.raises(ValueError, match="flag_rate"):
        DetectorParams(flag_rate=0.7)
    with pytest.raises(ValueError, match="weights"):
        DetectorParams(weights=(1.0, 1.0, 1.0))
    for bad in [(1.0, -0.5, 1.0, 1.0, 1.0, 1.0), (0.0,) * 6, (1.0, float("nan"), 1.0, 1.0, 1.0, 1.0),
                (1.0, float("inf"), 1.0, 1.0, 1.0, 1.0)]:
        with pytest.raises(ValueError, match="weights"):
            DetectorParams(weights=bad)
    assert DetectorParams(weights=(0.0, 0.0, 1.0, 0.0, 0.0, 0.0)).weights == (0.0, 0.0, 1.0, 0.0, 0.0, 0.0)


def test_signals_autoencoder_beats_every_single_signal_on_the_planted_set():
    texts, kinds = build(shared("text"))
    labels = np.array([k != "clean" for k in kinds], dtype=int)
    x = feature_matrix([compute_signals(t) for t in texts])
    model = train_autoencoder(x, FEATURE_NAMES, AutoencoderParams(trim=float(labels.mean())))
    best_single = max(max(auroc(x[:, j], labels), 1 - auroc(x[:, j], labels)) for j in range(x.shape[1]))
    assert auroc(model.score(x), labels) > best_single
    with pytest.raises(ValueError, match="at least 10 rows"):
        train_autoencoder(np.zeros((5, 3)), ["a", "b", "c"])
    with pytest.raises(ValueError, match="trim"):
        AutoencoderParams(trim=0.7)


def test_artifact_round_trip_weights_only_and_calibrated_threshold(clean_models):
    model_dir = clean_models["anomaly"]
    version = read_current(model_dir)
    base = f"{model_dir}/{version}"
    for name in ("lm.pt", "autoencoders.pt"):  # tensors and plain values only
        torch.load(f"{base}/{name}", map_location="cpu", weights_only=True)
    meta = json.loads(open(f"{base}/meta.json", encoding="utf-8").read())
    assert meta["artifact_version"] == ARTIFACT_VERSION and meta["feature_set"] == FEATURE_SET
    assert len(meta["training"]["training_sample_sha256"]) == 64
    detector = AnomalyDetector.load(model_dir, feature_set=FEATURE_SET, feature_names=FEATURE_NAMES)
    assert detector.threshold == meta["threshold"] and detector.version == version
    # the threshold is the (1 - flag_rate) quantile of the combined score on the corpus sample
    texts, _ = build(shared("text"), per_kind=10)
    cross = cross_signals(texts, ["en"] * len(texts), lambda batch: [("en", 1.0)] * len(batch))
    scores = detector.score(texts, feature_matrix([compute_signals(t) for t in texts]), cross, ["en"] * len(texts))
    assert meta["training"]["corpus_flagged"] == pytest.approx(SMALL.flag_rate, abs=0.02)
    assert scores.combined.shape == (len(texts),) and scores.detectors.shape == (len(texts), len(DETECTORS))
    weights = np.array(meta["weights"])
    assert meta["combination_rule"] == "positive_mean" and detector.combination == "positive_mean"
    assert np.allclose(scores.combined, np.clip(scores.detectors, 0, None) @ weights / weights.sum())
    again = AnomalyDetector.load(model_dir).score(texts[:5], feature_matrix(
        [compute_signals(t) for t in texts[:5]]), cross[:5], ["en"] * 5)
    assert np.allclose(again.combined, scores.combined[:5], atol=1e-5)


def test_missing_or_mismatched_artifacts_are_model_errors(clean_models, tmp_path):
    with pytest.raises(ModelError, match="no trained anomaly detector"):
        AnomalyDetector.load(str(tmp_path / "none"))
    legacy = tmp_path / "anomaly.pt"
    legacy.write_bytes(b"\x00old" * 10)
    with pytest.raises(ModelError, match="single file"):
        AnomalyDetector.load(str(legacy))
    with pytest.raises(ModelError, match="retrain"):
        AnomalyDetector.load(clean_models["anomaly"], feature_set=FEATURE_SET, feature_names=FEATURE_NAMES[:-1])
    with pytest.raises(ModelError, match="retrain"):
        AnomalyDetector.load(clean_models["anomaly"], feature_set="other-set")
    copy = tmp_path / "copy"
    shutil.copytree(clean_models["anomaly"], copy)
    version = read_current(str(copy))
    meta_path = copy / version / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "artifact_version": ARTIFACT_VERSION + 1}))
    with pytest.raises(ModelError, match="artifact version"):
        AnomalyDetector.load(str(copy))
    # a version-4 artifact (four detectors, none across sentences): retrain, not misaligned scores
    meta_path.write_text(json.dumps({**meta, "artifact_version": 4, "detectors": list(DETECTORS[:4])}))
    with pytest.raises(ModelError, match=r"artifact version 4, this code reads 5: retrain it"):
        AnomalyDetector.load(str(copy))
    meta_path.write_text(json.dumps({**meta, "detectors": list(DETECTORS[:4])}))  # a meta.json edited by hand
    with pytest.raises(ModelError, match=r"built with the detectors \['perplexity', 'representation', 'signals', "
                                         r"'context'\] \(artifact version 5\).*cohesion.*: retrain it"):
        AnomalyDetector.load(str(copy))
    meta_path.write_text(json.dumps(meta))
    (copy / version / "lm.pt").write_bytes(b"\x00garbage" * 100)
    with pytest.raises(ModelError, match="unreadable"):
        AnomalyDetector.load(str(copy))
    (copy / CURRENT).write_text("")
    with pytest.raises(ModelError, match="empty"):
        AnomalyDetector.load(str(copy))


def test_a_model_of_another_feature_list_is_refused_naming_both(tmp_path):
    """Checked from meta.json before any weight is read: the model's path, both feature
    sets and lists, and what differs."""
    model = tmp_path / "anomaly"
    (model / "v1").mkdir(parents=True)
    (model / CURRENT).write_text("v1\n")

    def load_trained_on(feature_set: str, names: list[str]) -> str:
        (model / "v1" / "meta.json").write_text(json.dumps({
            "kind": ARTIFACT_KIND, "artifact_version": ARTIFACT_VERSION, "feature_set": feature_set,
            "feature_names": names}))
        with pytest.raises(ModelError) as refused:
            AnomalyDetector.load(str(model), feature_set=FEATURE_SET, feature_names=FEATURE_NAMES)
        return str(refused.value)

    older = [n for n in FEATURE_NAMES if n != "url_ratio"] + ["old_signal"]
    message = load_trained_on(FEATURE_SET, older)
    assert message == (f"{model}/v1: trained on feature set {FEATURE_SET!r} {older}, the pipeline computes "
                       f"{FEATURE_SET!r} {list(FEATURE_NAMES)} (only the model's: ['old_signal']; "
                       "only the pipeline's: ['url_ratio']): retrain it")
    swapped = [FEATURE_NAMES[1], FEATURE_NAMES[0], *FEATURE_NAMES[2:]]
    assert "(the same names in another order): retrain it" in load_trained_on(FEATURE_SET, swapped)
    assert load_trained_on("signals-v0", list(FEATURE_NAMES)) == (
        f"{model}/v1: trained on feature set 'signals-v0' {list(FEATURE_NAMES)}, the pipeline computes "
        f"{FEATURE_SET!r} {list(FEATURE_NAMES)}: retrain it")


@pytest.mark.parametrize("z,weights,rule,expected", [
    ([[1.0, 5.0, 3.0]], [1.0, 0.0, 1.0], "positive_mean", 2.0),  # a weight of 0 leaves a detector out
    ([[4.0, 0.0, -3.0]], [1.0, 0.0, 1.0], "positive_mean", 2.0),  # a typical score does not cancel an alarm
    ([[4.0, 0.0, -3.0]], [1.0, 0.0, 1.0], "mean", 0.5),  # version-2 artifacts: it does
    ([[-1.0, -2.0, -3.0]], [1.0, 1.0, 1.0], "positive_mean", 0.0),
    ([[2.0, 1.0, 0.5]], [2.0, 1.0, 1.0], "positive_mean", 1.375),  # weighted: (4 + 1 + 0.5) / 4
])
def test_combination_table(z, weights, rule, expected):
    assert combine(np.array(z), np.array(weights), rule)[0] == pytest.approx(expected)


def test_combination_and_weights_are_validated(clean_models, tmp_path):
    with pytest.raises(ValueError, match="unknown combination"):
        combine(np.zeros((1, 3)), np.ones(3), "max")
    for bad in ((1.0, 1.0, 1.0), (1.0, -1.0, 1.0, 1.0), (0.0, 0.0, 0.0, 0.0), (1.0, float("nan"), 1.0, 1.0)):
        with pytest.raises(ValueError, match="weights"):
            DetectorParams(weights=bad)
    # an artifact written before the rule was recorded (version 2) is read as "mean"
    copy = tmp_path / "copy"
    shutil.copytree(clean_models["anomaly"], copy)
    meta_path = copy / read_current(str(copy)) / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({k: v for k, v in meta.items() if k != "combination_rule"}))
    legacy = AnomalyDetector.load(str(copy))
    assert legacy.combination == "mean"
    # before score_tokens, an artifact scored (and was calibrated on) max_tokens tokens
    old_lm = {**{k: v for k, v in meta["lm"].items() if k != "score_tokens"}, "max_tokens": 64}
    meta_path.write_text(json.dumps({**meta, "lm": old_lm}))
    assert AnomalyDetector.load(str(copy)).lm.params.score_tokens == 64
    meta_path.write_text(json.dumps({**meta, "combination_rule": "max"}))
    with pytest.raises(ModelError, match="unknown combination"):
        AnomalyDetector.load(str(copy))


def test_the_benchmarked_defaults_are_the_defaults():
    """docs/BENCHMARKS.md measured these on two seeds: perplexity, signals, context,
    cohesion and language mix equal, the representation detector weighted 0, the first 128 tokens scored, positive
    parts combined."""
    assert DetectorParams().weights == (1.0, 0.0, 1.0, 1.0, 1.0, 1.0)
    assert LMParams().score_tokens == 128 and LMParams().max_tokens == 256 and LMParams().steps == 1500
    assert AnomalyDetector.__dataclass_fields__["combination"].default == "positive_mean"
