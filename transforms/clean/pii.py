"""PII redaction (pure): e-mail addresses, phone numbers and IP addresses.

Replaced by ``<EMAIL>``, ``<PHONE>``, ``<IP>``, counted per type. Patterns favour
precision: a phone number needs a separator structure typical of phone numbers (or a
leading +), so years, prices and ISBN-like digit runs survive; German (``030 12345678``,
``+49 30 1234567``, ``+49 (0)30 ...``) and French (``01 23 45 67 89``, ``+33 1 23 45 67
89``) formats are in the patterns. IP candidates (four dotted numbers, hex groups with
colons) must parse with ``ipaddress``, so ``a:b:c:d`` and MAC addresses (6 groups, no
``::``) are not IPs; a dotted quad right after a letter or a version word (``v1.2.3.4``,
``version 1.2.3.4``, ``build``, ``release``, ``firmware``) is a version number.

Speed: each pattern first finds candidates with a cheap expression that starts on a
literal or a digit, and the strict pattern only checks those candidates; the strict
patterns alone (with look-behinds tried at every position) cost ~0.6 ms per 3 KB text.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Callable, NamedTuple, Optional

_EMAIL = re.compile(r"[\w.+-]{1,64}@(?:[A-Za-z0-9-]{1,63}\.)+[A-Za-z]{2,24}\b")
_IPV4_SHAPE = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
# Starts on a digit so the regex engine can skip ahead quickly (a leading "+" or "(" is
# taken in by hand): 3x faster than an optional prefix in the pattern.
_DIGITS_CANDIDATE = re.compile(r"\d[\d ().-]{5,18}\d")
_IPV6_HINT = re.compile(r"[0-9A-Fa-f]{0,4}:[0-9A-Fa-f]{0,4}:")
_IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){3,7}[0-9A-Fa-f]{1,4}(?![\w:])"
                   r"|(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){1,6}:(?:[0-9A-Fa-f]{1,4}:?){1,6}(?![\w:])")
_PHONE = re.compile(r"(?:\+\d{1,3}[\s.-]?)?(?:\(\d{2,4}\)[\s.-]?|\d{2,4}[\s.-])\d{3,4}[\s.-]\d{3,4}"
                    r"|\+\d{7,14}"
                    # international with a short area code and groups: +33 1 23 45 67 89,
                    # +49 30 1234567, +49 (0)30 1234567
                    r"|\+\d{1,3}[\s.-]?(?:\(0\)[\s.-]?)?\d{1,5}(?:[\s.-]\d{2,8}){1,4}"
                    r"|0\d{2,4}[\s-]\d{5,8}"  # German national: 030 12345678, 0221-1234567
                    r"|0[1-9]([\s.-])\d\d(?:\1\d\d){3}")  # French national: 01 23 45 67 89
_VERSION_WORD = re.compile(r"(?i)\b(?:version|ver\.?|release|build|firmware|v)\s*$")


class Redaction(NamedTuple):
    text: str
    emails: int
    phones: int
    ips: int


def _word_char(text: str, index: int) -> bool:
    return 0 <= index < len(text) and (text[index].isalnum() or text[index] == "_")


def _replace(text: str, finder: re.Pattern[str], accept: Callable[[str, re.Match[str]], bool],
             token: str) -> tuple[str, int]:
    parts: list[str] = []
    pos = count = 0
    for match in finder.finditer(text):
        if accept(text, match):
            parts.append(text[pos:match.start()])
            parts.append(token)
            pos = match.end()
            count += 1
    if not count:
        return text, 0
    parts.append(text[pos:])
    return "".join(parts), count


def _is_ipv4(text: str, match: re.Match[str]) -> bool:
    before = text[match.start() - 1] if match.start() else ""
    after = text[match.end():match.end() + 2]
    if before.isalnum() or before == "." or after[:1].isdigit() or (after[:1] == "." and after[1:2].isdigit()):
        return False
    if _VERSION_WORD.search(text[max(0, match.start() - 12):match.start()]):
        return False
    try:  # octets <= 255, no leading zeros (ipaddress refuses them: octal ambiguity)
        ipaddress.IPv4Address(match.group())
    except ValueError:
        return False
    return True


def _is_ipv6(text: str, match: re.Match[str]) -> bool:
    try:
        ipaddress.IPv6Address(match.group())
    except ValueError:
        return False
    return True


def _is_phone(text: str, start: int, end: int) -> bool:
    if _word_char(text, start - 1) or text[start - 1:start] == "+" or _word_char(text, end):
        return False
    return _PHONE.fullmatch(text[start:end].strip()) is not None


def _is_email(text: str, match: re.Match[str]) -> bool:
    before = text[match.start() - 1:match.start()]
    return not (before and (before.isalnum() or before in "._+-"))


def _is_ipv4_or_phone(text: str, match: re.Match[str]) -> tuple[Optional[str], int]:
    """(replacement or None, start of the replaced span)."""
    if _IPV4_SHAPE.fullmatch(match.group()):
        return ("<IP>" if _is_ipv4(text, match) else None), match.start()
    start = match.start()
    if start and text[start - 1] in "+(":
        start -= 1
    return ("<PHONE>" if _is_phone(text, start, match.end()) else None), start


def redact(text: str) -> Redaction:
    """``text`` with e-mails, IPs and phone numbers replaced, and how many of each."""
    emails = ips = phones = 0
    if "@" in text:
        text, emails = _replace(text, _EMAIL, _is_email, "<EMAIL>")
    if text.count(":") >= 3 and _IPV6_HINT.search(text):
        text, ips = _replace(text, _IPV6, _is_ipv6, "<IP>")
    parts: list[str] = []
    pos = 0
    for match in _DIGITS_CANDIDATE.finditer(text):  # one scan for IPv4 and phone numbers
        token, start = _is_ipv4_or_phone(text, match)
        if token is not None and start >= pos:
            parts += [text[pos:start], token]
            pos = match.end()
            if token == "<IP>":
                ips += 1
            else:
                phones += 1
    if parts:
        text = "".join(parts) + text[pos:]
    return Redaction(text, emails, phones, ips)
