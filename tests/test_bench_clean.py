"""The clean benchmark's word and sentence split for datatrove (datatrove itself lives in
.bench-venv only: these tests check the split against ours, which needs no datatrove)."""

from __future__ import annotations

from benchmarks.bench_clean import WhitespaceRegexWords, agreement, documents
from transforms.clean.signals import compute_signals, count_sentences


def test_split_counts_what_our_signals_count_on_real_documents() -> None:
    split = WhitespaceRegexWords()
    texts = documents()[::25]
    assert len(texts) > 50
    lines = 0
    for text in texts:
        assert split.word_tokenize(text) == text.split()
        assert len(split.word_tokenize(text)) == compute_signals(text).words
        for line in text.splitlines():  # datatrove's C4 filter counts sentences per kept line
            spans = split.span_tokenize(line)
            assert len(spans) == count_sentences(line)
            assert all(a < b for a, b in spans) and all(b1 <= a2 for (_, b1), (a2, _) in zip(spans, spans[1:]))
            lines += bool(spans)
    assert lines > 100


def test_sentences_end_after_closing_quotes_and_brackets() -> None:
    split = WhitespaceRegexWords()
    text = 'He said "stop." Then (quietly.) it ended! Version 2.0 is out? Yes'
    assert split.sent_tokenize(text) == ['He said "stop."', "Then (quietly.)", "it ended!", "Version 2.0 is out?"]
    assert len(split.span_tokenize(text)) == count_sentences(text) == 4


def test_agreement_counts_kept_documents_and_the_other_sides_reasons() -> None:
    ours = [None, None, "c4_sentences", None, "gopher_min_words"]
    theirs = [None, "⛰ C4 Quality: too_few_sentences", "⛰ C4 Quality: too_few_sentences", None, None]
    a = agreement(ours, theirs)
    assert (a["kept_a"], a["kept_b"], a["kept_both"], a["same"]) == (3, 3, 2, 3)
    assert a["only_a_kept_b_reason"] == [("⛰ C4 Quality: too_few_sentences", 1)]
    assert a["only_b_kept_a_reason"] == [("gopher_min_words", 1)]
