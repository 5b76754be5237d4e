"""Issue 39, items 2 and 5: no language is flagged for being rare (a language with too few
reference documents gets no language-dependent score, never another language's centre),
and the default reference is the shared data's real text in every language it has, put
through the extract stage's normalisation as --reference files are."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from benchmarks.anomalies import clean_chunks
from models.anomaly import DetectorParams, LanguageCentres, combine
from pipelines.anomaly import _reference
from pipelines.corpus import reference_texts
from pipelines.reference_corpus import default_reference, sentence_documents
from tests.cleanmodels import SMALL, train_small_detector, unwrap
from tests.conftest import shared
from transforms.clean.coherence import cross_signals
from transforms.clean.features import feature_matrix
from transforms.clean.signals import compute_signals


def test_only_languages_with_enough_documents_get_a_centre():
    raw = np.array([1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 50.0, 51.0])
    langs = ["en", "en", "en", "de", "de", "de", "zh", "zh"]
    centres = LanguageCentres.fit(raw, langs, min_docs=3)
    assert centres.centres == {"de": 11.0, "en": 2.0}  # zh: 2 < 3 documents, no centre
    assert centres.docs == {"de": 3, "en": 3, "zh": 2} and centres.uncentred() == {"zh": 2}
    # the spread is the IQR of the centred languages' residuals only: -1, 0, 1, -1, 0, 1
    assert centres.spread == pytest.approx(np.subtract(*np.percentile([-1, 0, 1, -1, 0, 1], [75, 25])))
    z = centres.apply(np.array([4.0, 11.0, 50.0, 7.0]), ["en", "de", "zh", "ko"])
    assert z[:2] == pytest.approx([2.0 / centres.spread, 0.0])
    assert np.isnan(z[2:]).all()  # rare and unseen languages: no score, not the English one
    assert LanguageCentres.fit(raw, langs, min_docs=2).centres["zh"] == 50.5
    none = LanguageCentres.fit(raw[:2], ["en", "en"], min_docs=3)
    assert none.centres == {} and none.spread == 1.0


@pytest.mark.parametrize("z,expected", [
    ([[np.nan, 0.0, 3.0, np.nan]], 1.0),  # missing scores add nothing; the divisor stays 3
    ([[np.nan, np.nan, np.nan, np.nan]], 0.0),
    ([[3.0, 0.0, 3.0, 3.0]], 3.0),
])
def test_a_missing_score_adds_no_evidence(z, expected):
    assert combine(np.array(z), np.array([1.0, 0.0, 1.0, 1.0]))[0] == pytest.approx(expected)


def test_min_language_docs_validates():
    with pytest.raises(ValueError, match="min_language_docs"):
        DetectorParams(min_language_docs=0)


def _leipzig_docs(lang: str, start: int, count: int) -> list[str]:
    sentences = shared("langid", "lingua_sentences", f"{lang}.txt").read_text(encoding="utf-8").splitlines()
    return [" ".join(sentences[start + 10 * i:start + 10 * (i + 1)]) for i in range(count)]


@pytest.fixture(scope="module")
def english_with_two_chinese(tmp_path_factory):
    """A detector whose reference is English books and 2 Chinese documents."""
    books = [unwrap(c) for c in clean_chunks(shared("text"))]
    reference = books[100:300] + _leipzig_docs("zh", 0, 2)
    params = dataclasses.replace(SMALL, lm=dataclasses.replace(SMALL.lm, steps=200))
    return train_small_detector(reference, books[300:420], str(tmp_path_factory.mktemp("zh") / "anomaly"), params)


def test_a_reference_with_two_chinese_documents_does_not_flag_chinese_text(english_with_two_chinese):
    detector = english_with_two_chinese
    assert "zh" not in detector.languages["perplexity"].centres and "en" in detector.languages["perplexity"].centres
    chinese = _leipzig_docs("zh", 100, 40)
    cross = cross_signals(chinese, ["zh"] * len(chinese), lambda batch: [("zh", 1.0)] * len(batch))
    x = feature_matrix([compute_signals(t) for t in chinese])
    scores = detector.score(chinese, x, cross, ["zh"] * len(chinese))
    assert np.isnan(scores.detectors).all() and (scores.combined == 0).all()  # left to the rules
    assert (scores.combined > detector.threshold).mean() <= 0.02
    # the old way, Chinese measured against the English centre, flags most of it
    shifted = {name: dataclasses.replace(c, centres={**c.centres, "zh": c.centres["en"]})
               for name, c in detector.languages.items()}
    old = dataclasses.replace(detector, languages=shifted).score(
        chinese, feature_matrix([compute_signals(t) for t in chinese]), cross, ["zh"] * len(chinese))
    assert (old.combined > detector.threshold).mean() > 0.5


def test_the_artifact_records_the_languages_without_a_centre(english_with_two_chinese, tmp_path):
    from models.anomaly import AnomalyDetector

    detector = english_with_two_chinese
    loaded = AnomalyDetector.load(detector.path.rsplit("/", 1)[0])
    assert loaded.languages["perplexity"].uncentred() == detector.languages["perplexity"].uncentred()
    meta = json.loads(open(f"{detector.path}/meta.json", encoding="utf-8").read())
    assert meta["languages"]["perplexity"]["min_docs"] == 5
    assert all(v is None or np.isfinite(v) for v in meta["detector_thresholds"])
    # the review band: the corpus sample's 1 - 0.05 - 0.10 quantile up to the threshold
    assert loaded.review_threshold == pytest.approx(detector.review_threshold)
    assert loaded.review_threshold < loaded.threshold
    assert meta["training"]["review_rate"] == 0.10
    # held-out reference snippets with their hidden states: a held-out book chunk's nearest is itself
    assert 10 <= len(loaded.snippets) <= 200 and loaded.snippet_vectors.shape == (len(loaded.snippets), 32)
    assert np.allclose(np.linalg.norm(loaded.snippet_vectors, axis=1), 1.0, atol=1e-3)
    nearest = loaded.nearest_reference(loaded.lm.score([detector.snippets[3]]))
    assert nearest == [detector.snippets[3]]


def test_the_default_reference_holds_every_language_of_the_shared_data():
    docs = default_reference(shared())
    sources = {d.source for d in docs}
    languages = {p.stem for p in shared("langid", "lingua_sentences").glob("*.txt")}
    assert len(languages) == 20 and {f"leipzig:{lang}" for lang in languages} <= sources
    assert {"book", "article", "news"} <= sources
    counts = {s: sum(d.source == s for d in docs) for s in sources}
    assert counts["article"] == 90 and counts["news"] >= 990 and min(counts[f"leipzig:{g}"] for g in languages) >= 30
    assert all(len(d.text) >= 100 and "\u00a0" not in d.text and "\u200f" not in d.text for d in docs)
    assert default_reference(shared()) == docs  # deterministic
    with pytest.raises(FileNotFoundError, match="TOKENFACTORY_SHARED_DATA"):
        default_reference(shared("text"))


def test_sentence_documents_keep_every_sentence_in_order():
    import random

    sentences = [f"s{i}." for i in range(50)]
    docs = list(sentence_documents(sentences, random.Random(0)))
    words = " ".join(d.replace("\n", " ") for d in docs).split()
    assert words == sentences[:len(words)] and len(sentences) - len(words) < 6
    assert all(6 <= len(d.replace("\n", " ").split()) <= 20 for d in docs)


def test_reference_files_are_normalised_as_extracted_text(tmp_path):
    raw = "Nach\u00a0dem Spiel \u200fsagte er:\x07 alles gut.\n\n\n\nZweiter Absatz."
    (tmp_path / "ref.jsonl").write_text(json.dumps({"text": raw}) + "\n", encoding="utf-8")
    (tmp_path / "ref.txt").write_text(raw, encoding="utf-8")
    expected = "Nach dem Spiel sagte er: alles gut.\n\nZweiter Absatz."
    assert list(reference_texts([str(tmp_path / "ref.jsonl"), str(tmp_path / "ref.txt")])) == [expected, expected]
    texts, sources = _reference([str(tmp_path / "ref.jsonl"), str(tmp_path / "ref.txt")], 0)
    assert texts == [expected, expected] and sources == {str(tmp_path / "ref.jsonl"): 1, str(tmp_path / "ref.txt"): 1}
    with pytest.raises(ValueError, match="stands alone"):
        _reference(["default", str(tmp_path / "ref.txt")], 0)
    assert _reference([], 0) == ([], {})


def test_every_language_with_enough_documents_gets_enough_held_out():
    from models.anomaly import _holdout, lm_texts

    texts = [f"english document {i}" for i in range(200)] + [f"documento {i}" for i in range(15)] \
        + [f"文档 {i}" for i in range(14)]
    langs = ["en"] * 200 + ["es"] * 15 + ["zh"] * 14
    plain = _holdout(texts, 0.15)
    held = _holdout(texts, 0.15, langs, per_language=5)
    spanish, chinese = np.arange(200, 215), np.arange(215, 229)
    assert held[spanish].sum() >= 5  # 15 = 3 x 5 documents: at least 5 held out for its centre
    assert held[chinese].sum() == plain[chinese].sum()  # 14 < 15: not enough to spare 5, unchanged
    assert (held >= plain).all() and held[:200].sum() == plain[:200].sum()  # only added, only where short
    assert held[spanish].sum() == max(5, plain[spanish].sum())
    params = DetectorParams(min_language_docs=5)
    assert lm_texts(texts, langs, params) == [t for t, h in zip(texts, held) if not h]


def test_the_review_head_learns_what_the_answers_mark():
    from models.review_head import fit_head

    rng = np.random.default_rng(0)
    z = rng.normal(size=(200, 4))
    signals = rng.normal(size=(200, 3))
    junk = signals[:, 1] + 0.5 * z[:, 2] > 0.8  # what the reviewer answered
    corpus_z, corpus_signals = rng.normal(size=(500, 4)), rng.normal(size=(500, 3))
    head = fit_head(z, signals, junk, corpus_z, corpus_signals, ["a", "b", "c", "d", "no_centre", "s0", "s1", "s2"])
    new_z, new_signals = rng.normal(size=(400, 4)), rng.normal(size=(400, 3))
    truth = new_signals[:, 1] + 0.5 * new_z[:, 2] > 0.8
    p = head.probability(new_z, new_signals)
    assert ((p > 0.5) == truth).mean() > 0.9 and head.examples == 200
    assert np.argmax(np.abs(head.coef)) == 6  # s1, the signal that decides
    z_missing = new_z.copy()
    z_missing[:5] = np.nan  # a language without a centre: scores 0 and the indicator set
    assert np.isfinite(head.probability(z_missing, new_signals)).all()
    with pytest.raises(ValueError, match="both kinds"):
        fit_head(z, signals, np.zeros(200, dtype=bool), corpus_z, corpus_signals, ["x"] * 8)
    # the decision threshold: 0.5, or higher so that at most 2% of the normal answers
    # (here floor(0.02 x n) of them) stay above it
    own = head.probability(z, signals)[~junk]
    assert head.threshold >= 0.5 and (own > head.threshold).sum() <= int(0.02 * len(own))
    noisy = junk ^ (rng.random(200) < 0.15)  # answers that disagree with the signals
    loose = fit_head(z, signals, noisy, corpus_z, corpus_signals, ["x"] * 8)
    strict = fit_head(z, signals, noisy, corpus_z, corpus_signals, ["x"] * 8, normal_rate=0.0)
    p_normal = loose.probability(z, signals)[~noisy]
    assert loose.threshold > 0.5 and (p_normal > loose.threshold).sum() == int(0.02 * len(p_normal))
    assert strict.threshold == pytest.approx(strict.probability(z, signals)[~noisy].max())


def test_the_shares_across_sentences_have_a_floor_on_their_spread():
    """Most documents of most languages have a language-mix share of 0: an IQR of 0 would
    make one odd sentence infinitely anomalous. The residual spread is at least one
    sentence in eight, and the corpus standardisation's scale at least 1 for those two
    detectors (not for the others)."""
    from models.anomaly import DETECTORS, _standardisation

    flat = LanguageCentres.fit(np.zeros(12), ["en"] * 12, min_docs=5, min_spread=0.125)
    assert flat.spread == 0.125 and flat.apply(np.array([0.5]), ["en"])[0] == pytest.approx(4.0)
    assert LanguageCentres.fit(np.zeros(12), ["en"] * 12, min_docs=5).spread < 1e-6
    location, scale = _standardisation(np.zeros((10, len(DETECTORS))))
    floors = dict(zip(DETECTORS, scale))
    assert floors["cohesion"] == floors["language_mix"] == 1.0 and floors["perplexity"] < 1e-6
