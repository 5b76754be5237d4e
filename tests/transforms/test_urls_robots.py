"""Tables for URL normalisation and RFC 9309 robots.txt rules."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from transforms.crawl.fetcher import retry_after_s
from transforms.crawl.robots import Robots, parse_robots, product_token, robots_for_status
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
    ("http://example.com/?q=1&b=2", None, "http://example.com/?b=2&q=1"),
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


# Issue 18, item 7: IDNA hosts, raw UTF-8 in paths and queries, query parameter order.
@pytest.mark.parametrize("url,expected", [
    ("http://Bücher.example/", "http://xn--bcher-kva.example/"),
    ("http://xn--bcher-kva.example/", "http://xn--bcher-kva.example/"),  # already ASCII: same
    ("https://例え.テスト/パス", "https://xn--r8jz45g.xn--zckzah/%E3%83%91%E3%82%B9"),
    ("http://faß.de/", "http://xn--fa-hia.de/"),  # IDNA 2008 (browsers), not 2003's fass.de
    ("https://de.wikipedia.org/wiki/Straße", "https://de.wikipedia.org/wiki/Stra%C3%9Fe"),
    ("https://de.wikipedia.org/wiki/Stra%c3%9fe", "https://de.wikipedia.org/wiki/Stra%C3%9Fe"),
    ("https://ja.example/検索?q=日本&lang=ja", "https://ja.example/%E6%A4%9C%E7%B4%A2?lang=ja&q=%E6%97%A5%E6%9C%AC"),
    ("http://x.org/p?b=2&a=1&a=0&&", "http://x.org/p?a=0&a=1&b=2"),
    ("http://x.org/p?a-b=1&a=2", "http://x.org/p?a=2&a-b=1"),  # by name, then value
    ("https://web.archive.org/web/2007/http://www.x.es/a.htm",
     "https://web.archive.org/web/2007/http://www.x.es/a.htm"),  # inner "//" kept
    ("http://x.org//a/b/..", "http://x.org/a/"),
    ("http://caf\ufffd.fr/", None),  # a mis-decoded host: no IDNA form
])
def test_normalize_international_urls(url, expected):
    assert normalize_url(url) == expected


def _warc_links() -> list[str]:
    from urllib.parse import urljoin

    from warcio.archiveiterator import ArchiveIterator

    from tests.conftest import shared
    from transforms.crawl.links import _LINK_TAG, _attrs
    from transforms.extract.html import decode_html, looks_like_html

    urls = []
    for name in ("resiliparse_warcfile.warc.gz", "dolma_sample-0000.warc.gz", "cc_whirlwind.warc.gz"):
        with open(shared("warc", name), "rb") as stream:
            for record in ArchiveIterator(stream):
                body = record.content_stream().read() if record.rec_type == "response" else b""
                if not looks_like_html(body):
                    continue
                page = record.rec_headers.get_header("WARC-Target-URI")
                for tag in _LINK_TAG.finditer(decode_html(body)[0]):
                    href = _attrs(tag.group(1)).get("href")
                    if href:
                        urls.append(urljoin(page, href.strip()))
    return urls


def _blank_values(url: str) -> str:
    """``name=`` and ``name`` as one spelling (w3lib writes the first)."""
    base, _, query = url.partition("?")
    pairs = [pair if "=" in pair else pair + "=" for pair in query.split("&")]
    return base + ("?" + "&".join(pairs) if query else "")


def test_normalize_url_agrees_with_w3lib_on_real_links():
    """Every link of the shared WARC pages (2,935) normalises as w3lib's canonicalize_url
    (Scrapy's fingerprint) does, up to the differences documented in urls.py's tests:
    w3lib keeps default ports, a host's trailing dot and leading "//", writes spaces in queries as "+" and a
    parameter without a value as ``name=`` (we keep ``name``: some servers read the raw
    query), and escapes reserved characters differently (``%27`` decoded, ``:`` in
    queries encoded)."""
    from urllib.parse import unquote_plus

    import w3lib.url as w3lib_url  # a test dependency (pyproject: test extras)
    links = [(u, normalize_url(u)) for u in _warc_links()]
    links = [(u, ours) for u, ours in links if ours is not None]
    assert len(links) > 2900
    differ = []
    for url, ours in links:
        theirs = w3lib_url.canonicalize_url(url)
        scheme, _, rest = theirs.partition("://")
        host, _, path = rest.partition("/")
        host = host.removesuffix(":80" if scheme == "http" else ":443").rstrip(".")
        path, _, query = path.partition("?")
        theirs = f"{scheme}://{host}/{path.lstrip('/')}" + (f"?{query}" if query else "")
        if _blank_values(unquote_plus(ours)) != _blank_values(unquote_plus(theirs)):
            differ.append((url, ours, theirs))
    assert differ == []


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


@pytest.mark.parametrize("status,page,private", [
    (199, False, False), (200, True, False), (299, True, False), (300, False, False),
    (399, False, False), (400, True, True), (499, True, True), (500, False, False)])
def test_robots_by_status_at_the_class_boundaries(status, page, private):
    """2xx: the rules; 4xx: allow all; anything else: disallow all (RFC 9309 2.3.1)."""
    robots = robots_for_status(status, "User-agent: *\nDisallow: /private\n", "x")
    assert (robots.allowed("/page"), robots.allowed("/private")) == (page, private)


@pytest.mark.parametrize("user_agent,token", [("MyBot/1.0 (+http://x/bot)", "mybot"), ("My Bot", "my"),
                                              ("  FooBot  ", "foobot")])
def test_product_token(user_agent, token):
    assert product_token(user_agent) == token


def test_robots_txt_itself_is_always_allowed_and_an_empty_path_is_the_root():
    robots = parse_robots("User-agent: *\nDisallow: /\n", "x")
    assert robots.allowed("/robots.txt") and not robots.allowed("")
    assert Robots.disallow_all().allowed("/robots.txt")  # a 5xx robots.txt may be fetched again


def test_robots_garbage_allows_all():
    assert parse_robots("<html>not robots</html>\x00\xff", "x").allowed("/x")
    assert Robots.allow_all().allowed("/x") and not Robots.disallow_all().allowed("/x")


# RFC 9309 behaviour, the cases of Google's robotstxt test suite (robots_test.cc):
# (robots.txt, user agent, path, allowed)
RFC_CASES = [
    ("user-agent: FooBot\ndisallow: /\n", "FooBot", "/x/y", False),
    ("foo: FooBot\nbar: /\n", "FooBot", "/x/y", True),  # unknown lines are ignored
    # rules outside a group are ignored; groups of the same agent are merged
    ("allow: /foo/bar/\n\nuser-agent: FooBot\ndisallow: /\nallow: /x/\nuser-agent: BarBot\n"
     "disallow: /\nallow: /y/\n\nuser-agent: FooBot\nallow: /z/\ndisallow: /\n", "FooBot", "/z/d", True),
    ("allow: /foo/bar/\n\nuser-agent: FooBot\ndisallow: /\nallow: /x/\n", "FooBot", "/foo/bar/", False),
    ("USER-AGENT: FooBot\nALLOW: /x/\nDISALLOW: /\n", "FooBot", "/x/y", True),  # names ignore case
    ("uSeR-aGeNt: FooBot\nAlLoW: /x/\ndIsAlLoW: /\n", "FooBot", "/a/b", False),
    ("User-Agent: FOO BAR\nAllow: /x/\nDisallow: /\n", "foo", "/x/y", True),  # agent ignores case
    ("user-agent: *\nallow: /\nuser-agent: FooBot\ndisallow: /\n", "FooBot", "/x/y", False),
    ("user-agent: *\nallow: /\nuser-agent: FooBot\ndisallow: /\n", "BarBot", "/x/y", True),
    ("user-agent: FooBot\nallow: /\nuser-agent: BarBot\ndisallow: /\n", "QuxBot", "/x/y", True),
    ("user-agent: FooBot\ndisallow: /X/\n", "FooBot", "/x/y", True),  # paths are case sensitive
    ("user-agent: FooBot\ndisallow: /x/page.html\nallow: /x/\n", "FooBot", "/x/page.html", False),
    ("user-agent: FooBot\nallow: /x/page.html\ndisallow: /x/\n", "FooBot", "/x/", False),
    ("user-agent: FooBot\ndisallow: /\nallow: /\n", "FooBot", "/x/page.html", True),  # tie: allow
    ("user-agent: FooBot\ndisallow: /x\nallow: /x/\n", "FooBot", "/x", False),
    ("user-agent: FooBot\nallow: /page\ndisallow: /*.html\n", "FooBot", "/page.html", False),
    ("user-agent: FooBot\nallow: /page\ndisallow: /*.html\n", "FooBot", "/page", True),
    ("user-agent: FooBot\nallow: /x/page.\ndisallow: /*.html\n", "FooBot", "/x/page.html", True),
    ("User-agent: *\nDisallow: /x/\nUser-agent: FooBot\nDisallow: /y/\n", "FooBot", "/x/page", True),
    ("User-agent: FooBot\nDisallow: /\nAllow: /foo/bar?qux=taz&baz=http://foo.bar?tar&par\n", "FooBot",
     "/foo/bar?qux=taz&baz=http://foo.bar?tar&par", True),
    ("User-agent: FooBot\nDisallow: /\nAllow: /foo/bar/\u30c4\n", "FooBot", "/foo/bar/%E3%83%84", True),
    ("User-agent: FooBot\nDisallow: /\nAllow: /foo/bar/%E3%83%84\n", "FooBot", "/foo/bar/%E3%83%84", True),
    ("User-agent: FooBot\nDisallow: /foo/bar$\n", "FooBot", "/foo/bar/baz", True),
    ("User-agent: FooBot\nDisallow: /foo/bar$\n", "FooBot", "/foo/bar", False),
    ("User-agent: FooBot\nDisallow: /fish*.php\n", "FooBot", "/fishheads/catfish.php?parameters", False),
    ("User-agent: FooBot\nDisallow: /fish*.php\n", "FooBot", "/Fish.PHP", True),
    ("User-agent: FooBot\nDisallow: /*.php$\n", "FooBot", "/filename.php?parameters", True),
    ("User-agent: FooBot\nDisallow: /fish*\n", "FooBot", "/fish.html", False),
    ("User-agent: FooBot\r\nDisallow: /a\r\n", "FooBot", "/a", False),  # CR LF line ends
    ("\ufeffUser-agent: FooBot\nDisallow: /a\n", "FooBot", "/a", False),  # a byte order mark
]


@pytest.mark.parametrize("text,agent,path,allowed", RFC_CASES)
def test_rfc9309_cases(text, agent, path, allowed):
    assert parse_robots(text, agent + "/1.0 (+https://example.com/bot)").allowed(path) is allowed


def test_wildcard_rules_match_in_linear_time():
    """One rule of many wildcards against long URLs that almost match: a backtracking
    matcher took 3.3 s per URL at 30 characters and over 100 s at 45; left-to-right
    matching takes microseconds. An alarm ends the test if it stalls."""
    import signal

    rule = "/" + "*a" * 10 + "*b"
    robots = parse_robots(f"User-agent: *\nDisallow: {rule}\n", "bot")

    def stalled(*_: object) -> None:
        raise TimeoutError("robots matching backtracks")

    previous = signal.signal(signal.SIGALRM, stalled)
    signal.alarm(30)
    try:
        for n in (30, 45, 200, 5000):
            assert robots.allowed("/" + "a" * n)  # no "b": every split of the a's is tried by a regex
            assert not robots.allowed("/" + "a" * n + "b")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_crawl_delay_must_be_positive_and_finite():
    assert parse_robots("User-agent: *\nCrawl-delay: nan\n", "x").crawl_delay is None
    assert parse_robots("User-agent: *\nCrawl-delay: inf\n", "x").crawl_delay is None
    assert parse_robots("User-agent: *\nCrawl-delay: -3\n", "x").crawl_delay is None
    assert parse_robots("User-agent: *\nCrawl-delay: 0\n", "x").crawl_delay is None
    assert parse_robots("User-agent: x\nCrawl-delay: 0.5\n", "X/2").crawl_delay == 0.5


def test_robots_size_cap():
    """Rules after the first 500 KiB (RFC 9309 2.5: at least that much is parsed) are not read."""
    filler = "# " + "x" * 1000 + "\n"
    text = "User-agent: *\n" + filler * 600 + "Disallow: /late\n"
    assert parse_robots(text, "x").allowed("/late")
    assert not parse_robots("User-agent: *\n" + filler * 100 + "Disallow: /late\n", "x").allowed("/late")


def test_retry_after():
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert retry_after_s("7") == 7.0
    assert retry_after_s("Thu, 01 Jan 2026 00:00:30 GMT", now) == 30.0
    assert retry_after_s("soon") is None and retry_after_s(None) is None
