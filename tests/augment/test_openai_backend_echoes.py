"""OpenAIBackend against a real aiohttp server on 127.0.0.1 that echoes the API key back
(in a completion, in long and multi-line error bodies) or answers JSON nested too deeply:
no piece of the key is returned, cached or logged, and every such answer is a result
(issue 36, items 3 and 14)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from tests.augment.servers import ScriptedServer, completion
from tests.augment.test_openai_backend import backend, requests
from transforms.augment.openai_backend import ERROR_SNIPPET, OpenAIBackend, redact_key
from transforms.augment.response_cache import ResponseCache

KEY = "sk-Q7vX2mP9kL4wR8tZ3nB6yH1cJ5dF0gS"  # random-looking: no 8 characters of it occur by chance
ENV = "TF_TEST_ECHO_KEY"


def fragments(secret: str, size: int = 6) -> set[str]:
    """Every ``size``-character piece of ``secret``: what a cut or split echo leaves."""
    return {secret[i:i + size] for i in range(len(secret) - size + 1)}


def leaked(text: str, secret: str = KEY) -> list[str]:
    return sorted(f for f in fragments(secret) if f in text)


@pytest.mark.parametrize("text, key, expected", [
    ("a sk-abcdefgh1234 b", "sk-abcdefgh1234", "a [redacted] b"),
    ("sk-abcd\nefgh1234", "sk-abcdefgh1234", "[redacted]"),
    ("sk-ab cd\r\n  efgh 1234!", "sk-abcdefgh1234", "[redacted]!"),
    ('{"e": "sk-abcd\\nefgh1234"}', "sk-abcdefgh1234", '{"e": "[redacted]"}'),  # JSON-escaped newline
    ('{"e": "ab\\/cdefgh"}', "ab/cdefgh", '{"e": "[redacted]"}'),  # JSON-escaped slash
    ("sk-abcdefgh1234sk-abcdefgh1234", "sk-abcdefgh1234", "[redacted][redacted]"),
    ("keys: EMPTY and E M P T Y", "EMPTY", "keys: [redacted] and E M P T Y"),  # short: verbatim only
    ("sk-abcdefgh123", "sk-abcdefgh1234", "sk-abcdefgh123"),  # not the key
    ("anything", "", "anything"),
])
def test_redact_key(text: str, key: str, expected: str) -> None:
    assert redact_key(text, key) == expected


def _echo_key(body: dict[str, Any], headers: dict[str, str]):
    """By request number (the prompt ends 'Number N.'): 0 and 1 answer the key (verbatim,
    then broken across lines); 2 a 400 whose body puts the key across the 200-character
    cut; 3 a 500 that breaks it across lines; 4 a 422 whose JSON body escapes the newline."""
    auth, n = headers["Authorization"], int(body["prompt"].split("Number ")[1][0])
    if n == 0:
        return completion(f"Tomatoes ripen late. Your header was {auth}.")
    if n == 1:
        return completion(f"Tomatoes ripen late. {auth[:12]}\n{auth[12:25]}\r\n  {auth[25:]}")
    if n == 2:
        return 400, {}, ("e" * (ERROR_SNIPPET - 20) + auth + " more text after the key").encode()
    if n == 3:
        return 500, {}, f"line one\ninvalid key {auth[:19]}\n{auth[19:]}\nline four".encode()
    return 422, {}, json.dumps({"error": f"bad {auth[:15]}\n{auth[15:]}"}).encode()


def test_an_echoed_key_is_neither_returned_nor_cached_nor_logged(scripted_server: ScriptedServer, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv(ENV, KEY)
    scripted_server.reset(_echo_key)
    cache = ResponseCache(str(tmp_path / "cache"))
    with caplog.at_level(logging.DEBUG):
        results = backend(scripted_server, api_key_env=ENV, retries=1, cache=cache).generate(requests(5))
    assert {h["Authorization"] for _, _, h in scripted_server.requests} == {f"Bearer {KEY}"}
    assert [(r.error_type, bool(r.text)) for r in results] == [
        ("", True), ("", True), ("http_400", False), ("http_500", False), ("http_422", False)]
    assert results[0].text == "Tomatoes ripen late. Your header was Bearer [redacted]."
    assert results[1].text == "Tomatoes ripen late. Bearer [redacted]"
    assert results[2].error.startswith("HTTP 400: " + "e" * (ERROR_SNIPPET - 20) + "Bearer [redac")
    assert "invalid key Bearer [redacted] line four" in results[3].error
    for result in results:
        assert not leaked(result.text + result.error), result
    cached = sorted(tmp_path.joinpath("cache").rglob("*.txt"))
    assert len(cached) == 2 and not any(leaked(p.read_text()) for p in cached)
    assert caplog.records and not leaked(caplog.text)
    again = backend(scripted_server, api_key_env=ENV, cache=cache).generate(requests(2))
    assert [(r.cached, r.text) for r in again] == [(True, results[0].text), (True, results[1].text)]


def test_a_key_cached_before_redaction_existed_is_redacted_when_read(scripted_server: ScriptedServer,
                                                                     tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache written by an older version may hold the key: it is cut out when read."""
    monkeypatch.setenv(ENV, KEY)
    cache = ResponseCache(str(tmp_path / "cache"))
    [request] = requests(1)
    cache.put(request.key, f"Tomatoes ripen late. Bearer {KEY}")
    [result] = backend(scripted_server, api_key_env=ENV, cache=cache).generate([request])
    assert (result.cached, result.text) == (True, "Tomatoes ripen late. Bearer [redacted]")
    assert not scripted_server.requests


