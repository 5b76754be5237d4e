"""The clean stage's decisions without a pipeline: the order of the checks, every threshold
at its boundary, the details a rejection carries, the top-fraction cut, the config's
bounds, and the batch step's failure isolation and fallback counters (real lid.176, real
text; fast enough to run against every mutant of clean.py)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest
from apache_beam.pvalue import TaggedOutput

from benchmarks.anomalies import clean_chunks
from tests.cleanmodels import unwrap
from tests.conftest import shared
from transforms.clean import clean as clean_mod
from transforms.clean.clean import (AnomalyConfig, CleanConfig, LangIdConfig, QualityConfig, _CleanBatchFn,
                                    _cut_of, _SelectFn, _split_by_quantile, _threshold, canonical_languages,
                                    rules_apply, select, valid_utf8)
from transforms.clean.rules import QualityRules
from transforms.clean.signals import compute_signals
from transforms.doc import Doc, Rejected
from transforms.routing import FAILED, REJECTED


@pytest.fixture(scope="module")
def book() -> str:
    return unwrap(clean_chunks(shared("text"))[10])


@pytest.fixture(scope="module")
def good(book: str) -> Doc:
    """An English book chunk, annotated as the stage would: every default rule passes."""
    doc = Doc(id="good", url="http://x/good", text=book, source="test", fetched_at="", lang="en",
              lang_score=0.97, signals=compute_signals(book), quality_score=0.8, anomaly_score=0.1)
    assert select(doc, cfg(), None) is None
    return doc


def cfg(languages: tuple[str, ...] = ("en",), threshold: float = 0.65, quality: float | None = 0.5,
        top_fraction: float | None = None, **kw: Any) -> CleanConfig:
    return CleanConfig(langid=LangIdConfig(model="unused.ftz", languages=languages, threshold=threshold),
                       quality=QualityConfig(threshold=quality, top_fraction=top_fraction), **kw)


def few_words(doc: Doc) -> Doc:
    """``doc`` with 10 words: breaks gopher_min_words (50), a count no language table maps."""
    return dataclasses.replace(doc, signals=dataclasses.replace(doc.signals, words=10.0))


def test_language_is_checked_first_and_named_with_the_allowed_list(good: Doc) -> None:
    french = dataclasses.replace(good, lang="fr", lang_score=0.1, quality_score=0.0, anomaly_score=9.0)
    assert select(french, cfg(), 0.5) == ("language", "fr (0.10) not in ['en']")
    assert select(french, cfg(languages=("en", "fr")), None)[0] == "lang_score"
    # no languages: any language passes the language check
    assert select(dataclasses.replace(french, lang_score=0.9, quality_score=0.9, anomaly_score=None),
                  cfg(languages=()), None) is None


def test_the_lang_score_detail_states_score_and_threshold(good: Doc) -> None:
    low = dataclasses.replace(good, lang_score=0.5)
    assert select(low, cfg(), None) == ("lang_score", "en 0.500 < 0.65")
    assert select(low, cfg(threshold=0.5), None) is None


def test_rules_decide_after_language_and_only_for_rules_languages(good: Doc) -> None:
    short = few_words(good)
    reason, detail = select(short, cfg(), None)
    assert reason == "gopher_min_words" and "10" in detail and "50" in detail
    assert "[" not in detail  # English has its own table: no fallback note
    assert select(short, cfg(rules_languages=("de",)), None) is None
    assert select(short, cfg(rules_languages=("de", "en")), None)[0] == "gopher_min_words"
    assert select(dataclasses.replace(short, signals=None), cfg(), None) is None  # not annotated: no rules
    assert select(short, cfg(rules=QualityRules(families=())), None) is None
    # language first: a French short document is a language drop
    assert select(dataclasses.replace(short, lang="fr"), cfg(), None)[0] == "language"


def test_rules_apply_reads_rules_languages_and_signals(good: Doc) -> None:
    assert rules_apply(good, cfg()) and rules_apply(good, cfg(rules_languages=("en",)))
    assert not rules_apply(good, cfg(rules_languages=("fr",)))
    assert not rules_apply(dataclasses.replace(good, signals=None), cfg())


def test_a_language_without_a_table_is_named_in_the_detail() -> None:
    cyrillic = "\n".join(shared("langid", "lingua_sentences", "ru.txt").read_text(encoding="utf-8").splitlines()[:40])
    # Tatar (tt) has no table: a Cyrillic text labelled tt gets Russian's
    base = Doc(id="tt", url="http://x/tt", text=cyrillic, source="test", fetched_at="", lang="tt",
               lang_score=0.9, signals=compute_signals(cyrillic))
    short = few_words(base)
    reason, detail = select(short, cfg(languages=()), None)
    assert reason == "gopher_min_words" and detail.endswith("[tt: rules of ru, Cyrl script default]")
    latin = dataclasses.replace(short, lang="fy", text="Alle minsken wurde frij en gelyk yn weardigens en rjochten berne.")
    assert select(latin, cfg(languages=()), None)[1].endswith("[fy: Latn script default: configured thresholds]")
    # language_rules off: the configured thresholds, no note
    off = select(short, cfg(languages=(), language_rules=False), None)
    assert off[0] == "gopher_min_words" and "[" not in off[1]


def test_anomaly_is_rejected_above_its_threshold_only(good: Doc) -> None:
    at = dataclasses.replace(good, anomaly_score=0.5)
    assert select(at, cfg(), 0.5) is None
    above = dataclasses.replace(good, anomaly_score=0.5001)
    assert select(above, cfg(), 0.5) == ("anomaly", "0.5001 > 0.5")
    assert select(above, cfg(), None) is None
    assert select(dataclasses.replace(good, anomaly_score=None), cfg(), 0.0) is None
    # the rules decide before the detector
    assert select(few_words(above), cfg(), 0.5)[0] == "gopher_min_words"


def test_quality_is_rejected_below_its_threshold_only(good: Doc) -> None:
    at = dataclasses.replace(good, quality_score=0.5)
    assert select(at, cfg(), None) is None
    below = dataclasses.replace(good, quality_score=0.49)
    assert select(below, cfg(), None) == ("quality_low", "0.490 < 0.5")
    assert select(below, cfg(quality=None), None) is None
    # top_fraction: the threshold is the stage's quantile, not the configured one
    assert select(below, cfg(top_fraction=0.5), None) is None
    assert select(dataclasses.replace(good, quality_score=None), cfg(), None) is None
    # the detector decides before the classifier
    assert select(dataclasses.replace(below, anomaly_score=0.9), cfg(), 0.5)[0] == "anomaly"


def test_the_select_step_of_the_runinference_path_keeps_or_rejects_with_the_verdict(good: Doc) -> None:
    step = _SelectFn(cfg(), 0.5)
    assert list(step.process(good)) == [good]
    (out,) = step.process(dataclasses.replace(good, anomaly_score=0.7))
    assert isinstance(out, TaggedOutput) and out.tag == REJECTED
    assert (out.value.doc.id, out.value.reason, out.value.detail) == ("good", "anomaly", "0.7 > 0.5")
    assert list(_SelectFn(cfg(), None).process(dataclasses.replace(good, anomaly_score=0.7)))[0].id == "good"
    (short,) = _SelectFn(cfg(), 0.5).process(few_words(good))
    assert short.value.reason == "gopher_min_words"


def test_the_top_fraction_cut_is_the_rounded_quantile() -> None:
    assert _cut_of([], 0.5) == 0.0
    quantiles = [0.0, 0.1, 0.2, 0.3, 0.4]
    assert _cut_of(quantiles, 1.0) == 0.0
    assert _cut_of(quantiles, 0.3) == 0.3  # round(0.7 x 4) = 3
    assert _cut_of(quantiles, 0.4) == 0.2  # round(0.6 x 4) = 2 (2.4 rounds down)
    assert _cut_of(quantiles, 0.05) == 0.4
    assert isinstance(_cut_of([1, 2], 0.5), float)


def test_the_top_fraction_split_keeps_the_cut_itself(good: Doc) -> None:
    at = list(_split_by_quantile(dataclasses.replace(good, quality_score=0.3), 0.3))
    assert at == [dataclasses.replace(good, quality_score=0.3)]
    (below,) = _split_by_quantile(dataclasses.replace(good, quality_score=0.29), 0.3)
    assert isinstance(below, TaggedOutput) and below.tag == REJECTED
    assert (below.value.doc.id, below.value.reason, below.value.detail) == ("good", "quality_low", "0.290 < top-fraction cut 0.300")
    assert list(_split_by_quantile(dataclasses.replace(good, quality_score=None), 0.3))[0].id == "good"


def test_the_configured_anomaly_threshold_wins_over_the_detectors() -> None:
    detector = SimpleNamespace(threshold=0.7)
    assert _threshold(AnomalyConfig(threshold=0.2), detector) == 0.2
    assert _threshold(AnomalyConfig(threshold=0.0), detector) == 0.0
    assert _threshold(AnomalyConfig(), detector) == 0.7
    assert _threshold(AnomalyConfig(), None) is None


def test_valid_utf8_replaces_lone_surrogates_only() -> None:
    text = "naïve 😀 text"
    assert valid_utf8(text) is text
    assert valid_utf8("a\ud800b") == "a?b"


def test_configured_languages_are_read_as_the_model_labels_them() -> None:
    assert canonical_languages(("nb", "no", "en", "en")) == ("no", "en")
    assert LangIdConfig(model="x", languages=("nb", "de")).languages == ("no", "de")
    assert cfg(rules_languages=("nb",)).rules_languages == ("no",)


@pytest.mark.parametrize("make,ok", [
    (lambda v: LangIdConfig(model="x", threshold=v), (0.0, 1.0)),
    (lambda v: QualityConfig(threshold=v), (0.0, 1.0)),
])
def test_thresholds_are_bounded_by_zero_and_one(make, ok) -> None:
    for value in ok:
        make(value)
    for value in (-0.01, 1.01):
        with pytest.raises(ValueError, match="threshold must be in"):
            make(value)


def test_every_size_and_share_is_bounded() -> None:
    QualityConfig(top_fraction=1.0)
    for bad in (0.0, 1.01, -0.5):
        with pytest.raises(ValueError, match="top_fraction must be in"):
            QualityConfig(top_fraction=bad)
    LangIdConfig(model="x", max_chars=1, max_windows=1)
    with pytest.raises(ValueError, match="max_chars must be > 0"):
        LangIdConfig(model="x", max_chars=0)
    with pytest.raises(ValueError, match="max_windows must be > 0"):
        LangIdConfig(model="x", max_windows=0)
    with pytest.raises(ValueError, match="max_chars must be > 0"):
        QualityConfig(max_chars=0)
    QualityConfig(max_chars=1)
    cfg(batch_size=1, max_error_ratio=1.0)
    with pytest.raises(ValueError, match="batch_size must be > 0"):
        cfg(batch_size=0)
    for bad in (0.0, 1.01):
        with pytest.raises(ValueError, match="max_error_ratio must be in"):
            cfg(max_error_ratio=bad)
    with pytest.raises(ValueError, match="route_by_language needs"):
        LangIdConfig(model="x", languages=(), route_by_language=True)
    assert LangIdConfig(model="x", languages=("en",), route_by_language=True).route_by_language


class _Counts:
    """Stands in for StageCounters: what the step counted, by name."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def inc(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n


