"""HTML bytes → main text: charset detection, boilerplate removal, title and language hint.

Pure functions, no Beam. Extractors (chosen by measurement, docs/BENCHMARKS.md):

- ``resiliparse``: lexbor DOM + resiliparse's main-content heuristics, then the text
  is trimmed to its core (first to last paragraph-like line), unless that core would
  hold under ``CORE_MIN_CHAR_SHARE`` of the text. Fastest.
- ``trafilatura``: trafilatura's ``fast`` extraction without comments. Most accurate
  on the scrapinghub pages and still faster than trafilatura's default.
- ``cascade``: ``resiliparse``, then trafilatura only for the pages whose trimmed text
  is still mostly short lines (6 of the 90 scrapinghub pages).
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from enum import Enum
from typing import Optional

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.encoding import bytes_to_str, detect_encoding
from resiliparse.parse.html import HTMLTree


# Nesting deeper than this fails the page (HtmlTooDeep) before extraction: resiliparse's
# main-content pass is quadratic in the depth (5,000 nested elements: 0.6 s, 20,000: 12 s,
# 100,000: hours). Browsers cap tree depth at 512 (Chromium's parser); real pages stay
# far below 2,048.
MAX_HTML_DEPTH = 2048
# Tags that never hold children or whose end tag is optional (the parser closes them by
# itself): they do not add to the depth estimate.
_FLAT_TAGS = ("area|base|br|col|embed|hr|img|input|link|meta|param|source|track|wbr|"
              "p|li|dt|dd|tr|td|th|option|optgroup|thead|tbody|tfoot|colgroup|caption|rb|rt|rp|"
              "!doctype|!--")
_TAG_EDGE = re.compile(r"<!--.*?(?:-->|$)|<(script|style)\b.*?(?:</\1\s*>|$)|"  # skipped whole
                       r"<(?P<end>/?)(?!(?:" + _FLAT_TAGS + r")[\s/>])[a-zA-Z]", re.I | re.S)


class HtmlTooDeep(ValueError):
    """The page nests elements deeper than the limit (a parser bomb or a broken page)."""


class Method(str, Enum):
    RESILIPARSE = "resiliparse"
    TRAFILATURA = "trafilatura"
    CASCADE = "cascade"


@dataclass(frozen=True)
class Extracted:
    """What extraction produced from one page."""

    text: str
    title: str
    lang_hint: str
    encoding: str
    method: str


_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([a-zA-Z0-9_\-:.]+)""", re.I)
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
_HTML_SNIFF = re.compile(rb"<\s*(!doctype\s+html|html|head|body|title|p|div|meta)\b", re.I)
_HTML_SNIFF_TEXT = re.compile(_HTML_SNIFF.pattern.decode(), re.I)
_BLANK_LINES = re.compile(r"\n\s*\n+")
_INVISIBLE_START = re.compile(r"<(script|style|svg|noscript|iframe|template)\b|<!--")
_SPACES = {ord(c): " " for c in "\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
           "\u2007\u2008\u2009\u200a\u202f\u205f\u3000"}
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Invisible format characters (Unicode category Cf) that carry nothing a reader sees:
# zero-width space, word joiner, zero-width no-break space (a BOM inside text), soft
# hyphen, bidi marks, embeddings and isolates, invisible math operators, interlinear
# annotation marks. CMSs emit ``<p>&#8203;</p>`` as spacers: a line holding only U+200B
# is not blank to ``str.strip`` and counted as a duplicated line (a real article failed
# gopher_rep_dup_line_frac at 0.321, 0.0 without them). Kept: U+200C/U+200D (ZWNJ/ZWJ
# spell Persian and Indic words and join emoji sequences; only trimmed at line edges),
# the visible prepended marks (U+0600-U+0605, U+06DD, U+070F) and tag characters
# (subdivision flag emoji).
INVISIBLE = frozenset(
    [0x00AD, 0x061C, 0x180E, 0x200B, 0x200E, 0x200F, 0xFEFF]
    + list(range(0x202A, 0x202F)) + list(range(0x2060, 0x2065)) + list(range(0x2066, 0x2070))
    + list(range(0xFFF9, 0xFFFC)))
