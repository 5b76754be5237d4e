"""OpenAIBackend against a real aiohttp server on 127.0.0.1 scripted per test: retries and
Retry-After, failures, hostile bodies, concurrency, the cache and the API key's secrecy."""

from __future__ import annotations

import email.utils
import json
import logging
import pickle
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.augment.servers import ScriptedServer, completion
from transforms.augment.openai_backend import OpenAIBackend, parse_retry_after
from transforms.augment.rephrase import BUILTIN_TEMPLATES, GenerationParams, check_generation, make_request
from transforms.augment.response_cache import ResponseCache

PARAMS = GenerationParams(model="tiny", max_tokens=32, seed=5)
SOURCE = "The tomatoes finally ripened in the second week of July after a cold and wet spring."
SECRET = "sk-test-4f1b0c9e7d2a-do-not-leak"


def requests(n: int, prefix: str = "doc"):
    return [make_request(f"{prefix}-{i}", 0, f"{SOURCE} Number {i}.", BUILTIN_TEMPLATES["summary"], PARAMS, "en")
            for i in range(n)]


def backend(server: ScriptedServer, **kwargs: Any) -> OpenAIBackend:
    options: dict[str, Any] = {"backoff_s": 0.01, "max_backoff_s": 0.05, "timeout_s": 5, "retries": 3, **kwargs}
    return OpenAIBackend(server.base_url, **options)


def sequence(*responses):
    """A responder that answers each prompt with the next of ``responses`` (last one repeats)."""
    seen: dict[str, int] = {}

    def respond(body: dict[str, Any], headers: dict[str, str]):
        n = seen[body["prompt"]] = seen.get(body["prompt"], 0) + 1
        return responses[min(n, len(responses)) - 1]
    return respond


def test_completions_body_and_order(scripted_server: ScriptedServer) -> None:
    scripted_server.reset(lambda body, headers: completion("out:" + body["prompt"][-12:]))
    batch = requests(5)
    results = backend(scripted_server).generate(batch)
    assert [r.request for r in results] == batch
    assert [r.text for r in results] == ["out:" + r.prompt[-12:] for r in batch]
    assert all(r.ok and r.attempts == 1 and not r.cached and r.seconds > 0 for r in results)
    path, body, _ = scripted_server.requests[0]
    assert path == "/v1/completions"
    assert {k: body[k] for k in ("model", "max_tokens", "temperature", "top_p", "seed")} == \
        {"model": "tiny", "max_tokens": 32, "temperature": 0.7, "top_p": 0.95, "seed": 5}


def test_chat_api(scripted_server: ScriptedServer) -> None:
    scripted_server.reset(lambda body, headers: (200, {}, json.dumps(
        {"choices": [{"message": {"role": "assistant", "content": body["messages"][0]["content"][:5]}}]}).encode()))
    [result] = backend(scripted_server, api="chat").generate(requests(1))
    assert result.text == requests(1)[0].prompt[:5]
    assert scripted_server.requests[0][0] == "/v1/chat/completions"


def test_429_with_retry_after_seconds_then_success(scripted_server: ScriptedServer) -> None:
    scripted_server.reset(sequence((429, {"Retry-After": "1"}, b"slow down"), completion("fine")))
    started = time.monotonic()
    [result] = backend(scripted_server, max_backoff_s=5).generate(requests(1))
    assert result.text == "fine" and result.attempts == 2
    assert time.monotonic() - started >= 1.0  # waited what the server asked, not the 0.01 s back-off


def test_retry_after_as_http_date_and_capped(scripted_server: ScriptedServer) -> None:
    later = email.utils.formatdate(time.time() + 3600, usegmt=True)
    scripted_server.reset(sequence((503, {"Retry-After": later}, b""), completion("fine")))
    started = time.monotonic()
    [result] = backend(scripted_server, max_backoff_s=0.5).generate(requests(1))
    assert result.text == "fine" and result.attempts == 2
    assert 0.4 <= time.monotonic() - started < 5  # an hour asked, the cap (0.5 s) waited


def test_500_then_success(scripted_server: ScriptedServer) -> None:
    scripted_server.reset(sequence((500, {}, b"oops"), (502, {}, b"bad gateway"), completion("fine")))
    results = backend(scripted_server).generate(requests(3))
    assert [(r.text, r.attempts) for r in results] == [("fine", 3)] * 3
    assert len(scripted_server.requests) == 9


def test_retries_exhausted_is_an_error(scripted_server: ScriptedServer) -> None:
    scripted_server.reset(lambda body, headers: (500, {}, b"always down"))
    [result] = backend(scripted_server, retries=2).generate(requests(1))
    assert (result.error_type, result.attempts, result.text) == ("http_500", 3, "")
    assert "always down" in result.error


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_other_4xx_is_not_retried(scripted_server: ScriptedServer, status: int) -> None:
    scripted_server.reset(lambda body, headers: (status, {}, b"no"))
    [result] = backend(scripted_server).generate(requests(1))
    assert (result.error_type, result.attempts) == (f"http_{status}", 1)
    assert len(scripted_server.requests) == 1


