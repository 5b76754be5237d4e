"""The crawler against a real local HTTP server with hostile pages."""

from __future__ import annotations

import glob
import io
import os

import apache_beam as beam
import pytest
import requests
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from warcio.archiveiterator import ArchiveIterator

from tests.httpsite import UTF8_TEXT, Site
from transforms.crawl.crawler import Crawl, CrawlConfig, HostCrawl, Outcome
from transforms.crawl.fetcher import FetchLogEntry, FetchPolicy, Hop, HostClient
from transforms.extract.html import extract_html

POLICY = FetchPolicy(user_agent="testbot/1.0", timeout_s=1.0, min_delay_s=0.0, max_retries=1,
                     backoff_s=0.05, max_bytes=1_000_000)


def crawl_site(site: Site, config: CrawlConfig, seeds: list[str]) -> list[object]:
    client = HostClient(config.policy)
    try:
        return list(HostCrawl(site.url, config, client).run(seeds))
    finally:
        client.close()


@pytest.fixture(scope="module")
def crawled() -> tuple[Site, list[object]]:
    with Site(slow_s=2.5) as site:
        config = CrawlConfig(policy=POLICY, max_depth=2, max_pages_per_host=100)
        events = crawl_site(site, config, [site.url + "/"])
    return site, events


def outcomes(events: list[object], base: str) -> dict[str, tuple[str, str]]:
    return {e.url.replace(base, ""): (e.kind, e.reason) for e in events if isinstance(e, Outcome)}


def test_every_url_ends_in_exactly_one_outcome(crawled: tuple[Site, list[object]]) -> None:
    site, events = crawled
    got = outcomes(events, site.url)
    assert got == {
        "/": ("kept", ""),
        "/a.html": ("kept", ""),
        "/b.html": ("kept", ""),
        "/private/secret.html": ("rejected", "robots"),
        "/redirect1": ("kept", ""),
        "/loop1": ("failed", "redirect_loop"),
        "/missing.html": ("rejected", "http_status"),
        "/flaky.html": ("kept", ""),
        "/slow.html": ("failed", "timeout"),
        "/image.png": ("rejected", "content_type"),
        "/huge.html": ("rejected", "too_large"),
        "/malformed.html": ("kept", ""),
        "/charset.html": ("kept", ""),
        "/offsite": ("rejected", "offsite_redirect"),
        "/deep/1.html": ("kept", ""),
        "/deep/2.html": ("kept", ""),
    }


def test_robots_nofollow_depth_and_dedup_are_respected(crawled: tuple[Site, list[object]]) -> None:
    site, _ = crawled
    paths = site.paths()
    assert "/private/secret.html" not in paths
    assert "/nofollow.html" not in paths
    assert "/deep/3.html" not in paths  # max_depth=2
    assert paths.count("/a.html") == 1  # "/./a.html" is the same URL
    assert paths.count("/robots.txt") == 1


class _FakeTime:
    """The client's clock and sleep: time moves only when the client sleeps or a request
    is sent, so the spacing measured is what the crawler decided, not the machine's load."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class _RecordingSession(requests.Session):
    """A real session that notes the (fake) time each request is sent; a request takes
    10 ms of fake time."""

    def __init__(self, fake: _FakeTime) -> None:
        super().__init__()
        self.fake, self.sent = fake, []

    def get(self, url: str, **kwargs: object) -> requests.Response:  # type: ignore[override]
        self.sent.append((self.fake.now, url))
        self.fake.now += 0.01
        return super().get(url, **kwargs)


@pytest.mark.parametrize("min_delay_s, expected_gap", [(0.0, 0.05), (0.2, 0.2)])
def test_politeness_delay_from_crawl_delay(min_delay_s: float, expected_gap: float) -> None:
    """Requests to a host start max(min_delay_s, Crawl-delay: 0.05) apart, measured on the
    client's own clock (the server's arrival times vary with the machine's load)."""
    fake = _FakeTime()
    policy = FetchPolicy(user_agent="testbot/1.0", timeout_s=5.0, min_delay_s=min_delay_s, max_retries=0)
    with Site(slow_s=0.2) as site:
        session = _RecordingSession(fake)
        client = HostClient(policy, session=session, sleep=fake.sleep, clock=fake.clock)
        try:
            config = CrawlConfig(policy=policy, max_depth=1, max_pages_per_host=6)
            list(HostCrawl(site.url, config, client).run([site.url + "/"]))
        finally:
            client.close()
    times = [t for t, _ in session.sent]
    assert session.sent[0][1].endswith("/robots.txt") and len(times) >= 5
    gaps = [round(b - a, 9) for a, b in zip(times, times[1:])]
    assert gaps == [expected_gap] * len(gaps)  # never sooner, and no needless waiting
    assert all(s > 0 for s in fake.sleeps)


