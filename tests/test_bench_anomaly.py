"""benchmarks/bench_anomaly.py's tables and benchmarks/cross_families.py's generators: the
figures of issue 39 are computed from these, so their decisions are pinned here."""

from __future__ import annotations

import random

import numpy as np
import pytest

from benchmarks.anomaly_web import Item
from benchmarks.bench_anomaly import _table, source_table
from benchmarks.cross_families import DEV_KINDS, HELD_OUT_KINDS, planted_cross, sentences


def _items() -> list[Item]:
    normal = [Item(f"a{i}", "text", "web", "article", "test") for i in range(4)]
    normal += [Item(f"z{i}", "text", "web", "leipzig:zh", "test") for i in range(2)]
    normal += [Item(f"x{i}", "text", "web", "leipzig+:zu", "test") for i in range(2)]
    junk = [Item(f"j{i}", "text", "word_salad", "planted", "test") for i in range(3)]
    junk += [Item(f"s{i}", "text", "spliced_sentences", "planted", "test") for i in range(2)]
    return normal + junk


def test_source_table_counts_flags_among_the_documents_the_rules_pass():
    items = _items()
    caught = np.array([True, False, False, False, False, False, False, False, True, False, False, False, False])
    flagged = np.array([True, True, False, False, False, True, False, False, True, True, False, True, False])
    rows = {r["source"]: r for r in source_table(items, caught, flagged)}
    assert rows["article"]["rule_passed"] == 3 and rows["article"]["flagged_count"] == 1  # the caught one not counted
    assert rows["article"]["rules_drop"] == 0.25 and rows["article"]["flagged"] == pytest.approx(1 / 3)
    assert rows["leipzig:zh"]["flagged"] == 0.5 and rows["leipzig+:zu"]["flagged"] == 0.0
    assert rows["all normal"]["rule_passed"] == 5 and rows["all normal"]["flagged_count"] == 2  # extras apart
    summary = rows["leipzig (1 languages)"]
    assert summary["worst_language"] == "leipzig:zh" and summary["worst_flagged"] == 0.5
    assert rows["leipzig+ (1 languages)"]["flagged_count"] == 0
    junk = rows["junk (all families)"]
    assert junk["docs"] == 5 and junk["rule_passed"] == 4 and junk["flagged_count"] == 2


def test_spliced_families_are_judged_against_coherent_documents_only():
    items = _items()
    scores = {"s": np.array([0.0, 0.1, 0.2, 0.3, 9.0, 9.0, 0.5, 0.5, 1.0, 1.0, 1.0, 5.0, 5.0])}
    caught = np.zeros(len(items), dtype=bool)
    rows = {r["family"]: r for r in _table(scores, items, caught, caught, ("word_salad", "spliced_sentences"))}
    # against all normal documents the two high-scoring Chinese ones rank above word salad;
    # spliced sentences are compared with the article bodies only (AUROC 1)
    assert rows["spliced_sentences"]["s_auroc"] == 1.0
    assert rows["word_salad"]["s_auroc"] == pytest.approx((3 * 6) / (3 * 8))
    assert rows["rule-passed pooled"]["docs"] == 5


@pytest.mark.parametrize("kind", DEV_KINDS + HELD_OUT_KINDS)
def test_each_cross_family_generator_makes_text_from_its_sources(kind):
    coherent = ["First sentence of document one. Second sentence here. A third one follows.\nNew paragraph. Last.",
                "Another document starts. It has sentences too. They talk about other things.\nMore here. End."]
    by_language = {"de": ["Das ist ein Satz. Noch ein Satz hier. Und ein dritter."] * 3,
                   "fr": ["Ceci est une phrase. Encore une phrase. Et une troisième."] * 3}
    text = planted_cross(kind, random.Random(0), coherent, coherent, by_language)
    assert text.strip() and text == planted_cross(kind, random.Random(0), coherent, coherent, by_language)
    if kind == "two_languages":
        assert {"Satz" in text, "phrase" in text} == {True}
    with pytest.raises(ValueError, match="unknown kind"):
        planted_cross("nope", random.Random(0), coherent, coherent, by_language)


def test_sentences_split_after_end_punctuation_in_every_script():
    assert sentences("One. Two! Three?\nFour") == ["One.", "Two!", "Three?", "Four"]
    assert sentences("第一句。第二句！") == ["第一句。", "第二句！"]
