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
