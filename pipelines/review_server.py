"""The review page's HTTP server: only the reviewer's own browser may read or answer.

Stdlib ``http.server`` on 127.0.0.1, guarded as Jupyter guards its notebook server:

* **a session token**: random (``secrets.token_urlsafe``), printed at start inside the
  page URL (``/?token=...``). The page request that carries it gets it back as an
  ``HttpOnly; SameSite=Strict`` cookie; scripts may send it as ``X-Review-Token`` or
  ``Authorization: token ...`` instead. Without it every path but ``/favicon.ico`` is 403;
* **Host** must name the server's own address (``127.0.0.1``, ``localhost`` or ``[::1]``
  with its port): a foreign name is DNS rebinding, 403;
* **Origin**, when sent, must be the server's own origin, and **Sec-Fetch-Site**, when
  sent, ``same-origin`` or ``none``: a page on another site or port is refused (cookies
  are not port-scoped, so a page on another port of 127.0.0.1 would send the cookie);
* answers are ``POST /api/answer`` with ``Content-Type: application/json`` only (HTML
  forms cannot send it, and a cross-origin ``fetch`` of it needs a CORS preflight this
  server never grants), a ``Content-Length`` of at most ``MAX_BODY_BYTES``, and a body
  ``{"task_id": str, "labels": {set: value, ...}}``; anything else is a 4xx with a JSON
  ``{"error": ...}`` body, never a dropped connection;
* a connection silent for ``IDLE_TIMEOUT_S`` is closed, and so is one that has not sent
  its whole request within ``REQUEST_DEADLINE_S`` (a slow trickle of bytes);
* responses carry ``no-store``, ``nosniff``, ``no-referrer``, ``X-Frame-Options: DENY``
  and, for the page, a Content-Security-Policy without any external source.

Refused requests are logged (without the token) and kept in ``ReviewServer.refused``.
"""

from __future__ import annotations

import collections
import hmac
import json
import logging
import secrets
import socket
import threading
import time
from http import HTTPStatus
from http.cookies import CookieError, SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional
from urllib.parse import parse_qs, urlsplit

from pipelines.review_page import PAGE, AnswerError, ReviewSession
from storage.redact import redact_url

_LOGGER = logging.getLogger(__name__)

IDLE_TIMEOUT_S = 10.0  # a connection may stay silent this long
REQUEST_DEADLINE_S = 30.0  # the whole request (line, headers, body) must arrive within this
MAX_BODY_BYTES = 64 * 1024  # an answer is a few hundred bytes
# After refusing a body it did not read, the server still reads (and drops) up to this
# much for up to this long before closing: closing with unread data makes the kernel
# reset the connection, and the client would see that instead of the 4xx answer.
LINGER_BYTES = 16 * 1024 * 1024
LINGER_S = 2.0
PAGE_CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
            "connect-src 'self'; img-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
            "form-action 'none'")
_ANSWER_KEYS = {"task_id", "labels"}


class Refused(Exception):
    """A request that is answered with ``status`` and the message, and logged."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class ReviewServer(ThreadingHTTPServer):
    """The guarded server of one ``ReviewSession``; ``url`` is the page with the token."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], session: ReviewSession, page: str,
                 token: Optional[str] = None, idle_timeout_s: float = IDLE_TIMEOUT_S,
                 request_deadline_s: float = REQUEST_DEADLINE_S,
                 max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.session = session
        self.page = page.encode("utf-8")
        self.token = token or secrets.token_urlsafe(32)
        self.idle_timeout_s = idle_timeout_s
        self.request_deadline_s = request_deadline_s
        self.max_body_bytes = max_body_bytes
        self.refused: collections.deque[tuple[str, str, int, str]] = collections.deque(maxlen=1000)
        super().__init__(address, _Handler)
        host, port = self.server_address[:2]
        names = {"127.0.0.1", "localhost", "[::1]", f"[{host}]" if ":" in host else host}
        self.hosts = {f"{name}:{port}" for name in names}
        self.origins = {f"http://{h}" for h in self.hosts}
        self.cookie = f"tf_review_{port}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/?token={self.token}"

    def token_ok(self, candidate: Optional[str]) -> bool:
        if not candidate:
            return False
        return hmac.compare_digest(candidate.encode("utf-8", "replace"), self.token.encode())


def _json_error(message: str) -> bytes:
    return json.dumps({"error": message}, ensure_ascii=False).encode("utf-8")


