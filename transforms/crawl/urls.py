"""URL normalisation and host keys (pure functions).

Two spellings of one page must become one URL, or the crawler fetches it twice:
scheme and host are lower-cased, default ports and fragments dropped, dot segments
resolved, percent-escapes upper-cased (and unreserved ones decoded), an empty path
becomes ``/``. Only http(s) URLs are crawlable.
"""

from __future__ import annotations

import posixpath
import re
from typing import Optional
from urllib.parse import urljoin, urlsplit, urlunsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}
_PERCENT = re.compile(r"%([0-9a-fA-F]{2})")
_UNRESERVED = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_MAX_URL_LENGTH = 2048


def _fix_escapes(part: str) -> str:
    def repl(match: re.Match[str]) -> str:
        char = chr(int(match.group(1), 16))
        return char if char in _UNRESERVED else "%" + match.group(1).upper()

    return _PERCENT.sub(repl, part)


def _clean_path(path: str) -> str:
    if not path:
        return "/"
    trailing = path.endswith("/")
    cleaned = posixpath.normpath(path)
    if cleaned.startswith("//"):
        cleaned = "/" + cleaned.lstrip("/")
    if trailing and cleaned != "/":
        cleaned += "/"
    return cleaned


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
    host = parts.hostname.lower().rstrip(".")
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host if port in (None, _DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    path = _clean_path(_fix_escapes(parts.path.replace(" ", "%20")))
    query = _fix_escapes(parts.query.replace(" ", "%20"))
    return urlunsplit((scheme, netloc, path, query, ""))


def host_key(url: str) -> str:
    """``scheme://host[:port]`` of a normalised URL: the unit of politeness."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def path_and_query(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")