@pytest.mark.parametrize("api, body", [
    ("completions", b"[" * 100_000),
    ("completions", b'{"choices": [{"text": ' + b"[" * 100_000),
    ("chat", b'{"choices": [{"message": {"content": ' + b'{"a": ' * 100_000),
])
def test_json_nested_too_deeply_fails_one_request(scripted_server: ScriptedServer, api: str, body: bytes) -> None:
    """json raises RecursionError (not ValueError) on such a body; the request fails as
    ``bad_response``, the others of the batch are answered, and nothing is raised."""
    def respond(request: dict[str, Any], headers: dict[str, str]):
        prompt = request["prompt"] if api == "completions" else request["messages"][0]["content"]
        if "Number 1." in prompt:
            return 200, {}, body
        reply = {"text": "Tomatoes ripen late."} if api == "completions" else \
            {"message": {"role": "assistant", "content": "Tomatoes ripen late."}}
        return 200, {}, json.dumps({"choices": [reply]}).encode()
    scripted_server.reset(respond)
    results = backend(scripted_server, api=api).generate(requests(3))
    assert [(r.text, r.error_type, r.attempts) for r in results] == [
        ("Tomatoes ripen late.", "", 1), ("", "bad_response", 1), ("Tomatoes ripen late.", "", 1)]
    assert results[1].error == f"response JSON is nested too deeply ({len(body)} bytes)"


def test_an_unreadable_cache_entry_costs_a_request(scripted_server: ScriptedServer, tmp_path: Path) -> None:
    """A cache entry that cannot be read (here a directory where its file would be) is a
    miss: the request is sent, nothing is raised."""
    cache = ResponseCache(str(tmp_path / "cache"))
    [request] = requests(1)
    Path(cache.path(request.key)).mkdir(parents=True)
    [result] = backend(scripted_server, cache=cache).generate([request])
    assert (result.text, result.cached, len(scripted_server.requests)) == ("ok", False, 1)


def test_an_unforeseen_error_fails_its_request_only(scripted_server: ScriptedServer,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The promise holds for failures no check names (a bug while reading one answer):
    that request fails as ``backend_error`` with the key cut out of its text."""
    monkeypatch.setenv(ENV, KEY)
    real_parse = OpenAIBackend._parse

    def parse(self: OpenAIBackend, data: bytes, key: str) -> str:
        text = real_parse(self, data, key)
        if "boom" in text:
            raise KeyError(f"boom with {key}")
        return text
    monkeypatch.setattr(OpenAIBackend, "_parse", parse)
    scripted_server.reset(lambda body, headers: completion("boom" if "Number 0." in body["prompt"] else "fine"))
    results = backend(scripted_server, api_key_env=ENV).generate(requests(2))
    assert [(r.text, r.error_type) for r in results] == [("", "backend_error"), ("fine", "")]
    assert results[0].error == "KeyError: 'boom with [redacted]'"
