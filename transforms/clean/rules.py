"""The quality rules: one table, one row per threshold over a quality signal (pure).

A row (``Rule``) states the rule's family (its config section under ``clean.rules``), its
config key, the ``Signals`` field it reads, its direction, its default (from the rule's
source), its reason code and the signal's unit. ``RULES`` is the only place a rule is
stated; derived from it are:

* the config classes (``rules_config``): ``QualityRules`` with one section per family
  (``GopherRepetitionRules``, ``GopherQualityRules``, ``C4Rules``, ``FineWebRules``), a key
  per rule with its default and type (an integer for counts, a boolean for flags) and
  the check that thresholds are >= 0;
* selection (``first_failure``): the families in ``QualityRules.families`` order (the
  default is FineWeb's: Gopher repetition, Gopher quality, C4, FineWeb), each family's
  rules in table order; the first rule a document breaks is returned with its reason
  code, the value and the threshold, so every drop can be explained afterwards;
* the run report's histograms and threshold markers (``pipelines/report.py``): every
  signal a min or max rule reads, in table order;
* each key's meaning in ``docs/CONFIG.md`` (``describe``, the classes' ``field_docs``).

A threshold set to ``None`` (``null`` in YAML) turns its rule off, as does ``false`` for a
flag rule.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, Optional, Sequence, Union

from transforms.doc import Signals

Threshold = Union[bool, int, float, None]
Failure = tuple[str, str]  # (reason code, "value vs threshold")


class Direction(str, Enum):
    MIN = "min"  # a signal below the threshold is rejected (key ``min_*``)
    MAX = "max"  # a signal above the threshold is rejected (key ``max_*``)
    FLAG = "flag"  # a boolean key (``reject_*``): when true, a non-zero signal is rejected


class Unit(str, Enum):
    """What a signal measures: its thresholds' type and the report's bins."""

    FRACTION = "fraction"  # a ratio, mostly in [0, 1]
    COUNT = "count"  # words, sentences: thresholds are integers, plots have a log axis
    CHARS = "chars"  # characters per word


@dataclass(frozen=True)
class Family:
    name: str  # the section under ``clean.rules`` and the name in ``families``
    class_name: str  # of its config class (a module-level name here, for pickling)
    source: str  # where its rules and defaults come from (the class docstring)


@dataclass(frozen=True)
class Rule:
    family: str
    key: str  # in the family's config section
    signal: str  # the ``Signals`` field it reads
    direction: Direction
    default: Threshold
    reason: str  # the reason code of a document it rejects
    unit: Unit = Unit.FRACTION
    detail: str = ""  # a flag rule's rejection detail


FAMILIES: tuple[Family, ...] = (  # in the order ``first_failure`` applies them by default
    Family("gopher_repetition", "GopherRepetitionRules", "Gopher paper (Rae et al. 2021) Table A1."),
    Family("gopher_quality", "GopherQualityRules",
           "Gopher paper section A.1.1 (and datatrove's GopherQualityFilter defaults)."),
    Family("c4", "C4Rules", "C4 (Raffel et al. 2020, section 2.2): document-level rules. C4's line "
                            "removals are measured (``c4_dropped_lines_frac``) but the text is not rewritten."),
    Family("fineweb", "FineWebRules",
           "FineWeb (Penedo et al. 2024) custom filters, datatrove FineWebQualityFilter defaults."),
)

_MIN, _MAX, _FLAG = Direction.MIN, Direction.MAX, Direction.FLAG
# Within a family, table order is the order of its checks; across the table, the order
# of the report's signal plots.
RULES: tuple[Rule, ...] = (
    Rule("gopher_quality", "min_words", "words", _MIN, 50, "gopher_min_words", Unit.COUNT),
    Rule("gopher_quality", "max_words", "words", _MAX, 100_000, "gopher_max_words", Unit.COUNT),
    Rule("gopher_quality", "min_mean_word_length", "mean_word_length", _MIN, 3.0, "gopher_mean_word_length",
         Unit.CHARS),
    Rule("gopher_quality", "max_mean_word_length", "mean_word_length", _MAX, 10.0, "gopher_mean_word_length",
         Unit.CHARS),
    Rule("gopher_quality", "max_symbol_word_ratio", "symbol_word_ratio", _MAX, 0.1, "gopher_symbol_word_ratio"),
    Rule("gopher_quality", "max_bullet_lines_ratio", "bullet_lines_ratio", _MAX, 0.9, "gopher_bullet_lines_ratio"),
    Rule("gopher_quality", "max_ellipsis_lines_ratio", "ellipsis_lines_ratio", _MAX, 0.3,
         "gopher_ellipsis_lines_ratio"),
    Rule("gopher_quality", "min_alpha_words_ratio", "alpha_words_ratio", _MIN, 0.8, "gopher_alpha_words_ratio"),
    Rule("gopher_quality", "min_stop_words", "stop_words", _MIN, 2, "gopher_stop_words", Unit.COUNT),
    Rule("gopher_repetition", "max_dup_line_frac", "dup_line_frac", _MAX, 0.30, "gopher_rep_dup_line_frac"),
    Rule("gopher_repetition", "max_dup_para_frac", "dup_para_frac", _MAX, 0.30, "gopher_rep_dup_para_frac"),
    Rule("gopher_repetition", "max_dup_line_char_frac", "dup_line_char_frac", _MAX, 0.20,
         "gopher_rep_dup_line_char_frac"),
    Rule("gopher_repetition", "max_dup_para_char_frac", "dup_para_char_frac", _MAX, 0.20,
         "gopher_rep_dup_para_char_frac"),
    Rule("gopher_repetition", "max_top_2gram_char_frac", "top_2gram_char_frac", _MAX, 0.20,
         "gopher_rep_top_2gram_char_frac"),
    Rule("gopher_repetition", "max_top_3gram_char_frac", "top_3gram_char_frac", _MAX, 0.18,
         "gopher_rep_top_3gram_char_frac"),
    Rule("gopher_repetition", "max_top_4gram_char_frac", "top_4gram_char_frac", _MAX, 0.16,
         "gopher_rep_top_4gram_char_frac"),
    Rule("gopher_repetition", "max_dup_5gram_char_frac", "dup_5gram_char_frac", _MAX, 0.15,
         "gopher_rep_dup_5gram_char_frac"),
    Rule("gopher_repetition", "max_dup_6gram_char_frac", "dup_6gram_char_frac", _MAX, 0.14,
         "gopher_rep_dup_6gram_char_frac"),
    Rule("gopher_repetition", "max_dup_7gram_char_frac", "dup_7gram_char_frac", _MAX, 0.13,
         "gopher_rep_dup_7gram_char_frac"),
    Rule("gopher_repetition", "max_dup_8gram_char_frac", "dup_8gram_char_frac", _MAX, 0.12,
         "gopher_rep_dup_8gram_char_frac"),
    Rule("gopher_repetition", "max_dup_9gram_char_frac", "dup_9gram_char_frac", _MAX, 0.11,
         "gopher_rep_dup_9gram_char_frac"),
    Rule("gopher_repetition", "max_dup_10gram_char_frac", "dup_10gram_char_frac", _MAX, 0.10,
         "gopher_rep_dup_10gram_char_frac"),
    Rule("c4", "reject_lorem_ipsum", "c4_lorem_ipsum", _FLAG, True, "c4_lorem_ipsum",
         detail="contains 'lorem ipsum'"),
    Rule("c4", "reject_curly_bracket", "c4_curly_bracket", _FLAG, True, "c4_curly_bracket", detail="contains '{'"),
    Rule("c4", "min_sentences", "c4_sentences", _MIN, 5, "c4_sentences", Unit.COUNT),
    Rule("c4", "max_dropped_lines_frac", "c4_dropped_lines_frac", _MAX, None, "c4_dropped_lines_frac"),
    Rule("fineweb", "min_line_punct_ratio", "fineweb_line_punct_ratio", _MIN, 0.12, "fineweb_line_punct_ratio"),
    Rule("fineweb", "max_short_line_ratio", "fineweb_short_line_ratio", _MAX, 0.67, "fineweb_short_line_ratio"),
    Rule("fineweb", "max_dup_line_char_ratio", "fineweb_dup_line_char_ratio", _MAX, 0.01,
         "fineweb_dup_line_char_ratio"),
    Rule("fineweb", "max_newline_word_ratio", "fineweb_newline_word_ratio", _MAX, 0.3,
         "fineweb_newline_word_ratio"),
)

_KEY_PREFIX = {Direction.MIN: "min_", Direction.MAX: "max_", Direction.FLAG: "reject_"}
_SIGNALS = frozenset(f.name for f in fields(Signals))


def _row_error(rule: Rule, families: set[str]) -> str:
    """What is wrong with one row ("" when nothing)."""
    if rule.family not in families:
        return f"unknown family {rule.family!r}"
    if rule.signal not in _SIGNALS:
        return f"{rule.signal!r} is not a Signals field"
    if not rule.key.startswith(_KEY_PREFIX[rule.direction]) or not rule.key.isidentifier():
        return f"a {rule.direction.value} rule's key starts with {_KEY_PREFIX[rule.direction]!r}"
    if rule.direction is Direction.FLAG:
        return "" if isinstance(rule.default, bool) and rule.detail else "a flag has a boolean default and a detail"
    kinds = (int,) if rule.unit is Unit.COUNT else (int, float)
    if rule.default is not None and (isinstance(rule.default, bool) or not isinstance(rule.default, kinds)
                                     or rule.default < 0):
        return f"the default must be None or {'an integer' if kinds == (int,) else 'a number'} >= 0"
    return ""


def check_table(rules: Sequence[Rule], families: Sequence[Family]) -> None:
    """``ValueError`` naming the first bad row: unknown family or signal, a key that does
    not say its direction or repeats one, a default of the wrong type, or two units for
    one signal."""
    names = {f.name for f in families}
    keys: set[tuple[str, str]] = set()
    units: dict[str, Unit] = {}
    for rule in rules:
        error = _row_error(rule, names)
        if not error and (rule.family, rule.key) in keys:
            error = "the key is used twice in the family"
        if not error and units.setdefault(rule.signal, rule.unit) is not rule.unit:
            error = f"another rule reads {rule.signal!r} as {units[rule.signal].value}"
        if error:
            raise ValueError(f"rule {rule.family}.{rule.key}: {error}")
        keys.add((rule.family, rule.key))


def _check_thresholds(self: Any) -> None:
    for f in fields(self):
        value = getattr(self, f.name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            raise ValueError(f"{f.name} must be >= 0, got {value}")


def _check_families(self: Any) -> None:
    known = list(type(self).sections)
    unknown = set(self.families) - set(known)
    if unknown:
        raise ValueError(f"unknown rule families {sorted(unknown)}; known: {known}")


def _value_type(rule: Rule) -> Any:
    if rule.direction is Direction.FLAG:
        return bool
    return Optional[int] if rule.unit is Unit.COUNT else Optional[float]


def describe(rule: Rule) -> str:
    """What a rule's key means, for the config reference."""
    if rule.direction is Direction.FLAG:
        return f"true: reject a document that {rule.detail} (reason ``{rule.reason}``)"
    side = "below" if rule.direction is Direction.MIN else "above"
    return (f"reject a document whose ``{rule.signal}`` ({rule.unit.value}) is {side} this "
            f"(reason ``{rule.reason}``); null: off")


