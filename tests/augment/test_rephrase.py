"""Templates, parameters, request keys and the checks on a generation (pure tables)."""

from __future__ import annotations

import json

import pytest

from transforms.augment.rephrase import (BUILTIN_TEMPLATES, ECHO_NGRAM, GenerationParams, RephraseResult,
                                         Template, check_generation, is_prompt_echo, make_request, request_key)

PARAMS = GenerationParams(model="tiny")
SOURCE = ("The tomatoes finally ripened in the second week of July after a cold and wet spring "
          "that kept the plants from flowering for a long time.")


@pytest.mark.parametrize("prompt, message", [
    ("Rewrite: {txt}", "unknown placeholder"),
    ("Rewrite {text} for {audience}", "unknown placeholder"),
    ("Rewrite {text} and {}", "unknown placeholder"),
    ("Rewrite {0}", "unknown placeholder"),
    ("Rewrite {text.upper}", "unknown placeholder"),
    ("Rewrite the text", "exactly once"),
    ("{text} and again {text}", "exactly once"),
    ("Rewrite {text", "stray brace"),
    ("Rewrite } {text}", "stray brace"),
    ("Rewrite {text!r}", "no conversion or format spec"),
    ("Rewrite {text:>10}", "no conversion or format spec"),
    ("   ", "non-empty"),
])
def test_bad_templates_are_refused_naming_the_template(prompt: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        Template("mine", prompt)
    assert "'mine'" in str(info.value)


@pytest.mark.parametrize("name", ["", "Wiki", "a b", "../x", "x" * 65])
def test_bad_template_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="template name"):
        Template(name, "{text}")


def test_good_templates_render_with_literal_braces() -> None:
    template = Template("json-ish", 'In {lang}, as {{"title": "{title}"}}: {text}')
    assert template.placeholders == ("lang", "text", "title")
    assert template.render("body {not a field}", "en", "T") == 'In en, as {"title": "T"}: body {not a field}'


def test_builtin_templates() -> None:
    assert set(BUILTIN_TEMPLATES) == {"wikipedia", "qa", "summary"}
    for name, template in BUILTIN_TEMPLATES.items():
        assert template.name == name and "text" in template.placeholders
        assert SOURCE in template.render(SOURCE, "en")


