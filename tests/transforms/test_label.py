"""The label stage's pure functions and its Beam transform on real sentences."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from models.labeller import Labeller
from transforms.doc import Doc, Label
from transforms.label.label import (LabelConfig, LabelDocs, LabelSetConfig, Review, apply_reviews,
                                    label_batch, pick_for_review, predicted_class, review_key, review_priority,
                                    reviews_of, uncertainty)
from tests.labelmodels import LANGS, label_data, sentences  # noqa: F401  (fixture)


def config(model_dir: str = "m", budget: int = 5, threshold: float = 0.9, sampling: str = "uncertainty") -> LabelConfig:
    return LabelConfig(sets=(LabelSetConfig("language", LANGS, model_dir, accept_threshold=threshold),),
                       review_budget=budget, sampling=sampling)


def doc(i: str, text: str = "x", labels=()) -> Doc:
    return Doc(id=i, url="", text=text, source="s", fetched_at="", labels=tuple(labels))


@pytest.mark.parametrize("kwargs, message", [
    (dict(name="", values=("a", "b"), model="m"), "name"),
    (dict(name="a b", values=("a", "b"), model="m"), "name"),
    (dict(name="t", values=("a",), model="m"), "two values"),
    (dict(name="t", values=("a", "a"), model="m"), "unique"),
    (dict(name="t", values=("a", "b c"), model="m"), "without spaces"),
    (dict(name="t", values=("a", "b"), model=""), "model"),
    (dict(name="t", values=("a", "b"), model="m", accept_threshold=1.5), "accept_threshold"),
])
def test_label_set_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LabelSetConfig(**kwargs)


def test_label_config_validation():
    one = LabelSetConfig("t", ("a", "b"), "m")
    with pytest.raises(ValueError, match="at least one"):
        LabelConfig(sets=())
    with pytest.raises(ValueError, match="unique"):
        LabelConfig(sets=(one, one))
    with pytest.raises(ValueError, match="sampling"):
        LabelConfig(sets=(one,), sampling="margin")
    with pytest.raises(ValueError, match="review_budget"):
        LabelConfig(sets=(one,), review_budget=-1)


def test_human_review_overrides_model_with_provenance():
    model = [Label("language", "de", 0.4, "model", "v1"), Label("topic", "news", 0.99, "model", "v7")]
    review = Review("d1", "d1", "language", "en", "ann", "2026-11-29T10:00:00Z", "v1", "de")
    out = apply_reviews(model, [review])
    assert out[0] == Label("language", "en", 1.0, "human", "v1", "ann", "2026-11-29T10:00:00Z")
    assert out[1] == model[1]


def test_reviews_find_their_documents_under_both_id_schemes():
    """Issue 36: document ids became unique (``own id@hash``); reviews stored before then
    (id_scheme 1) name the input's own id, which is now ``source_id``."""
    a = Doc(id="7@aaa", url="", text="x", source="a.jsonl", fetched_at="", source_id="7")
    b = Doc(id="7@bbb", url="", text="y", source="b.jsonl", fetched_at="", source_id="7")
    bare = Doc(id="h123", url="", text="z", source="c.jsonl", fetched_at="")  # no own id: id unchanged
    old = Review("7", "7", "language", "fr", "ann", "t")  # id_scheme 1 (a file written before)
    old_bare = Review("h123", "h123", "language", "de", "ann", "t")
    new = Review("7@aaa", "7@aaa", "language", "en", "bob", "t2", id_scheme=2)
    stray = Review("7", "7", "language", "en", "bob", "t2", id_scheme=2)  # names no document id
    reviews: dict = {}
    for r in (old, old_bare, new, stray):
        reviews.setdefault(review_key(r), []).append(r)
    assert reviews_of(a, reviews) == (old, new)  # the newer scheme last: it wins in apply_reviews
    assert reviews_of(b, reviews) == (old,)
    assert reviews_of(bare, reviews) == (old_bare,)
    model = [Label("language", "de", 0.4, "model", "v1")]
    assert apply_reviews(model, reviews_of(a, reviews))[0].value == "en"
    assert apply_reviews(model, reviews_of(b, reviews))[0].value == "fr"
    assert review_key(stray) == "7" and review_key(old).endswith("7") and review_key(old) != "7"


def test_uncertainty_and_priority():
    cfg = config()
    sure = doc("a", labels=[Label("language", "de", 0.95, "model", "v")])
    unsure = doc("b", labels=[Label("language", "de", 0.3, "model", "v")])
    human = doc("c", labels=[Label("language", "de", 1.0, "human", "v", "ann", "t")])
    assert uncertainty(sure, cfg) is None and uncertainty(human, cfg) is None
    assert uncertainty(unsure, cfg) == pytest.approx(0.7)
    assert review_priority(unsure, cfg) == pytest.approx(0.7)
    rnd = config(sampling="random")
    assert review_priority(unsure, rnd) == review_priority(unsure, rnd)  # seeded, stable
    assert 0 <= review_priority(unsure, rnd) < 1