class _Handler(BaseHTTPRequestHandler):
    server: ReviewServer

    def setup(self) -> None:
        self.timeout = self.server.idle_timeout_s
        super().setup()

    def _abort(self) -> None:
        """The request deadline passed: unblock the reading thread and close."""
        self._late = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def handle_one_request(self) -> None:
        self._late = False
        self._body_pending = False
        self._deadline = threading.Timer(self.server.request_deadline_s, self._abort)
        self._deadline.daemon = True
        self._deadline.start()
        try:
            super().handle_one_request()
        except OSError as exc:  # the deadline shut the socket, or the client went away
            self.close_connection = True
            _LOGGER.info("review page: connection from %s closed: %s", self.client_address[0],
                         "request deadline passed" if self._late else exc)
        finally:
            self._deadline.cancel()
        if self._late:
            self._note("-", "-", 408, "request deadline passed")
            self.close_connection = True

    def finish(self) -> None:
        super().finish()
        if getattr(self, "_body_pending", False):
            self._linger()

    def _linger(self) -> None:
        """Reads and drops what is left of a refused body, so the answer is not lost in a
        connection reset (bounded by ``LINGER_BYTES`` and ``LINGER_S``)."""
        try:
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(LINGER_S)
            deadline, drained = time.monotonic() + LINGER_S, 0
            while time.monotonic() < deadline and drained < LINGER_BYTES:
                chunk = self.connection.recv(1 << 16)
                if not chunk:
                    break
                drained += len(chunk)
        except OSError:
            pass

    def log_message(self, fmt: str, *args: Any) -> None:
        _LOGGER.debug("review page: %s", self._safe(fmt % args))

    def _safe(self, text: str) -> str:
        return redact_url(text.replace(self.server.token, "***"))

    def _note(self, method: str, path: str, status: int, reason: str) -> None:
        path = self._safe(urlsplit(path).path)
        self.server.refused.append((method, path, status, reason))
        _LOGGER.warning("review page: refused %s %s from %s (%d): %s", method, path,
                        self.client_address[0], status, reason)

    def _send(self, status: int, body: bytes, kind: str, extra: Optional[dict[str, str]] = None) -> None:
        self.send_response(status)
        headers = {"Content-Type": kind, "Content-Length": str(len(body)),
                   "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
                   "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY", **(extra or {})}
        if self.close_connection:
            headers["Connection"] = "close"
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, data: Any) -> None:
        self._send(status, json.dumps(data, ensure_ascii=False).encode("utf-8"), "application/json")

    def _refuse(self, exc: Refused) -> None:
        self._note(self.command, self.path, exc.status, str(exc))
        self._send(exc.status, _json_error(str(exc)), "application/json")

    # ------------------------------------------------------------ checks

    def _check_origin(self) -> None:
        host = (self.headers.get("Host") or "").strip().lower()
        if not host:
            raise Refused(HTTPStatus.BAD_REQUEST, "a Host header is required")
        if host not in self.server.hosts:
            raise Refused(HTTPStatus.FORBIDDEN, f"Host {host[:100]!r} is not this server")
        origin = self.headers.get("Origin")
        if origin is not None and origin.strip().lower() not in self.server.origins:
            raise Refused(HTTPStatus.FORBIDDEN, f"Origin {origin[:100]!r} is not this server")
        site = self.headers.get("Sec-Fetch-Site")
        if site is not None and site.strip().lower() not in ("same-origin", "none"):
            raise Refused(HTTPStatus.FORBIDDEN, f"a {site[:30]} request is not accepted")

    def _request_token(self) -> tuple[Optional[str], bool]:
        """(token the request carries, whether it came in the URL)."""
        query = parse_qs(urlsplit(self.path).query).get("token")
        if query:
            return query[0], True
        header = self.headers.get("X-Review-Token")
        if header:
            return header.strip(), False
        auth = self.headers.get("Authorization") or ""
        scheme, _, value = auth.partition(" ")
        if scheme.lower() in ("token", "bearer") and value.strip():
            return value.strip(), False
        try:
            morsel = SimpleCookie(self.headers.get("Cookie") or "").get(self.server.cookie)
        except CookieError:
            morsel = None
        return (morsel.value if morsel is not None else None), False

    def _authorise(self) -> bool:
        """Checks Host, Origin and the token; ``True`` if the token came in the URL."""
        self._check_origin()
        token, in_url = self._request_token()
        if not self.server.token_ok(token):
            raise Refused(HTTPStatus.FORBIDDEN, "missing or wrong session token: open the URL "
                          "the review server printed at start (…/?token=…)")
        return in_url

    def _answer_body(self) -> tuple[str, dict[str, str]]:
        kind = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if kind != "application/json":
            raise Refused(HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                          f"Content-Type must be application/json, got {kind[:60]!r}")
        if self.headers.get("Transfer-Encoding") or self.headers.get("Content-Length") is None:
            raise Refused(HTTPStatus.LENGTH_REQUIRED, "a Content-Length is required")
        try:
            length = int(self.headers["Content-Length"])
        except ValueError:
            length = -1
        if not 0 < length <= self.server.max_body_bytes:
            status = HTTPStatus.REQUEST_ENTITY_TOO_LARGE if length > 0 else HTTPStatus.BAD_REQUEST
            raise Refused(status, f"Content-Length must be 1 to {self.server.max_body_bytes} bytes")
        self._body_pending = False
        raw = self.rfile.read(length)
        self._deadline.cancel()  # the whole request is in
        if len(raw) != length:
            raise OSError("the body ended early")
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise Refused(HTTPStatus.BAD_REQUEST, f"the body is not JSON: {str(exc)[:200]}") from None
        return _parse_answer(body)

    # ------------------------------------------------------------ methods

    def do_GET(self) -> None:
        self._deadline.cancel()
        path = urlsplit(self.path).path
        if path == "/favicon.ico":
            self._send(HTTPStatus.NO_CONTENT, b"", "image/x-icon")
            return
        try:
            in_url = self._authorise()
            if path in ("/", "/index.html"):
                extra = {"Content-Security-Policy": PAGE_CSP}
                if in_url:
                    extra["Set-Cookie"] = (f"{self.server.cookie}={self.server.token}; HttpOnly; "
                                           "SameSite=Strict; Path=/")
                self._send(HTTPStatus.OK, self.server.page, "text/html; charset=utf-8", extra)
            elif path == "/api/state":
                self._json(HTTPStatus.OK, self.server.session.state())
            else:
                raise Refused(HTTPStatus.NOT_FOUND, "not found")
        except Refused as exc:
            self._refuse(exc)

    do_HEAD = do_GET

    def do_POST(self) -> None:
        self._body_pending = bool(self.headers.get("Content-Length") or self.headers.get("Transfer-Encoding"))
        try:
            self._authorise()
            if urlsplit(self.path).path != "/api/answer":
                raise Refused(HTTPStatus.NOT_FOUND, "not found")
            task_id, labels = self._answer_body()
            self._json(HTTPStatus.OK, self.server.session.answer(task_id, labels))
        except AnswerError as exc:
            self._refuse(Refused(HTTPStatus.BAD_REQUEST, str(exc)))
        except Refused as exc:
            self.close_connection = True
            self._refuse(exc)

    def _not_allowed(self) -> None:
        self._deadline.cancel()
        self.close_connection = True
        self._refuse(Refused(HTTPStatus.METHOD_NOT_ALLOWED, f"{self.command} is not accepted"))

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed


