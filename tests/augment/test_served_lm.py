"""OpenAIBackend against a real OpenAI-compatible server (``transformers serve``) serving the
tiny LM trained on the demo corpus: generation, the cache, and a server killed mid-run."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.augment.servers import LMServer, ServedModel
from tests.augment.tinylm import demo_texts
from transforms.augment.openai_backend import OpenAIBackend
from transforms.augment.rephrase import BUILTIN_TEMPLATES, GenerationParams, check_generation, make_request
from transforms.augment.response_cache import ResponseCache


def requests(model: str, n: int, max_tokens: int = 12):
    params = GenerationParams(model=model, max_tokens=max_tokens, temperature=0.8, seed=1)
    texts = demo_texts()
    return [make_request(f"doc-{i}", 0, texts[i % len(texts)][:200] + f" ({i})", BUILTIN_TEMPLATES["qa"], params, "en")
            for i in range(n)]


def test_generation_through_the_server(served_lm: ServedModel, lm_server: LMServer) -> None:
    before = lm_server.requests_received()
    for api in ("completions", "chat"):
        client = OpenAIBackend(served_lm.base_url, api=api, concurrency=2, timeout_s=60, retries=1)
        results = client.generate(requests(served_lm.model_name, 2))
        assert all(r.ok and r.attempts == 1 and r.seconds > 0 for r in results), [r.error for r in results]
        assert all(isinstance(r.text, str) and r.text for r in results)
        for result in results:
            text, reason = check_generation(result.request, result.text)
            assert reason in ("", "invalid_utf8", "prompt_echo")  # garbage from a tiny model, but a string
    assert lm_server.requests_received() - before == 4


def test_second_run_makes_no_request(served_lm: ServedModel, lm_server: LMServer, tmp_path: Path) -> None:
    cache = ResponseCache(str(tmp_path / "cache"))
    client = OpenAIBackend(served_lm.base_url, concurrency=3, timeout_s=60, cache=cache)
    batch = requests(served_lm.model_name, 5)
    before = lm_server.requests_received()
    first = client.generate(batch)
    assert all(r.ok for r in first) and lm_server.requests_received() - before == 5
    second = client.generate(batch)
    assert lm_server.requests_received() - before == 5  # the server saw nothing more
    assert [r.text for r in second] == [r.text for r in first] and all(r.cached for r in second)


def test_server_killed_mid_run_and_restarted(lm_server: LMServer, tmp_path: Path) -> None:
    """The session's server is killed while requests are in flight and started again on
    its port. Nothing lost (one result per request, all ok), nothing generated twice (each
    key cached once, a rerun makes no request, only the requests in flight were re-sent)."""
    cache = ResponseCache(str(tmp_path / "cache"))
    client = OpenAIBackend(lm_server.base_url, concurrency=2, timeout_s=30, retries=40, backoff_s=0.2,
                           max_backoff_s=2.0, cache=cache)
    batch = requests(lm_server.served.model_name, 24, max_tokens=48)
    results: list = []
    runner = threading.Thread(target=lambda: results.extend(client.generate(batch)))
    before = lm_server.requests_received()
    try:
        runner.start()
        deadline = time.monotonic() + 60
        while lm_server.requests_received() - before < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        lm_server.stop()  # SIGKILL: the requests in flight lose their connection
        assert runner.is_alive(), "the run finished before the server was stopped"
        time.sleep(0.5)
    finally:
        lm_server.start()
    runner.join(timeout=120)
    assert not runner.is_alive()
    assert [r.request for r in results] == batch
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    assert max(r.attempts for r in results) > 1  # requests were retried across the restart
    files = sorted(p.name for p in (tmp_path / "cache").rglob("*.txt"))
    assert files == sorted(f"{r.key}.txt" for r in batch)
    received = lm_server.requests_received() - before
    assert len(batch) <= received <= len(batch) + client.concurrency  # only those in flight were re-sent
    again = client.generate(batch)
    assert lm_server.requests_received() - before == received
    assert [r.text for r in again] == [r.text for r in results]
