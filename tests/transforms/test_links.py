"""Link extraction tables."""

from __future__ import annotations

import pytest

from transforms.crawl.links import extract_links

BASE = "http://site.test/dir/page.html"


@pytest.mark.parametrize("html,expected", [
    ('<a href="a.html">a</a><a href=\'/b\'>b</a><a href=c>c</a>',
     ["http://site.test/dir/a.html", "http://site.test/b", "http://site.test/dir/c"]),
    ('<A HREF="X.html">', ["http://site.test/dir/X.html"]),
    ('<a href="a.html#x"></a><a href="a.html">', ["http://site.test/dir/a.html"]),
    ('<a rel="nofollow" href="/no">x</a><a href="/yes">', ["http://site.test/yes"]),
    ('<meta name="robots" content="noindex, nofollow"><a href="/x">', []),
    ('<base href="http://other.test/root/"><a href="p">', ["http://other.test/root/p"]),
    ('<!-- <a href="/commented"> --><script>var s = "<a href=/js>";</script><a href="/real">',
     ["http://site.test/real"]),
    ('<a href="mailto:x@y"><a href="javascript:void(0)"><a href="tel:1">', []),
    ('<a href="/q?a=1&amp;b=2">', ["http://site.test/q?a=1&b=2"]),
    ('<area shape="rect" href="/map">', ["http://site.test/map"]),
    ('<a name="anchor">no href</a>', []),
    ('<a href="http://[broken">', []),
    ("", []),
])
def test_extract_links(html, expected):
    assert extract_links(html.encode(), BASE) == expected
