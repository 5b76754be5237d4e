"""The augment stage's pure decisions: selections, repeat counts, chunks; and the
upsampling annotations through a Beam pipeline."""

from __future__ import annotations

import dataclasses
import json

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.augment.augment import Augment, annotate_repeats
from transforms.augment.chunks import join_chunks, split_chunks
from transforms.augment.config import AugmentConfig, RephraseConfig, Selection, TemplateSpec, UpsampleRule
from transforms.augment.select import has_label, in_sample, matches, quality_cut, repeats_for
from transforms.doc import Doc, Label


def doc(i: int, quality: float | None = None, anomaly: float | None = None, lang: str = "en",
        labels: tuple[Label, ...] = ()) -> Doc:
    return Doc(id=f"d{i}", url=f"http://x/{i}", text=f"text {i}", source="s", fetched_at="",
               lang=lang, quality_score=quality, anomaly_score=anomaly, labels=labels)


def model_label(name: str, value: str, score: float) -> Label:
    return Label(name, value, score, "model", "v1")


def test_quality_cut_picks_the_top_fraction_from_quantiles():
    quantiles = [i / 10 for i in range(11)]  # 0.0 .. 1.0
    assert quality_cut(quantiles, 0.1) == 0.9
    assert quality_cut(quantiles, 0.5) == 0.5
    assert quality_cut([], 0.1) == float("-inf")


def test_selection_conditions_each_decide():
    assert matches(doc(1, quality=0.5), Selection(min_quality=0.5))
    assert not matches(doc(1, quality=0.49), Selection(min_quality=0.5))
    assert not matches(doc(1), Selection(min_quality=0.0))  # no score: fails a quality condition
    assert matches(doc(1, anomaly=2.0), Selection(max_anomaly=2.0))
    assert not matches(doc(1, anomaly=2.01), Selection(max_anomaly=2.0))
    assert matches(doc(1), Selection(max_anomaly=2.0))  # no anomaly score: passes
    assert matches(doc(1, lang="de"), Selection(languages=("de", "fr")))
    assert not matches(doc(1, lang="en"), Selection(languages=("de", "fr")))
    top = Selection(top_quality_fraction=0.1)
    assert matches(doc(1, quality=0.9), top, cut=0.9)
    assert not matches(doc(1, quality=0.89), top, cut=0.9)
    with pytest.raises(ValueError, match="quality cut"):
        matches(doc(1, quality=0.9), top)


def test_label_conditions_need_the_score_unless_human():
    sci = doc(1, labels=(model_label("topic", "science", 0.8),))
    assert has_label(sci, "topic=science", 0.8)
    assert not has_label(sci, "topic=science", 0.81)
    assert not has_label(sci, "topic=sports", 0.0)
    human = doc(2, labels=(Label("topic", "science", 1.0, "human", "v1", reviewer="r"),))
    assert has_label(dataclasses.replace(human, labels=(dataclasses.replace(human.labels[0], score=0.0),)),
                     "topic=science", 0.99)
    assert matches(sci, Selection(labels=("topic=sports", "topic=science")))


def test_sample_rate_is_a_seeded_nested_hash_sample():
    ids = [f"d{i}" for i in range(4000)]
    half = {i for i in ids if in_sample(i, 0.5, 7)}
    tenth = {i for i in ids if in_sample(i, 0.1, 7)}
    assert 1800 < len(half) < 2200 and 300 < len(tenth) < 500
    assert tenth <= half  # raising the rate only adds documents
    assert half != {i for i in ids if in_sample(i, 0.5, 8)}  # the seed matters
    assert all(in_sample(i, 1.0, 0) for i in ids[:10]) and not any(in_sample(i, 0.0, 0) for i in ids[:10])