def test_timeout_is_retried(scripted_server: ScriptedServer) -> None:
    scripted_server.reset(delay_s=1.0)
    [result] = backend(scripted_server, timeout_s=0.2, retries=1).generate(requests(1))
    assert (result.error_type, result.attempts) == ("timeout", 2)
    assert len(scripted_server.requests) == 2


def test_connection_refused_is_retried() -> None:
    from tests.augment.servers import free_port
    [result] = OpenAIBackend(f"http://127.0.0.1:{free_port()}", retries=2, backoff_s=0.01).generate(requests(1))
    assert (result.error_type, result.attempts) == ("connection", 3)


@pytest.mark.parametrize("status, body, error_type", [
    (200, b"not json", "bad_response"),
    (200, b'{"choices": []}', "bad_response"),
    (200, b'{"choices": [{"text": 7}]}', "bad_response"),
    (200, b'{"choices": [{"text": null}]}', "bad_response"),
    (200, b'["choices"]', "bad_response"),
    (200, b'{"choices": [{"text": "' + b"a" * 5000 + b'"}]}', "response_too_large"),
])
def test_malformed_bodies_fail_without_retry(scripted_server: ScriptedServer, status: int, body: bytes,
                                              error_type: str) -> None:
    scripted_server.reset(lambda b, h: (status, {}, body))
    [result] = backend(scripted_server, max_response_bytes=4096).generate(requests(1))
    assert (result.error_type, result.attempts) == (error_type, 1)


@pytest.mark.parametrize("body, reason", [
    (json.dumps({"choices": [{"text": ""}]}).encode(), "empty"),
    (json.dumps({"choices": [{"text": "  \n "}]}).encode(), "empty"),
    (json.dumps({"choices": [{"text": "Tomatoes ripen late. " * 100}]}).encode(), "too_long"),
    (b'{"choices": [{"text": "Tomatoes \xff\xfe ripened late"}]}', "invalid_utf8"),
    (b'{"choices": [{"text": "Tomatoes \\ud800 ripened late"}]}', "invalid_utf8"),
    (None, "prompt_echo"),
])
def test_hostile_outputs_are_rejected_with_a_reason(scripted_server: ScriptedServer, body: bytes | None,
                                                    reason: str) -> None:
    scripted_server.reset(lambda b, h: (200, {}, body if body is not None else
                                        json.dumps({"choices": [{"text": b["prompt"]}]}).encode()))
    [result] = backend(scripted_server).generate(requests(1))
    assert result.ok and result.attempts == 1  # a hostile generation is a result, not a failure
    text, got = check_generation(result.request, result.text)
    assert got == reason
    text.encode("utf-8")


def test_concurrency_limit(scripted_server: ScriptedServer) -> None:
    scripted_server.reset(delay_s=0.05)
    results = backend(scripted_server, concurrency=4).generate(requests(20))
    assert all(r.ok for r in results)
    assert scripted_server.max_in_flight == 4


