"""Quality rules per language: stop words, word segmentation and thresholds (pure).

The Gopher / C4 / FineWeb thresholds in ``clean.rules`` were set on English. As FineWeb-2
does (github.com/huggingface/fineweb-2, ``configs/{lang}_{script}.yml``; datatrove's
``word_tokenizers.py``), each language gets its own word segmentation, stop words and,
for the rules whose scale depends on the language, thresholds fitted on that language's
own distribution. ``language_rules.json`` beside this module holds the fitted tables; it
is written by ``python -m benchmarks.fit_language_rules`` from the Leipzig web sentences
in ``../shared/data/langid/lingua_sentences`` (20 languages, 1,000 sentences or fewer
each) and, with ``--extra-sentences``, the 47 more of the same source (lingua-py's
``language-testdata``) that lid.176 can emit, Thai among them (the derived word lists and
numbers only, no text; 66 tables and English).

Method (``fit_language``; the fit uses the even-numbered sentences of each file, the
benchmark ``benchmarks.bench_language_rules`` measures on the odd-numbered ones):

1. Reference documents: ``REFERENCE_DOCS`` documents per language, each of 5-12
   sentences drawn (seeded) from the fit half, 1-3 sentences per line (sentences joined
   by a space, or by nothing for Chinese and Japanese).
2. Words: the language's segmenter (``segment.py``: whitespace; jieba for Chinese;
   pythainlp newmm for Thai; characters for Japanese and the other scripts without
   spaces).
3. Stop words (as FineWeb-2: the language's most frequent words): lower-cased words made
   of letters (and combining marks) in order of frequency in the fit half, as many as
   cover the share of running words that Gopher's eight English stop words cover in the
   English fit half (``coverage_target``, about 0.17), at least ``MIN_STOP_WORDS`` and at
   most ``MAX_STOP_WORDS``. ``min_stop_words`` (2) then means the same for every language.
   English keeps Gopher's eight.
4. Thresholds: for each rule of ``FITTED_RULES`` (word length, alphabetic words, n-gram
   repetition, short lines, newlines per word: signals whose scale moves with the language
   and its segmentation), the English threshold t maps to ``a + b * t`` (then clipped at
   0), the map that sends the English reference distribution onto the language's
   distribution on the side the rule cuts: b = the language's spread over the English
   spread, the spread being the distance from the median to the 5th percentile (a min
   rule) or to the 95th (a max rule), and a puts the English median on the language's
   median. On reference data of the same shape up to location and scale this is the
   quantile mapping FineWeb-2 describes (the threshold removes the same share of the
   language's reference as of the English one), and unlike it it extrapolates beyond the
   reference's range, where English thresholds usually sit on clean text. Where the
   English spread is zero (repetition fractions, all 0 on clean text), the map is a shift
   by the difference of the two 95th percentiles (b = 1). The map, not the threshold, is
   stored: a threshold set in the config is read as the English one and mapped.
   Every other rule (counts, flags, line structure, duplicated lines) keeps the
   configured threshold for every language, as FineWeb-2 keeps most of them global.

A language with no fitted table uses, by the dominant script of the document, the
table of ``SCRIPT_DEFAULTS`` (Latin: English, i.e. the configured thresholds; Cyrillic:
Russian; Arabic script: Arabic; Devanagari: Hindi; Han: Chinese; Kana: Japanese; Hangul:
Korean; Thai: Thai; Greek: Greek; Hebrew script: Hebrew; Lao, Khmer, Myanmar (character
words): Japanese) with its stop-word rule off (another language's stop words would
reject it); any other script keeps the configured thresholds, stop-word rule off. The rejection detail names the
table used (``[rules of ru: Cyrl script default]``) and the clean stage counts these
documents (``rules_fallback``).

Thai, Lao and Myanmar (by language code or, for any other code, by the document's
dominant script) get no punctuation rules (``PUNCTUATION_SIGNALS``: C4's sentence count
and dropped lines, FineWeb's line-end punctuation): their writing separates sentences
with a space or ends them with no mark that web text uses consistently, so a count of
sentence-ending marks says nothing about the text's quality and would reject nearly every
document (FineWeb-2 sets ``line_punct_thr: 0.0`` for tha_Thai, lao_Laoo and mya_Mymr, and
runs no C4 filter at all). Khmer keeps them: its khan (។) ends sentences and counts.
"""

from __future__ import annotations

import dataclasses
import json
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

import numpy as np

from transforms.clean.rules import QualityRules, Rule, Threshold
from transforms.clean.segment import dominant_script, segmenter, segmenter_name
from transforms.clean.signals import STOP_WORDS

