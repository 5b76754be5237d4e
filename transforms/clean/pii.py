"""PII redaction (pure): e-mail addresses, phone numbers and IP addresses.

Replaced by ``<EMAIL>``, ``<PHONE>``, ``<IP>`` (the placeholders DCLM and FineWeb use in
spirit), counted per type. Patterns favour precision: a phone number needs a separator
structure typical of phone numbers (or a leading +), so years, prices and ISBN-like
digit runs survive; an IPv4 address needs four octets <= 255; IPv6 needs at least three
colon groups with hex digits.
"""

from __future__ import annotations

import re
from typing import NamedTuple

EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]{1,64}@(?:[A-Za-z0-9-]{1,63}\.)+[A-Za-z]{2,24}\b")
_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
IPV4 = re.compile(rf"(?<![\d.]){_OCTET}(?:\.{_OCTET}){{3}}(?![\d.]*\d)")
IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){3,7}[0-9A-Fa-f]{1,4}(?![\w:])"
                  r"|(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){1,6}:(?:[0-9A-Fa-f]{1,4}:?){1,6}(?![\w:])")
PHONE = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}[\s.-]?)?(?:\(\d{2,4}\)[\s.-]?|\d{2,4}[\s.-])\d{3,4}[\s.-]\d{3,4}(?!\w)"
    r"|(?<![\w+])\+\d{7,14}(?!\w)"
)


class Redaction(NamedTuple):
    text: str
    emails: int
    phones: int
    ips: int


def redact(text: str) -> Redaction:
    """``text`` with e-mails, IPs and phone numbers replaced, and how many of each."""
    if "@" in text:
        text, emails = EMAIL.subn("<EMAIL>", text)
    else:
        emails = 0
    text, ip4 = IPV4.subn("<IP>", text)
    text, ip6 = IPV6.subn("<IP>", text) if ":" in text else (text, 0)
    text, phones = PHONE.subn("<PHONE>", text)
    return Redaction(text, emails, phones, ip4 + ip6)
