"""PII redaction (pure): e-mail addresses, phone numbers and IP addresses.

Replaced by ``<EMAIL>``, ``<PHONE>``, ``<IP>``, counted per type. Patterns favour
precision: a phone number needs a separator structure typical of phone numbers (or a
leading +), so years, prices and ISBN-like digit runs survive; an IPv4 address needs four
octets <= 255; IPv6 needs at least three colon groups with hex digits.

Speed: each pattern first finds candidates with a cheap expression that starts on a
literal or a digit, and the strict pattern only checks those candidates; the strict
patterns alone (with look-behinds tried at every position) cost ~0.6 ms per 3 KB text.
"""

from __future__ import annotations

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
                    r"|\+\d{7,14}")


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
    if before.isdigit() or before == "." or after[:1].isdigit() or (after[:1] == "." and after[1:2].isdigit()):
        return False
    return all(int(octet) <= 255 and (octet == "0" or not octet.startswith("0"))
               for octet in match.group().split("."))


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
        text, ips = _IPV6.subn("<IP>", text)
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