def _step(config: CleanConfig, monkeypatch: pytest.MonkeyPatch, selects: bool = True) -> tuple[_CleanBatchFn, _Counts]:
    fn = _CleanBatchFn(config, "clean", selects=selects)
    fn.setup()
    counts = _Counts()
    monkeypatch.setattr(fn, "_counters", counts)
    return fn, counts


def _real(config: CleanConfig) -> CleanConfig:
    return dataclasses.replace(config, langid=dataclasses.replace(
        config.langid, model=str(shared("models", "lid.176.ftz"))), quality=QualityConfig(threshold=None))


def test_the_batch_step_isolates_a_failing_document_and_counts_the_rest(book: str, monkeypatch) -> None:
    real_redact = clean_mod.redact

    def redact(text: str):
        if "BOOM" in text:
            raise RuntimeError("redaction broke")
        return real_redact(text)

    monkeypatch.setattr(clean_mod, "redact", redact)
    fn, counts = _step(_real(cfg()), monkeypatch)
    docs = [Doc(id="a", url="", text=book + "\nMail jane.roe@example.org", source="s.jsonl", fetched_at=""),
            Doc(id="b", url="", text="BOOM " + book, source="bad.jsonl", fetched_at=""),
            Doc(id="c", url="", text="Ceci est un texte en français. " * 40, source="s.jsonl", fetched_at="")]
    out = list(fn.process(docs))
    failed = [o.value for o in out if isinstance(o, TaggedOutput) and o.tag == FAILED]
    assert len(failed) == 1 and failed[0].source == "bad.jsonl" and "redaction broke" in failed[0].error
    assert failed[0].raw.startswith(b"BOOM ") and failed[0].stage == "clean"
    kept = [o for o in out if isinstance(o, Doc)]
    rejected = [o.value for o in out if isinstance(o, TaggedOutput) and o.tag == REJECTED]
    assert [d.id for d in kept] == ["a"] and "<EMAIL>" in kept[0].text
    assert [(r.doc.id, r.reason) for r in rejected] == [("c", "language")] and isinstance(rejected[0], Rejected)
    assert counts.counts == {"pii_email": 1, "pii_phone": 0, "pii_ip": 0}
    # a batch without failures is annotated once, in one call
    calls = []
    monkeypatch.setattr(clean_mod, "annotate", lambda *a, **k: calls.append(len(a[0])) or real_annotate(*a, **k))
    list(fn.process([docs[0], docs[2]]))
    assert calls == [2]


