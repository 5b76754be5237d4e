"""Links of an HTML page (pure): absolute, normalised, ``nofollow`` respected."""

from __future__ import annotations

from resiliparse.parse.html import HTMLTree

from transforms.crawl.urls import normalize_url
from transforms.extract.html import decode_html


def extract_links(payload: bytes, page_url: str, declared_charset: str = "") -> list[str]:
    """Unique normalised http(s) links of the page, in document order.

    ``<base href>`` is honoured; links with ``rel="nofollow"`` and every link of a page
    with ``<meta name="robots" content="nofollow">`` are skipped.
    """
    html, _ = decode_html(payload, declared_charset)
    tree = HTMLTree.parse(html)
    document = tree.document
    for meta in document.query_selector_all('meta[name="robots" i]'):
        if "nofollow" in (meta.getattr("content") or "").lower():
            return []
    base_tag = document.query_selector("base[href]")
    base = page_url
    if base_tag is not None:
        base = normalize_url(base_tag.getattr("href") or "", page_url) or page_url
    seen: set[str] = set()
    links: list[str] = []
    for anchor in document.query_selector_all("a[href], area[href]"):
        if "nofollow" in (anchor.getattr("rel") or "").lower():
            continue
        url = normalize_url(anchor.getattr("href") or "", base)
        if url and url not in seen:
            seen.add(url)
            links.append(url)
    return links