def test_repeats_take_the_largest_matching_rule_capped():
    rules = (UpsampleRule("good", 3, Selection(min_quality=0.8)),
             UpsampleRule("science", 2, Selection(labels=("topic=science",))))
    sci = model_label("topic", "science", 0.99)
    assert repeats_for(doc(1, quality=0.9, labels=(sci,)), rules, 16, [None, None]) == (3, ("good", "science"))
    assert repeats_for(doc(1, quality=0.1, labels=(sci,)), rules, 16, [None, None]) == (2, ("science",))
    assert repeats_for(doc(1, quality=0.1), rules, 16, [None, None]) == (1, ())
    assert repeats_for(doc(1, quality=0.9), rules, 2, [None, None]) == (2, ("good",))


def test_annotate_repeats_respects_the_section_selection():
    config = AugmentConfig(select=Selection(languages=("en",)),
                           upsample=(UpsampleRule("top", 3, Selection(top_quality_fraction=0.5)),))
    quantiles = [0.0, 0.25, 0.5, 0.75, 1.0]
    assert annotate_repeats(doc(1, quality=0.6), config, quantiles).repeats == 3
    assert annotate_repeats(doc(1, quality=0.4), config, quantiles).repeats == 1
    assert annotate_repeats(doc(1, quality=0.6, lang="de"), config, quantiles).repeats == 1


def test_split_chunks_cuts_at_the_best_break_and_loses_nothing():
    text = "First paragraph here.\n\nSecond one is a bit longer. It has two sentences.\nA line.\n\nEnd."
    for size in (5, 12, 25, 40, 200):
        chunks = split_chunks(text, size)
        assert "".join(chunks) == text
        assert all(0 < len(c) <= size for c in chunks)
    assert split_chunks(text, 40)[0] == "First paragraph here.\n\n"
    assert split_chunks("One. Two three four five.", 12) == ["One. ", "Two three ", "four five."]
    assert split_chunks("abcdefghij", 4) == ["abcd", "efgh", "ij"]
    assert split_chunks("", 10) == [""]
    assert join_chunks([" a ", "", "b"]) == "a\n\nb"


@pytest.mark.parametrize("bad, message", [
    (dict(upsample=(UpsampleRule("a", 2), UpsampleRule("a", 3))), "unique"),
    (dict(upsample=(UpsampleRule("a", 20),)), "max_repeats"),
    (dict(), "upsample rules or a rephrase"),
])
def test_augment_config_refuses(bad, message):
    with pytest.raises(ValueError, match=message):
        AugmentConfig(**bad)


@pytest.mark.parametrize("bad, message", [
    (dict(endpoint="ftp://x"), "http"),
    (dict(endpoint="http://user:pw@x"), "credentials"),
    (dict(endpoint="http://x:1/?key=sk-1"), "query"),
    (dict(api_key_env="MY KEY"), "environment variable"),
    (dict(templates=()), "at least one"),
    (dict(templates=(TemplateSpec("qa"), TemplateSpec("qa"))), "unique"),
    (dict(min_length_ratio=3.0, max_length_ratio=2.0), "min_length_ratio"),
    (dict(backend="magic"), "backend"),
    (dict(model=""), "model"),
])
def test_rephrase_config_refuses(bad, message):
    values = dict(endpoint="http://127.0.0.1:8000", model="m") | bad
    with pytest.raises(ValueError, match=message):
        RephraseConfig(**values)


def test_selection_refuses_bad_values():
    with pytest.raises(ValueError, match="set=value"):
        Selection(labels=("science",))
    with pytest.raises(ValueError, match="sample_rate"):
        Selection(sample_rate=1.5)
    with pytest.raises(ValueError, match="top_quality_fraction"):
        Selection(top_quality_fraction=0.0)


def test_upsampling_through_beam_keeps_every_document(beam_options):
    docs = [doc(i, quality=i / 100) for i in range(101)]  # the 0.8 quantile is d80's 0.8
    config = AugmentConfig(upsample=(UpsampleRule("top_fifth", 3, Selection(top_quality_fraction=0.2)),))
    with TestPipeline(options=beam_options) as p:
        out = p | beam.Create(docs) | Augment(config)
        assert_that(out.kept | "Repeats" >> beam.Map(lambda d: (d.id, d.repeats, tuple(d.repeat_rules))),
                    equal_to([(f"d{i}", 3 if i >= 80 else 1, ("top_fifth",) if i >= 80 else ())
                              for i in range(101)]))
        assert_that(out.rejected, equal_to([]), label="NoRejects")


