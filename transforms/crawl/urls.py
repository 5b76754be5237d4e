"""URL normalisation and host keys (pure functions).

Two spellings of one page must become one URL, or the crawler fetches it twice:
scheme and host are lower-cased, internationalised host names go to their IDNA
(punycode, UTS #46) form, default ports and fragments dropped, dot segments resolved (empty segments kept),
raw non-ASCII characters (and spaces) in the path and query percent-encoded as UTF-8,
percent-escapes upper-cased (and unreserved ones decoded), query parameters sorted by
name then value (order kept among equal ones), an empty path becomes ``/``. Only http(s)
URLs are crawlable. Measured against w3lib's ``canonicalize_url`` (which does the same,
the Scrapy request fingerprint) in tests/transforms/test_urls_robots.py.
"""

from __future__ import annotations

import re
from typing import Optional
from urllib.parse import quote, urljoin, urlsplit, urlunsplit

import idna  # IDNA 2008 + UTS #46 (a dependency of requests, itself one of apache-beam)

_DEFAULT_PORTS = {"http": 80, "https": 443}
_PERCENT = re.compile(r"%([0-9a-fA-F]{2})")
_UNRESERVED = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_MAX_URL_LENGTH = 2048


def _fix_escapes(part: str) -> str:
    def repl(match: re.Match[str]) -> str:
        char = chr(int(match.group(1), 16))
        return char if char in _UNRESERVED else "%" + match.group(1).upper()

    return _PERCENT.sub(repl, part)


# Characters left as they are when percent-encoding a path or query: ASCII that RFC 3986
# allows there, and "%" (existing escapes are fixed by ``_fix_escapes``).
_PATH_SAFE = "/:@!$&'()*+,;=-._~%"
_QUERY_SAFE = _PATH_SAFE + "?"


_UNSAFE = re.compile(r"[^A-Za-z0-9/:@!$&'()*+,;=\-._~%?]")


def _encode(part: str, safe: str) -> str:
    """Non-ASCII (as UTF-8), spaces and other characters URLs may not hold
    (``"<>{}|^`` and the like) percent-encoded."""
    if not _UNSAFE.search(part):
        return part
    return quote(part, safe=safe, errors="surrogatepass")


def _sort_query(query: str) -> str:
    """Parameters sorted by (name, value) as w3lib does, empty ones dropped."""
    pairs = [pair for pair in query.split("&") if pair]
    return "&".join(sorted(pairs, key=lambda pair: pair.partition("=")[::2]))


def _ascii_host(host: str) -> Optional[str]:
    """The host in ASCII (IDNA) form, or None when it is not a valid host name."""
    if host.isascii():
        return host
    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError):
        try:
            return host.encode("idna").decode("ascii")  # IDNA 2003, as browsers once did
        except UnicodeError:
            return None


def _clean_path(path: str) -> str:
    """Dot segments resolved (RFC 3986 section 5.2.4), leading slashes collapsed to one;
    empty segments inside the path are kept: ``/web/2007/http://x.org/`` (the Wayback
    Machine's form) is not ``/web/2007/http:/x.org/``."""
    if not path:
        return "/"
    segments = path.lstrip("/").split("/")
    out: list[str] = []
    for segment in segments:
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
    if segments[-1] in (".", ".."):
        out.append("")  # "/a/b/.." is the directory "/a/"
    return "/" + "/".join(out)


def normalize_url(url: str, base: Optional[str] = None) -> Optional[str]:
    """The canonical form of ``url`` (resolved against ``base``), or None if it is not
    a crawlable http(s) URL."""
    url = url.strip()
    if not url or len(url) > _MAX_URL_LENGTH:
        return None
    if base is not None:
        try:
            url = urljoin(base, url)
        except ValueError:
            return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    host = _ascii_host(parts.hostname.lower().rstrip("."))
    if not host:
        return None
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host if port in (None, _DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    # "\" is "/" in http(s) paths, as browsers read it (WHATWG URL standard)
    path = _clean_path(_fix_escapes(_encode(parts.path.replace("\\", "/"), _PATH_SAFE)))
    query = _sort_query(_fix_escapes(_encode(parts.query, _QUERY_SAFE)))
    return urlunsplit((scheme, netloc, path, query, ""))


def host_key(url: str) -> str:
    """``scheme://host[:port]`` of a normalised URL: the unit of politeness."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def path_and_query(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")
