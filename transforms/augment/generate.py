"""``Generate``: PCollection[RephraseRequest] -> PCollection[RephraseResult], over either backend.

* ``kind="openai"``: requests are batched (``BatchElements``, up to ``batch_size``) and each
  batch goes to ``OpenAIBackend.generate`` in a DoFn whose ``setup`` builds the backend
  (concurrency, retries and the response cache are the backend's);
* ``kind="runinference"``: cached requests are answered from the ``ResponseCache``, the
  others go through ``RunInference`` with a ``KeyedModelHandler`` over ``CausalLMHandler``
  (keyed by the request key) and their texts are cached afterwards.

Either way a rerun over the same requests makes no model call. Counters (namespace
``augment``): ``generate_requests`` (sent to a model), ``generate_cached``,
``generate_failed_<error_type>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.ml.inference.base import KeyedModelHandler, PredictionResult, RunInference

from transforms.augment.hf_backend import CausalLMHandler, Generation
from transforms.augment.config import check_api_key_env, check_endpoint
from transforms.augment.openai_backend import APIS, OpenAIBackend
from transforms.augment.rephrase import RephraseRequest, RephraseResult
from transforms.augment.response_cache import ResponseCache

KINDS = ("openai", "runinference")
NAMESPACE = "augment"
_ERROR_TYPE = re.compile(r"[^a-z0-9_]+")


@dataclass(frozen=True)
class BackendSpec:
    """Which backend generates and how. ``model``: the served model's name for ``openai``
    (sent as ``model``), the model directory (path or URL) for ``runinference``."""

    kind: str
    model: str
    endpoint: str = ""
    api_key_env: str = ""
    concurrency: int = 16
    timeout_s: float = 120.0
    retries: int = 5
    backoff_s: float = 1.0
    max_backoff_s: float = 60.0
    cache_dir: str = ""
    api: str = "completions"
    batch_size: int = 64
    max_batch_tokens: int = 8192

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"backend kind: expected one of {list(KINDS)}, got {self.kind!r}")
        if not isinstance(self.model, str) or not self.model.strip():
            raise ValueError("backend model: expected the served model's name (openai) or a model directory (runinference)")
        if self.kind == "openai":
            check_endpoint(self.endpoint)
        elif self.endpoint:
            raise ValueError("backend endpoint: only for kind 'openai'")
        check_api_key_env(self.api_key_env)
        if self.api not in APIS:
            raise ValueError(f"backend api: expected one of {sorted(APIS)}, got {self.api!r}")
        for name, high in (("batch_size", 4096), ("max_batch_tokens", 1 << 24)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
                raise ValueError(f"backend {name}: expected an integer in [1, {high}], got {value!r}")
        if self.cache_dir:
            ResponseCache(self.cache_dir)
        if self.kind == "openai":
            self.openai_backend()  # validates concurrency, timeouts, retries

    def cache(self) -> ResponseCache | None:
        return ResponseCache(self.cache_dir) if self.cache_dir else None

    def openai_backend(self) -> OpenAIBackend:
        return OpenAIBackend(self.endpoint, api_key_env=self.api_key_env, concurrency=self.concurrency,
                             timeout_s=self.timeout_s, retries=self.retries, backoff_s=self.backoff_s,
                             max_backoff_s=self.max_backoff_s, cache=self.cache(), api=self.api)


def _count_results(results: Iterable[RephraseResult]) -> None:
    for result in results:
        if result.cached:
            Metrics.counter(NAMESPACE, "generate_cached").inc()
        else:
            Metrics.counter(NAMESPACE, "generate_requests").inc()
        if result.error:
            Metrics.counter(NAMESPACE, f"generate_failed_{_ERROR_TYPE.sub('_', result.error_type.lower())}").inc()


class _OpenAIGenerateFn(beam.DoFn):
    def __init__(self, spec: BackendSpec) -> None:
        self._spec = spec
        self._backend: OpenAIBackend | None = None

    def setup(self) -> None:
        self._backend = self._spec.openai_backend()

    def process(self, batch: Sequence[RephraseRequest]) -> Iterator[RephraseResult]:
        if self._backend is None:
            self.setup()
        results = self._backend.generate(list(batch))  # type: ignore[union-attr]
        _count_results(results)
        yield from results


class _CachedFn(beam.DoFn):
    """Answers a request from the cache (main output) or passes it on (``MISS``)."""

    MISS = "miss"

    def __init__(self, cache_dir: str) -> None:
        self._cache_dir = cache_dir
        self._cache: ResponseCache | None = None

    def setup(self) -> None:
        self._cache = ResponseCache(self._cache_dir) if self._cache_dir else None

    def process(self, request: RephraseRequest) -> Iterator[object]:
        text = self._cache.get(request.key) if self._cache is not None else None
        if text is None:
            yield beam.pvalue.TaggedOutput(self.MISS, (request.key, request))
        else:
            result = RephraseResult(request, text=text, cached=True)
            _count_results([result])
            yield result


class _ToResultFn(beam.DoFn):
    """A RunInference prediction -> RephraseResult; a text is cached."""

    def __init__(self, cache_dir: str) -> None:
        self._cache_dir = cache_dir
        self._cache: ResponseCache | None = None

    def setup(self) -> None:
        self._cache = ResponseCache(self._cache_dir) if self._cache_dir else None

    def process(self, keyed: tuple[str, PredictionResult]) -> Iterator[RephraseResult]:
        _, prediction = keyed
        request: RephraseRequest = prediction.example
        generation: Generation = prediction.inference
        if generation.error:
            result = RephraseResult(request, error=generation.error, error_type=generation.error_type,
                                    attempts=1, seconds=generation.seconds)
        else:
            if self._cache is not None:
                self._cache.put(request.key, generation.text)
            result = RephraseResult(request, text=generation.text, attempts=1, seconds=generation.seconds)
        _count_results([result])
        yield result


class Generate(beam.PTransform):
    """PCollection[RephraseRequest] -> PCollection[RephraseResult] (one result per request)."""

    def __init__(self, spec: BackendSpec) -> None:
        super().__init__()
        if not isinstance(spec, BackendSpec):
            raise ValueError("Generate: expected a BackendSpec")
        self._spec = spec

    def expand(self, requests: beam.PCollection[RephraseRequest]) -> beam.PCollection[RephraseResult]:
        spec = self._spec
        if spec.kind == "openai":
            return (requests
                    | "Batch" >> beam.BatchElements(min_batch_size=1, max_batch_size=spec.batch_size)
                    | "CallServer" >> beam.ParDo(_OpenAIGenerateFn(spec)))
        split = requests | "FromCache" >> beam.ParDo(_CachedFn(spec.cache_dir)).with_outputs(_CachedFn.MISS,
                                                                                              main="cached")
        handler = KeyedModelHandler(CausalLMHandler(spec.model, max_batch_size=spec.batch_size,
                                                    max_batch_tokens=spec.max_batch_tokens))
        generated = (split[_CachedFn.MISS]
                     | "RunInference" >> RunInference(handler)
                     | "ToResult" >> beam.ParDo(_ToResultFn(spec.cache_dir)))
        return (split.cached, generated) | "Merge" >> beam.Flatten()