LANGUAGE_RULES_FILE = Path(__file__).with_name("language_rules.json")
FITTED_RULES: tuple[str, ...] = (
    "gopher_quality.min_mean_word_length", "gopher_quality.max_mean_word_length",
    "gopher_quality.min_alpha_words_ratio",
    *(f"gopher_repetition.max_top_{n}gram_char_frac" for n in (2, 3, 4)),
    *(f"gopher_repetition.max_dup_{n}gram_char_frac" for n in range(5, 11)),
    "fineweb.max_short_line_ratio", "fineweb.max_newline_word_ratio",
)
SCRIPT_DEFAULTS: dict[str, str] = {"Latn": "en", "Cyrl": "ru", "Arab": "ar", "Deva": "hi", "Hani": "zh",
                                   "Kana": "ja", "Hang": "ko", "Thai": "th", "Grek": "el", "Hebr": "he",
                                   "Laoo": "ja", "Khmr": "ja", "Mymr": "ja"}
# Languages and scripts whose documents are not checked by sentence-ending punctuation.
NO_PUNCTUATION_LANGUAGES: frozenset[str] = frozenset({"th", "lo", "my"})
NO_PUNCTUATION_SCRIPTS: frozenset[str] = frozenset({"Thai", "Laoo", "Mymr"})
PUNCTUATION_SIGNALS: frozenset[str] = frozenset({"c4_sentences", "c4_dropped_lines_frac",
                                                 "fineweb_line_punct_ratio"})
REFERENCE_DOCS = 400
MIN_STOP_WORDS = 4
MAX_STOP_WORDS = 40
TAIL = 0.05  # the percentile a spread reaches to: 5th (min rules) and 95th (max rules)
_EPS = 1e-9


@dataclass(frozen=True)
class LanguageTable:
    """One language's fitted rules: its stop words and, per fitted rule, the map (a, b)."""

    lang: str
    stop_words: frozenset[str]
    maps: Mapping[str, tuple[float, float]]  # "family.key" -> (a, b): t -> max(0, a + b * t)

    def __hash__(self) -> int:
        return hash(self.lang)


@dataclass(frozen=True)
class LanguageProfile:
    """What the clean stage uses for a document: its words, stop words and rule table."""

    lang: str  # the document's language
    segmenter: str  # segment.SEGMENTERS
    stop_words: frozenset[str]  # empty: the stop-word rule is off
    table: str  # the language whose table applies ("" : the configured thresholds)
    fallback: str  # "" when the language has its own table, else why this one applies
    punctuation: bool = True  # False: the punctuation rules (PUNCTUATION_SIGNALS) are off

    def segment(self) -> Optional[Callable[[str], list[str]]]:
        return None if self.segmenter == "whitespace" else segmenter(self.segmenter)


def _table(lang: str, entry: Mapping[str, Any]) -> LanguageTable:
    maps = entry.get("maps", {})
    unknown = set(maps) - set(FITTED_RULES)
    if unknown:
        raise ValueError(f"{LANGUAGE_RULES_FILE.name}: {lang}: unknown rules {sorted(unknown)}")
    return LanguageTable(lang, frozenset(entry["stop_words"]),
                         {key: (float(a), float(b)) for key, (a, b) in maps.items()})


@lru_cache(maxsize=1)
def tables() -> dict[str, LanguageTable]:
    """The fitted tables of ``language_rules.json`` by language (English: Gopher's stop
    words and the configured thresholds)."""
    data = json.loads(LANGUAGE_RULES_FILE.read_text(encoding="utf-8"))
    out = {lang: _table(lang, entry) for lang, entry in data["languages"].items()}
    out["en"] = LanguageTable("en", STOP_WORDS, {})
    return out


def profile(lang: str, text: str) -> LanguageProfile:
    """The segmenter, stop words and rule table of a document in ``lang``: its own table,
    else its dominant script's default (``SCRIPT_DEFAULTS``) without stop words."""
    if lang in tables():
        return _own_profile(lang)
    return script_profile(lang, text)


def script_profile(lang: str, text: str, without: str = "") -> LanguageProfile:
    """The profile by the text's dominant script (``SCRIPT_DEFAULTS``), stop-word rule off:
    what a language without a table of its own gets (``without``: a table not to use, as
    if it had not been fitted)."""
    script = dominant_script(text)
    default = SCRIPT_DEFAULTS.get(script, "")
    default = "" if default == without else default
    name = segmenter_name(lang, script) if not default else segmenter_name(default, script)
    if default == "en" or not default:
        why = f"{script or 'no'} script default: configured thresholds"
        default = ""
    else:
        why = f"{script} script default"
    punctuation = lang not in NO_PUNCTUATION_LANGUAGES and script not in NO_PUNCTUATION_SCRIPTS
    if not punctuation:
        why += ", no punctuation rules"
    return LanguageProfile(lang, name, frozenset(), default, why, punctuation)