def test_label_batch_on_real_sentences(label_data):
    cfg = config(label_data.model_dir)
    model = Labeller.load(label_data.model_dir)
    docs = [doc(f"{lang}{i}", s) for lang in LANGS for i, s in enumerate(sentences(lang)[300:320])]
    other = Label("topic", "news", 0.8, "model", "v0")
    docs[0] = doc(docs[0].id, docs[0].text, [other])
    review = Review(docs[1].id, docs[1].id, "language", "fr", "bob", "t", model.version, "de")
    out = label_batch(docs, cfg, {"language": model}, {docs[1].id: (review,)})
    assert out[0].labels[0] == other  # other label sets are kept
    lang = [next(lab for lab in d.labels if lab.name == "language") for d in out]
    assert lang[1].origin == "human" and lang[1].value == "fr" and lang[1].reviewer == "bob"
    model_labels = [lab for lab in lang if lab.origin == "model"]
    assert all(lab.version == model.version and 0 < lab.score <= 1 for lab in model_labels)
    truth = [d.id[:2] for d in docs]
    accuracy = np.mean([lab.value == t for lab, t in zip(lang, truth)])
    assert accuracy > 0.8


def test_label_transform_queues_the_least_confident(label_data, beam_options):
    cfg = config(label_data.model_dir, budget=5)
    docs = [doc(f"{lang}{i}", s) for lang in LANGS for i, s in enumerate(sentences(lang)[400:440])]
    model = Labeller.load(label_data.model_dir)
    confidence = model.predict_proba([d.text for d in docs]).max(axis=1)
    expected = [docs[i].id for i in np.argsort(confidence)[:5]]
    with TestPipeline(options=beam_options) as p:
        outputs, queue = p | beam.Create(docs) | LabelDocs(cfg, (), "label")
        assert_that(outputs.kept | beam.Map(lambda d: d.id), equal_to([d.id for d in docs]), label="all kept")
        assert_that(queue | beam.Map(lambda ds: sorted(d.id for d in ds)), equal_to([sorted(expected)]),
                    label="queue")


def scored(i: int, value: str, score: float) -> Doc:
    return doc(f"d{i:02d}", labels=[Label("language", value, score, "model", "v")])


def test_pick_for_review_strategies():
    # "de" holds the 6 least confident documents; "en" and "fr" are a little more confident
    docs = [scored(i, "de", 0.10 + i * 0.01) for i in range(6)]
    docs += [scored(10 + i, "en", 0.30 + i * 0.01) for i in range(3)]
    docs += [scored(20 + i, "fr", 0.50 + i * 0.01) for i in range(3)]
    docs += [scored(30, "es", 0.95)]  # certain: never picked
    ids = lambda ds: [d.id for d in ds]  # noqa: E731
    assert ids(pick_for_review(docs, config(budget=4))) == ["d00", "d01", "d02", "d03"]
    assert ids(pick_for_review(docs, config(budget=4, sampling="balanced"))) == ["d00", "d10", "d20", "d01"]
    hybrid = pick_for_review(docs, config(budget=4, sampling="hybrid"))
    assert ids(hybrid)[:2] == ["d00", "d10"] and len(set(ids(hybrid))) == 4
    rnd = pick_for_review(docs, config(budget=4, sampling="random"))
    assert ids(rnd) == ids(pick_for_review(list(reversed(docs)), config(budget=4, sampling="random")))
    assert "d30" not in ids(rnd) + ids(hybrid)
    assert len(pick_for_review(docs, config(budget=0, sampling="hybrid"))) == 12  # no budget: all uncertain
    assert predicted_class(docs[0], config()) == "language=de"


@pytest.mark.parametrize("sampling", ["balanced", "hybrid", "random"])
def test_beam_queue_equals_the_pure_pick(label_data, beam_options, sampling):
    cfg = config(label_data.model_dir, budget=7, sampling=sampling)
    docs = [doc(f"{lang}{i}", s) for lang in LANGS for i, s in enumerate(sentences(lang)[400:440])]
    model = Labeller.load(label_data.model_dir)
    expected = [d.id for d in pick_for_review(label_batch(docs, cfg, {"language": model}, {}), cfg)]
    assert len(expected) == 7
    with TestPipeline(options=beam_options) as p:
        _, queue = p | beam.Create(docs) | LabelDocs(cfg, (), "label")
        assert_that(queue | beam.Map(lambda ds: [d.id for d in ds]), equal_to([expected]))


def test_round_robin_depth_bounds_what_each_class_sends():
    from transforms.label.label import round_robin_depth

    assert round_robin_depth([100, 100, 100], 10) == 4  # 3 + 3 + 3 + 1
    assert round_robin_depth([100, 1, 1], 10) == 8  # 3, then 1 per round
    assert round_robin_depth([2, 2], 10) == 2  # everything there is
    assert round_robin_depth([], 10) == 0