_NORMALIZE = {**_SPACES, **dict.fromkeys(INVISIBLE)}
# Any character the first step of normalize_text changes: most texts hold none, and
# str.translate with a dict costs ~50 ns a character even then (a regex search ~2 ns).
_NEEDS_NORMALIZING = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f"
                                + "".join(re.escape(chr(c)) for c in sorted(_NORMALIZE)) + "]")
_JOINERS = "\u200c\u200d"

# A "paragraph line" has >= PARAGRAPH_MIN_WORDS words and ends like a sentence, or has
# >= PARAGRAPH_LONG_WORDS words. Lines before the first and after the last paragraph
# line (menus, bylines, teasers, share bars, cookie notices) are trimmed.
PARAGRAPH_MIN_WORDS = 10
PARAGRAPH_LONG_WORDS = 20
_SENTENCE_END = re.compile(r"[.!?\u2026\"\u201d\u00bb)\]:;\u3002\uff01\uff1f]\s*$")
# A line that ends in an ellipsis after a word is cut short. When a text holds
# TEASER_LIST_MIN such lines they are a list of teasers of linked stories ("... The...",
# then "Read More"), not paragraphs of this page: long lines that would otherwise extend
# the core to the end of the page (scrapinghub page 264dc3ae: F1 0.711, trafilatura
# 1.000). One such line alone is kept as a paragraph: a paywalled article's body ends
# that way (page 7ab16ade).
_TRUNCATED = re.compile(r"\w[,;:]?\s*(?:\.{3}|\u2026)\W{0,2}$")
TEASER_LIST_MIN = 2
# Cascade: fall back to trafilatura when the trimmed text still has at least this many
# short lines and they are at least this fraction of its lines.
CASCADE_MIN_SHORT_LINES = 5
CASCADE_SHORT_FRACTION = 0.6
# A core holding less than this share of the text's characters is not trusted: an article
# of short lines whose only paragraph-like line is a notice ("Comments are moderated ...")
# would be trimmed to that notice, which has no short lines left for the cascade rule to
# see (an unseen page: F1 0.045, trafilatura 0.747). The text stays whole and the cascade
# rule judges all of it. Measured share of the core: >= 0.71 on all 90 scrapinghub pages,
# below 0.5 on 1 of 42 HTML pages in ../shared/data/warc (0.42).
CORE_MIN_CHAR_SHARE = 0.5
# Posts a story quotes from social networks (the embed code's ``<blockquote class=...>``,
# shown as a card by the network's script): resiliparse's main-content pass drops these
# blockquotes by their class, although their text is the story's (quoted statements;
# trafilatura and the scrapinghub truth keep them: page 0dd13570 F1 0.762 -> 0.980,
# trafilatura 0.971). Their class is renamed before extraction; no page of the 90 got worse.
EMBEDDED_POSTS = ("twitter-tweet", "instagram-media", "tiktok-embed", "reddit-embed", "fb-post")


def _codec(name: str) -> Optional[str]:
    try:
        return codecs.lookup(name).name
    except (LookupError, TypeError):
        return None


def decode_html(payload: bytes, declared: str = "") -> tuple[str, str]:
    """(text, encoding) of an HTML body.

    Order: a byte-order mark; valid UTF-8 without NUL bytes (a declaration is often
    wrong, valid non-ASCII UTF-8 almost never happens by accident); the charset declared in the HTTP header
    or a ``<meta>`` tag if it decodes cleanly and the page's ASCII markup is still
    markup after decoding; else UTF-16 told by its NUL bytes, or the detected encoding
    (uchardet via resiliparse), decoding with replacement characters.
    """
    for bom, name in _BOMS:
        if payload.startswith(bom):
            return payload[len(bom):].decode(name, "replace"), name
    if b"\x00" not in payload[:4096]:  # NUL bytes are UTF-16/32 text, valid UTF-8 or not
        try:
            return payload.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            pass
    candidates = [declared]
    meta = _META_CHARSET.search(payload[:4096])
    if meta:
        candidates.append(meta.group(1).decode("ascii", "ignore"))
    markup = looks_like_html(payload)
    for candidate in candidates:
        codec = _codec(candidate) if candidate else None
        if codec and codec not in ("utf-8", "ascii"):
            try:
                text = payload.decode(codec)
            except (UnicodeDecodeError, LookupError):
                continue
            # A declaration must agree with the bytes: ASCII markup in the bytes must still
            # be markup after decoding (Latin-1 declared as UTF-16 decodes, into CJK).
            if not markup or _HTML_SNIFF_TEXT.search(text[:1024]):
                return text, codec
    detected = _utf16_by_nul_bytes(payload) or detect_encoding(payload)
    return bytes_to_str(payload, detected), detected


