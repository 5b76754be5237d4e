"""robots.txt per RFC 9309 (pure functions).

The standard library's ``urllib.robotparser`` applies the first matching rule and
knows no ``*`` / ``$`` patterns; RFC 9309 (and Google, Bing) apply the longest match,
with ``Allow`` winning a tie. A site that writes ``Disallow: /`` then
``Allow: /public/`` is crawlable under /public/ only with the RFC's rule, so this
module implements it. ``Crawl-delay`` (non-standard, widely used) is read too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional
from urllib.parse import unquote

_MAX_ROBOTS_BYTES = 500 * 1024  # RFC 9309 2.5: parse at least 500 KiB


@dataclass(frozen=True)
class Rule:
    allow: bool
    pattern: str
    regex: re.Pattern[str]

    @property
    def specificity(self) -> int:
        return len(self.pattern)


@dataclass(frozen=True)
class Robots:
    """The rules that apply to one user agent. ``Robots.allow_all()`` when there are none."""

    rules: tuple[Rule, ...] = ()
    crawl_delay: Optional[float] = None
    sitemaps: tuple[str, ...] = field(default=())

    @staticmethod
    def allow_all() -> "Robots":
        return Robots()

    @staticmethod
    def disallow_all() -> "Robots":
        return Robots(rules=(_rule(False, "/"),))

    def allowed(self, path: str) -> bool:
        """True if ``path`` (path + query of a URL) may be fetched."""
        if path in ("/robots.txt",):
            return True
        target = _canonical(path or "/")
        best: Optional[Rule] = None
        for rule in self.rules:
            if rule.regex.match(target):
                if (best is None or rule.specificity > best.specificity
                        or (rule.specificity == best.specificity and rule.allow)):
                    best = rule
        return True if best is None else best.allow


def _canonical(path: str) -> str:
    return unquote(path)


def _rule(allow: bool, pattern: str) -> Rule:
    pattern = _canonical(pattern)
    anchored = pattern.endswith("$")
    body = pattern[:-1] if anchored else pattern
    regex = "".join(".*" if ch == "*" else re.escape(ch) for ch in body)
    return Rule(allow=allow, pattern=pattern, regex=re.compile(regex + ("$" if anchored else ""), re.S))


def _product_token(user_agent: str) -> str:
    """The product token of a User-Agent string: ``MyBot/1.0 (+url)`` → ``mybot``."""
    token = re.split(r"[/\s]", user_agent.strip(), maxsplit=1)[0]
    return token.lower()


def parse_robots(text: str, user_agent: str) -> Robots:
    """The rules of ``text`` for ``user_agent``: its own groups, else the ``*`` groups."""
    token = _product_token(user_agent)
    groups: dict[str, list[Rule]] = {}
    delays: dict[str, float] = {}
    sitemaps: list[str] = []
    agents: list[str] = []
    in_rules = False
    for raw_line in text[:_MAX_ROBOTS_BYTES].splitlines():
        line = raw_line.split("#", 1)[0].strip()
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip().lower(), value.strip()
        if key == "user-agent":
            if in_rules:
                agents, in_rules = [], False
            agents.append(value.lower())
            for agent in agents:
                groups.setdefault(agent, [])
        elif key in ("allow", "disallow"):
            in_rules = True
            if value:  # an empty Disallow allows everything
                for agent in agents:
                    groups.setdefault(agent, []).append(_rule(key == "allow", value))
        elif key == "crawl-delay":
            in_rules = True
            try:
                delay = float(value)
            except ValueError:
                continue
            for agent in agents:
                delays[agent] = delay
        elif key == "sitemap":
            sitemaps.append(value)
    chosen = token if token in groups else ("*" if "*" in groups else None)
    if chosen is None:
        return Robots(sitemaps=tuple(sitemaps))
    delay = delays.get(chosen)
    return Robots(rules=tuple(groups[chosen]), crawl_delay=delay if delay and delay > 0 else None,
                  sitemaps=tuple(sitemaps))


def robots_for_status(status: int, text: str, user_agent: str) -> Robots:
    """RFC 9309 2.3.1: 2xx → parse; 4xx → allow all; 5xx or no answer → disallow all."""
    if 200 <= status < 300:
        return parse_robots(text, user_agent)
    if 400 <= status < 500:
        return Robots.allow_all()
    return Robots.disallow_all()
