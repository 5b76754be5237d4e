"""Issue 39, item 3: the signals across sentences (transforms/clean/coherence.py), on hand
examples that pin each decision and on real text (books, Leipzig sentences, lid.176)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from benchmarks.bench_anomaly import auroc
from models.fasttext_models import LanguageIdentifier
from pipelines.reference_corpus import _ARTICLES
from tests.conftest import shared
from transforms.clean import coherence
from transforms.clean.coherence import (content_units, cross_signals, other_language_share, sentence_gap,
                                        split_sentences)
from transforms.clean.features import CROSS_FEATURES, cross_matrix
from transforms.doc import Signals


def test_sentences_end_as_the_signals_say_and_at_line_ends():
    text = 'He said "Go." Then left! Why?\nA line without a stop\n新闻。第二句。 x'
    assert split_sentences(text) == ['He said "Go."', "Then left!", "Why?", "A line without a stop",
                                     "新闻。", "第二句。"]  # "x": one character, not a sentence
    assert split_sentences("One. Two. Three. Four.", limit=2) == ["One.", "Two."]
    assert split_sentences("I.\nx\nGo") == ["I.", "Go"]  # two characters make a sentence, one does not
    assert len(split_sentences(" ".join(f"S{i}." for i in range(40)))) == coherence.MAX_SENTENCES == 16


def test_content_units_are_stems_of_long_words_and_cjk_bigrams():
    assert content_units("The Elections of 2024 were won by the party") == {"electi", "party"}
    assert content_units("Electoral elected") == {"electo", "electe"}  # stems of STEM=6 letters
    assert content_units("四月新闻") == {"四月", "月新", "新闻"}
    assert content_units("ab中文字 danced12345 _that_ Привет") == {"中文", "文字", "danced", "привет"}
    assert content_units("Short words only here") == {"short", "words"}  # 5 letters: in; 4: out


@pytest.mark.parametrize("sentences,expected", [
    (["Rivers flood.", "Rivers rise."], 0.0),  # under MIN_SENTENCES: no evidence
    (["Rivers flood.", "Rivers rise.", "Bridges close."], 0.5),
    # the third shares "rivers" with the first (two sentences back): not a gap
    (["Rivers flood.", "Bridges close.", "Rivers rise."], 0.5),
    # three back is too far
    (["Rivers flood.", "Bridges close.", "Roads shut.", "Rivers rise."], 1.0),
    (["Rivers flood.", "Rivers close.", "Rivers shut.", "Rivers rise."], 0.0),
    # the second sentence has one sentence before it, not the last one
    (["Rivers flood.", "Bridges close.", "Roads shut.", "Bridges rise."], 2 / 3),
])
def test_sentence_gap_counts_sentences_sharing_nothing_with_the_two_before(sentences, expected):
    assert sentence_gap(sentences) == pytest.approx(expected)


def test_other_language_share_reads_long_sentences_only():
    seen: list[list[str]] = []

    def predict(batch: list[str]) -> list[tuple[str, float]]:
        seen.append(batch)
        return [("de" if "Haus" in s else "en", 0.9) for s in batch]

    long_en, long_de = "This is an English sentence.", "Das ist ein Haus am See."
    assert len(long_de) >= coherence.MIN_LID_CHARS == 16
    assert other_language_share([long_en, long_de, long_en, "Short one."], "en", predict) == pytest.approx(1 / 3)
    assert seen[-1] == [long_en, long_de, long_en]
    assert other_language_share([long_en, long_de, "Too short."], "en", predict) == 0.0  # 2 < MIN_SENTENCES
    assert len("Das Haus am See.") == 16  # exactly MIN_LID_CHARS: read
    assert other_language_share([long_en, long_en, "Das Haus am See."], "en", predict) == pytest.approx(1 / 3)
    # language ID reads the first MAX_LID_SENTENCES long sentences only
    assert coherence.MAX_LID_SENTENCES == 8
    assert other_language_share([long_en] * 7 + [long_de] * 3, "en", predict) == pytest.approx(1 / 8)
    assert len(seen[-1]) == 8


@pytest.fixture(scope="module")
def lid():
    return LanguageIdentifier.load(str(shared("models", "lid.176.ftz")))


def _leipzig(lang: str) -> list[str]:
    return shared("langid", "lingua_sentences", f"{lang}.txt").read_text(encoding="utf-8").splitlines()


def test_real_sentences_of_many_languages_are_told_from_one_language(lid):
    langs = ["de", "fr", "es", "it", "nl", "pl", "ru", "sv", "tr", "pt"]
    by_lang = {lang: _leipzig(lang) for lang in langs}
    rng = random.Random(1)
    mixed = [" ".join(by_lang[rng.choice(langs)][rng.randrange(500)] for _ in range(10)) for _ in range(20)]
    single = [" ".join(by_lang[lang][100 + 10 * i:110 + 10 * i]) for lang in langs for i in range(2)]
    doc_langs = [lang for lang, _ in lid.predict(mixed + single)]
    shares = np.array([s for _, s in cross_signals(mixed + single, doc_langs, lid.predict)])
    assert shares[:20].min() >= 0.5 > 0.25 >= shares[20:].max() and np.median(shares[20:]) == 0.0


def test_spliced_article_sentences_have_larger_gaps_than_the_articles(lid):
    """News article bodies repeat their subject's words; sentences of many articles do not
    (fiction is another matter: docs/BENCHMARKS.md)."""
    truth = json.loads(shared(*_ARTICLES).read_text(encoding="utf-8"))
    articles = [v["articleBody"] for _, v in sorted(truth.items()) if len(v.get("articleBody") or "") > 1500][:40]
    rng = random.Random(2)
    pool = [s for a in articles for s in split_sentences(a, limit=40) if len(s) > 30]
    spliced = [" ".join(rng.sample(pool, 12)) for _ in range(40)]
    gaps = np.array([g for g, _ in cross_signals(articles + spliced, ["en"] * (len(articles) + 40), lid.predict)])
    y = np.array([0] * len(articles) + [1] * 40)
    assert len(articles) >= 30 and auroc(gaps, y) >= 0.85
    assert np.median(gaps[y == 1]) >= 0.8 > np.median(gaps[y == 0])


def test_cross_matrix_reads_the_two_signals_the_detector_reads():
    import models.anomaly

    assert CROSS_FEATURES == models.anomaly.CROSS_SIGNALS
    x = cross_matrix([Signals(sentence_gap=0.25, sentence_other_lang=0.5), None])
    assert x.tolist() == [[0.25, 0.5], [0.0, 0.0]] and x.dtype == np.float64
    assert cross_matrix([]).shape == (0, 2)
