"""Words of a text by language and script (pure functions, no Beam).

The Gopher / C4 / FineWeb word signals assume words separated by whitespace. Languages
written without spaces between words need a segmenter, as FineWeb-2 / datatrove use one
(``datatrove/utils/word_tokenizers.py``: spaCy with jieba for Chinese, pythainlp's
``newmm`` for Thai, ...). Here:

* ``whitespace``: ``str.split`` (every language written with spaces: exactly what the
  English rules have always read);
* ``jieba``: Chinese, jieba 0.42.1 (pinned in pyproject.toml), precise mode without its
  HMM for unknown words (dictionary words only: 1.5x faster, 170-210 k characters/s here);
  its dictionary loads once per process (~1.1 s) on the first Chinese text;
* ``kiwi``: Korean, kiwipiepy 0.24.1's morphological analyser with its default ``cong``
  model (kiwipiepy_model 0.24.0), as datatrove's ``KiwiTokenizer`` for FineWeb-2: Korean
  writes spaces between phrases (eojeol), each a stem with its particles and endings
  attached, so whitespace words leave the particles (the language's stop words) inside
  longer words. A word is the surface text of a morpheme; morphemes whose spans overlap
  (a contraction such as 입니다 = 이 + ᆸ니다) are one word. ~40-45 k characters/s
  here (a document of 3,000 characters ~70 ms: the clean benchmark's signals cost ~50x
  whitespace words'); the model loads once per process on the first Korean text (~3 s,
  ~280 MB);
* ``newmm``: Thai, pythainlp 5.4.0's dictionary-based maximal matching (``newmm-safe``,
  as datatrove), ~670 k characters/s here;
* ``chars``: the documented fallback for the other scripts written without spaces (Japanese
  Kana and Han, Lao, Khmer, Myanmar, and Han text of a language with no segmenter): every
  character of those scripts is a word, except that a run of Katakana (with its long-vowel
  mark) is one word (loanwords); any other run of non-space characters (Latin words,
  digits, punctuation) stays one word. Several pipelines count CJK characters as words;
  it is a regular expression, ~4 M characters/s.

Whitespace never belongs to a word; segmenters' punctuation tokens are words, as spaCy's
are in datatrove (they count in ``alpha_words_ratio`` as non-alphabetic words).
"""

from __future__ import annotations

import logging
import re
from functools import lru_cache
from typing import Callable, Iterable

# Scripts written without spaces between words (code point ranges).
_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
_HIRAGANA = "\u3040-\u309f"
_KATAKANA = "\u30a0-\u30ff\u31f0-\u31ff\uff66-\uff9f"
_THAI = "\u0e00-\u0e7f"
_LAO = "\u0e80-\u0eff"
_KHMER = "\u1780-\u17ff\u19e0-\u19ff"
_MYANMAR = "\u1000-\u109f\uaa60-\uaa7f\ua9e0-\ua9ff"
_NO_SPACE = _HAN + _HIRAGANA + _KATAKANA + _THAI + _LAO + _KHMER + _MYANMAR
_CHAR_WORDS = re.compile(f"[{_KATAKANA}]+|[{_NO_SPACE}]|[^\\s{_NO_SPACE}]+")

# Scripts told apart for the fallback of a language with no fitted rules (rules.py).
SCRIPT_RANGES: dict[str, str] = {
    "Hani": _HAN, "Kana": _HIRAGANA + _KATAKANA, "Hang": "\uac00-\ud7af\u1100-\u11ff\u3130-\u318f",
    "Thai": _THAI, "Laoo": _LAO, "Khmr": _KHMER, "Mymr": _MYANMAR,
    "Cyrl": "\u0400-\u04ff\u0500-\u052f", "Arab": "\u0600-\u06ff\u0750-\u077f\u08a0-\u08ff\ufb50-\ufdff\ufe70-\ufeff",
    "Deva": "\u0900-\u097f", "Grek": "\u0370-\u03ff\u1f00-\u1fff", "Hebr": "\u0590-\u05ff",
    "Latn": "A-Za-z\u00c0-\u024f\u1e00-\u1eff",
}
_SCRIPT_PATTERNS = {name: re.compile(f"[{chars}]") for name, chars in SCRIPT_RANGES.items()}
SCRIPT_SAMPLE_CHARS = 2000  # the characters of a text its dominant script is read from

