"""Tables for URL normalisation and RFC 9309 robots.txt rules."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from transforms.crawl.fetcher import retry_after_s
from transforms.crawl.robots import Robots, parse_robots, robots_for_status
from transforms.crawl.urls import host_key, normalize_url


@pytest.mark.parametrize("url,base,expected", [
    ("HTTP://Example.COM", None, "http://example.com/"),
    ("http://example.com:80/a", None, "http://example.com/a"),
    ("https://example.com:443/a", None, "https://example.com/a"),
    ("http://example.com:8080/a", None, "http://example.com:8080/a"),
    ("http://example.com/a/./b/../c", None, "http://example.com/a/c"),
    ("http://example.com/a/b/", None, "http://example.com/a/b/"),
    ("http://example.com/a#frag", None, "http://example.com/a"),
    ("http://example.com/%7euser/%2f", None, "http://example.com/~user/%2F"),
    ("http://example.com/a b", None, "http://example.com/a%20b"),
    ("http://example.com/?q=1&b=2", None, "http://example.com/?q=1&b=2"),
    ("../x.html", "http://example.com/a/b/c.html", "http://example.com/a/x.html"),
    ("//cdn.example.com/x", "https://example.com/", "https://cdn.example.com/x"),
    ("#top", "http://example.com/page", "http://example.com/page"),
    ("mailto:a@b.c", None, None),
    ("javascript:alert(1)", None, None),
    ("ftp://example.com/x", None, None),
    ("http://", None, None),
    ("http://example.com:99999/", None, None),
    ("", None, None),
    ("http://example.com/" + "a" * 3000, None, None),
    ("http://[::1]:8080/x", None, "http://[::1]:8080/x"),
])
def test_normalize_url(url, base, expected):
    assert normalize_url(url, base) == expected


def test_host_key():
    assert host_key("http://example.com:8080/a?b") == "http://example.com:8080"


ROBOTS = """
# comment
User-agent: *
Disallow: /private/
Allow: /private/open/
Disallow: /*.pdf$
Disallow: /search?
Crawl-delay: 2.5

User-agent: NoisyBot
User-agent: otherbot
Disallow: /
Sitemap: https://example.com/sitemap.xml
"""


@pytest.mark.parametrize("agent,path,allowed", [
    ("mybot/1.0", "/", True),
    ("mybot/1.0", "/private/x", False),
    ("mybot/1.0", "/private/open/x", True),   # longest match wins (stdlib gets this wrong)
    ("mybot/1.0", "/doc.pdf", False),
    ("mybot/1.0", "/doc.pdf?x=1", True),      # $ anchors the end
    ("mybot/1.0", "/search?q=1", False),
    ("mybot/1.0", "/searching", True),
    ("noisybot/3 (+http://x)", "/", False),
    ("OtherBot", "/anything", False),
    ("mybot/1.0", "/robots.txt", True),
])
def test_robots_rules(agent, path, allowed):
    assert parse_robots(ROBOTS, agent).allowed(path) is allowed


def test_robots_crawl_delay_and_sitemaps():
    robots = parse_robots(ROBOTS, "mybot")
    assert robots.crawl_delay == 2.5
    assert robots.sitemaps == ("https://example.com/sitemap.xml",)


def test_allow_wins_a_tie_and_empty_disallow_allows():
    assert parse_robots("User-agent: *\nDisallow: /a\nAllow: /a\n", "x").allowed("/a")
    assert parse_robots("User-agent: *\nDisallow:\n", "x").allowed("/anything")


@pytest.mark.parametrize("status,allowed", [(200, False), (404, True), (403, True), (500, False), (0, False)])
def test_robots_by_status(status, allowed):
    assert robots_for_status(status, "User-agent: *\nDisallow: /\n", "x").allowed("/page") is allowed


def test_robots_garbage_allows_all():
    assert parse_robots("<html>not robots</html>\x00\xff", "x").allowed("/x")
    assert Robots.allow_all().allowed("/x") and not Robots.disallow_all().allowed("/x")


def test_retry_after():
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert retry_after_s("7") == 7.0
    assert retry_after_s("Thu, 01 Jan 2026 00:00:30 GMT", now) == 30.0
    assert retry_after_s("soon") is None and retry_after_s(None) is None
