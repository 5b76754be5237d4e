"""Credentials out of messages: the userinfo of every URL inside a text is replaced.

``s3://KEY:SECRET@bucket/x`` becomes ``s3://***@bucket/x`` wherever it appears in an
error, a log line or a report. Two shapes are recognised:

* the standard one, ``scheme://userinfo@host``, where the userinfo holds no ``/``, ``?``
  or ``#``;
* a ``key:secret`` pair whose secret holds ``/``, ``?`` or ``#`` unencoded (AWS secret
  keys often hold ``/`` and ``+``): the authority before the first of those has a colon
  that is not followed by a port number. Everything up to the last ``@`` of the URL is
  then replaced, since a URL parser would read part of the secret as the path.

``https://medium.com/@user/post`` and ``http://host:8080/a@b`` keep their ``@``: no
credentials are recognised there.

Command lines carry secrets as option values too (``--s3_secret_access_key=...``, a
``--hf_token ...`` Beam logs as an "unparseable argument"): ``redact_options`` masks the
value of every ``--name=value`` whose name says it holds a secret (``SECRET_NAME``:
secret, password, token, key, credential, auth, cookie, signature), ``redact_command``
also the ``--name value`` form of an argv list, and ``redact_text`` does URLs and
options together. Beam-free and dependency-free (``storage/`` is the
bottom layer), so every layer can call it.
"""

from __future__ import annotations

import logging
import re
from typing import Sequence

_LOGGER = logging.getLogger(__name__)

__all__ = ["MASK", "SECRET_NAME", "has_userinfo", "redact_args", "redact_command", "redact_options", "redact_text",
           "redact_url"]

MASK = "***"

# scheme "://" then the rest of the URL up to whitespace, a quote or an angle bracket
# (the ends a URL has when quoted by repr(), in JSON, in HTML or in prose).
_URL = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<rest>[^\s'\"<>`]*)")
_STANDARD = re.compile(r"^[^/?#]*@")  # userinfo: up to the last '@' before any / ? #
_NOT_A_PORT = re.compile(r":(?![0-9]*$)")  # a colon not followed by digits only
# an option name that says its value is a secret (masking a harmless value costs nothing)
SECRET_NAME = re.compile(r"secret|passw|token|key|credential|auth|cookie|signature", re.IGNORECASE)
# "--name=value" inside any text: the value ends at whitespace, a quote, a comma or a bracket
_OPTION = re.compile(r"(?P<name>(?<![\w-])--?[A-Za-z][\w.-]*)=(?P<value>[^\s'\"`,\]\)]+)")


def _redact_rest(rest: str) -> str:
    """``rest`` (what follows ``scheme://``) with any userinfo replaced by the mask."""
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if "@" in authority:
        return MASK + rest[_STANDARD.match(rest).end() - 1:]  # type: ignore[union-attr]
    if _NOT_A_PORT.search(re.sub(r"\[[^\]]*\]", "", authority)) and "@" in rest:
        return MASK + rest[rest.rindex("@"):]
    return rest


def redact_url(text: str) -> str:
    """``text`` with the userinfo (user, password, access keys) of every URL in it masked."""
    if "://" not in text:
        return text
    return _URL.sub(lambda m: m.group("scheme") + _redact_rest(m.group("rest")), text)


def has_userinfo(url: str) -> bool:
    """Whether ``url`` carries credentials that ``redact_url`` would mask."""
    return redact_url(url) != url


def redact_options(text: str) -> str:
    """``text`` with the value of every ``--name=value`` whose name says it is a secret masked."""
    if "=" not in text:
        return text
    return _OPTION.sub(lambda m: m.group("name") + "=" + MASK if SECRET_NAME.search(m.group("name"))
                       else m.group(0), text)


def redact_text(text: str) -> str:
    """``text`` with URL credentials and secret option values masked (logs, messages)."""
    return redact_options(redact_url(text))


def redact_args(argv: Sequence[str]) -> list[str]:
    """The arguments ``argv`` with secrets masked: URL credentials, the value of a secret
    ``--name=value`` and the argument after a secret ``--name`` that has no ``=``
    (``--s3_secret_access_key SECRET``)."""
    words: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("-"):
            words.append(MASK)
            hide_next = False
            continue
        hide_next = arg.startswith("-") and "=" not in arg and bool(SECRET_NAME.search(arg))
        words.append(redact_text(arg))
    return words


def redact_command(argv: Sequence[str]) -> str:
    """The command line ``argv`` as one string, secrets masked (``redact_args``)."""
    return " ".join(redact_args(argv))