real_annotate = clean_mod.annotate


def test_the_batch_step_counts_documents_checked_without_a_table_of_their_own(monkeypatch) -> None:
    lines = shared("langid", "lingua_sentences", "ru.txt").read_text(encoding="utf-8").splitlines()
    russian = " ".join(lines[:60])
    fn, counts = _step(_real(cfg(languages=())), monkeypatch)
    # lid.176 reads the Russian text as ru (a table of its own): no fallback count
    (kept,) = [o for o in fn.process([Doc(id="ru", url="", text=russian, source="s", fetched_at="")])]
    assert kept.lang == "ru" and not any(k.startswith("rules_fallback") for k in counts.counts)
    # West Frisian has no table (no sentences to fit it on): counted whether kept or dropped
    # by a rule, not when dropped by language (UDHR article 1, lid.176: fy 0.81)
    frisian = ("Alle minsken wurde frij en gelyk yn weardigens en rjochten berne. " * 12).strip()
    out = list(fn.process([Doc(id="fy", url="", text=frisian, source="s", fetched_at="")]))
    assert counts.counts.get("rules_fallback_fy") == 1, (out, counts.counts)
    fn_en, counts_en = _step(_real(cfg(languages=("en",))), monkeypatch)
    out = list(fn_en.process([Doc(id="fy", url="", text=frisian, source="s", fetched_at="")]))
    assert out[0].value.reason == "language" and not any(k.startswith("rules_fallback") for k in counts_en.counts)
    # outside rules_languages: not checked, not counted
    fn_de, counts_de = _step(_real(cfg(languages=(), rules_languages=("de",))), monkeypatch)
    list(fn_de.process([Doc(id="fy", url="", text=frisian, source="s", fetched_at="")]))
    assert not any(k.startswith("rules_fallback") for k in counts_de.counts)


def test_without_selection_the_batch_step_keeps_what_language_id_keeps(book: str, monkeypatch) -> None:
    """The RunInference path selects after the language model, but what language ID drops
    is dropped before it (no signals, no scores): the rest is annotated and kept."""
    fn, _ = _step(_real(cfg()), monkeypatch, selects=False)
    out = list(fn.process([Doc(id="fr", url="", text="Ceci est un texte en français. " * 40, source="s",
                               fetched_at=""),
                           Doc(id="en", url="", text=book, source="s", fetched_at="")]))
    dropped, kept = out
    assert isinstance(dropped, TaggedOutput) and dropped.value.reason == "language"
    assert dropped.value.doc.lang == "fr" and dropped.value.doc.signals is None
    assert isinstance(kept, Doc) and kept.lang == "en" and kept.signals is not None
