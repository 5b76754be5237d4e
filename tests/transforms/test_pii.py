"""PII redaction tables."""

from __future__ import annotations

import pytest

from transforms.clean.pii import redact


@pytest.mark.parametrize("text,expected,counts", [
    ("mail me at john.doe+x@example.co.uk now", "mail me at <EMAIL> now", (1, 0, 0)),
    ("a@b and user@localhost", "a@b and user@localhost", (0, 0, 0)),
    ("call +1 415-555-0100 or (020) 7946 0958.", "call <PHONE> or <PHONE>.", (0, 2, 0)),
    ("+442079460958", "<PHONE>", (0, 1, 0)),
    ("server 192.168.1.254 and 10.0.0.1", "server <IP> and <IP>", (0, 0, 2)),
    ("version 1.2.3.4.5 and 999.1.1.1 and 01.2.3.4", "version 1.2.3.4.5 and 999.1.1.1 and 01.2.3.4", (0, 0, 0)),
    ("ipv6 2001:db8:85a3::8a2e:370:7334 here", "ipv6 <IP> here", (0, 0, 1)),
    ("In 1999 it cost 1,200 dollars", "In 1999 it cost 1,200 dollars", (0, 0, 0)),
    ("ISBN 978-3-16-148410-0", "ISBN 978-3-16-148410-0", (0, 0, 0)),
    ("time 12:30:45, ratio 3:4", "time 12:30:45, ratio 3:4", (0, 0, 0)),
    ("order 20231105", "order 20231105", (0, 0, 0)),
    ("", "", (0, 0, 0)),
    ("😀 <b>@</b> \x00", "😀 <b>@</b> \x00", (0, 0, 0)),
])
def test_redact(text, expected, counts):
    out = redact(text)
    assert out.text == expected
    assert (out.emails, out.phones, out.ips) == counts


def test_redact_is_idempotent():
    once = redact("write to a.b@c.org or call 415-555-0100 from 8.8.8.8").text
    assert redact(once).text == once
