"""The extract stage transform: kept, rejected (with reasons), failed (errors, timeouts)."""

from __future__ import annotations

import time

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

import transforms.extract.extract as extract_mod
from transforms.doc import RawRecord
from transforms.extract.extract import ExtractConfig, ExtractReason, ExtractText, classify, extract_record

ARTICLE = b"<html><head><title>T</title></head><body><p>" + b"Real words in a sentence. " * 20 + b"</p></body></html>"


def html(url: str, payload: bytes = ARTICLE, status: int = 200, ctype: str = "text/html") -> RawRecord:
    return RawRecord(kind="html", url=url, source="test", offset=0, record_id=url, payload=payload,
                     content_type=ctype, http_status=status)


def text(url: str, body: str) -> RawRecord:
    return RawRecord(kind="text", url=url, source="test", offset=0, record_id=url, text=body)


@pytest.mark.parametrize("record,reason", [
    (html("ok"), None),
    (html("redirect", status=301), ExtractReason.HTTP_STATUS),
    (html("missing", status=404), ExtractReason.HTTP_STATUS),
    (html("pdf", b"%PDF-1.4", ctype="application/pdf"), ExtractReason.CONTENT_TYPE),
    (html("sniffed", ctype=""), None),
    (html("json", b'{"a": 1}', ctype="application/octet-stream"), ExtractReason.CONTENT_TYPE),
    (text("t", "plain"), None),
])
def test_classify(record, reason):
    assert classify(record) == reason


@pytest.mark.parametrize("record,expected", [
    (html("empty", b"<html><body><script>x()</script></body></html>"), ExtractReason.EMPTY),
    (text("blank", " \n\t "), ExtractReason.EMPTY),
    (text("nul", "\x00\x00"), ExtractReason.EMPTY),
    (text("short", "hi"), ExtractReason.TOO_SHORT),
    (text("emoji", "😀" * 20), None),
    (text("surrogate", "ok \ud800 text here"), None),
])
def test_extract_record_reasons(record, expected):
    result = extract_record(record, ExtractConfig(min_chars=10))
    if expected is None:
        assert result.text
    else:
        assert result[1] == expected


ZWSP_ARTICLE = [
    "The city council approved the new budget on Monday evening after a long debate.",
    "Most of the extra money will go to schools and to the repair of old bridges.",
    "The mayor said that the plan had been discussed with residents for several months.",
    "Opposition members argued that the budget relies too much on a rise in property taxes.",
    "The vote passed by seven to four, and the budget will take effect in January.",
    "Local businesses welcomed the decision to keep parking fees at their current level.",
]


def test_zero_width_spacer_lines_are_not_duplicated_lines():
    """Text records (WET, JSONL) keep a CMS's ``<p>&#8203;</p>`` spacers as lines holding
    only U+200B: not blank to ``str.strip``, each was a duplicated line and the article
    failed gopher_rep_dup_line_frac (issue 18, item 2). resiliparse and trafilatura
    already drop such paragraphs from HTML."""
    from transforms.clean.rules import QualityRules, first_failure
    from transforms.clean.signals import compute_signals

    spaced = "\n\u200b\n".join(ZWSP_ARTICLE)
    assert compute_signals(spaced).dup_line_frac > 0.3  # what the rule saw before
    doc = extract_record(text("zwsp", spaced), ExtractConfig())
    assert doc.text.split("\n\n") == ZWSP_ARTICLE
    signals = compute_signals(doc.text)
    assert signals.dup_line_frac == 0.0
    assert first_failure(signals, QualityRules()) is None
    assert extract_record(text("only", "\u200b\n\ufeff\u2060\n\u200d"), ExtractConfig())[1] == ExtractReason.EMPTY


def test_extract_config_validates():
    with pytest.raises(ValueError, match="method"):
        ExtractConfig(method="magic")
    with pytest.raises(ValueError, match="timeout_s"):
        ExtractConfig(timeout_s=0)
    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError, match="timeout_s"):
            ExtractConfig(timeout_s=bad)
    with pytest.raises(ValueError, match="max_depth"):
        ExtractConfig(max_depth=0)
    with pytest.raises(ValueError, match="isolation"):
        ExtractConfig(isolation="none")


def test_extract_transform_routes_and_counts(beam_options, monkeypatch):
    real = extract_mod.extract_html

    def flaky_extract(payload, charset="", method=None, max_depth=2048):
        if b"BOOM" in payload:
            raise ValueError("parser exploded")
        if b"SLOW" in payload:
            time.sleep(3)
        return real(payload, charset, method, max_depth)

    monkeypatch.setattr(extract_mod, "extract_html", flaky_extract)
    records = [
        html("a"), text("b", "A text document long enough."), html("c", status=404),
        html("d", b"<html>BOOM</html>"), html("e", b"<html>SLOW</html>"),
        html("f", b"GIF89a", ctype="image/gif"),
    ]
    # routing of errors and Beam's thread timeout (the monkeypatch reaches this process only)
    config = ExtractConfig(timeout_s=1.0, max_error_ratio=1.0, isolation="thread")
    with TestPipeline(options=beam_options) as p:
        out = p | beam.Create(records) | ExtractText(config)
        assert_that(out.kept | beam.Map(lambda d: d.source_id), equal_to(["a", "b"]), label="kept")
        assert_that(out.rejected | beam.Map(lambda r: (r.doc.url, r.reason)),
                    equal_to([("c", "http_status"), ("f", "content_type")]), label="rejected")
        assert_that(out.failed | beam.Map(lambda f: (f.error_type, f.raw)),
                    equal_to([("ValueError", b"<html>BOOM</html>"),
                              ("TimeoutError", b"<html>SLOW</html>")]), label="failed")
    counters = {c.key.metric.name: c.committed for c in p.result.metrics().query()["counters"]}
    assert counters["records_in"] == 6 and counters["records_out"] == 2
    assert counters["rejected_http_status"] == 1 and counters["failed_ValueError"] == 1
    assert counters["failed_TimeoutError"] == 1


