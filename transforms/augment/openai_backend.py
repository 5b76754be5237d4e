"""A ``Backend`` over an OpenAI-compatible HTTP server (vLLM, TGI, llama.cpp, transformers serve).

``generate(requests)`` answers from the ``ResponseCache`` first, sends one request per
remaining distinct key (``POST {endpoint}/v1/completions``, or ``/v1/chat/completions``
with ``api="chat"``) concurrently on the process's asyncio loop thread with at most
``concurrency`` in flight per process and endpoint (across threads and calls), and caches
every text it gets. Connections are kept alive between calls. Each request has a timeout; 429, 5xx, timeouts and
connection errors are retried with exponential back-off and full jitter, waiting at least
what ``Retry-After`` asks (seconds or an HTTP date, capped at ``max_backoff_s``); any other
status fails the request at once. Failures are results with ``error`` set, never raised.

Response bodies are hostile: read up to ``max_response_bytes``, parsed as JSON, and
``choices[0].text`` (``choices[0].message.content`` for chat) must be a string. Bytes that
are not UTF-8 are carried as surrogates (``surrogateescape``) so ``check_generation``
rejects them as ``invalid_utf8`` rather than the call failing.

The API key is read from the environment variable named ``api_key_env`` when ``generate``
runs and is held only in the coroutine's headers: it is not an attribute, so it is in no
repr or pickle, and it is never logged. A server may echo it (a proxy that reflects the
request, a model prompted to repeat its headers), so ``redact_key`` cuts it out of every
text the backend returns or caches, of cached texts read back (a cache written before this
rule), and of every whole error body before that body is cut to ``ERROR_SNIPPET``.

One request's failure of any kind (a body nested too deeply for ``json``, a bug) is that
request's ``error``: ``generate`` does not raise, so one hostile answer cannot stop a stage.
"""

from __future__ import annotations

import asyncio
import atexit
import email.utils
import json
import logging
import math
import os
import random
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Sequence

import aiohttp

from transforms.augment.config import check_api_key_env, check_endpoint
from transforms.augment.rephrase import RephraseRequest, RephraseResult
from transforms.augment.response_cache import ResponseCache

_LOGGER = logging.getLogger(__name__)
APIS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
ERROR_SNIPPET = 200  # characters of a server's error body kept in the error text
REDACTED = "[redacted]"
SPLIT_KEY_MIN = 8  # keys at least this long are also found split by whitespace (shorter: verbatim only)
# what a server that wraps or reflows an echoed key may put between its characters:
# whitespace, or JSON's escaped \n \r \t in a raw error body
_KEY_GAP = r"(?:\s|\\[nrt])*"


def redact_key(text: str, key: str) -> str:
    """``text`` with every copy of ``key`` replaced by ``[redacted]``: verbatim and, for a
    key of at least ``SPLIT_KEY_MIN`` characters, with whitespace or JSON-escaped newlines
    and tabs between its characters, or a ``/`` of it escaped as ``\\/`` (JSON allows both).
    A short key is matched only verbatim: spread out, a few letters match ordinary prose."""
    if not key or not text:
        return text
    if len(key) < SPLIT_KEY_MIN:
        return text.replace(key, REDACTED)
    parts = [r"\\?/" if char == "/" else re.escape(char) for char in key]
    return re.sub(_KEY_GAP.join(parts), REDACTED, text)


class _Retryable(Exception):
    def __init__(self, error_type: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.error_type, self.retry_after = error_type, retry_after


class _Fatal(Exception):
    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


@dataclass
class _Outcome:
    text: str = ""
    error: str = ""
    error_type: str = ""
    attempts: int = 0
    seconds: float = 0.0


def parse_retry_after(value: str | None, cap: float, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta seconds or HTTP date), in
    [0, cap]; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()[:64]
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None or when.tzinfo is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), cap)


