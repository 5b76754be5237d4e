"""URL credentials are masked in any text; URLs without credentials are left alone."""

from __future__ import annotations

import pytest

from storage.redact import MASK, has_userinfo, redact_command, redact_text, redact_url


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


@pytest.mark.parametrize("text,expected", [
    ("Unparseable argument: --hf_token=abc123", f"Unparseable argument: --hf_token={MASK}"),
    ("['--s3_secret_access_key=wJal/r+X', '--runner=FnApiRunner']",
     f"['--s3_secret_access_key={MASK}', '--runner=FnApiRunner']"),
    ("run --api-key=k1 --password=p --session_token=t --s3_access_key_id=AKIA --output=/x",
     f"run --api-key={MASK} --password={MASK} --session_token={MASK} --s3_access_key_id={MASK} --output=/x"),
    ("--output=s3://K:S@b/x --stages=a,b", f"--output=s3://{MASK}@b/x --stages=a,b"),
    ("monkey=banana keys=3 -k=v", "monkey=banana keys=3 -k=v"),  # not options, or names without a secret word
])
def test_secret_option_values_are_masked(text, expected):
    assert redact_text(text) == expected
    assert redact_text(expected) == expected


def test_a_command_line_is_masked_in_both_option_forms():
    argv = ["/repo/pipelines/run.py", "--config", "job.yaml", "--s3_secret_access_key", "wJal/r+X",
            "--token=t0k", "--output", "s3://K:S@bucket/out", "--sdk-workers", "pool", "--password", "--force"]
    assert redact_command(argv) == (f"/repo/pipelines/run.py --config job.yaml --s3_secret_access_key {MASK} "
                                    f"--token={MASK} --output s3://{MASK}@bucket/out --sdk-workers pool "
                                    "--password --force")