# The segmenter of each language code (lid.176's labels); any other language: by script.
LANGUAGE_SEGMENTERS: dict[str, str] = {"zh": "jieba", "th": "newmm", "ko": "kiwi", "ja": "chars",
                                       "lo": "chars", "km": "chars", "my": "chars"}
# A language with no entry above, by its text's dominant script: these scripts have no
# spaces between words (Hangul: none between a word and its particles); every other
# script is segmented on whitespace.
SCRIPT_SEGMENTERS: dict[str, str] = {"Hani": "jieba", "Kana": "chars", "Thai": "newmm", "Hang": "kiwi",
                                     "Laoo": "chars", "Khmr": "chars", "Mymr": "chars"}
SEGMENTERS = ("whitespace", "jieba", "newmm", "kiwi", "chars")


def dominant_script(text: str) -> str:
    """The script (``SCRIPT_RANGES`` name) with the most letters in the first
    ``SCRIPT_SAMPLE_CHARS`` characters; Kana wins over Han once a tenth of the letters are
    Kana (Japanese mixes both); "" when none of them occurs."""
    sample = text[:SCRIPT_SAMPLE_CHARS]
    counts = {name: len(pattern.findall(sample)) for name, pattern in _SCRIPT_PATTERNS.items()}
    total = sum(counts.values())
    if total == 0:
        return ""
    if counts["Kana"] * 10 >= total:
        return "Kana"
    return max(counts, key=lambda name: counts[name])


def segmenter_name(lang: str, script: str = "") -> str:
    """The segmenter of a language code, else of the text's dominant script, else whitespace."""
    return LANGUAGE_SEGMENTERS.get(lang) or SCRIPT_SEGMENTERS.get(script, "whitespace")


def char_words(text: str) -> list[str]:
    """The ``chars`` fallback: a character of a no-space script per word (a Katakana run
    is one word), other non-space runs one word each."""
    return _CHAR_WORDS.findall(text)


@lru_cache(maxsize=1)
def _jieba() -> Callable[[str], list[str]]:
    import jieba

    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    return lambda text: [w for w in jieba.lcut(text, HMM=False) if not w.isspace()]


@lru_cache(maxsize=1)
def _newmm() -> Callable[[str], list[str]]:
    from pythainlp.tokenize import word_tokenize

    return lambda text: [w for w in word_tokenize(text, engine="newmm-safe", keep_whitespace=False)
                         if not w.isspace()]


def merged_spans(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Non-empty ``(start, end)`` spans in order, a span that starts inside the one before
    it merged into that one (kiwi gives a contraction's morphemes overlapping spans)."""
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if end <= start:
            continue  # a morpheme with no surface of its own (e.g. an elided copula)
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


@lru_cache(maxsize=1)
def _kiwi() -> Callable[[str], list[str]]:
    from kiwipiepy import Kiwi

    kiwi = Kiwi(num_workers=-1)  # analyse in the calling thread: Beam runs one bundle per thread

    def words(text: str) -> list[str]:
        spans = merged_spans((t.start, t.start + t.len) for t in kiwi.tokenize(text))
        return [w for w in (text[start:end] for start, end in spans) if not w.isspace()]

    return words


def segmenter(name: str) -> Callable[[str], list[str]]:
    """The word function of a segmenter name (``SEGMENTERS``); ``ValueError`` for others."""
    if name == "whitespace":
        return str.split
    if name == "chars":
        return char_words
    if name == "jieba":
        return _jieba()
    if name == "newmm":
        return _newmm()
    if name == "kiwi":
        return _kiwi()
    raise ValueError(f"unknown segmenter {name!r}; known: {list(SEGMENTERS)}")


def words(text: str, lang: str = "", script: str = "") -> list[str]:
    """The words of ``text`` in language ``lang`` (dominant script ``script`` when the
    language has no segmenter of its own)."""
    return segmenter(segmenter_name(lang, script))(text)