def _parse_answer(body: Any) -> tuple[str, dict[str, str]]:
    """(task id, labels) of an answer body, or ``Refused`` (400) saying what is wrong."""
    if not isinstance(body, dict):
        raise Refused(HTTPStatus.BAD_REQUEST, f"the body must be an object "
                      f"{{\"task_id\", \"labels\"}}, got {type(body).__name__}")
    unknown = sorted(set(body) - _ANSWER_KEYS)
    if unknown:
        raise Refused(HTTPStatus.BAD_REQUEST, f"unknown key {unknown[0][:100]!r} "
                      "(an answer has task_id and labels)")
    task_id, labels = body.get("task_id"), body.get("labels")
    if not isinstance(task_id, str):
        raise Refused(HTTPStatus.BAD_REQUEST, "task_id must be a string")
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise Refused(HTTPStatus.BAD_REQUEST, "labels must map label sets to values (strings)")
    return task_id, labels


def serve(session: ReviewSession, port: int = 8766, host: str = "127.0.0.1",
          token: str | None = None, **limits: float) -> ReviewServer:
    """A started review server (call ``shutdown()`` to stop; its ``url`` carries the
    session token); port 0 picks a free one. ``limits``: see ``ReviewServer``."""
    server = ReviewServer((host, port), session, PAGE, token=token, **limits)
    threading.Thread(target=server.serve_forever, daemon=True, name="review-page").start()
    return server