def _utf16_by_nul_bytes(payload: bytes) -> Optional[str]:
    """UTF-16 without a byte-order mark: markup and Latin text put a NUL in every other
    byte (odd positions for little-endian); uchardet does not see it."""
    head = payload[:4096]
    half = len(head) // 2
    if half < 16:
        return None
    even, odd = head[0::2].count(0), head[1::2].count(0)
    if odd > 0.3 * half and even < 0.05 * half:
        return "utf-16-le"
    if even > 0.3 * half and odd < 0.05 * half:
        return "utf-16-be"
    return None


def looks_like_html(payload: bytes) -> bool:
    """True if the first KiB contains an HTML tag (for records with no content type)."""
    return bool(_HTML_SNIFF.search(payload[:1024]))


def normalize_text(text: str) -> str:
    """Strip control characters, ``INVISIBLE`` format characters and lone surrogates,
    turn Unicode spaces (``&nbsp;`` and the like, which tokenizers and fastText do not
    split on) into plain spaces, trim lines (of spaces and of joiners, which join nothing
    there), collapse blank runs."""
    if _NEEDS_NORMALIZING.search(text):
        text = _CONTROL.sub("", text).translate(_NORMALIZE)
    text = text.encode("utf-8", "replace").decode("utf-8")
    lines = [line.strip().strip(_JOINERS).strip() for line in text.splitlines()]
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()


def keep_embedded_posts(tree: HTMLTree) -> int:
    """Renames the class of each embedded social post (a ``blockquote`` of a class in
    ``EMBEDDED_POSTS``) so the main-content pass keeps its text; the number renamed.
    The parsed tree's blockquotes are looked up by tag (~0.15 ms on a 180 KB page here;
    five substring scans of the page's HTML cost ~0.5 ms, a CSS selector query ~0.17)."""
    found = 0
    for element in tree.document.get_elements_by_tag_name("blockquote"):
        classes = element.class_list
        if any(name in classes for name in EMBEDDED_POSTS):
            element.setattr("class", "embedded-post")
            found += 1
    return found


def _resiliparse_text(tree: HTMLTree) -> str:
    return extract_plain_text(
        tree, main_content=True, alt_texts=False, links=False, list_bullets=False,
        form_fields=False, noscript=False, comments=False,
    )


def strip_invisible(html: str) -> str:
    """``html`` without comments and script/style/svg/noscript/iframe/template elements.

    Two thirds of the bytes of the scrapinghub pages are such blocks; removing them with
    a string scan (~1 ms per page) makes trafilatura's lxml parse and tree cleaning ~35%
    faster with identical output on that set.
    """
    lower = html.lower()
    parts: list[str] = []
    pos = 0
    for match in _INVISIBLE_START.finditer(lower):
        if match.start() < pos:
            continue
        tag = match.group(1)
        if tag is None:
            end = lower.find("-->", match.end())
            close = end + 3 if end != -1 else -1
        else:
            end = lower.find("</" + tag, match.end())
            close = lower.find(">", end) + 1 if end != -1 else -1
        if close <= 0:
            break
        parts.append(html[pos:match.start()])
        pos = close
    parts.append(html[pos:])
    return "".join(parts)


def _trafilatura_text(html: str) -> str:
    import trafilatura  # imported lazily: it is slow to import and only some methods use it

    return trafilatura.extract(
        strip_invisible(html), deduplicate=False, fast=True, include_comments=False,
        favor_precision=False,
    ) or ""


def is_paragraph(line: str) -> bool:
    words = len(line.split())
    return words >= PARAGRAPH_LONG_WORDS or (
        words >= PARAGRAPH_MIN_WORDS and bool(_SENTENCE_END.search(line)))