def test_concurrency_limit_holds_across_threads(scripted_server: ScriptedServer) -> None:
    """Beam calls generate from several DoFn threads: the limit is per process and endpoint."""
    scripted_server.reset(delay_s=0.05)
    outputs: list[list] = [[], [], []]
    threads = [threading.Thread(target=lambda out=out, i=i: out.extend(
        backend(scripted_server, concurrency=3).generate(requests(8, prefix=f"t{i}"))))
        for i, out in enumerate(outputs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert [len(out) for out in outputs] == [8, 8, 8] and all(r.ok for out in outputs for r in out)
    assert scripted_server.max_in_flight == 3 and len(scripted_server.requests) == 24


def test_cache_answers_without_a_request(scripted_server: ScriptedServer, tmp_path: Path) -> None:
    cache = ResponseCache(str(tmp_path / "cache"))
    scripted_server.reset(lambda body, headers: completion("gen " + body["prompt"][-3:]))
    batch = requests(4)
    first = backend(scripted_server, cache=cache).generate(batch)
    assert len(scripted_server.requests) == 4
    second = backend(scripted_server, cache=cache).generate(batch)
    assert len(scripted_server.requests) == 4  # no request
    assert [r.text for r in second] == [r.text for r in first] and all(r.cached and r.attempts == 0 for r in second)


def test_a_cache_that_cannot_be_written_loses_no_result(scripted_server: ScriptedServer, tmp_path: Path,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "file").write_text("not a directory")
    results = backend(scripted_server, cache=ResponseCache(str(tmp_path / "file"))).generate(requests(2))
    assert [r.text for r in results] == ["ok", "ok"]
    assert "could not cache response" in caplog.text


def test_failures_are_not_cached(scripted_server: ScriptedServer, tmp_path: Path) -> None:
    cache = ResponseCache(str(tmp_path / "cache"))
    scripted_server.reset(lambda body, headers: (400, {}, b"bad"))
    backend(scripted_server, cache=cache).generate(requests(2))
    assert not any((tmp_path / "cache").rglob("*.txt"))


def test_identical_requests_in_a_batch_are_sent_once(scripted_server: ScriptedServer) -> None:
    one = requests(1)[0]
    twin = make_request("other-doc", 3, f"{SOURCE} Number 0.", BUILTIN_TEMPLATES["summary"], PARAMS, "en")
    assert twin.key == one.key
    results = backend(scripted_server).generate([one, twin])
    assert len(scripted_server.requests) == 1
    assert [r.request.doc_id for r in results] == ["doc-0", "other-doc"] and results[0].text == results[1].text


def test_api_key_is_sent_but_never_logged_kept_or_echoed(scripted_server: ScriptedServer,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("TF_TEST_LLM_KEY", SECRET)

    def echo_auth(body: dict[str, Any], headers: dict[str, str]):
        if body["prompt"].endswith("1.\n\nSummary:\n"):  # one request: a 401 that echoes the header
            return 401, {}, f"bad key {headers.get('Authorization')}".encode()
        return 500, {"Retry-After": "0"}, f"down for {headers.get('Authorization')}".encode()
    scripted_server.reset(echo_auth)
    client = backend(scripted_server, api_key_env="TF_TEST_LLM_KEY", retries=1)
    with caplog.at_level(logging.DEBUG):
        results = client.generate(requests(2))
    assert {h.get("Authorization") for _, _, h in scripted_server.requests} == {f"Bearer {SECRET}"}
    assert {r.error_type for r in results} == {"http_500", "http_401"}
    assert all("[redacted]" in r.error and SECRET not in r.error for r in results)
    assert caplog.records and SECRET not in caplog.text
    assert SECRET not in repr(client) and SECRET.encode() not in pickle.dumps(client)
    assert SECRET not in repr(results) and SECRET.encode() not in pickle.dumps(results)
    assert SECRET not in str(vars(client))


def test_missing_api_key_fails_every_request_without_sending(scripted_server: ScriptedServer,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TF_TEST_ABSENT_KEY", raising=False)
    results = backend(scripted_server, api_key_env="TF_TEST_ABSENT_KEY").generate(requests(2))
    assert {r.error_type for r in results} == {"missing_api_key"} and not scripted_server.requests


def test_backend_pickles_and_works_after(scripted_server: ScriptedServer, tmp_path: Path) -> None:
    client = pickle.loads(pickle.dumps(backend(scripted_server, cache=ResponseCache(str(tmp_path)))))
    assert client.generate(requests(1))[0].text == "ok"


@pytest.mark.parametrize("kwargs, message", [
    ({"endpoint": "ftp://x"}, "endpoint"),
    ({"endpoint": "http://user:pw@host"}, "credentials"),
    ({"endpoint": "http://host/?key=1"}, "credentials"),
    ({"api_key_env": "sk-live-abc123"}, "api_key_env"),
    ({"api": "embeddings"}, "api"),
    ({"concurrency": 0}, "concurrency"),
    ({"retries": -1}, "retries"),
    ({"timeout_s": 0}, "timeout_s"),
])
def test_bad_configuration(kwargs: dict[str, Any], message: str) -> None:
    options = {"endpoint": "http://127.0.0.1:1", **kwargs}
    with pytest.raises(ValueError, match=message) as info:
        OpenAIBackend(**options)
    assert "sk-live-abc123" not in str(info.value)


@pytest.mark.parametrize("value, expected", [
    (None, None), ("", None), ("2", 2.0), ("0.5", 0.5), ("-3", 0.0), ("99999", 60.0), ("soon", None),
    ("nan", None), ("inf", None), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
])
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, cap=60.0) == expected


def test_parse_retry_after_http_date() -> None:
    now = 1_800_000_000.0
    assert parse_retry_after(email.utils.formatdate(now + 30, usegmt=True), cap=60.0, now=now) == pytest.approx(30)


def test_backoff_is_full_jitter_capped_and_at_least_retry_after() -> None:
    client = OpenAIBackend("http://127.0.0.1:1", backoff_s=1.0, max_backoff_s=10.0)
    for attempt, ceiling in ((0, 1.0), (1, 2.0), (2, 4.0), (3, 8.0), (4, 10.0), (50, 10.0)):
        delays = [client._delay(attempt, None) for _ in range(300)]
        assert 0.0 <= min(delays) and max(delays) <= ceiling
        assert max(delays) > 0.7 * ceiling and min(delays) < 0.3 * ceiling  # spread over [0, ceiling]
    assert all(client._delay(0, 5.0) >= 5.0 for _ in range(50))
