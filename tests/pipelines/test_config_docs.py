"""docs/CONFIG.md: generated from the config dataclasses, never stale, every key explained."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from pipelines.config import JobConfig
from pipelines.config_docs import CONFIG_MD, MissingMeaning, field_meanings, render, sections
from pipelines.stage_specs import STAGE_SPECS
from transforms.clean.rules import RULES


def test_the_checked_in_reference_is_the_generated_one():
    """Regenerate with ``python -m pipelines.config_docs --write`` after changing a config class."""
    assert CONFIG_MD.read_text(encoding="utf-8") == render(), (
        "docs/CONFIG.md is stale: run python -m pipelines.config_docs --write")


def test_every_key_of_every_section_is_listed_with_a_meaning():
    by_path = {s.path: s for s in sections()}
    assert [k.name for k in by_path[""].keys] == [f.name for f in dataclasses.fields(JobConfig) if f.compare]
    for path in ("inputs[]", "crawl", "read", "extract", "clean", "clean.langid", "clean.anomaly",
                 "clean.quality", "dedup", "dedup.minhash", "label", "label.sets[]", "tokenize", "storage"):
        assert by_path[path].keys and all(k.meaning and k.type and k.default for k in by_path[path].keys), path
    keys = {(s.path, k.name): k for s in sections() for k in s.keys}
    assert keys[("inputs[]", "url_field")].default == "`url`"
    assert keys[("clean.langid", "model")].default == "required"
    assert keys[("clean", "rules_languages")].type == "list of strings"
    assert keys[("clean.quality", "top_fraction")].type == "number or null"
    assert keys[("tokenize", "target_shard_bytes")].default == "`268435456` (256 MiB)"


def test_the_quality_rule_keys_come_from_the_rule_table():
    keys = {(s.path, k.name): k for s in sections() for k in s.keys}
    for rule in RULES:
        key = keys[(f"clean.rules.{rule.family}", rule.key)]
        assert rule.reason in key.meaning and (rule.direction.value == "flag" or rule.signal in key.meaning)
    assert "below" in keys[("clean.rules.c4", "min_sentences")].meaning
    assert keys[("clean.rules.c4", "max_dropped_lines_frac")].default == "`null`"


def test_the_stages_are_listed_from_the_stage_table_in_order():
    text = render()
    rows = [line for line in text.splitlines() if line.startswith("| `") and line.count("|") == 5]
    assert [r.split("`")[1] for r in rows[:len(STAGE_SPECS)]] == [s.name for s in STAGE_SPECS]
    assert all(spec.does and spec.does in text for spec in STAGE_SPECS)


@dataclass(frozen=True)
class _Documented:
    # the comment above a field
    # (on two lines)
    a: int = 1
    b: str = "x"  # the comment at the end of its line
    c: bool = True


def test_meanings_are_the_field_comments_and_a_key_without_one_is_refused():
    meanings = field_meanings(_Documented)
    assert meanings["a"] == "the comment above a field (on two lines)"
    assert meanings["b"] == "the comment at the end of its line"
    assert meanings["c"] == ""
    with pytest.raises(MissingMeaning, match=r"config key c \(.*_Documented\.c\) has no meaning"):
        sections(_Documented)