def trim_to_core(text: str) -> tuple[str, int, int]:
    """(text from the first to the last paragraph line, short lines kept, lines kept).

    Text without any paragraph line (lists, tables, code, link pages) is returned whole,
    with 0 short lines: there is no article inside navigation to rescue, so the cascade
    does not send it to trafilatura (measured: 11 of the 21 fallbacks on the Common
    Crawl pages in ../shared/data/warc, none of the 6 on the scrapinghub articles).
    A core under ``CORE_MIN_CHAR_SHARE`` of the characters is not a trim but a guess:
    the text is returned whole with all its short lines, for the cascade rule to judge.
    """
    lines = [line for line in text.split("\n") if line.strip()]
    flags = [is_paragraph(line) for line in lines]
    # the regex only for lines whose last characters hold an ellipsis (few of them)
    truncated = [("..." in line[-6:] or "\u2026" in line[-4:]) and bool(_TRUNCATED.search(line))
                 for line in lines]
    if sum(truncated) >= TEASER_LIST_MIN:
        flags = [flag and not cut for flag, cut in zip(flags, truncated)]
    if not any(flags):
        return text, 0, len(lines)
    first = flags.index(True)
    last = len(flags) - 1 - flags[::-1].index(True)
    core = lines[first:last + 1]
    if sum(map(len, core)) < CORE_MIN_CHAR_SHARE * sum(map(len, lines)):
        return text, flags.count(False), len(lines)
    return "\n".join(core), flags[first:last + 1].count(False), len(core)


def needs_fallback(short_lines: int, lines: int) -> bool:
    """The cascade rule: many short lines left mean navigation blocks inside the core."""
    return short_lines >= CASCADE_MIN_SHORT_LINES and short_lines >= CASCADE_SHORT_FRACTION * lines


def nesting_depth(html: str) -> int:
    """An estimate of the page's element depth from its tags (opening tags of elements
    that can hold children minus closing tags, counted from the lowest point, as parsers
    ignore stray end tags; comments, scripts and styles skipped). Linear in the page;
    exact for well-formed markup."""
    depth = low = peak = 0
    for match in _TAG_EDGE.finditer(html):
        end = match.group("end")
        if end is None:  # a comment, script or style block
            continue
        depth += -1 if end else 1
        if depth < low:
            low = depth
        elif depth - low > peak:
            peak = depth - low
    return peak


def check_depth(html: str, max_depth: int) -> None:
    """Raises ``HtmlTooDeep`` when the page nests deeper than ``max_depth``. Pages with
    fewer tags than that are not scanned (they cannot be deeper)."""
    if html.count("<") <= max_depth:
        return
    depth = nesting_depth(html)
    if depth > max_depth:
        raise HtmlTooDeep(f"elements nested {depth:,} deep (limit {max_depth:,}: extract.max_depth)")


def _lang_of(tree: HTMLTree) -> str:
    root = tree.document.query_selector("html")
    value = root.getattr("lang") if root is not None else None
    if not value:
        meta = tree.document.query_selector('meta[http-equiv="content-language" i]')
        value = meta.getattr("content") if meta is not None else None
    return (value or "").split(",")[0].strip()


def extract_html(payload: bytes, declared_charset: str = "",
                 method: Method = Method.RESILIPARSE, max_depth: int = MAX_HTML_DEPTH) -> Extracted:
    """Main text, title and language hint of an HTML page; ``HtmlTooDeep`` for pages
    nested deeper than ``max_depth``."""
    html, encoding = decode_html(payload, declared_charset)
    check_depth(html, max_depth)
    tree = HTMLTree.parse(html)
    title = normalize_text(tree.title or "").replace("\n", " ")
    lang = _lang_of(tree)
    if method == Method.TRAFILATURA:
        text, used = _trafilatura_text(html), Method.TRAFILATURA
    else:
        keep_embedded_posts(tree)
        text, short, lines = trim_to_core(_resiliparse_text(tree))
        used = Method.RESILIPARSE
        if method == Method.CASCADE and needs_fallback(short, lines):
            text, used = _trafilatura_text(html) or text, Method.TRAFILATURA
    return Extracted(text=normalize_text(text), title=title, lang_hint=lang,
                     encoding=encoding, method=used.value)
