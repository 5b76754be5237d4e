"""A polite HTTP client for one host: spacing between requests, retries, limits.

``HostClient.fetch`` performs one hop (no redirect following: the crawler decides
whether a redirect target may be fetched) with retries on 429, 5xx, timeouts and
connection errors, exponential backoff with jitter, and ``Retry-After`` honoured up to
a cap. Every attempt becomes a ``FetchLogEntry``. Bodies are streamed and cut at
``max_bytes``; bodies of disallowed content types are never downloaded.
"""

from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Callable, Optional

import requests

_LOGGER = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class FetchPolicy:
    """How to talk to a host."""

    user_agent: str = "tokenfactory-crawler/0.1 (+https://github.com/tokenfactory)"
    timeout_s: float = 10.0
    min_delay_s: float = 1.0
    max_retries: int = 3
    backoff_s: float = 1.0
    max_backoff_s: float = 60.0
    max_bytes: int = 5 * 1024 * 1024
    allowed_content_types: tuple[str, ...] = ("text/html", "application/xhtml+xml")

    def __post_init__(self) -> None:
        if not self.user_agent.strip():
            raise ValueError("user_agent must not be empty")
        for name in ("timeout_s", "min_delay_s", "backoff_s", "max_backoff_s"):
            if not math.isfinite(getattr(self, name)):  # NaN passes every comparison
                raise ValueError(f"{name} must be a finite number, got {getattr(self, name)}")
        for name in ("timeout_s", "max_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("min_delay_s", "max_retries", "backoff_s", "max_backoff_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class FetchLogEntry:
    """One HTTP attempt (the fetch log has one row per attempt)."""

    url: str
    attempt: int
    status: int  # 0 when no response
    bytes: int
    content_type: str
    error: str
    elapsed_ms: float
    fetched_at: str
    redirect_to: str = ""
    depth: int = 0


@dataclass
class Hop:
    """The outcome of fetching one URL, after retries.

    ``kind``: ``ok`` (a response with its body; any status), ``redirect`` (``location``
    set), ``rejected`` (``reason``: content_type or too_large; body not kept) or
    ``failed`` (``reason``: the error class; no usable response).
    """

    url: str
    kind: str
    status: int = 0
    reason: str = ""
    detail: str = ""
    location: str = ""
    http_version: str = "HTTP/1.1"
    status_text: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    request_headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    truncated: bool = False
    content_type: str = ""
    fetched_at: str = ""
    log: list[FetchLogEntry] = field(default_factory=list)


def _now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _mime(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def retry_after_s(value: Optional[str], now: Optional[datetime] = None) -> Optional[float]:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    now = now or datetime.now(timezone.utc)
    return max(0.0, (when - now).total_seconds())


class _TooSlow(Exception):
    """The body did not arrive within the timeout."""


class HostClient:
    """Sequential requests to one host, at most one per ``delay_s`` seconds."""

    def __init__(
        self,
        policy: FetchPolicy,
        session: Optional[requests.Session] = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: Optional[random.Random] = None,
    ) -> None:
        self.policy = policy
        self.delay_s = policy.min_delay_s
        self._session = session or requests.Session()
        self._sleep = sleep
        self._clock = clock
        self._rng = rng or random.Random(0)
        self._last_request: Optional[float] = None

    def close(self) -> None:
        self._session.close()

    def _wait_turn(self, extra_s: float = 0.0) -> None:
        if self._last_request is not None:
            wait = self._last_request + max(self.delay_s, extra_s) - self._clock()
            if wait > 0:
                self._sleep(wait)
        self._last_request = self._clock()

    def _backoff(self, attempt: int, retry_after: Optional[float]) -> float:
        base = self.policy.backoff_s * (2 ** (attempt - 1))
        wait = base * (1.0 + 0.5 * self._rng.random())
        if retry_after is not None:
            wait = max(wait, retry_after)
        return min(wait, self.policy.max_backoff_s)

    def fetch(self, url: str, depth: int = 0, download: bool = True) -> Hop:
        """One hop to ``url`` with retries. ``download=False`` ignores the content-type
        allow-list (for robots.txt)."""
        hop = Hop(url=url, kind="failed")
        extra_wait = 0.0
        for attempt in range(1, self.policy.max_retries + 2):
            self._wait_turn(extra_wait)
            retry, retry_after = self._attempt(url, attempt, depth, download, hop)
            if not retry or attempt > self.policy.max_retries:
                return hop
            extra_wait = self._backoff(attempt, retry_after)
            _LOGGER.debug("retrying %s in %.2fs (%s)", url, extra_wait, hop.reason or hop.status)
        return hop

    def _attempt(self, url: str, attempt: int, depth: int, download: bool,
                 hop: Hop) -> tuple[bool, Optional[float]]:
        """Fills ``hop``; returns (retry?, Retry-After seconds)."""
        policy = self.policy
        started = self._clock()
        fetched_at = _now_iso()
        request_headers = {"User-Agent": policy.user_agent, "Accept": "text/html,*/*;q=0.5"}

        def log(status: int, size: int, ctype: str, error: str, redirect: str = "") -> None:
            hop.log.append(FetchLogEntry(
                url=url, attempt=attempt, status=status, bytes=size, content_type=ctype,
                error=error, elapsed_ms=round((self._clock() - started) * 1000, 1),
                fetched_at=fetched_at, redirect_to=redirect, depth=depth,
            ))

        try:
            resp = self._session.get(url, headers=request_headers, timeout=policy.timeout_s,
                                     stream=True, allow_redirects=False)
        except requests.Timeout as exc:
            hop.kind, hop.reason, hop.detail = "failed", "timeout", str(exc)
            log(0, 0, "", f"timeout: {exc}")
            return True, None
        except requests.ConnectionError as exc:
            hop.kind, hop.reason, hop.detail = "failed", "connection_error", str(exc)
            log(0, 0, "", f"connection_error: {exc}")
            return True, None
        except requests.RequestException as exc:
            hop.kind, hop.reason, hop.detail = "failed", "invalid_request", str(exc)
            log(0, 0, "", f"invalid_request: {exc}")
            return False, None
        with resp:
            return self._read_response(resp, url, started, download, request_headers, hop, log,
                                       fetched_at)

    def _read_response(self, resp: requests.Response, url: str, started: float, download: bool,
                       request_headers: dict[str, str], hop: Hop, log: Callable[..., None],
                       fetched_at: str) -> tuple[bool, Optional[float]]:
        policy = self.policy
        status = resp.status_code
        ctype = resp.headers.get("Content-Type", "")
        hop.status, hop.content_type, hop.fetched_at = status, _mime(ctype), fetched_at
        hop.status_text = resp.reason or ""
        hop.http_version = {10: "HTTP/1.0", 11: "HTTP/1.1"}.get(resp.raw.version or 11, "HTTP/1.1")
        hop.headers = list(resp.headers.items())
        hop.request_headers = list(request_headers.items())
        if status in REDIRECT_STATUSES and resp.headers.get("Location"):
            hop.kind, hop.location = "redirect", resp.headers["Location"]
            log(status, 0, ctype, "", hop.location)
            return False, None
        if status in RETRY_STATUSES:
            hop.kind, hop.reason = "ok", ""
            retry_after = retry_after_s(resp.headers.get("Retry-After"))
            body, truncated, error = self._read_body(resp, started)
            hop.body, hop.truncated = body, truncated
            log(status, len(body), ctype, error or f"HTTP {status}")
            return True, retry_after
        if download and 200 <= status < 300 and _mime(ctype) not in policy.allowed_content_types:
            hop.kind, hop.reason, hop.detail = "rejected", "content_type", _mime(ctype) or "none"
            log(status, 0, ctype, f"content_type {hop.detail} not allowed")
            return False, None
        declared = resp.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > policy.max_bytes:
            hop.kind, hop.reason = "rejected", "too_large"
            hop.detail = f"Content-Length {declared} > {policy.max_bytes}"
            log(status, 0, ctype, hop.detail)
            return False, None
        body, truncated, error = self._read_body(resp, started)
        if error:
            hop.kind, hop.reason, hop.detail = "failed", error.split(":", 1)[0], error
            log(status, len(body), ctype, error)
            return True, None
        if truncated:
            hop.kind, hop.reason = "rejected", "too_large"
            hop.detail = f"body over {policy.max_bytes} bytes"
            hop.body, hop.truncated = body, True
            log(status, len(body), ctype, hop.detail)
            return False, None
        hop.kind, hop.body, hop.truncated = "ok", body, False
        log(status, len(body), ctype, "")
        return False, None

    def _read_body(self, resp: requests.Response, started: float) -> tuple[bytes, bool, str]:
        """(body, cut at max_bytes?, error) — the whole body must arrive within timeout."""
        limit = self.policy.max_bytes
        deadline = started + self.policy.timeout_s
        chunks: list[bytes] = []
        size = 0
        try:
            for chunk in resp.iter_content(_CHUNK):
                chunks.append(chunk)
                size += len(chunk)
                if size > limit:
                    return b"".join(chunks)[:limit], True, ""
                if self._clock() > deadline:
                    raise _TooSlow(f"body not complete after {self.policy.timeout_s}s")
        except (requests.Timeout, _TooSlow) as exc:
            return b"".join(chunks), False, f"timeout: {exc}"
        except requests.RequestException as exc:
            return b"".join(chunks), False, f"read_error: {exc}"
        return b"".join(chunks), False, ""
