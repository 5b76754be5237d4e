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


# Issue 18, item 6: version numbers, a:b:c:d and MAC addresses are not IPs (ipaddress
# decides); German and French phone formats are phones.
@pytest.mark.parametrize("text,expected,counts", [
    ("Update to version 1.2.3.4 now", "Update to version 1.2.3.4 now", (0, 0, 0)),
    ("nginx v1.2.3.4 and build 10.0.19041.1", "nginx v1.2.3.4 and build 10.0.19041.1", (0, 0, 0)),
    ("Firmware 2.1.0.7 released", "Firmware 2.1.0.7 released", (0, 0, 0)),
    ("ping 1.2.3.4 failed", "ping <IP> failed", (0, 0, 1)),
    ("ratios a:b:c:d and 1:2:3:4", "ratios a:b:c:d and 1:2:3:4", (0, 0, 0)),
    ("MAC 00:1A:2B:3C:4D:5E, eth0 de:ad:be:ef:00:01", "MAC 00:1A:2B:3C:4D:5E, eth0 de:ad:be:ef:00:01", (0, 0, 0)),
    ("host fe80::1ff:fe23:4567:890a up", "host <IP> up", (0, 0, 1)),
    ("Tel. +49 30 1234567 oder 030 12345678.", "Tel. <PHONE> oder <PHONE>.", (0, 2, 0)),
    ("Zentrale: +49 (0)221 9876543, Fax 0221-9876544", "Zentrale: <PHONE>, Fax <PHONE>", (0, 2, 0)),
    ("Appelez le +33 1 23 45 67 89 ou le 01 23 45 67 89.", "Appelez le <PHONE> ou le <PHONE>.", (0, 2, 0)),
    ("Portable : 06.12.34.56.78", "Portable : <PHONE>", (0, 1, 0)),
    ("Am 01.02.2024 um 10.30 Uhr, PLZ 10115 Berlin", "Am 01.02.2024 um 10.30 Uhr, PLZ 10115 Berlin", (0, 0, 0)),
    ("Chapitre 01 23 pages, 0,50 EUR", "Chapitre 01 23 pages, 0,50 EUR", (0, 0, 0)),
])
def test_redact_versions_macs_and_european_phones(text, expected, counts):
    out = redact(text)
    assert out.text == expected
    assert (out.emails, out.phones, out.ips) == counts


def test_ip_candidates_agree_with_ipaddress():
    import ipaddress

    for candidate in ("255.255.255.255", "256.1.1.1", "1.2.3.04", "0.0.0.0", "2001:db8::1",
                      "a:b:c:d", "00:1a:2b:3c:4d:5e", "1::2::3", "12345::1"):
        try:
            ipaddress.ip_address(candidate)
            valid = True
        except ValueError:
            valid = False
        assert (redact(f"addr {candidate} end").ips == 1) is valid, candidate


def test_redact_is_idempotent():
    once = redact("write to a.b@c.org or call 415-555-0100 from 8.8.8.8").text
    assert redact(once).text == once
