"""A local HTTP site on 127.0.0.1 for crawler tests, with the pages a hostile web has.

Routes: robots.txt (Disallow /private/, Crawl-delay), a link-rich index, a redirect
chain, a redirect loop, an off-host redirect, 404, 500-then-200, a page slower than
any sane timeout, a PNG, a huge page, malformed HTML, a page whose declared charset is
wrong, a nofollow link. Every request is recorded with its time.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional

UTF8_TEXT = "Grüße aus Köln — naïve café, 東京, Ελληνικά. " * 8
PAGES = {
    "/": (
        "<html lang='en'><head><title>Home</title></head><body><h1>Home</h1>"
        "<p>" + "This is the home page of a small test site with several links. " * 5 + "</p>"
        "<a href='/a.html'>a</a> <a href='/b.html#frag'>b</a> <a href='/./a.html'>a again</a>"
        "<a href='/private/secret.html'>secret</a> <a href='/redirect1'>redir</a>"
        "<a href='/loop1'>loop</a> <a href='/missing.html'>404</a> <a href='/flaky.html'>flaky</a>"
        "<a href='/slow.html'>slow</a> <a href='/image.png'>img</a> <a href='/huge.html'>huge</a>"
        "<a href='/malformed.html'>bad html</a> <a href='/charset.html'>charset</a>"
        "<a href='/offsite'>offsite redirect</a> <a href='http://other.example/page'>other host</a>"
        "<a rel='nofollow' href='/nofollow.html'>nofollow</a> <a href='mailto:x@y.z'>mail</a>"
        "<a href='/deep/1.html'>deep</a>"
        "</body></html>"
    ),
    "/a.html": "<html><head><title>A</title></head><body><p>" + "Page A has real sentences about apples. " * 10 + "</p><a href='/'>home</a></body></html>",
    "/b.html": "<html><head><title>B</title></head><body><p>" + "Page B talks about bananas at length. " * 10 + "</p></body></html>",
    "/final.html": "<html><head><title>Final</title></head><body><p>" + "You reached the end of the redirect chain. " * 10 + "</p></body></html>",
    "/deep/1.html": "<html><body><p>depth one</p><a href='/deep/2.html'>2</a></body></html>",
    "/deep/2.html": "<html><body><p>depth two</p><a href='/deep/3.html'>3</a></body></html>",
    "/deep/3.html": "<html><body><p>depth three</p><a href='/deep/4.html'>4</a></body></html>",
    "/deep/4.html": "<html><body><p>depth four</p></body></html>",
    "/malformed.html": "<html><body><div><p>Unclosed paragraph with text that still counts <b>bold <i>italic</div></td></table><p>more words here and there",
    "/nofollow.html": "<html><body><p>should never be fetched</p></body></html>",
    "/private/secret.html": "<html><body><p>robots.txt forbids this page</p></body></html>",
}
ROBOTS = "User-agent: *\nDisallow: /private/\nCrawl-delay: 0.05\n\nUser-agent: badbot\nDisallow: /\n"


class Site:
    """Start with ``with Site() as site:``; ``site.url`` is ``http://127.0.0.1:PORT``."""

    def __init__(self, slow_s: float = 3.0, huge_bytes: int = 3_000_000,
                 robots: Optional[str] = ROBOTS) -> None:
        self.slow_s = slow_s
        self.huge_bytes = huge_bytes
        self.robots = robots
        self.requests: list[tuple[float, str]] = []
        self.flaky_calls = 0
        self._lock = threading.Lock()
        self._server: Optional[ThreadingHTTPServer] = None
        self.url = ""

    def __enter__(self) -> "Site":
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                with site._lock:
                    site.requests.append((time.monotonic(), self.path))
                site.route(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def paths(self) -> list[str]:
        return [p for _, p in self.requests]

    def route(self, h: BaseHTTPRequestHandler) -> None:
        path = h.path.split("#")[0]
        send: Callable[..., None] = _send
        if path == "/robots.txt":
            if self.robots is None:
                return send(h, 404, "text/plain", b"no robots")
            return send(h, 200, "text/plain", self.robots.encode())
        if path == "/redirect1":
            return send(h, 301, "text/html", b"", {"Location": "/redirect2"})
        if path == "/redirect2":
            return send(h, 302, "text/html", b"", {"Location": f"{self.url}/final.html"})
        if path in ("/loop1", "/loop2"):
            return send(h, 302, "text/html", b"", {"Location": "/loop2" if path == "/loop1" else "/loop1"})
        if path == "/offsite":
            return send(h, 301, "text/html", b"", {"Location": "http://elsewhere.example/landing"})
        if path == "/flaky.html":
            with self._lock:
                self.flaky_calls += 1
                calls = self.flaky_calls
            if calls == 1:
                return send(h, 500, "text/html", b"<html><body>try again</body></html>")
            return send(h, 200, "text/html", ("<html><body><p>" + "Flaky page finally answered. " * 10 + "</p></body></html>").encode())
        if path == "/slow.html":
            time.sleep(self.slow_s)
            return send(h, 200, "text/html", b"<html><body><p>too late</p></body></html>")
        if path == "/image.png":
            return send(h, 200, "image/png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 1000)
        if path == "/huge.html":
            body = b"<html><body><p>" + b"huge " * (self.huge_bytes // 5) + b"</p></body></html>"
            return send(h, 200, "text/html", body)
        if path == "/charset.html":
            body = f"<html><head><title>Umlaute</title></head><body><p>{UTF8_TEXT}</p></body></html>"
            return send(h, 200, "text/html; charset=iso-8859-1", body.encode("utf-8"))
        page = PAGES.get(path)
        if page is None:
            return send(h, 404, "text/html", b"<html><body>not found</body></html>")
        return send(h, 200, "text/html; charset=utf-8", page.encode("utf-8"))


def _send(h: BaseHTTPRequestHandler, status: int, ctype: str, body: bytes,
          headers: Optional[dict[str, str]] = None) -> None:
    try:
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            h.send_header(key, value)
        h.end_headers()
        h.wfile.write(body)
    except (BrokenPipeError, ConnectionResetError):
        pass
