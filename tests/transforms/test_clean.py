"""The clean stage transform on real models: kept, rejected with reasons, failed, counters."""

from __future__ import annotations

import dataclasses

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from benchmarks.anomalies import clean_chunks, planted, planted_new
from tests.cleanmodels import clean_models, unwrap  # noqa: F401 (fixture)
from tests.conftest import shared
from transforms.clean.clean import (AnomalyConfig, Clean, CleanConfig, LangIdConfig, Models,
                                    QualityConfig, annotate, select)
from transforms.clean.rules import QualityRules
from transforms.doc import Doc


def doc(doc_id: str, text: str) -> Doc:
    return Doc(id=doc_id, url=f"http://x/{doc_id}", text=text, source="test", fetched_at="")


@pytest.fixture(scope="module")
def book() -> list[str]:
    """Book chunks with the hard line wraps undone (paragraph = line, as on the web)."""
    return [unwrap(chunk) for chunk in clean_chunks(shared("text"))]


def config(models: dict[str, str], **quality) -> CleanConfig:
    return CleanConfig(langid=LangIdConfig(model=models["lid"]),
                       anomaly=AnomalyConfig(model=models["anomaly"]),
                       quality=QualityConfig(model=models["quality"], **quality), batch_size=4)


def hostile_docs(book: list[str]) -> list[Doc]:
    import random

    rng = random.Random(3)
    return [
        doc("good", book[10]),
        doc("good-pii", book[11] + "\nWrite to jane.roe@example.org or call +1 415-555-0100."),
        doc("french", "Ceci est un long texte en français. " * 60),
        doc("logs", planted("logs", rng, book)),
        doc("empty", ""),
        doc("huge-line", "word " * 2_000_000),
        doc("surrogates", "lone \ud800 surrogate " * 100),
        doc("emoji", "😀🎉" * 500),
        doc("nul", "a\x00b " * 500),
    ]


def test_annotate_and_select_every_hostile_input(clean_models, book):
    cfg = config(clean_models)
    models = Models(cfg)
    docs = hostile_docs(book)
    annotated, pii = annotate(docs, models, cfg)
    assert pii == [1, 1, 0]
    by_id = {d.id: d for d in annotated}
    assert "<EMAIL>" in by_id["good-pii"].text and "<PHONE>" in by_id["good-pii"].text
    assert by_id["good"].lang == "en" and by_id["good"].lang_score > 0.65
    assert by_id["good"].signals.words > 300 and by_id["good"].anomaly_score is not None
    verdicts = {d.id: select(d, cfg, models.anomaly.threshold) for d in annotated}
    assert verdicts["good"] is None and verdicts["good-pii"] is None
    assert verdicts["french"][0] == "language"
    assert all(verdicts[k] is not None for k in ("logs", "empty", "huge-line", "emoji", "nul", "surrogates"))
    assert "\ud800" not in by_id["surrogates"].text


def _mixed_language_docs(book: list[str]) -> list[Doc]:
    """English book chunks, Lingua's sentences of 8 languages in documents of 12, and
    English pages with a little German mixed in (some below the language threshold)."""
    docs = [doc(f"en{i}", text) for i, text in enumerate(book[30:50])]
    for lang in ("de", "fr", "zh", "ja", "ko", "ar", "ru", "es"):
        lines = shared("langid", "lingua_sentences", f"{lang}.txt").read_text(encoding="utf-8").splitlines()
        docs += [doc(f"{lang}{i}", "\n".join(lines[i * 12:(i + 1) * 12])) for i in range(4)]
    de = shared("langid", "lingua_sentences", "de.txt").read_text(encoding="utf-8").splitlines()
    docs += [doc(f"mix{i}", book[60 + i][:600 * (i + 1)] + "\n" + "\n".join(de[100 + 10 * i:110 + 10 * i + 3 * i]))
             for i in range(6)]
    return docs


def test_documents_dropped_by_language_get_no_signals_and_the_same_decisions(clean_models, book, monkeypatch):
    """Issue 37, item 5: signals, segmentation (jieba, kiwi...) and the models are computed
    only for documents language ID keeps. Every decision and detail equals the one made
    with everything annotated (the code before), and every kept document is unchanged."""
    import transforms.clean.clean as clean_module

    cfg = CleanConfig(langid=LangIdConfig(model=clean_models["lid"], languages=("en", "de")),
                      anomaly=AnomalyConfig(model=clean_models["anomaly"]),
                      quality=QualityConfig(model=clean_models["quality"]), batch_size=16)
    models = Models(cfg)
    docs = _mixed_language_docs(book)
    lean, _ = annotate(docs, models, cfg)
    with monkeypatch.context() as m:
        m.setattr(clean_module, "language_verdict", lambda lang, score, config: None)
        full, _ = annotate(docs, models, cfg)
    threshold = models.anomaly.threshold
    decided = [select(d, cfg, threshold) for d in lean]
    assert decided == [select(d, cfg, threshold) for d in full]
    reasons = [v[0] if v else "kept" for v in decided]
    assert reasons.count("language") >= 20 and reasons.count("lang_score") >= 1 and reasons.count("kept") >= 10
    for before, after, verdict in zip(full, lean, decided):
        if verdict is not None and verdict[0] in ("language", "lang_score"):
            assert after.signals is None and after.anomaly_score is None and after.quality_score is None
            assert (after.lang, after.lang_score, after.text) == (before.lang, before.lang_score, before.text)
        else:
            assert after == before


