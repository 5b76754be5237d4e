"""Quality signals and rules: tables, and the n-gram statistics against datatrove's code."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from tests.conftest import shared
from transforms.clean.rules import (
    C4Rules,
    FineWebRules,
    GopherQualityRules,
    GopherRepetitionRules,
    QualityRules,
    first_failure,
)
from transforms.clean.signals import compute_signals, count_sentences, ngram_signals
from transforms.doc import Signals


# --- datatrove's reference definitions (string based), ported verbatim for comparison ---
def ref_top_duplicate(x: list[str]) -> int:
    top, count = Counter(x).most_common(1)[0]
    return len(top) * count


def ref_all_duplicate(words: list[str], n: int) -> int:
    unique: set[str] = set()
    repeated, idx = 0, 0
    while idx < len(words) - n + 1:
        gram = "".join(words[idx:idx + n])
        if gram in unique:
            repeated += len(gram)
            idx += n
        else:
            unique.add(gram)
            idx += 1
    return repeated


def reference_ngrams(text: str) -> dict[str, float]:
    words = text.split()
    out = {}
    for n in (2, 3, 4):
        grams = [" ".join(words[i:i + n]) for i in range(len(words) - n + 1)]
        out[f"top_{n}gram_char_frac"] = ref_top_duplicate(grams) / len(text) if grams else 0.0
    for n in range(5, 11):
        out[f"dup_{n}gram_char_frac"] = ref_all_duplicate(words, n) / len(text)
    return out


def sample_texts() -> list[str]:
    rng = random.Random(1)
    book = shared("text", "pg2701_moby_dick.txt").read_text(encoding="utf-8")
    texts = [book[i:i + 3000] for i in range(10_000, 400_000, 37_000)]
    for base in list(texts[:5]):
        words = base.split()
        cut = rng.randrange(20, len(words) - 40)
        texts.append(" ".join(words[:cut] + words[cut:cut + 30] * 3 + words[cut:]))  # planted repeat
    texts += ["spam " * 300, "a b c d e f " * 100, "one two", "x", "the cat sat on the mat " * 40]
    return texts


@pytest.mark.parametrize("text", sample_texts())
def test_ngram_signals_match_datatrove(text):
    ours = ngram_signals(text.split(), len(text))
    ref = reference_ngrams(text)
    for key, value in ref.items():
        assert ours[key] == pytest.approx(value, abs=1e-12), key


@pytest.mark.parametrize("text,field,expected", [
    ("", "words", 0.0),
    ("one two three", "words", 3.0),
    ("a\n\nb\n\na", "dup_para_frac", 1 / 3),
    ("line\nline\nother", "dup_line_frac", 1 / 3),
    ("line\nline\nother", "dup_line_char_frac", 4 / 15),
    ("# # # word", "symbol_word_ratio", 3 / 4),
    ("wait...\nok\n…", "ellipsis_lines_ratio", 2 / 3),
    ("• a\n- b\nc", "bullet_lines_ratio", 2 / 3),
    ("the cat and the dog", "stop_words", 3.0),
    ("word 123 -- $5 hello, world! ___ x1", "alpha_words_ratio", 4 / 8),
    ("Ends well.\nno end\nAlso ends!", "fineweb_line_punct_ratio", 2 / 3),
    ("short\n" + "a much longer line that has more than thirty characters", "fineweb_short_line_ratio", 0.5),
    ("Lorem ipsum dolor sit amet.", "c4_lorem_ipsum", 1.0),
    ("function() { return 1; }", "c4_curly_bracket", 1.0),
    ("Visit https://x.org and www.y.com now", "url_ratio", 2 / 5),
    ("GrÃ¼ÃŸe aus KÃ¶ln", "mojibake_ratio", 1.0),
    ("ABC def", "upper_ratio", 3 / 7),
    ("a1b2", "digit_ratio", 0.5),
    ("aaaa", "char_entropy", 0.0),
    ("abab", "char_entropy", 1.0),
])
def test_signal_table(text, field, expected):
    assert getattr(compute_signals(text), field) == pytest.approx(expected)


@pytest.mark.parametrize("text,expected", [
    ("Hi. Ho! Hu?", 3), ("a... b?! c.", 3), ("no end", 0), ("e.g. this", 1), ("。你好。", 1), ("", 0),
    ('He said "no." Then left.', 2), ("(As planned.) Done.", 2), ("It was “over.”\nYes.", 2),
    ("Really?!» Ja.", 2), ("「行く。」", 1), ('a."b', 0), ("3.5 (x.)y", 0),
])
def test_count_sentences(text, expected):
    assert count_sentences(text) == expected


# Five sentences; three end in a closing quote or bracket (issue 18, item 3).
NEWS = ('The council approved the new road plan on Tuesday evening. The mayor called it '
        '"a good day for the town."\n'
        "Work on the bridge will start in May (the contract was signed last week.) It should "
        "take about two years.\n"
        "Residents said the plan was “long overdue.”")


def test_news_article_with_quoted_endings_passes_c4_sentences():
    from transforms.clean.rules import C4Rules, family_failure

    signals = compute_signals(NEWS)
    assert signals.c4_dropped_lines_frac == 0.0
    assert signals.c4_sentences == 5
    assert family_failure(signals, C4Rules()) is None


@pytest.mark.parametrize("text", [
    "", " \n\t ", "x" * 10_000_000, "lone \ud800 surrogate \udcff", "😀" * 500, "a\x00b\x00" * 100,
    "\n" * 10_000, "word " * 200_000,
])
def test_signals_survive_hostile_text(text):
    signals = compute_signals(text)
    assert all(v == v and v >= 0 for v in vars(signals).values())  # no NaN, no negatives


GOOD = Signals(words=300, mean_word_length=4.5, alpha_words_ratio=0.95, stop_words=30,
               c4_sentences=20, fineweb_line_punct_ratio=0.9, fineweb_short_line_ratio=0.1)


@pytest.mark.parametrize("change,reason", [
    ({}, None),
    ({"words": 20}, "gopher_min_words"),
    ({"mean_word_length": 12}, "gopher_mean_word_length"),
    ({"symbol_word_ratio": 0.2}, "gopher_symbol_word_ratio"),
    ({"alpha_words_ratio": 0.5}, "gopher_alpha_words_ratio"),
    ({"stop_words": 1}, "gopher_stop_words"),
    ({"dup_line_frac": 0.5}, "gopher_rep_dup_line_frac"),
    ({"top_2gram_char_frac": 0.3}, "gopher_rep_top_2gram_char_frac"),
    ({"dup_10gram_char_frac": 0.2}, "gopher_rep_dup_10gram_char_frac"),
    ({"c4_lorem_ipsum": 1.0}, "c4_lorem_ipsum"),
    ({"c4_curly_bracket": 1.0}, "c4_curly_bracket"),
    ({"c4_sentences": 2}, "c4_sentences"),
    ({"fineweb_line_punct_ratio": 0.05}, "fineweb_line_punct_ratio"),
    ({"fineweb_short_line_ratio": 0.9}, "fineweb_short_line_ratio"),
    ({"fineweb_dup_line_char_ratio": 0.05}, "fineweb_dup_line_char_ratio"),
    ({"fineweb_newline_word_ratio": 0.5}, "fineweb_newline_word_ratio"),
    ({"words": 20, "dup_line_frac": 0.5}, "gopher_rep_dup_line_frac"),  # repetition first
])
def test_rules_table(change, reason):
    signals = Signals(**{**vars(GOOD), **change})
    failed = first_failure(signals, QualityRules())
    assert (failed[0] if failed else None) == reason


def test_rules_can_be_switched_off():
    bad = Signals(**{**vars(GOOD), "c4_curly_bracket": 1.0, "words": 20})
    rules = QualityRules(families=("c4",), c4=C4Rules(reject_curly_bracket=False))
    assert first_failure(bad, rules) is None
    assert first_failure(bad, QualityRules(gopher_quality=GopherQualityRules(min_words=None),
                                           families=("gopher_quality",))) is None
    with pytest.raises(ValueError, match="unknown rule families"):
        QualityRules(families=("gopher", "c5"))
    with pytest.raises(ValueError):
        FineWebRules(max_short_line_ratio=-1.0)
    assert GopherRepetitionRules().max_dup_5gram_char_frac == 0.15  # Gopher Table A1
