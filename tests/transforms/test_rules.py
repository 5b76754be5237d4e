"""The rule table (transforms/clean/rules.py): the pinned rows, and the table driving the
config keys, selection and the report's histograms and threshold markers."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Optional

import numpy as np
import pytest

from pipelines import report
from pipelines.config import ConfigError, from_mapping
from transforms.clean.clean import CleanConfig, LangIdConfig
from transforms.clean.rules import (
    FAMILIES,
    RULES,
    C4Rules,
    Direction,
    QualityRules,
    Rule,
    Unit,
    check_table,
    first_failure,
    rules_config,
    threshold,
)
from transforms.doc import Signals

# (family, key, signal, direction, default, reason): the sources' thresholds. A changed
# row here is a changed contract (config key, default or reason code).
PINNED = [
    ("gopher_quality", "min_words", "words", "min", 50, "gopher_min_words"),
    ("gopher_quality", "max_words", "words", "max", 100_000, "gopher_max_words"),
    ("gopher_quality", "min_mean_word_length", "mean_word_length", "min", 3.0, "gopher_mean_word_length"),
    ("gopher_quality", "max_mean_word_length", "mean_word_length", "max", 10.0, "gopher_mean_word_length"),
    ("gopher_quality", "max_symbol_word_ratio", "symbol_word_ratio", "max", 0.1, "gopher_symbol_word_ratio"),
    ("gopher_quality", "max_bullet_lines_ratio", "bullet_lines_ratio", "max", 0.9, "gopher_bullet_lines_ratio"),
    ("gopher_quality", "max_ellipsis_lines_ratio", "ellipsis_lines_ratio", "max", 0.3,
     "gopher_ellipsis_lines_ratio"),
    ("gopher_quality", "min_alpha_words_ratio", "alpha_words_ratio", "min", 0.8, "gopher_alpha_words_ratio"),
    ("gopher_quality", "min_stop_words", "stop_words", "min", 2, "gopher_stop_words"),
    ("gopher_repetition", "max_dup_line_frac", "dup_line_frac", "max", 0.30, "gopher_rep_dup_line_frac"),
    ("gopher_repetition", "max_dup_para_frac", "dup_para_frac", "max", 0.30, "gopher_rep_dup_para_frac"),
    ("gopher_repetition", "max_dup_line_char_frac", "dup_line_char_frac", "max", 0.20,
     "gopher_rep_dup_line_char_frac"),
    ("gopher_repetition", "max_dup_para_char_frac", "dup_para_char_frac", "max", 0.20,
     "gopher_rep_dup_para_char_frac"),
    *[("gopher_repetition", f"max_top_{n}gram_char_frac", f"top_{n}gram_char_frac", "max", limit,
       f"gopher_rep_top_{n}gram_char_frac") for n, limit in ((2, 0.20), (3, 0.18), (4, 0.16))],
    *[("gopher_repetition", f"max_dup_{n}gram_char_frac", f"dup_{n}gram_char_frac", "max", limit,
       f"gopher_rep_dup_{n}gram_char_frac")
      for n, limit in ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))],
    ("c4", "reject_lorem_ipsum", "c4_lorem_ipsum", "flag", True, "c4_lorem_ipsum"),
    ("c4", "reject_curly_bracket", "c4_curly_bracket", "flag", True, "c4_curly_bracket"),
    ("c4", "min_sentences", "c4_sentences", "min", 5, "c4_sentences"),
    ("c4", "max_dropped_lines_frac", "c4_dropped_lines_frac", "max", None, "c4_dropped_lines_frac"),
    ("fineweb", "min_line_punct_ratio", "fineweb_line_punct_ratio", "min", 0.12, "fineweb_line_punct_ratio"),
    ("fineweb", "max_short_line_ratio", "fineweb_short_line_ratio", "max", 0.67, "fineweb_short_line_ratio"),
    ("fineweb", "max_dup_line_char_ratio", "fineweb_dup_line_char_ratio", "max", 0.01,
     "fineweb_dup_line_char_ratio"),
    ("fineweb", "max_newline_word_ratio", "fineweb_newline_word_ratio", "max", 0.3, "fineweb_newline_word_ratio"),
]


def test_the_table_is_the_pinned_one():
    assert [(r.family, r.key, r.signal, r.direction.value, r.default, r.reason) for r in RULES] == PINNED
    assert [type(r.default) for r in RULES] == [type(row[4]) for row in PINNED]  # 50, not 50.0
    assert QualityRules().families == ("gopher_repetition", "gopher_quality", "c4", "fineweb")


def only(family: str, key: str, value: object = None) -> QualityRules:
    """Rules with one family applied and, in it, only ``key`` on (at its default, or at
    ``value``), through the config keys as YAML gives them."""
    section = QualityRules.sections[family]
    off = {r.key: (False if r.direction is Direction.FLAG else None) for r in section.table if r.key != key}
    data = {family: {**off, **({key: value} if value is not None else {})}, "families": [family]}
    return from_mapping(QualityRules, data, "clean.rules")


def verdict(rules: QualityRules, signal: str, value: float) -> object:
    failed = first_failure(Signals(**{signal: value}), rules)
    return failed[0] if failed else None


@pytest.mark.parametrize("family,key,signal,direction,default,reason", PINNED)
def test_each_rule_rejects_past_its_default_only(family, key, signal, direction, default, reason):
    rules = only(family, key)
    if direction == "flag":
        assert (verdict(rules, signal, 1.0), verdict(rules, signal, 0.0)) == (reason, None)
    elif default is None:  # off by default
        assert verdict(rules, signal, 1e9) is None and verdict(only(family, key, 0.5), signal, 0.6) == reason
    else:
        step = 1 if isinstance(default, int) else 0.01
        past = default - step if direction == "min" else default + step
        inside = default + step if direction == "min" else default - step
        assert (verdict(rules, signal, default), verdict(rules, signal, inside)) == (None, None)
        assert verdict(rules, signal, past) == reason


def test_config_values_are_typed_and_checked_as_the_table_says():
    with pytest.raises(ConfigError, match=r"clean\.rules\.gopher_quality\.min_words: expected an integer"):
        from_mapping(QualityRules, {"gopher_quality": {"min_words": 50.5}}, "clean.rules")
    with pytest.raises(ConfigError, match=r"clean\.rules\.c4\.reject_lorem_ipsum: expected a boolean"):
        from_mapping(QualityRules, {"c4": {"reject_lorem_ipsum": 1}}, "clean.rules")
    with pytest.raises(ConfigError, match=r"clean\.rules\.c4: max_dropped_lines_frac must be >= 0, got -0.5"):
        from_mapping(QualityRules, {"c4": {"max_dropped_lines_frac": -0.5}}, "clean.rules")
    with pytest.raises(ConfigError, match=r"c4\.max_words: unknown key \(allowed in clean\.rules\.c4: "
                                          r"max_dropped_lines_frac, min_sentences, reject_curly_bracket"):
        from_mapping(QualityRules, {"c4": {"max_words": 5}}, "clean.rules")


def test_the_config_pickles_by_reference():
    """Beam pickles the clean config: each generated class is the module-level name it says."""
    rules = QualityRules(c4=C4Rules(min_sentences=3), families=("c4",))
    assert pickle.loads(pickle.dumps(rules)) == rules  # every section's class, by module and name


URL_RULE = Rule("fineweb", "max_url_ratio", "url_ratio", Direction.MAX, 0.05, "fineweb_url_ratio")


def test_a_new_row_drives_config_selection_and_report():
    extended = rules_config(RULES + (URL_RULE,))
    # config: the key, its default, its type and its check
    rules = from_mapping(extended, {"fineweb": {"max_url_ratio": 0.2}}, "clean.rules")
    assert threshold(rules, URL_RULE) == 0.2 and threshold(extended(), URL_RULE) == 0.05
    with pytest.raises(ConfigError, match="max_url_ratio must be >= 0"):
        from_mapping(extended, {"fineweb": {"max_url_ratio": -1}}, "clean.rules")
    with pytest.raises(ConfigError, match="max_url_ratio: unknown key"):
        from_mapping(QualityRules, {"fineweb": {"max_url_ratio": 0.2}}, "clean.rules")
    # selection: after the family's other rules, with its reason code
    spam = Signals(fineweb_line_punct_ratio=0.9, url_ratio=0.1)
    assert first_failure(spam, extended(families=("fineweb",))) == ("fineweb_url_ratio", "0.1 > 0.05")
    assert first_failure(spam, QualityRules(families=("fineweb",))) is None
    # report: the signal is plotted, with the threshold marked
    edges, log = report.signal_bins(extended.table)["url_ratio"]
    assert np.array_equal(edges, np.linspace(0.0, 1.0, 51)) and not log
    assert "url_ratio" not in report.signal_bins()
    config = type("Job", (), {"clean": CleanConfig(LangIdConfig(model="lid.bin"), rules=extended())})()
    assert report.config_thresholds(config)["signals"]["url_ratio"] == [
        {"value": 0.05, "kind": "max", "rule": "fineweb.max_url_ratio", "active": True}]


def test_report_bins_follow_each_rule_unit():
    bins = report.signal_bins()
    assert list(bins)[:3] == ["words", "mean_word_length", "symbol_word_ratio"]  # table order
    assert bins["words"][1] and bins["c4_sentences"][1] and not bins["dup_line_frac"][1]
    assert bins["mean_word_length"][0][-1] == 30.0
    assert "c4_lorem_ipsum" not in bins  # flags are not plotted


@pytest.mark.parametrize("change,message", [
    ({"family": "kenlm"}, "unknown family 'kenlm'"),
    ({"signal": "perplexity"}, "'perplexity' is not a Signals field"),
    ({"direction": Direction.MIN}, "a min rule's key starts with 'min_'"),
    ({"key": "max_words"}, "the key is used twice in the family"),
    ({"default": -0.1}, "the default must be None or a number >= 0"),
    ({"default": True}, "the default must be None or a number >= 0"),
    ({"signal": "words", "key": "max_words_again"}, "another rule reads 'words' as count"),
    ({"unit": Unit.COUNT}, "the default must be None or an integer >= 0"),
    ({"direction": Direction.FLAG, "key": "reject_words"}, "a flag has a boolean default and a detail"),
    ({"direction": Direction.FLAG, "key": "reject_words", "default": True}, "a flag has a boolean default and a detail"),
])
def test_bad_rows_are_refused(change, message):
    row = dataclasses.replace(Rule("gopher_quality", "max_url_ratio", "url_ratio", Direction.MAX, 0.05,
                                   "gopher_url_ratio"), **change)
    with pytest.raises(ValueError, match=f"rule {row.family}.{row.key}: {message}"):
        check_table(RULES + (row,), FAMILIES)


def test_a_zero_default_is_a_threshold():
    check_table(RULES + (Rule("gopher_quality", "max_url_ratio", "url_ratio", Direction.MAX, 0, "gopher_url_ratio"),),
                FAMILIES)


def test_a_built_config_is_frozen_typed_documented_and_checks_its_families():
    """Built here, not at import, so that every line of ``rules_config`` runs in the test."""
    config = rules_config()
    assert (config.__name__, config.__module__) == ("QualityRules", "transforms.clean.rules")
    assert config.__doc__ == "The rule families (a section each) and the ones applied, in order."
    assert config.field_docs["families"] == ("the families applied, in this order (the first rule a document "
                                             "breaks is its reason)")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config().families = ()  # type: ignore[misc]
    with pytest.raises(ValueError, match=r"unknown rule families \['nope'\]"):
        config(families=("c4", "nope"))
    quality = config.sections["gopher_quality"]
    assert (quality.__name__, quality.__module__, quality.__doc__) == (
        "GopherQualityRules", "transforms.clean.rules", FAMILIES[1].source)
    types = {f.name: f.type for f in dataclasses.fields(quality)}
    assert types["min_words"] == Optional[int] and types["max_symbol_word_ratio"] == Optional[float]
    assert quality.field_docs["min_words"] == ("reject a document whose ``words`` (count) is below this "
                                               "(reason ``gopher_min_words``); null: off")
    assert quality.field_docs["max_words"].startswith("reject a document whose ``words`` (count) is above this")
    assert config.sections["c4"].field_docs["reject_lorem_ipsum"] == (
        "true: reject a document that contains 'lorem ipsum' (reason ``c4_lorem_ipsum``)")
    assert quality(min_words=0).min_words == 0
    with pytest.raises(ValueError, match="min_words must be >= 0, got -1"):
        quality(min_words=-1)