def test_the_signals_across_sentences_are_measured_when_the_detector_runs(clean_models, book):
    french = ["Le gouvernement a présenté mardi un nouveau projet de loi sur le logement.",
              "Les syndicats ont appelé à une grève générale pour la semaine prochaine."]
    english = ["The council approved the new budget for the city's public libraries on Monday.",
               "Officials said the money would extend opening hours at twelve branches.",
               "Several residents spoke in favour of the plan during the public hearing.",
               "The library director thanked the council for its continued support.",
               "Construction of a new branch in the northern district will begin next spring.",
               "The budget also includes funds for new computers and digital services.",
               "Critics argued that the spending increase was larger than the city could afford.",
               "The mayor is expected to sign the budget into law later this week.",
               "A final report on the libraries' performance will be published in December."]
    # a French sentence after every third English one: the document stays English
    mixed = doc("mixed", " ".join(e + (f" {french[i // 3 % 2]}" if i % 3 == 2 else "")
                                  for i, e in enumerate(english)))
    docs = [doc("good", book[10]), mixed]
    cfg = dataclasses.replace(config(clean_models), langid=LangIdConfig(model=clean_models["lid"], threshold=0.3))
    annotated, _ = annotate(docs, Models(cfg), cfg)
    assert [d.lang for d in annotated] == ["en", "en"]
    good, half = (d.signals for d in annotated)
    assert half.sentence_other_lang == pytest.approx(3 / 12) and good.sentence_other_lang < 0.1
    assert 0.0 < good.sentence_gap < 1.0
    z = {d.id: d.anomaly_scores for d in annotated}
    assert z["mixed"].language_mix is not None and z["mixed"].language_mix > z["good"].language_mix
    # without the detector nothing reads them: not measured (no language ID per sentence)
    plain = dataclasses.replace(cfg, anomaly=AnomalyConfig())
    bare, _ = annotate(docs, Models(plain), plain)
    assert all(d.signals.sentence_gap == d.signals.sentence_other_lang == 0.0 for d in bare)
    forced, _ = annotate(docs, Models(plain), plain, cross_sentence=True)
    assert [d.signals for d in forced] == [d.signals for d in annotated]


def test_clean_transform_routes_and_counts(clean_models, book, beam_options):
    # Lone surrogates cannot even be encoded between Beam steps (and never leave the
    # extract stage, which normalises text); annotate() handles them (test above).
    docs = [d for d in hostile_docs(book) if d.id != "surrogates"]
    with TestPipeline(options=beam_options) as p:
        out = p | beam.Create(docs) | Clean(config(clean_models))
        assert_that(out.kept | beam.Map(lambda d: d.id), equal_to(["good", "good-pii"]), label="kept")
        assert_that(out.rejected | beam.Map(lambda r: r.doc.id),
                    equal_to([d.id for d in docs if not d.id.startswith("good")]), label="rejected")
        assert_that(out.failed, equal_to([]), label="failed")
    counters = {c.key.metric.name: c.committed for c in p.result.metrics().query()["counters"]}
    assert counters["records_in"] == 8 and counters["records_out"] == 2
    assert counters["rejected_language"] >= 1 and counters["pii_email"] == 1
    assert sum(v for k, v in counters.items() if k.startswith("rejected_")) == 6


def test_top_fraction_keeps_the_best(clean_models, book, beam_options):
    docs = [doc(str(i), text) for i, text in enumerate(book[20:60])]
    cfg = config(clean_models, threshold=None, top_fraction=0.5)
    cfg = CleanConfig(langid=cfg.langid, quality=cfg.quality, batch_size=8,
                      rules_languages=(), rules=cfg.rules.__class__(families=()))
    with TestPipeline(options=beam_options) as p:
        out = p | beam.Create(docs) | Clean(cfg)
        kept = out.kept | "CountKept" >> beam.combiners.Count.Globally()
        assert_that(kept, lambda got: _between(got[0], 15, 25), label="half kept")
        reasons = out.rejected | beam.Map(lambda r: r.reason) | beam.Distinct()
        assert_that(reasons, equal_to(["quality_low"]), label="reasons")


