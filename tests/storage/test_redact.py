"""URL credentials are masked in any text; URLs without credentials are left alone."""

from __future__ import annotations

import pytest

from storage.redact import MASK, has_userinfo, redact_url


@pytest.mark.parametrize("text,expected", [
    ("s3://KEY:SECRET@bucket/x/*.jsonl", f"s3://{MASK}@bucket/x/*.jsonl"),
    ("cannot read 's3://KEY:SECRET@bucket/x': Invalid", f"cannot read 's3://{MASK}@bucket/x': Invalid"),
    ('{"url": "https://user:pw@host:8443/p?q=1"}', f'{{"url": "https://{MASK}@host:8443/p?q=1"}}'),
    ("https://user@host/", f"https://{MASK}@host/"),
    ("s3://K:p@ss@bucket/key", f"s3://{MASK}@bucket/key"),  # '@' in the password
    # an AWS secret with '/' and '+' unencoded: a URL parser would see "K:wJal" as host:port
    ("s3://AKIAX:wJalrXUtn/K7MDENG/bPxR+fiCY@bucket/k", f"s3://{MASK}@bucket/k"),
    ("s3://K:a?b#c@bucket/k", f"s3://{MASK}@bucket/k"),
    ("two: ftp://a:b@h1/x and gs://c:d@h2/y.", f"two: ftp://{MASK}@h1/x and gs://{MASK}@h2/y."),
    ("(s3://K:S@b/x)", f"(s3://{MASK}@b/x)"),
    ("<a href=\"http://u:p@h/\">", f"<a href=\"http://{MASK}@h/\">"),
    ("redis+ssl://u:p@h:6379/0", f"redis+ssl://{MASK}@h:6379/0"),
])
def test_credentials_are_masked(text, expected):
    assert redact_url(text) == expected
    assert has_userinfo(text)
    assert redact_url(expected) == expected  # idempotent


@pytest.mark.parametrize("text", [
    "https://medium.com/@user/post",
    "http://host:8080/a@b",
    "http://[::1]:8080/x@y",
    "s3://bucket/path/a@b.txt",
    "mailto:someone@example.org",
    "no url here: a@b c:d",
    "/local/path/with@sign:colon",
    "",
])
def test_text_without_credentials_is_unchanged(text):
    assert redact_url(text) == text
    assert not has_userinfo(text)


def test_long_text_is_linear():
    text = ("s3://K:S@b/" + "x" * 1000 + " ") * 2000
    assert redact_url(text).count(MASK) == 2000 and "K:S" not in redact_url(text)