def _section_class(family: Family, rules: tuple[Rule, ...]) -> type:
    """A family's frozen config class: a key per rule; ``table`` holds its rows,
    ``field_docs`` what each key means."""
    return dataclasses.make_dataclass(
        family.class_name, [(r.key, _value_type(r), field(default=r.default)) for r in rules],
        namespace={"__doc__": family.source, "__module__": __name__, "table": rules,
                   "field_docs": {r.key: describe(r) for r in rules},
                   "__post_init__": _check_thresholds}, frozen=True)


def rules_config(rules: Sequence[Rule] = RULES, families: Sequence[Family] = FAMILIES) -> type:
    """The config class of a rule table (checked first): a section per family, and
    ``families``, the families applied, in order (default: every family, ``families`` order)."""
    check_table(rules, families)
    sections = {f.name: _section_class(f, tuple(r for r in rules if r.family == f.name)) for f in families}
    return dataclasses.make_dataclass(
        "QualityRules", [(name, cls, field(default=cls())) for name, cls in sections.items()]
        + [("families", tuple[str, ...], field(default=tuple(sections)))],
        namespace={"__doc__": "The rule families (a section each) and the ones applied, in order.",
                   "__module__": __name__, "table": tuple(rules), "sections": sections,
                   "field_docs": {**{f.name: f"the {f.name} thresholds: {f.source}" for f in families},
                                  "families": "the families applied, in this order (the first rule "
                                              "a document breaks is its reason)"},
                   "__post_init__": _check_families}, frozen=True)


