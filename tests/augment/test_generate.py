"""``Generate`` in a TestPipeline: the in-process backend (RunInference, the tiny LM on the
CPU) and the OpenAI backend (the tiny LM behind ``transformers serve``), each run twice over
one cache: the second run makes no model call."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import apache_beam as beam
import pytest
import torch
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.augment.servers import LMServer, ServedModel
from tests.augment.tinylm import demo_texts
from transforms.augment.generate import BackendSpec, Generate
from transforms.augment.hf_backend import CausalLMHandler, _sub_batches
from transforms.augment.rephrase import BUILTIN_TEMPLATES, GenerationParams, RephraseRequest, make_request


@pytest.fixture
def one_thread() -> Iterator[None]:
    """The in-process model runs in this process: one torch thread on a small loaded machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_requests(model: str, n: int, max_tokens: int = 8) -> list[RephraseRequest]:
    params = GenerationParams(model=model, max_tokens=max_tokens, temperature=0.7, seed=3)
    texts = demo_texts()
    # different lengths, so a batch is sorted and cut by length
    return [make_request(f"doc-{i}", i % 2, texts[i % len(texts)][: 40 + 30 * i], BUILTIN_TEMPLATES["summary"],
                         params, "en") for i in range(n)]


def run(spec: BackendSpec, requests: list[RephraseRequest], beam_options) -> tuple[list, dict[str, int]]:
    collected: list = []
    with TestPipeline(options=beam_options) as p:
        results = p | beam.Create(requests) | Generate(spec)
        assert_that(results | beam.Map(lambda r: (r.request.key, r.ok, isinstance(r.text, str))),
                    equal_to([(r.key, True, True) for r in requests]))
        _ = results | beam.Map(collected.append)
    counters = {c.key.metric.name: c.committed for c in p.result.metrics().query()["counters"]}
    return collected, counters


def test_runinference_backend_then_cached(tiny_lm_dir: Path, tmp_path: Path, beam_options, one_thread) -> None:
    spec = BackendSpec(kind="runinference", model=str(tiny_lm_dir), cache_dir=str(tmp_path / "cache"),
                       batch_size=4, max_batch_tokens=600)
    requests = make_requests("tiny-in-process", 6)
    first, counters = run(spec, requests, beam_options)
    assert counters.get("generate_requests") == 6 and "generate_cached" not in counters
    assert len(list((tmp_path / "cache").rglob("*.txt"))) == 6
    second, counters = run(spec, requests, beam_options)
    assert counters.get("generate_cached") == 6 and "generate_requests" not in counters
    assert {r.request.key: r.text for r in first} == {r.request.key: r.text for r in second}


def test_openai_backend_through_beam_then_cached(served_lm: ServedModel, lm_server: LMServer, tmp_path: Path,
                                                 beam_options) -> None:
    spec = BackendSpec(kind="openai", model=served_lm.model_name, endpoint=served_lm.base_url,
                       cache_dir=str(tmp_path / "cache"), concurrency=4, batch_size=3, timeout_s=60)
    requests = make_requests(served_lm.model_name, 5)
    before = lm_server.requests_received()
    _, counters = run(spec, requests, beam_options)
    assert counters.get("generate_requests") == 5 and lm_server.requests_received() - before == 5
    _, counters = run(spec, requests, beam_options)
    assert counters.get("generate_cached") == 5 and lm_server.requests_received() - before == 5


def test_handler_batches_by_length_and_refuses_overlong_prompts(tiny_lm_dir: Path, one_thread) -> None:
    handler = CausalLMHandler(str(tiny_lm_dir), max_batch_tokens=400)
    model = handler.load_model()
    requests = make_requests("tiny", 4)
    huge = make_request("huge", 0, " ".join(demo_texts()) * 2, BUILTIN_TEMPLATES["qa"], requests[0].params, "en")
    predictions = list(handler.run_inference([requests[3], huge, requests[0]], model))
    assert [p.example for p in predictions] == [requests[3], huge, requests[0]]
    assert predictions[1].inference.error_type == "too_long_prompt"
    assert all(p.inference.error == "" and isinstance(p.inference.text, str) for p in (predictions[0], predictions[2]))
    # the seed is honoured: the same batch gives the same texts
    again = list(handler.run_inference([requests[3], huge, requests[0]], model))
    assert [p.inference.text for p in again] == [p.inference.text for p in predictions]


@pytest.mark.parametrize("lengths, new_tokens, budget, expected", [
    ([10, 20, 30], 10, 1000, [[0, 1, 2]]),
    ([10, 20, 30], 10, 60, [[0, 1], [2]]),  # 3 rows x (30 + 10) = 120 > 60; 2 x (20 + 10) = 60 fits
    ([10, 20, 30], 10, 59, [[0], [1], [2]]),
    ([500], 10, 100, [[0]]),  # one row always makes a sub-batch
])
def test_sub_batches(lengths: list[int], new_tokens: int, budget: int, expected: list[list[int]]) -> None:
    assert _sub_batches(list(range(len(lengths))), lengths, new_tokens, budget) == expected


@pytest.mark.parametrize("kwargs, message", [
    ({"kind": "vllm"}, "kind"),
    ({"kind": "openai", "endpoint": ""}, "endpoint"),
    ({"kind": "runinference", "endpoint": "http://x"}, "only for kind 'openai'"),
    ({"model": ""}, "model"),
    ({"api_key_env": "sk-123"}, "api_key_env"),
    ({"batch_size": 0}, "batch_size"),
    ({"concurrency": 0}, "concurrency"),
    ({"api": "responses"}, "api"),
])
def test_backend_spec_validates(kwargs: dict, message: str) -> None:
    options = {"kind": "openai", "model": "m", "endpoint": "http://127.0.0.1:8000", **kwargs}
    with pytest.raises(ValueError, match=message):
        BackendSpec(**options)