def nested(depth: int, tag: str = "div") -> bytes:
    return ("<html><body>" + f"<{tag}>" * depth + "Deep words in a sentence here."
            + f"</{tag}>" * depth + "</body></html>").encode()


@pytest.mark.parametrize("html_text,depth", [
    ("<html><body><div><div>x</div></div></body></html>", 4),
    ("<p>a<p>b<p>c<br><img src=x><hr>", 0),  # optional end tags and void elements
    ("<li>a<li>b<td>c<tr><option>d", 0),
    ("</div></div><div><div>x", 2),  # stray end tags are ignored, as parsers do
    ("<DIV><Span>x</sPaN></div>", 2),
    ("<!-- <div><div><div> --><div>x</div>", 1),  # comments do not open elements
    ("<div/><div/><div/>", 3),  # HTML has no self-closing div: three open elements
    ("<pre>a < b and c<d</pre>", 2),  # a "<" before a letter looks like a tag: over-estimates
    ("<script>if (a<b) { x = '<div><div>'; }</script><div>x</div>", 1),
    ("<style>a<b</style><!-- unclosed <div><div>", 0),
])
def test_nesting_depth(html_text, depth):
    from transforms.extract.html import nesting_depth

    assert nesting_depth(html_text) == depth


def test_depth_guard_fails_deep_pages_before_parsing():
    from transforms.extract.html import MAX_HTML_DEPTH, HtmlTooDeep, extract_html

    assert MAX_HTML_DEPTH == 2048
    assert "Deep words" in extract_html(nested(MAX_HTML_DEPTH - 2)).text  # + html + body
    with pytest.raises(HtmlTooDeep, match="nested 2,049 deep"):
        extract_html(nested(MAX_HTML_DEPTH - 1))
    with pytest.raises(HtmlTooDeep, match="nested 100,002 deep"):
        extract_html(nested(100_000))  # hours of resiliparse main-content work, refused at once
    with pytest.raises(HtmlTooDeep):
        extract_html(nested(5000, "span"), max_depth=100)


def test_isolated_extraction_times_out_kills_and_recovers(beam_options):
    """The default isolation: a page that takes minutes in native code (20,000 nested
    elements with the depth guard lifted, ~12 s here, the more under load) fails at the
    timeout with its raw bytes, the deep page is refused by the guard, and the pages after
    them are extracted by a fresh extraction process; with the guard on, both deep pages
    are refused before parsing."""
    slow = nested(20_000)
    records = [html("a"), html("slow", slow), html("deep", nested(100_000)), html("b")]
    lifted = ExtractConfig(timeout_s=1.0, max_error_ratio=1.0, max_depth=10**9)
    assert lifted.isolation == "process"
    with TestPipeline(options=beam_options) as p:
        out = p | beam.Create(records[:2] + records[3:]) | "lifted" >> ExtractText(lifted)
        assert_that(out.kept | beam.Map(lambda d: d.source_id), equal_to(["a", "b"]), label="kept")
        assert_that(out.failed | beam.Map(lambda f: (f.error_type, f.raw == slow, "restarted" in f.error)),
                    equal_to([("TimeoutError", True, True)]), label="failed")
    guarded = ExtractConfig(timeout_s=30.0, max_error_ratio=1.0)
    with TestPipeline(options=beam_options) as p:
        out = p | beam.Create(records) | ExtractText(guarded)
        assert_that(out.kept | beam.Map(lambda d: d.source_id), equal_to(["a", "b"]), label="kept")
        assert_that(out.failed | beam.Map(lambda f: f.error_type), equal_to(["HtmlTooDeep", "HtmlTooDeep"]),
                    label="failed")


def test_isolated_extractor_survives_a_killed_child():
    """The extraction process killed in the middle of a page (a crash in native code):
    that page fails with ExtractorCrashed, the next one gets a new process."""
    import os
    import signal
    import threading

    from transforms.extract.html import Method
    from transforms.extract.isolated import ExtractorCrashed, IsolatedExtractor

    ex = IsolatedExtractor(timeout_s=120.0)
    try:
        assert "Real words" in ex.extract(ARTICLE, "", Method.CASCADE, 2048).text
        first = ex.pid
        killer = threading.Timer(0.5, lambda: os.kill(first, signal.SIGKILL))
        killer.start()
        with pytest.raises(ExtractorCrashed, match="died"):
            ex.extract(nested(20_000), "", Method.RESILIPARSE, 10**9)
        assert "Real words" in ex.extract(ARTICLE, "", Method.CASCADE, 2048).text
        assert ex.pid != first and ex.restarts == 1
        from transforms.extract.html import HtmlTooDeep

        with pytest.raises(HtmlTooDeep):  # the extractor's own errors come back as they are
            ex.extract(ARTICLE, "", Method.CASCADE, -1)
        assert ex.restarts == 1
    finally:
        ex.close()