QualityRules = rules_config()
GopherRepetitionRules = QualityRules.sections["gopher_repetition"]
GopherQualityRules = QualityRules.sections["gopher_quality"]
C4Rules = QualityRules.sections["c4"]
FineWebRules = QualityRules.sections["fineweb"]


def threshold(rules: QualityRules, rule: Rule) -> Threshold:
    """The threshold ``rules`` (a ``QualityRules``) sets for ``rule``."""
    return getattr(getattr(rules, rule.family), rule.key)


def broken(rule: Rule, value: float, limit: Threshold) -> Optional[Failure]:
    """(reason, detail) when ``value`` breaks ``rule`` at ``limit``, else None."""
    if limit is None or limit is False:
        return None
    if rule.direction is Direction.FLAG:
        return (rule.reason, rule.detail) if value else None
    if rule.direction is Direction.MAX:
        return (rule.reason, f"{value:.4g} > {limit:g}") if value > limit else None
    return (rule.reason, f"{value:.4g} < {limit:g}") if value < limit else None


def family_failure(signals: Signals, section: Any) -> Optional[Failure]:
    """The first rule of one family's config section that ``signals`` break, or None."""
    for rule in section.table:
        failed = broken(rule, getattr(signals, rule.signal), getattr(section, rule.key))
        if failed:
            return failed
    return None


def first_failure(signals: Signals, rules: QualityRules) -> Optional[Failure]:
    """The first rule (in ``rules.families`` order) that ``signals`` break, or None."""
    for family in rules.families:
        failed = family_failure(signals, getattr(rules, family))
        if failed:
            return failed
    return None