class _LoopThread:
    """One asyncio loop in a daemon thread per process, shared by every ``OpenAIBackend``:
    ``generate`` calls from any thread (Beam runs several DoFn threads per worker process)
    submit to it, so ``concurrency`` bounds the requests in flight per process and endpoint
    (one semaphore and one keep-alive connection pool per (endpoint, concurrency)), and
    connections outlive a batch. Made again after a fork (the pid changes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = -1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pools: dict[tuple[str, int], tuple[aiohttp.ClientSession, asyncio.Semaphore]] = {}

    def run(self, coroutine: Any) -> Any:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                self._pid, self._pools = os.getpid(), {}
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, name="openai-backend-loop", daemon=True).start()
            loop = self._loop
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result()

    def pool(self, endpoint: str, concurrency: int) -> tuple[aiohttp.ClientSession, asyncio.Semaphore]:
        """The session and semaphore for (endpoint, concurrency); called on the loop."""
        key = (endpoint, concurrency)
        if key not in self._pools:
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency))
            self._pools[key] = (session, asyncio.Semaphore(concurrency))
        return self._pools[key]

    def close(self) -> None:
        """Closes the sessions and stops the loop (at exit; a later ``run`` starts anew)."""
        with self._lock:
            loop, pools, pid = self._loop, self._pools, self._pid
            self._loop, self._pools = None, {}
        if loop is None or pid != os.getpid():
            return

        async def close_all() -> None:
            for session, _ in pools.values():
                await session.close()
        try:
            asyncio.run_coroutine_threadsafe(close_all(), loop).result(timeout=5)
        except Exception:  # at exit: nothing left to report to
            pass
        loop.call_soon_threadsafe(loop.stop)


_LOOP = _LoopThread()
atexit.register(_LOOP.close)


class OpenAIBackend:
    """See the module docstring. Picklable (configuration only): the loop, sessions and
    connections belong to the process (``_LOOP``), not to the backend."""

    def __init__(self, endpoint: str, api_key_env: str = "", concurrency: int = 16, timeout_s: float = 120,
                 retries: int = 5, backoff_s: float = 1.0, max_backoff_s: float = 60,
                 cache: ResponseCache | None = None, api: str = "completions",
                 max_response_bytes: int = 4 << 20) -> None:
        self.endpoint = check_endpoint(endpoint)
        self.api_key_env = check_api_key_env(api_key_env)
        if api not in APIS:
            raise ValueError(f"api: expected one of {sorted(APIS)}, got {api!r}")
        _positive_int("concurrency", concurrency, 4096)
        _positive_int("max_response_bytes", max_response_bytes, 1 << 30)
        if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 100:
            raise ValueError(f"retries: expected an integer in [0, 100], got {retries!r}")
        for name, value in (("timeout_s", timeout_s), ("backoff_s", backoff_s), ("max_backoff_s", max_backoff_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 86400:
                raise ValueError(f"{name}: expected seconds in (0, 86400], got {value!r}")
        self.api, self.concurrency, self.timeout_s, self.retries = api, concurrency, float(timeout_s), retries
        self.backoff_s, self.max_backoff_s, self.cache = float(backoff_s), float(max_backoff_s), cache
        self.max_response_bytes = max_response_bytes
        self.url = self.endpoint + APIS[api]

    def __repr__(self) -> str:
        return (f"OpenAIBackend(endpoint={self.endpoint!r}, api={self.api!r}, api_key_env={self.api_key_env!r}, "
                f"concurrency={self.concurrency}, cache={self.cache!r})")

    # --- public ------------------------------------------------------------------------

    def generate(self, requests: Sequence[RephraseRequest]) -> list[RephraseResult]:
        """One result per request, in order; a request that fails has ``error`` set (this
        call does not raise for it). Texts carry no copy of the API key."""
        key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
        results: dict[str, RephraseResult] = {}
        pending: dict[str, RephraseRequest] = {}
        for request in requests:
            if request.key in results or request.key in pending:
                continue
            cached = self._cached(request.key)
            if cached is not None:
                results[request.key] = RephraseResult(request, text=redact_key(cached, key), cached=True)
            else:
                pending[request.key] = request
        if pending:
            outcomes = self._outcomes(list(pending.values()), key)
            for request, outcome in zip(pending.values(), outcomes):
                results[request.key] = RephraseResult(request, text=outcome.text, error=outcome.error,
                                                      error_type=outcome.error_type, attempts=outcome.attempts,
                                                      seconds=outcome.seconds)
        return [_for(results[r.key], r) for r in requests]

    def _cached(self, request_key: str) -> str | None:
        """The cached text of a request; None when there is none or the cache cannot be
        read (that costs a request, not the batch)."""
        if self.cache is None:
            return None
        try:
            return self.cache.get(request_key)
        except Exception as error:
            _LOGGER.warning("could not read cached response %s: %s", request_key, type(error).__name__)
            return None

    def _outcomes(self, requests: list[RephraseRequest], key: str) -> list[_Outcome]:
        """The outcome of every request; a failure outside any one request (the loop, the
        connection pool) fails each request of the batch rather than raising."""
        if self.api_key_env and not key:
            return [_Outcome(error=f"environment variable {self.api_key_env} is not set",
                             error_type="missing_api_key") for _ in requests]
        try:
            return _LOOP.run(self._send_all(requests, key))
        except Exception as error:
            _LOGGER.warning("backend_error on %s: %s", self.url, type(error).__name__)
            message = _error_text(error, key)
            return [_Outcome(error=message, error_type="backend_error") for _ in requests]

    # --- async -------------------------------------------------------------------------

    async def _send_all(self, requests: list[RephraseRequest], key: str) -> list[_Outcome]:
        session, slots = _LOOP.pool(self.endpoint, self.concurrency)
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return list(await asyncio.gather(*(self._send_and_cache(session, slots, r, headers, key)
                                           for r in requests)))

    async def _send_and_cache(self, session: aiohttp.ClientSession, slots: asyncio.Semaphore,
                              request: RephraseRequest, headers: dict[str, str], key: str) -> _Outcome:
        """A text is cached as soon as it arrives (in a worker thread, while other requests
        are in flight), with the key cut out of it first. A cache that cannot be written
        costs a rerun, not this result."""
        outcome = await self._send(session, slots, request, headers, key)
        outcome.text, outcome.error = redact_key(outcome.text, key), redact_key(outcome.error, key)
        if not outcome.error and self.cache is not None:
            try:
                await asyncio.get_running_loop().run_in_executor(None, self.cache.put, request.key, outcome.text)
            except Exception as error:
                _LOGGER.warning("could not cache response %s: %s", request.key, type(error).__name__)
        return outcome

    async def _send(self, session: aiohttp.ClientSession, slots: asyncio.Semaphore, request: RephraseRequest,
                    headers: dict[str, str], key: str) -> _Outcome:
        outcome = _Outcome()
        body = json.dumps(self._body(request))
        for attempt in range(self.retries + 1):
            outcome.attempts = attempt + 1
            retry_after: float | None = None
            async with slots:
                started = time.perf_counter()
                try:
                    outcome.text = await self._post(session, body, headers, key)
                    outcome.error = outcome.error_type = ""
                    return outcome
                except _Fatal as fatal:
                    outcome.error, outcome.error_type = str(fatal), fatal.error_type
                    return outcome
                except _Retryable as retry:
                    outcome.error, outcome.error_type, retry_after = str(retry), retry.error_type, retry.retry_after
                except Exception as error:  # what no check foresaw fails this request, not the stage
                    _LOGGER.warning("backend_error on %s: %s", self.url, type(error).__name__)
                    outcome.error, outcome.error_type = _error_text(error, key), "backend_error"
                    return outcome
                finally:
                    outcome.seconds += time.perf_counter() - started
            if attempt < self.retries:
                delay = self._delay(attempt, retry_after)
                _LOGGER.warning("%s on %s (attempt %d of %d); retrying in %.2fs", outcome.error_type,
                                self.url, attempt + 1, self.retries + 1, delay)
                await asyncio.sleep(delay)
        return outcome

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        """Full jitter: uniform in [0, min(cap, base * 2^attempt)], at least Retry-After."""
        jitter = random.uniform(0.0, min(self.max_backoff_s, self.backoff_s * (2 ** min(attempt, 60))))
        return max(jitter, retry_after) if retry_after is not None else jitter

    async def _post(self, session: aiohttp.ClientSession, body: str, headers: dict[str, str], key: str) -> str:
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        try:
            async with session.post(self.url, data=body, headers=headers, timeout=timeout) as response:
                data = await _read_bounded(response.content, self.max_response_bytes + 1)
                status = response.status
                retry_after = parse_retry_after(response.headers.get("Retry-After"), self.max_backoff_s)
        except asyncio.TimeoutError:
            raise _Retryable("timeout", f"no response within {self.timeout_s:g}s") from None
        except (aiohttp.ClientError, OSError) as error:
            raise _Retryable("connection", _error_text(error, key)) from None
        if status == 429 or 500 <= status <= 599:
            raise _Retryable(f"http_{status}", f"HTTP {status}: {_snippet(data, key)}", retry_after)
        if status != 200:
            raise _Fatal(f"http_{status}", f"HTTP {status}: {_snippet(data, key)}")
        if len(data) > self.max_response_bytes:
            raise _Fatal("response_too_large", f"response body over {self.max_response_bytes} bytes")
        return self._parse(data, key)

    def _body(self, request: RephraseRequest) -> dict[str, Any]:
        params = request.params
        body: dict[str, Any] = {"model": params.model, "max_tokens": params.max_tokens,
                                "temperature": params.temperature, "top_p": params.top_p, "seed": params.seed}
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": request.prompt}]
        else:
            body["prompt"] = request.prompt
        return body

    def _parse(self, data: bytes, key: str) -> str:
        try:
            document = json.loads(data.decode("utf-8", "surrogateescape"))
        except ValueError:
            raise _Fatal("bad_response", f"response is not JSON: {_snippet(data, key)}") from None
        except RecursionError:  # json recurses per level: 100,000 '[' exhaust the stack
            raise _Fatal("bad_response", f"response JSON is nested too deeply ({len(data)} bytes)") from None
        choices = document.get("choices") if isinstance(document, dict) else None
        choice = choices[0] if isinstance(choices, list) and choices else None
        if self.api == "chat":
            message = choice.get("message") if isinstance(choice, dict) else None
            text = message.get("content") if isinstance(message, dict) else None
            where = "choices[0].message.content"
        else:
            text = choice.get("text") if isinstance(choice, dict) else None
            where = "choices[0].text"
        if not isinstance(text, str):
            raise _Fatal("bad_response", f"response has no string {where}")
        return text


async def _read_bounded(stream: aiohttp.StreamReader, limit: int) -> bytes:
    """The body up to ``limit`` bytes (a longer body is cut there and refused by the caller)."""
    parts: list[bytes] = []
    size = 0
    while size < limit:
        part = await stream.read(limit - size)
        if not part:
            break
        parts.append(part)
        size += len(part)
    return b"".join(parts)


def _positive_int(name: str, value: object, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise ValueError(f"{name}: expected an integer in [1, {high}], got {value!r}")


def _snippet(data: bytes, key: str) -> str:
    """The start of a server's body for an error text: the whole body is decoded and
    redacted before it is cut, so no piece of the key survives at the cut or where the
    server broke it across lines."""
    return redact_key(data.decode("utf-8", "replace"), key)[:ERROR_SNIPPET].replace("\n", " ")


def _error_text(error: BaseException, key: str) -> str:
    """An exception as error text, redacted whole, then cut to ``ERROR_SNIPPET``."""
    return redact_key(f"{type(error).__name__}: {error}", key)[:ERROR_SNIPPET]


def _for(result: RephraseResult, request: RephraseRequest) -> RephraseResult:
    """The result of a shared key, addressed to this request (same doc order)."""
    if result.request is request:
        return result
    return RephraseResult(request, text=result.text, error=result.error, error_type=result.error_type,
                          attempts=0, cached=True, seconds=0.0)