def _between(value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise AssertionError(f"{value} not in [{low}, {high}]")


def test_clean_config_validates():
    with pytest.raises(ValueError, match="threshold"):
        LangIdConfig(model="x", threshold=1.5)
    with pytest.raises(ValueError, match="route_by_language"):
        LangIdConfig(model="x", languages=(), route_by_language=True)
    with pytest.raises(ValueError, match="top_fraction"):
        QualityConfig(top_fraction=0.0)
    with pytest.raises(ValueError, match="contamination"):
        AnomalyConfig(contamination=0.9)


def _scored_docs(book: list[str]) -> list[Doc]:
    import random

    rng = random.Random(5)
    return ([doc(f"book{i}", book[30 + i]) for i in range(6)]
            + [doc(f"{kind}", planted_new(kind, rng, book)) for kind in ("encoded", "placeholder", "word_salad")])


def test_each_detector_score_is_written_and_the_combined_one_decides(clean_models, book, beam_options):
    # every language kept: every document is scored (a document language ID drops is not)
    cfg = dataclasses.replace(config(clean_models), langid=LangIdConfig(model=clean_models["lid"], languages=(),
                                                                        threshold=0.0))
    models = Models(cfg)
    annotated, _ = annotate(_scored_docs(book), models, cfg)
    weights = models.anomaly.weights
    centred = models.anomaly.languages["perplexity"].centres
    for d in annotated:
        s = d.anomaly_scores
        z = np.array([s.perplexity, s.representation, s.signals, s.context, s.cohesion, s.language_mix],
                     dtype=np.float64)
        # a language without a centre (the reference is English books): no detector scores it
        assert (np.isfinite(z).all() if d.lang in centred else np.isnan(z).all()) and s.token_perplexity > 1.0
        assert d.anomaly_score == pytest.approx(float(np.nan_to_num(np.clip(z, 0, None)) @ weights / weights.sum()),
                                                abs=1e-6)
    assert sum(d.lang in centred for d in annotated) >= 7
    # only the detector selects here (no rules, every language): the combined score against
    # the threshold decides, whatever a single detector says
    scores = sorted(d.anomaly_score for d in annotated)
    threshold = (scores[-3] + scores[-4]) / 2
    expected = sorted(d.id for d in annotated if d.anomaly_score > threshold)
    assert len(expected) == 3
    for inference in ("inline", "runinference"):  # RunInference: the GPU path, on the CPU here
        cfg2 = CleanConfig(langid=LangIdConfig(model=clean_models["lid"], languages=(), threshold=0.0),
                           anomaly=AnomalyConfig(model=clean_models["anomaly"], threshold=threshold,
                                                 inference=inference),
                           rules=QualityRules(families=()), batch_size=4)
        with TestPipeline(options=beam_options) as p:
            out = p | beam.Create(_scored_docs(book)) | Clean(cfg2)
            assert_that(out.rejected | beam.Map(lambda r: (r.doc.id, r.reason)),
                        equal_to([(i, "anomaly") for i in expected]), label="rejected")
            assert_that(out.kept | beam.Map(lambda d: d.anomaly_scores is not None),
                        equal_to([True] * 6), label="kept scored")


def test_annotate_records_the_second_language_of_a_mixed_document():
    def run(lang: str, min_chars: int) -> str:
        lines = shared("langid", "lingua_sentences", f"{lang}.txt").read_text(encoding="utf-8").splitlines()
        out: list[str] = []
        while len("\n".join(out)) < min_chars:
            out.append(lines[len(out)])
        return "\n".join(out)

    cfg = CleanConfig(langid=LangIdConfig(model=str(shared("models", "lid.176.ftz")), languages=("de",)))
    short, mixed = run("de", 900), run("en", 1200) + "\n" + run("de", 5000)
    (one, two), _ = annotate([doc("short", short), doc("mixed", mixed)], Models(cfg), cfg)
    assert (one.lang, one.lang2, one.lang2_share) == ("de", "", 0.0)
    assert (two.lang, two.lang2) == ("de", "en") and 0.1 < two.lang2_share < 0.3
    assert select(two, cfg, None) is None  # kept: the first 1,000 characters alone said English


@pytest.mark.parametrize("score,verdict", [(0.649, "lang_score"), (0.65, None), (0.9, None)])
def test_select_applies_the_lang_score_threshold(score, verdict):
    cfg = CleanConfig(langid=LangIdConfig(model="unused.ftz", languages=("en",), threshold=0.65),
                      quality=QualityConfig(threshold=None))
    annotated = Doc(id="d", url="http://x/d", text="t", source="test", fetched_at="", lang="en", lang_score=score)
    got = select(annotated, cfg, None)
    assert (got and got[0]) == verdict