def test_retries_and_fetch_log(crawled: tuple[Site, list[object]]) -> None:
    site, events = crawled
    log = [e for e in events if isinstance(e, FetchLogEntry)]
    flaky = [e for e in log if e.url.endswith("/flaky.html")]
    assert [(e.attempt, e.status) for e in flaky] == [(1, 500), (2, 200)]
    slow = [e for e in log if e.url.endswith("/slow.html")]
    assert len(slow) == 2 and all(e.status == 0 and e.error.startswith("timeout") for e in slow)
    redirects = [e for e in log if e.redirect_to]
    assert {e.redirect_to for e in redirects} >= {"/redirect2", f"{site.url}/final.html"}


def test_frontier_has_offhost_links_and_redirects(crawled: tuple[Site, list[object]]) -> None:
    _, events = crawled
    frontier = {e[1] for e in events if isinstance(e, tuple) and e[0] == "frontier"}
    assert frontier == {"http://other.example/page", "http://elsewhere.example/landing"}


def test_stored_hops_keep_bodies_and_charset(crawled: tuple[Site, list[object]]) -> None:
    _, events = crawled
    hops = {h.url.rsplit("/", 1)[-1]: h for h in events if isinstance(h, Hop)}
    charset = hops["charset.html"]
    assert extract_html(charset.body, "iso-8859-1").text.startswith(UTF8_TEXT.strip()[:30])
    assert "huge.html" not in hops  # rejected from Content-Length, never downloaded
    assert "image.png" not in hops  # disallowed content type: body not downloaded


def test_user_agent_group_disallows_everything() -> None:
    with Site() as site:
        policy = FetchPolicy(user_agent="BadBot/2.0", timeout_s=1.0, min_delay_s=0.0, max_retries=0)
        events = crawl_site(site, CrawlConfig(policy=policy), [site.url + "/", site.url + "/a.html"])
        assert site.paths() == ["/robots.txt"]
    assert {e.reason for e in events if isinstance(e, Outcome)} == {"robots"}


def test_page_budget_sends_leftovers_to_frontier() -> None:
    with Site() as site:
        events = crawl_site(site, CrawlConfig(policy=POLICY, max_pages_per_host=2), [site.url + "/"])
    kinds = [e for e in events if isinstance(e, Outcome)]
    assert len(kinds) == 2
    frontier = {e[1] for e in events if isinstance(e, tuple)}
    assert f"{site.url}/malformed.html" in frontier


def test_truncated_body_over_limit_without_content_length() -> None:
    """A body with no Content-Length is cut at max_bytes while streaming."""
    with Site(huge_bytes=200_000) as site:
        policy = FetchPolicy(user_agent="testbot", timeout_s=2.0, min_delay_s=0.0, max_bytes=50_000)
        client = HostClient(policy)
        hop = client.fetch(site.url + "/huge.html")
        client.close()
    assert hop.kind == "rejected" and hop.reason == "too_large"


def test_crawl_transform_writes_warc_log_rejects_and_frontier(tmp_path, beam_options) -> None:
    warc_dir = str(tmp_path / "warc")
    with Site(slow_s=1.5) as site:
        config = CrawlConfig(seeds=(), policy=POLICY, max_depth=1)
        seeds = [site.url + "/", site.url + "/a.html", "not a url", "ftp://example.com/x"]
        with TestPipeline(options=beam_options) as p:
            out = p | beam.Create(seeds) | Crawl(config, warc_dir)
            assert_that(out.rejected | "Reasons" >> beam.Map(lambda r: r.reason)
                        | beam.combiners.Count.PerElement(),
                        equal_to([("bad_url", 2), ("robots", 1), ("http_status", 1),
                                  ("content_type", 1), ("too_large", 1), ("offsite_redirect", 1)]),
                        label="rejected")
            assert_that(out.failed | "Errors" >> beam.Map(lambda f: f.error_type),
                        equal_to(["redirect_loop", "timeout"]), label="failed")
            assert_that(out.frontier, equal_to(["http://other.example/page",
                                                 "http://elsewhere.example/landing"]), label="frontier")
    files = glob.glob(os.path.join(warc_dir, "*.warc.gz"))
    assert len(files) == 1 and not glob.glob(os.path.join(warc_dir, ".tmp-*"))
    with open(files[0], "rb") as fh:
        records = [(r.rec_type, r.rec_headers.get_header("WARC-Target-URI"),
                    r.http_headers.get_statuscode() if r.http_headers else None)
                   for r in ArchiveIterator(fh)]
    responses = {url.replace(site.url, ""): status for kind, url, status in records if kind == "response"}
    assert responses["/"] == "200" and responses["/missing.html"] == "404"
    assert responses["/redirect1"] == "301" and responses["/final.html"] == "200"
    assert sum(kind == "request" for kind, _, _ in records) == len(responses)
