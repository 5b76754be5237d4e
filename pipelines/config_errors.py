"""The config's error type and the bounded, credential-free quoting of values in it.

A config value can be huge (a list of a million seeds, or a few hundred bytes of YAML
aliases standing for billions of values) and can carry credentials
(``s3://KEY:SECRET@bucket``): a message quotes at most ``MAX_QUOTE_CHARS`` of a value,
is cut at ``MAX_MESSAGE_CHARS`` and has the userinfo of every URL masked.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import reprlib
from typing import Any, Callable, Iterable

from storage.redact import redact_url

_LOGGER = logging.getLogger(__name__)

MAX_QUOTE_CHARS = 200  # of a value quoted in an error
MAX_MESSAGE_CHARS = 4000  # of a whole error message


class ConfigError(ValueError):
    """A configuration problem, with the file and key it concerns. The message has URL
    credentials masked and is cut at ``MAX_MESSAGE_CHARS``."""

    def __init__(self, message: str) -> None:
        text = redact_url(str(message))
        if len(text) > MAX_MESSAGE_CHARS:
            text = text[:MAX_MESSAGE_CHARS] + " [...]"
        super().__init__(text)


class _QuoteRepr(reprlib.Repr):
    """``repr`` of a bounded part of a value (aliases can make a value huge); strings
    have URL credentials masked before they are cut."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxlist, self.maxtuple, self.maxdict = 3, 8, 8, 8
        self.maxstring = self.maxother = self.maxlong = MAX_QUOTE_CHARS

    def repr_str(self, x: str, level: int) -> str:
        return super().repr_str(redact_url(x), level)


def quote(value: Any) -> str:
    """A short, credential-free ``repr`` of ``value`` for error messages."""
    text = _QuoteRepr().repr(value)
    return text if len(text) <= MAX_QUOTE_CHARS else text[:MAX_QUOTE_CHARS] + "..."


def did_you_mean(name: Any, known: Iterable[Any]) -> str:
    """``" (did you mean 'x'?)"`` for the known name closest to a mistyped ``name``
    (difflib's ratio >= 0.6, case ignored), else ``""``."""
    if not isinstance(name, str):
        return ""
    by_lower = {str(k).lower(): str(k) for k in known}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""


def choice_of(what: str, known: Iterable[str]) -> Callable[[str], str]:
    """An argparse ``type`` accepting one of ``known``; anything else is an error that
    names the closest choice and lists them all."""
    names = list(known)

    def parse(value: str) -> str:
        if value in names:
            return value
        raise argparse.ArgumentTypeError(
            f"unknown {what} {value!r}{did_you_mean(value, names)}; one of: {', '.join(names)}")
    parse.__name__ = what  # argparse names the type in its own errors
    return parse
