"""Thresholds over the quality signals, with defaults from their sources (pure).

Each rule has its own reason code (``gopher_rep_*``, ``gopher_*``, ``c4_*``,
``fineweb_*``); ``first_failure`` applies the families in FineWeb's order (Gopher
repetition, Gopher quality, C4, FineWeb) and returns the first rule a document breaks,
with the value and the threshold, so every drop can be explained afterwards.
A threshold set to ``None`` (``null`` in YAML) turns its rule off.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable, Optional

from transforms.doc import Signals


def _check_fractions(obj: object) -> None:
    for f in fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        if value is not None and isinstance(value, float) and value < 0:
            raise ValueError(f"{f.name} must be >= 0, got {value}")


@dataclass(frozen=True)
class GopherRepetitionRules:
    """Gopher paper (Rae et al. 2021) Table A1."""

    max_dup_line_frac: Optional[float] = 0.30
    max_dup_para_frac: Optional[float] = 0.30
    max_dup_line_char_frac: Optional[float] = 0.20
    max_dup_para_char_frac: Optional[float] = 0.20
    max_top_2gram_char_frac: Optional[float] = 0.20
    max_top_3gram_char_frac: Optional[float] = 0.18
    max_top_4gram_char_frac: Optional[float] = 0.16
    max_dup_5gram_char_frac: Optional[float] = 0.15
    max_dup_6gram_char_frac: Optional[float] = 0.14
    max_dup_7gram_char_frac: Optional[float] = 0.13
    max_dup_8gram_char_frac: Optional[float] = 0.12
    max_dup_9gram_char_frac: Optional[float] = 0.11
    max_dup_10gram_char_frac: Optional[float] = 0.10

    def __post_init__(self) -> None:
        _check_fractions(self)


@dataclass(frozen=True)
class GopherQualityRules:
    """Gopher paper section A.1.1 (and datatrove's GopherQualityFilter defaults)."""

    min_words: Optional[int] = 50
    max_words: Optional[int] = 100_000
    min_mean_word_length: Optional[float] = 3.0
    max_mean_word_length: Optional[float] = 10.0
    max_symbol_word_ratio: Optional[float] = 0.1
    max_bullet_lines_ratio: Optional[float] = 0.9
    max_ellipsis_lines_ratio: Optional[float] = 0.3
    min_alpha_words_ratio: Optional[float] = 0.8
    min_stop_words: Optional[int] = 2

    def __post_init__(self) -> None:
        _check_fractions(self)


@dataclass(frozen=True)
class C4Rules:
    """C4 (Raffel et al. 2020, section 2.2): document-level rules. C4's line removals are
    measured (``c4_dropped_lines_frac``) but the text is not rewritten."""

    min_sentences: Optional[int] = 5
    reject_lorem_ipsum: bool = True
    reject_curly_bracket: bool = True
    max_dropped_lines_frac: Optional[float] = None


@dataclass(frozen=True)
class FineWebRules:
    """FineWeb (Penedo et al. 2024) custom filters, datatrove FineWebQualityFilter defaults."""

    min_line_punct_ratio: Optional[float] = 0.12
    max_short_line_ratio: Optional[float] = 0.67
    max_dup_line_char_ratio: Optional[float] = 0.01
    max_newline_word_ratio: Optional[float] = 0.3

    def __post_init__(self) -> None:
        _check_fractions(self)


Failure = tuple[str, str]  # (reason code, "value vs threshold")


def _max(reason: str, value: float, limit: Optional[float]) -> Optional[Failure]:
    if limit is not None and value > limit:
        return reason, f"{value:.4g} > {limit:g}"
    return None


def _min(reason: str, value: float, limit: Optional[float]) -> Optional[Failure]:
    if limit is not None and value < limit:
        return reason, f"{value:.4g} < {limit:g}"
    return None


def gopher_repetition(s: Signals, r: GopherRepetitionRules) -> Optional[Failure]:
    checks = [("dup_line_frac", r.max_dup_line_frac), ("dup_para_frac", r.max_dup_para_frac),
              ("dup_line_char_frac", r.max_dup_line_char_frac),
              ("dup_para_char_frac", r.max_dup_para_char_frac)]
    checks += [(f"top_{n}gram_char_frac", getattr(r, f"max_top_{n}gram_char_frac")) for n in (2, 3, 4)]
    checks += [(f"dup_{n}gram_char_frac", getattr(r, f"max_dup_{n}gram_char_frac"))
               for n in range(5, 11)]
    for name, limit in checks:
        failed = _max(f"gopher_rep_{name}", getattr(s, name), limit)
        if failed:
            return failed
    return None


def gopher_quality(s: Signals, r: GopherQualityRules) -> Optional[Failure]:
    return (_min("gopher_min_words", s.words, r.min_words)
            or _max("gopher_max_words", s.words, r.max_words)
            or _min("gopher_mean_word_length", s.mean_word_length, r.min_mean_word_length)
            or _max("gopher_mean_word_length", s.mean_word_length, r.max_mean_word_length)
            or _max("gopher_symbol_word_ratio", s.symbol_word_ratio, r.max_symbol_word_ratio)
            or _max("gopher_bullet_lines_ratio", s.bullet_lines_ratio, r.max_bullet_lines_ratio)
            or _max("gopher_ellipsis_lines_ratio", s.ellipsis_lines_ratio, r.max_ellipsis_lines_ratio)
            or _min("gopher_alpha_words_ratio", s.alpha_words_ratio, r.min_alpha_words_ratio)
            or _min("gopher_stop_words", s.stop_words, r.min_stop_words))


def c4(s: Signals, r: C4Rules) -> Optional[Failure]:
    if r.reject_lorem_ipsum and s.c4_lorem_ipsum:
        return "c4_lorem_ipsum", "contains 'lorem ipsum'"
    if r.reject_curly_bracket and s.c4_curly_bracket:
        return "c4_curly_bracket", "contains '{'"
    return (_min("c4_sentences", s.c4_sentences, r.min_sentences)
            or _max("c4_dropped_lines_frac", s.c4_dropped_lines_frac, r.max_dropped_lines_frac))


def fineweb(s: Signals, r: FineWebRules) -> Optional[Failure]:
    return (_min("fineweb_line_punct_ratio", s.fineweb_line_punct_ratio, r.min_line_punct_ratio)
            or _max("fineweb_short_line_ratio", s.fineweb_short_line_ratio, r.max_short_line_ratio)
            or _max("fineweb_dup_line_char_ratio", s.fineweb_dup_line_char_ratio,
                    r.max_dup_line_char_ratio)
            or _max("fineweb_newline_word_ratio", s.fineweb_newline_word_ratio,
                    r.max_newline_word_ratio))


@dataclass(frozen=True)
class QualityRules:
    """All four rule families; each can be switched off with ``enabled: false``."""

    gopher_repetition: GopherRepetitionRules = GopherRepetitionRules()
    gopher_quality: GopherQualityRules = GopherQualityRules()
    c4: C4Rules = C4Rules()
    fineweb: FineWebRules = FineWebRules()
    families: tuple[str, ...] = ("gopher_repetition", "gopher_quality", "c4", "fineweb")

    def __post_init__(self) -> None:
        unknown = set(self.families) - set(_FAMILIES)
        if unknown:
            raise ValueError(f"unknown rule families {sorted(unknown)}; known: {list(_FAMILIES)}")


_FAMILIES: dict[str, Callable[[Signals, object], Optional[Failure]]] = {
    "gopher_repetition": gopher_repetition,  # type: ignore[dict-item]
    "gopher_quality": gopher_quality,  # type: ignore[dict-item]
    "c4": c4,  # type: ignore[dict-item]
    "fineweb": fineweb,  # type: ignore[dict-item]
}


def first_failure(signals: Signals, rules: QualityRules) -> Optional[Failure]:
    """The first rule (in ``rules.families`` order) that ``signals`` break, or None."""
    for family in rules.families:
        failed = _FAMILIES[family](signals, getattr(rules, family))
        if failed:
            return failed
    return None