@lru_cache(maxsize=None)
def _own_profile(lang: str) -> LanguageProfile:
    return LanguageProfile(lang, segmenter_name(lang), tables()[lang].stop_words,
                           "" if lang == "en" else lang, "", lang not in NO_PUNCTUATION_LANGUAGES)


def mapped(threshold: Threshold, ab: tuple[float, float]) -> Threshold:
    """A configured (English) threshold mapped to a language: None stays None (off)."""
    if threshold is None or isinstance(threshold, bool):
        return threshold
    return round(max(0.0, ab[0] + ab[1] * float(threshold)), 4)


@lru_cache(maxsize=256)
def rules_for(rules: QualityRules, table: str, stop_words: bool = True, punctuation: bool = True) -> QualityRules:
    """``rules`` with the fitted rules mapped by ``table``'s maps ("": unchanged), the
    stop-word rule off when ``stop_words`` is false and the punctuation rules
    (``PUNCTUATION_SIGNALS``) off when ``punctuation`` is false."""
    maps = tables()[table].maps if table else {}
    sections = {}
    for family in type(rules).sections:
        section = getattr(rules, family)
        changes: dict[str, Threshold] = {}
        for rule in section.table:
            key = f"{family}.{rule.key}"
            if key in maps:
                changes[rule.key] = mapped(getattr(section, rule.key), maps[key])
            if rule.signal == "stop_words" and not stop_words:
                changes[rule.key] = None
            if rule.signal in PUNCTUATION_SIGNALS and not punctuation:
                changes[rule.key] = None
        if changes:
            sections[family] = dataclasses.replace(section, **changes)
    return dataclasses.replace(rules, **sections) if sections else rules


def document_rules(rules: QualityRules, prof: LanguageProfile) -> QualityRules:
    """The thresholds a document of profile ``prof`` is checked against."""
    return rules_for(rules, prof.table, bool(prof.stop_words), prof.punctuation)


# --- fitting (used by benchmarks/fit_language_rules.py) ----------------------------------

def is_word(token: str) -> bool:
    """A candidate stop word: letters and combining marks only (Hindi vowel signs,
    Arabic diacritics), at least one letter."""
    return any(c.isalpha() for c in token) and all(c.isalpha() or unicodedata.category(c)[0] == "M"
                                                   for c in token)


def stop_word_coverage(words: Sequence[str], stop_words: Iterable[str]) -> float:
    """The share of ``words`` (lower-cased) that are stop words."""
    wanted = frozenset(stop_words)
    return sum(w.lower() in wanted for w in words) / max(len(words), 1)


def fit_stop_words(words: Sequence[str], coverage: float) -> list[str]:
    """The most frequent words (ties: alphabetical) until they cover ``coverage`` of the
    running words, between ``MIN_STOP_WORDS`` and ``MAX_STOP_WORDS`` of them."""
    counts: dict[str, int] = {}
    for word in words:
        lower = word.lower()
        if is_word(lower):
            counts[lower] = counts.get(lower, 0) + 1
    ranked = sorted(counts, key=lambda w: (-counts[w], w))
    total = max(len(words), 1)
    chosen: list[str] = []
    covered = 0
    for word in ranked[:MAX_STOP_WORDS]:
        if covered / total >= coverage and len(chosen) >= MIN_STOP_WORDS:
            break
        chosen.append(word)
        covered += counts[word]
    return chosen


def fit_map(english: Sequence[float], language: Sequence[float], direction: str) -> tuple[float, float]:
    """(a, b) mapping an English threshold onto ``language``'s distribution (see the
    module docstring): scale by the tail spreads on the rule's side and align medians;
    a shift of the tail percentiles where the English spread is zero."""
    tail = TAIL if direction == "min" else 1.0 - TAIL
    e_med, e_tail = np.quantile(english, [0.5, tail])
    l_med, l_tail = np.quantile(language, [0.5, tail])
    e_spread, l_spread = abs(e_tail - e_med), abs(l_tail - l_med)
    if e_spread > _EPS:
        b = l_spread / e_spread
        return round(float(l_med - b * e_med), 6), round(float(b), 6)
    return round(float(l_tail - e_tail), 6), 1.0


def rule_of(key: str, rules: Sequence[Rule]) -> Rule:
    family, name = key.split(".")
    return next(r for r in rules if r.family == family and r.key == name)
