"""pipelines/anomaly_review.py: which documents the anomaly review queue takes (the band
between the review and the drop threshold, the config's overrides) and what a task shows."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pipelines.anomaly_review import TAXONOMY, anomaly_task, in_band, review_band
from pipelines.review import load_queue
from tests.browser import chromium  # noqa: F401  (fixture)
from tests.cleanmodels import clean_models  # noqa: F401  (fixture)
from transforms.clean.detect import AnomalyConfig
from transforms.doc import AnomalyScores, Doc


def _model(tmp_path: Path, meta: dict) -> str:
    (tmp_path / "v1").mkdir(parents=True)
    (tmp_path / "v1" / "meta.json").write_text(json.dumps(meta))
    (tmp_path / "CURRENT").write_text("v1\n")
    return str(tmp_path)


def test_the_band_comes_from_the_artifact_and_the_config_overrides_it(tmp_path):
    model = _model(tmp_path, {"threshold": 2.0, "review_threshold": 1.0})
    assert review_band(AnomalyConfig(model=model)) == (1.0, 2.0)
    assert review_band(AnomalyConfig(model=model, threshold=3.0, review_threshold=0.5)) == (0.5, 3.0)
    assert review_band(AnomalyConfig(model=model, review_budget=0)) is None  # no queue
    assert review_band(AnomalyConfig(model=model, review_threshold=2.0)) is None  # an empty band
    assert review_band(AnomalyConfig()) is None  # no model
    old = _model(tmp_path / "old", {"threshold": 2.0})  # an artifact without a review threshold
    assert review_band(AnomalyConfig(model=old)) is None
    for bad in ({"review_budget": -1}, {"review_rate": 0.6}, {"review_threshold": float("inf")}):
        with pytest.raises(ValueError):
            AnomalyConfig(**bad)


def _doc(score, **scores) -> Doc:
    return Doc(id="d1", url="http://x/1", text="some text " * 5, source="s", fetched_at="", lang="en",
               anomaly_score=score, anomaly_scores=AnomalyScores(**scores) if scores else None)


@pytest.mark.parametrize("score,queued", [(1.0, False), (1.0001, True), (2.0, True), (2.0001, False), (None, False)])
def test_the_band_is_above_the_review_threshold_and_at_most_the_drop_one(score, queued):
    assert in_band(_doc(score), (1.0, 2.0)) is queued


def test_a_task_shows_the_scores_both_thresholds_and_the_nearest_reference():
    doc = _doc(1.5, perplexity=2.25, representation=None, signals=0.5, context=1.0, token_perplexity=30.0)
    task = anomaly_task(doc, (1.0, 2.0), "v7", [0.5, 2.0], "a reference document")
    assert task["taxonomy"] == TAXONOMY and task["suggestions"] == {"anomaly": {"value": "ok", "score": 1.0,
                                                                                "version": "v7"}}
    assert task["context"] == ["anomaly score 1.500: review above 1.000, dropped above 2.000",
                               "detectors: perplexity 2.250, representation none (no centre for its language), "
                               "signals 0.500, context 1.000, cohesion 0.000, language_mix 0.000",
                               "language en; detector v7", "nearest reference document: a reference document"]
    assert task["anomaly"]["features"] == [0.5, 2.0] and "token_perplexity" not in task["anomaly"]["scores"]
    assert task["task_id"] == task["doc_id"] == "d1" and not task["text_truncated"]


def test_the_review_page_shows_the_scores_and_takes_junk_or_ok(tmp_path, chromium):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    from pipelines.review_page import ReviewSession
    from pipelines.review_server import serve
    from tests.browser import console_errors

    docs = [dataclasses.replace(_doc(1.9 - i / 10, perplexity=1.0, representation=0.0, signals=2.0, context=None,
                                     token_perplexity=9.0), id=f"d{i}") for i in range(2)]
    tasks = [anomaly_task(d, (1.0, 2.0), "v7", [0.0], "<b>a reference</b>") for d in docs]
    queue = tmp_path / "tasks.jsonl"
    queue.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    answers = tmp_path / "answers.jsonl"
    server = serve(ReviewSession(load_queue(str(queue)), str(answers), "rita"), port=0)
    try:
        chromium.get(server.url)
        wait = WebDriverWait(chromium, 20)
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
        lines = [p.text for p in chromium.find_elements(By.CSS_SELECTOR, "#context .ctx")]
        assert lines[0] == "anomaly score 1.900: review above 1.000, dropped above 2.000"
        assert "context none (no centre for its language)" in lines[1]
        assert lines[-1] == "nearest reference document: <b>a reference</b>"  # text, not HTML
        progress = chromium.find_element(By.ID, "progress")
        body = chromium.find_element(By.TAG_NAME, "body")
        body.send_keys(Keys.ENTER)  # d0: accept the suggestion, ok
        wait.until(lambda d: progress.text == "1 / 2 reviewed")
        body.send_keys("1")  # d1: junk (the first value)
        body.send_keys(Keys.ENTER)
        wait.until(lambda d: progress.text == "2 / 2 reviewed")
        assert console_errors(chromium) == []
    finally:
        server.shutdown()
    rows = [json.loads(line) for line in answers.read_text().splitlines()]
    assert [(r["task_id"], r["labels"]) for r in rows] == [("d0", {"anomaly": "ok"}), ("d1", {"anomaly": "junk"})]


def test_learn_makes_a_new_version_whose_head_drops_what_the_reviewer_called_junk(tmp_path, clean_models):  # noqa: F811
    import random
    import shutil

    from benchmarks.anomalies import clean_chunks, planted_new
    from models.anomaly import DETECTORS, AnomalyDetector, read_current
    from pipelines.anomaly import main as anomaly_main
    from tests.cleanmodels import unwrap
    from tests.conftest import shared
    from transforms.clean.features import cross_matrix, feature_matrix
    from transforms.clean.signals import compute_signals

    model = tmp_path / "anomaly"
    shutil.copytree(clean_models["anomaly"], model)
    detector = AnomalyDetector.load(str(model))
    books = [unwrap(c) for c in clean_chunks(shared("text"))][:160]
    rng = random.Random(3)
    junk = [planted_new("word_salad", rng, books[i:i + 1]) for i in range(0, 120, 2)]
    texts = books[60:120] + junk
    signals = [compute_signals(t) for t in texts]
    x = feature_matrix(signals)
    cross = cross_matrix(signals)
    scores = detector.score(texts, x, cross, ["en"] * len(texts))
    band = (float(detector.review_threshold), float(detector.threshold))
    docs = [Doc(id=f"d{i}", url="", text=t, source="s", fetched_at="", lang="en", signals=s,
                anomaly_score=float(c), anomaly_scores=AnomalyScores(**dict(zip(DETECTORS, map(float, z)))))
            for i, (t, s, c, z) in enumerate(zip(texts, signals, scores.combined, scores.detectors))]
    queue = tmp_path / "out" / "review" / "anomaly-20261207T000000"
    queue.mkdir(parents=True)
    tasks = [anomaly_task(d, band, detector.version, f, "") for d, f in zip(docs, x)]
    tasks[0]["anomaly"]["version"] = "v-older"  # scored by another version: not learnt from
    queue.joinpath("tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    answers = tmp_path / "answers.jsonl"
    lines = [{"task_id": d.id, "labels": {"anomaly": "junk" if i >= 60 else "ok"}} for i, d in enumerate(docs)]
    lines += [{"task_id": "nowhere", "labels": {"anomaly": "junk"}},
              {"task_id": "d1", "labels": {"anomaly": "maybe"}}, {"labels": "not a mapping"}]
    answers.write_text("".join(json.dumps(line) + "\n" for line in lines))
    cfg = tmp_path / "job.yaml"
    (tmp_path / "docs.jsonl").write_text(json.dumps({"text": books[0]}) + "\n")
    cfg.write_text(f"output: {tmp_path / 'out'}\ninputs:\n  - format: jsonl\n"
                   f"    path: {tmp_path / 'docs.jsonl'}\nclean:\n  langid:\n    model: {clean_models['lid']}\n"
                   f"  anomaly:\n    model: {model}\n")
    assert anomaly_main(["learn", "--config", str(cfg), "--answers", str(answers)]) == 0
    learnt = AnomalyDetector.load(str(model))
    assert learnt.version != detector.version and read_current(str(model)) == learnt.version
    assert learnt.head is not None and learnt.head.examples == 119  # d0 of another version left out
    review = learnt.metadata["review"]
    assert review["from_version"] == detector.version and review["junk"] == 60
    assert review["set_aside"] == {"not an anomaly answer": 1, "value not junk or ok": 1, "not in a queue": 1,
                                   "scored by another detector version": 1}
    after = learnt.score(texts, x, cross, ["en"] * len(texts)).combined
    assert (after >= scores.combined - 1e-9).all()  # the head only adds: max(combined, scaled p)
    dropped = after > learnt.threshold
    assert dropped[60:].mean() > 0.8 and dropped[:60].mean() < 0.1  # word salad dropped, books kept
    chinese = learnt.score(texts[:3], x[:3], cross[:3], ["zh"] * 3).combined  # no centre: never the head's
    assert (chinese == 0).all()
    # too few kinds of answer: refused, nothing written
    answers.write_text(json.dumps({"task_id": "d5", "labels": {"anomaly": "ok"}}) + "\n")
    assert anomaly_main(["learn", "--config", str(cfg), "--answers", str(answers)]) == 2
    assert read_current(str(model)) == learnt.version


def test_the_whole_task_of_a_queued_document():
    from pipelines.anomaly_review import TEXT_LIMIT
    from transforms.doc import ID_SCHEME

    doc = dataclasses.replace(_doc(1.25, perplexity=1.0, representation=0.5, signals=0.25, context=0.125,
                                   token_perplexity=7.0), lang="", source_id="in-7", title="T",
                              text="x" * (TEXT_LIMIT + 1))
    task = anomaly_task(doc, (1.0, 2.0), "v9", [1, 2.5], "")
    assert task == {
        "task_id": "d1", "doc_id": "d1", "source_id": "in-7", "id_scheme": ID_SCHEME, "url": "http://x/1",
        "title": "T", "text": "x" * TEXT_LIMIT, "text_truncated": True,
        "suggestions": {"anomaly": {"value": "ok", "score": 1.0, "version": "v9"}}, "taxonomy": TAXONOMY,
        "context": ["anomaly score 1.250: review above 1.000, dropped above 2.000",
                    "detectors: perplexity 1.000, representation 0.500, signals 0.250, context 0.125, "
                    "cohesion 0.000, language_mix 0.000",
                    "language ?; detector v9"],  # no nearest reference: no line for it
        "anomaly": {"score": 1.25, "review_threshold": 1.0, "threshold": 2.0,
                    "scores": {"perplexity": 1.0, "representation": 0.5, "signals": 0.25, "context": 0.125,
                               "cohesion": 0.0, "language_mix": 0.0},
                    "lang": "", "version": "v9", "features": [1.0, 2.5], "nearest_reference": ""}}
    exact = anomaly_task(dataclasses.replace(doc, text="y" * TEXT_LIMIT), (1.0, 2.0), "v9", [], "")
    assert exact["text_truncated"] is False and len(exact["text"]) == TEXT_LIMIT
    unscored = anomaly_task(dataclasses.replace(doc, anomaly_scores=None), (1.0, 2.0), "v9", [], "")
    assert unscored["anomaly"]["scores"] == {} and unscored["context"][1] == "detectors: "


def test_the_band_of_a_named_version_and_a_budget_of_one(tmp_path):
    model = _model(tmp_path, {"threshold": 2.0, "review_threshold": 1.0})
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / "meta.json").write_text(json.dumps({"threshold": 5.0, "review_threshold": 4.0}))
    assert review_band(AnomalyConfig(model=model, review_budget=1)) == (1.0, 2.0)  # CURRENT: v1
    assert review_band(AnomalyConfig(model=model, version="v2")) == (4.0, 5.0)


def test_the_review_head_round_trips_and_refuses_a_damaged_state():
    import numpy as np

    from models.review_head import ReviewHead, fit_head, head_features

    rng = np.random.default_rng(1)
    z, x = rng.normal(size=(60, 2)), rng.normal(size=(60, 1))
    head = fit_head(z, x, x[:, 0] > 0, z, x, ["a", "b", "no_centre", "s"])
    state = json.loads(json.dumps(head.state()))
    again = ReviewHead.from_state(state, 4)
    assert np.array_equal(again.probability(z, x), head.probability(z, x))
    assert again.threshold == head.threshold and again.examples == 60
    assert again.feature_names == ("a", "b", "no_centre", "s")
    for key, bad in (("coef", [1.0, 2.0]), ("mean", [0.0, float("nan"), 0.0, 0.0]), ("threshold", 1.0),
                     ("threshold", 0.0), ("intercept", float("inf"))):
        with pytest.raises(ValueError):
            ReviewHead.from_state({**state, key: bad}, 4)
    with pytest.raises(KeyError):
        ReviewHead.from_state({k: v for k, v in state.items() if k != "scale"}, 4)
    # a detector that did not score (NaN) is 0 and sets the no-centre column
    features = head_features(np.array([[np.nan, np.nan], [1.5, np.nan]]), np.array([[2.0], [3.0]]))
    assert features.tolist() == [[0.0, 0.0, 1.0, 2.0], [1.5, 0.0, 0.0, 3.0]]
    # extreme logits are clipped at +-50: finite, strictly inside (0, 1)
    loud = ReviewHead.from_state({**state, "coef": [1e6, 0.0, 0.0, 0.0], "mean": [0.0] * 4, "scale": [1.0] * 4}, 4)
    p = loud.probability(np.array([[1.0, 0.0], [-1.0, 0.0]]), np.zeros((2, 1)))
    assert p.tolist() == pytest.approx([1.0 / (1.0 + np.exp(-50.0)), 1.0 / (1.0 + np.exp(50.0))], rel=1e-12)


def test_a_damaged_review_head_in_meta_json_is_a_model_error_naming_it(tmp_path, clean_models):  # noqa: F811
    import shutil

    from models.anomaly import AnomalyDetector, read_current
    from models.files import ModelError

    model = tmp_path / "anomaly"
    shutil.copytree(clean_models["anomaly"], model)
    meta_path = model / read_current(str(model)) / "meta.json"
    meta = json.loads(meta_path.read_text())
    assert meta["review_head"] is None and AnomalyDetector.load(str(model)).head is None
    for bad in ({"coef": [1.0]}, "not an object", {"threshold": 0.7}):
        meta_path.write_text(json.dumps({**meta, "review_head": bad}))
        with pytest.raises(ModelError, match="meta.json: unreadable review_head"):
            AnomalyDetector.load(str(model))


def test_the_head_maps_its_threshold_onto_the_drop_threshold():
    """with_head: max(combined, threshold x p / head threshold); a document no detector
    scored gets nothing from the head."""
    from types import SimpleNamespace

    import numpy as np

    from models.anomaly import AnomalyDetector

    head = SimpleNamespace(threshold=0.8, probability=lambda z, x: np.array([0.8, 0.4, 0.96, 0.99]))
    owner = SimpleNamespace(head=head, threshold=2.0)
    z = np.array([[0.0] * 4, [0.0] * 4, [0.0] * 4, [np.nan] * 4])
    out = AnomalyDetector.with_head(owner, np.array([0.5, 1.5, 0.1, 0.2]), z, np.zeros((4, 1)))
    # p at the head's threshold lands exactly on the drop threshold (not above: kept)
    assert out.tolist() == pytest.approx([2.0, 1.5, 2.4, 0.2])
