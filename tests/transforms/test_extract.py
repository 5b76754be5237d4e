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


def test_extract_config_validates():
    with pytest.raises(ValueError, match="method"):
        ExtractConfig(method="magic")
    with pytest.raises(ValueError, match="timeout_s"):
        ExtractConfig(timeout_s=0)


def test_extract_transform_routes_and_counts(beam_options, monkeypatch):
    real = extract_mod.extract_html

    def flaky_extract(payload, charset="", method=None):
        if b"BOOM" in payload:
            raise ValueError("parser exploded")
        if b"SLOW" in payload:
            time.sleep(3)
        return real(payload, charset, method)

    monkeypatch.setattr(extract_mod, "extract_html", flaky_extract)
    records = [
        html("a"), text("b", "A text document long enough."), html("c", status=404),
        html("d", b"<html>BOOM</html>"), html("e", b"<html>SLOW</html>"),
        html("f", b"GIF89a", ctype="image/gif"),
    ]
    config = ExtractConfig(timeout_s=1.0, max_error_ratio=1.0)
    with TestPipeline(options=beam_options) as p:
        out = p | beam.Create(records) | ExtractText(config)
        assert_that(out.kept | beam.Map(lambda d: d.id), equal_to(["a", "b"]), label="kept")
        assert_that(out.rejected | beam.Map(lambda r: (r.doc.url, r.reason)),
                    equal_to([("c", "http_status"), ("f", "content_type")]), label="rejected")
        assert_that(out.failed | beam.Map(lambda f: (f.error_type, f.raw)),
                    equal_to([("ValueError", b"<html>BOOM</html>"),
                              ("TimeoutError", b"<html>SLOW</html>")]), label="failed")
    counters = {c.key.metric.name: c.committed for c in p.result.metrics().query()["counters"]}
    assert counters["records_in"] == 6 and counters["records_out"] == 2
    assert counters["rejected_http_status"] == 1 and counters["failed_ValueError"] == 1
    assert counters["failed_TimeoutError"] == 1
