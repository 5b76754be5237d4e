"""Whether a document's sentences belong together (pure): the inputs of the anomaly
detector's two cross-sentence detectors (issue 39).

Junk made of fluent sentences passes every per-token and per-line test: sentences taken
from many documents, or a different language in every sentence. Two measures read across
sentences:

* ``sentence_gap``: the share of sentences (after the first) that share no content word
  with either of the two sentences before them. Text about one thing repeats its words
  (names, the subject, its terms); sentences from different documents rarely do (lexical
  cohesion, Halliday and Hasan 1976; TextTiling's block similarity, Hearst 1997). A
  content word is a token of at least ``MIN_WORD`` letters, cut to its first ``STEM``
  (a crude stem: "election", "elections", "electoral" meet); text in a script written
  without spaces (CJK) contributes its character bigrams instead.
* ``sentence_other_lang``: the share of sentences that language ID labels a language
  other than the document's (each sentence of at least ``MIN_LID_CHARS`` characters,
  fastText lid.176, the clean stage's model).

Both read the first ``MAX_SENTENCES`` sentences; a document with fewer than
``MIN_SENTENCES`` (of at least ``MIN_LID_CHARS`` characters, for the language share)
gets 0.0: no evidence either way. Sentences end as the signals' do
(``transforms/clean/signals.py``: ., !, ? and their CJK, Devanagari, Arabic ... forms,
then closing quotes) and at line ends.

The measures are language-dependent (the reference of a language made of unrelated
sentences, as Leipzig's corpora are, has a high ``sentence_gap`` itself), so the detector
centres them per language like its other scores (``models/anomaly.py``).
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

from transforms.clean.signals import SENTENCE_END

MAX_SENTENCES = 16
MIN_SENTENCES = 3
MIN_LID_CHARS = 16
MAX_LID_SENTENCES = 8  # language ID reads the first 8 of them (half the cost of 16, the same AUROC)
MIN_WORD = 5
STEM = 6
# CJK radicals to CJK ideographs, Hangul syllables, compatibility ideographs, full-width forms
_CJK = "\u2e80-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\uff00-\uffef"
_UNSEGMENTED = re.compile(f"[{_CJK}]+")
_BOUNDARY = re.compile(f"{SENTENCE_END.pattern}|\\n")  # a sentence's end or its line's
_LONG_WORD = re.compile(f"[^\\W\\d_{_CJK}]{{{MIN_WORD},}}")  # letters of other scripts


def split_sentences(text: str, limit: int = MAX_SENTENCES) -> list[str]:
    """The first ``limit`` sentences of ``text`` (stripped, longer than one character):
    one scan that stops at the last one needed."""
    out: list[str] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        piece = text[start:match.end()].strip()
        start = match.end()
        if len(piece) > 1:
            out.append(piece)
            if len(out) >= limit:
                return out
    piece = text[start:].strip()
    if len(piece) > 1:
        out.append(piece)
    return out


def content_units(sentence: str) -> frozenset[str]:
    """A sentence's content words (the first ``STEM`` letters of each run of at least
    ``MIN_WORD`` letters: digits and ``_`` end a word) and the character bigrams of its
    runs of unsegmented script (Han, kana, Hangul, full-width forms)."""
    lower = sentence.lower()
    units = {word[:STEM] for word in _LONG_WORD.findall(lower)}
    for run in _UNSEGMENTED.findall(lower):
        units.update(run[i:i + 2] for i in range(len(run) - 1))
    return frozenset(units)


def sentence_gap(sentences: Sequence[str]) -> float:
    """The share of sentences after the first that share no content unit with the two
    before them; 0.0 under ``MIN_SENTENCES`` sentences."""
    if len(sentences) < MIN_SENTENCES:
        return 0.0
    units = [content_units(s) for s in sentences]
    gaps = sum(1 for i in range(1, len(units))
               if not units[i] & (units[i - 1] | (units[i - 2] if i >= 2 else frozenset())))
    return gaps / (len(units) - 1)


def other_language_share(sentences: Sequence[str], lang: str,
                         predict: Callable[[list[str]], list[tuple[str, float]]]) -> float:
    """The share of ``sentences`` of at least ``MIN_LID_CHARS`` characters that ``predict``
    (language ID: text → (label, probability), labels canonical as the document's
    ``lang``) puts in another language; 0.0 under ``MIN_SENTENCES`` of them."""
    long_ = [s for s in sentences if len(s) >= MIN_LID_CHARS][:MAX_LID_SENTENCES]
    if len(long_) < MIN_SENTENCES:
        return 0.0
    return sum(1 for label, _ in predict(long_) if label != lang) / len(long_)


def cross_signals(texts: Sequence[str], langs: Sequence[str],
                  predict: Callable[[list[str]], list[tuple[str, float]]]) -> list[tuple[float, float]]:
    """(``sentence_gap``, ``sentence_other_lang``) of each text, ``langs`` its language."""
    out = []
    for text, lang in zip(texts, langs):
        sentences = split_sentences(text)
        out.append((sentence_gap(sentences), other_language_share(sentences, lang, predict)))
    return out
