"""Headless Debian Chromium for page tests (the run report, the review page).

``make test`` installs ``chromium`` and ``chromium-driver`` and sets
``TOKENFACTORY_REQUIRE_BROWSER=1``, so there a missing browser fails the test; a bare
``pytest`` on a machine without Chromium skips with the reason.

Chromium runs with the flags this closed network needs (no background networking, no
component updates, no sync) and a fresh profile per test; console messages are
collected so tests can assert that a page logged no errors.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Iterator

import pytest

CHROMIUM = os.environ.get("TOKENFACTORY_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("TOKENFACTORY_CHROMEDRIVER", "/usr/bin/chromedriver")
FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-extensions",
    "--window-size=1280,1600",
)


def _require() -> None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    if not missing:
        return
    message = (f"headless Chromium not installed ({', '.join(missing)} missing): "
               "`make browser` installs Debian's chromium and chromium-driver")
    if os.environ.get("TOKENFACTORY_REQUIRE_BROWSER") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def chromium() -> Iterator[object]:
    """A selenium WebDriver on headless Chromium; quits and removes its profile after."""
    _require()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="tf-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def console_errors(driver: object) -> list[dict]:
    """Console entries of level SEVERE (errors and uncaught exceptions) so far."""
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]  # type: ignore[attr-defined]


class PageSite:
    """A plain local web site on 127.0.0.1 (its own port, so its own origin): serves the
    given pages and records every request it receives (method, path, headers, body).
    Page tests use it as a foreign site, e.g. an attacker's page, or as a server
    without any protection, to show that a request really reached a server."""

    def __init__(self, pages: dict[str, str]) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        site = self
        self.pages = dict(pages)
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt: str, *args: object) -> None:
                pass

            def _record(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                site.requests.append((self.command, self.path, dict(self.headers), body))

            def do_GET(self) -> None:
                self._record()
                page = site.pages.get(self.path.split("?")[0])
                data = (page or "not found").encode("utf-8")
                self.send_response(200 if page is not None else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                self._record()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.origin = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