def test_template_specs_are_checked_when_the_config_is_read():
    assert TemplateSpec("qa").template().name == "qa"
    assert TemplateSpec("notes", "Notes on {title}:\n{text}").template().placeholders == ("text", "title")
    with pytest.raises(ValueError, match="not a built-in"):
        TemplateSpec("poem")
    with pytest.raises(ValueError, match="unknown placeholder"):
        TemplateSpec("notes", "Rewrite {text} for {audience}")


def _generation(parent_chars: int, outputs: list[str], errors: tuple[int, ...] = ()):
    from transforms.augment.augment import _Parent, assemble_generation
    from transforms.augment.rephrase import BUILTIN_TEMPLATES, GenerationParams, RephraseResult, make_request

    params = GenerationParams(model="m")
    template = BUILTIN_TEMPLATES["summary"]
    chunk = "Alpha beta gamma delta epsilon zeta eta theta. " * 4
    results = [RephraseResult(make_request("p1", i, chunk, template, params),
                              **({"error": "HTTP 503", "error_type": "http_503", "attempts": 3} if i in errors
                                 else {"text": text}))
               for i, text in enumerate(outputs)]
    rephrase = RephraseConfig(endpoint="http://127.0.0.1:1", model="m", min_length_ratio=0.5, max_length_ratio=2.0)
    parent = _Parent("p1", "in.jsonl", "http://x/p1", "T", "en", parent_chars)
    return assemble_generation(parent, "summary", "m", params.as_json(), list(reversed(results)), rephrase, "augment")


def test_assembled_generation_joins_chunks_in_order_and_bounds_the_length_ratio():
    from transforms.doc import Failure, Rejected

    one, two = "One sentence of new words here.", "Another sentence of other words"
    doc = _generation(64, [one, two])  # results arrive in any order
    assert doc.text == f"{one}\n\n{two}" and len(doc.text) == 64 and doc.source == "synthetic"
    assert (doc.provenance.parent_id, doc.provenance.chunks, doc.provenance.template) == ("p1", 2, "summary")
    n = len(doc.text)
    for parent_chars, kept in ((128, True), (129, False), (32, True), (31, False)):  # ratios 0.5 and 2.0 kept
        out = _generation(parent_chars, [one, two])
        assert isinstance(out, Rejected) != kept, parent_chars
        if not kept:
            assert out.reason == "length_ratio"
    echo = _generation(n, [one, ""])
    assert isinstance(echo, Rejected) and echo.reason == "empty" and "chunk 1 of 2" in echo.detail
    failed = _generation(n, [one, two], errors=(1,))
    assert isinstance(failed, Failure) and failed.error_type == "http_503" and "after 3 attempts" in failed.error
    assert [r["chunk"] for r in json.loads(failed.raw)] == [0, 1]


def test_rephrasing_selects_by_both_selections_and_never_rewrites_a_generation():
    from transforms.augment.augment import rephrase_selected

    config = AugmentConfig(select=Selection(languages=("en",)), rephrase=RephraseConfig(
        endpoint="http://127.0.0.1:1", model="m", select=Selection(min_quality=0.5)))
    assert rephrase_selected(doc(1, quality=0.5), config, [])
    assert not rephrase_selected(doc(1, quality=0.4), config, [])
    assert not rephrase_selected(doc(1, quality=0.9, lang="de"), config, [])
    generated = dataclasses.replace(doc(1, quality=0.9), source="synthetic")
    assert not rephrase_selected(generated, config, [])
    assert not rephrase_selected(doc(1, quality=0.9), AugmentConfig(upsample=(UpsampleRule("a", 2),)), [])