@pytest.mark.parametrize("field, value", [
    ("model", ""), ("max_tokens", 0), ("max_tokens", True), ("max_tokens", 1.5), ("temperature", -0.1),
    ("temperature", 2.01), ("temperature", float("nan")), ("top_p", 0.0), ("top_p", 1.01), ("seed", -1),
    ("seed", "1"),
])
def test_generation_params_ranges(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        GenerationParams(**{"model": "tiny", field: value})  # type: ignore[arg-type]


def test_generation_params_json_is_sorted_and_complete() -> None:
    text = GenerationParams("m", max_tokens=10, temperature=0.0, top_p=1.0, seed=3).as_json()
    assert text == '{"max_tokens":10,"model":"m","seed":3,"temperature":0.0,"top_p":1.0}'
    assert list(json.loads(text)) == sorted(json.loads(text))


def test_request_key_covers_every_input() -> None:
    wiki = BUILTIN_TEMPLATES["wikipedia"]
    base = request_key(wiki, PARAMS, SOURCE, "en")
    assert len(base) == 64 and base == request_key(wiki, PARAMS, SOURCE, "en")
    variants = [
        request_key(Template("other", wiki.prompt), PARAMS, SOURCE, "en"),
        request_key(Template("wikipedia", wiki.prompt + " "), PARAMS, SOURCE, "en"),
        request_key(wiki, GenerationParams("tiny", seed=1), SOURCE, "en"),
        request_key(wiki, GenerationParams("other"), SOURCE, "en"),
        request_key(wiki, GenerationParams("tiny", temperature=0.8), SOURCE, "en"),
        request_key(wiki, PARAMS, SOURCE + ".", "en"),
        request_key(wiki, PARAMS, SOURCE, "fr"),  # the template uses {lang}
    ]
    assert len({base, *variants}) == len(variants) + 1
    # {title} is not in the template: it does not change the prompt, nor the key
    assert request_key(wiki, PARAMS, SOURCE, "en", title="T") == base


def test_make_request() -> None:
    request = make_request("doc-1", 2, SOURCE, BUILTIN_TEMPLATES["summary"], PARAMS, lang="en")
    assert request.key == request_key(BUILTIN_TEMPLATES["summary"], PARAMS, SOURCE, "en")
    assert (request.doc_id, request.chunk, request.template, request.source_chars) == ("doc-1", 2, "summary", len(SOURCE))
    assert SOURCE in request.prompt and request.params == PARAMS and request.source == SOURCE
    braces = Template("b", "{{text}} {title} in {lang}: {text} {{}}")
    assert make_request("d", 0, "body", braces, PARAMS, "en", "Title").source == "body"
    with pytest.raises(ValueError, match="chunk index"):
        make_request("doc-1", -1, SOURCE, BUILTIN_TEMPLATES["summary"], PARAMS)


def test_result_is_a_text_or_an_error() -> None:
    request = make_request("d", 0, SOURCE, BUILTIN_TEMPLATES["qa"], PARAMS)
    assert RephraseResult(request, text="").ok  # an empty generation is a rejection, not an error
    with pytest.raises(ValueError):
        RephraseResult(request, text="x", error="boom", error_type="http_500")
    with pytest.raises(ValueError):
        RephraseResult(request, error="boom")


REQUEST = make_request("d", 0, SOURCE, BUILTIN_TEMPLATES["wikipedia"], PARAMS, lang="en")
GOOD = "Tomato plants in a temperate garden may ripen late when spring is cold; this crop did so in mid July."


@pytest.mark.parametrize("raw, reason", [
    (GOOD, ""),
    (GOOD.encode(), ""),
    ("  \n\t ", "empty"),
    ("", "empty"),
    (b"", "empty"),
    (b"Tomatoes \xff\xfe ripened", "invalid_utf8"),
    ("Tomatoes \udcff ripened", "invalid_utf8"),  # an undecodable byte carried by surrogateescape
    ("Tomatoes \ud800 ripened", "invalid_utf8"),  # a lone surrogate from a JSON \ud800 escape
    ("Tomatoes \ufffd ripened", "invalid_utf8"),  # the server's replacement character
    (GOOD + "\ufffd", ""),  # a multi-byte character cut by max_tokens at the end
    (GOOD * 100, "too_long"),
    ("x" * (4 * len(SOURCE)), ""),  # exactly max_ratio x the source is allowed
    ("x" * (4 * len(SOURCE) + 1), "too_long"),
    (REQUEST.prompt, "prompt_echo"),
    (SOURCE, "prompt_echo"),
    ("Sure! " + SOURCE.upper() + " And many other new words that follow it " * 3, "prompt_echo"),
    (b"\xff" * 10 * len(SOURCE), "invalid_utf8"),  # invalid before too long
])
def test_check_generation_reasons(raw: bytes | str, reason: str) -> None:
    text, got = check_generation(REQUEST, raw)
    assert got == reason
    text.encode("utf-8")  # whatever the reason, the text returned can be stored


def test_check_generation_max_ratio_is_the_callers() -> None:
    text = "y" * (2 * len(SOURCE) + 1)
    assert check_generation(REQUEST, text)[1] == ""
    assert check_generation(REQUEST, text, max_ratio=2.0)[1] == "too_long"
    with pytest.raises(ValueError):
        check_generation(REQUEST, text, max_ratio=0)


def _words(n: int, prefix: str) -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


def test_echo_share_threshold() -> None:
    prompt = _words(40, "p")
    # 20 copied words + k new ones: n-grams (n=8) of the output = 20 + k - 7; copied ones = 13
    half = _words(20, "p") + " " + _words(6, "new")  # 19 n-grams, 13 from the prompt: 0.68
    assert is_prompt_echo(half, prompt)
    at = _words(20, "p") + " " + _words(13, "new")  # 26 n-grams, 13 copied: exactly 0.5 -> echo
    assert is_prompt_echo(at, prompt)
    below = _words(20, "p") + " " + _words(14, "new")  # 27 n-grams, 13 copied: < 0.5
    assert not is_prompt_echo(below, prompt)


def test_echo_whole_source_or_prompt_contained_wins_over_share() -> None:
    source = _words(ECHO_NGRAM, "s")
    long_tail = " ".join(["fresh words here"] * 50)
    assert is_prompt_echo(f"{source} {long_tail}", f"Rewrite: {source}", source)
    assert not is_prompt_echo(f"{_words(ECHO_NGRAM - 1, 's')} {long_tail}", f"Rewrite: {source}", source)


def test_echo_short_outputs() -> None:
    assert not is_prompt_echo("p1 p2", _words(40, "p"))  # fewer than 3 words: not judged
    assert is_prompt_echo("p1 p2 p3", _words(40, "p"))
    assert not is_prompt_echo("p1 p3 p2", _words(40, "p"))
