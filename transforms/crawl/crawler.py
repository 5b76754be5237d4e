"""The crawl stage: seed URLs → WARC files, a fetch log and the next crawl's frontier.

Seeds are normalised and grouped by host (``scheme://host:port``); one worker crawls
one host at a time, breadth first, so politeness holds by construction: robots.txt
(RFC 9309 rules and ``Crawl-delay``) is fetched first, requests to the host are spaced
by ``max(min_delay_s, Crawl-delay)``, and the page and depth budgets are per host.
Same-host links are followed; off-host links (and redirects) become the frontier.

Every URL taken from the queue is counted ``records_in`` and ends as exactly one of:
kept (a 2xx HTML page, stored in a WARC file), rejected (``CrawlReason``) or failed
(timeouts, connection errors, redirect loops...). Every HTTP attempt is a fetch-log row.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Iterator, NamedTuple, Optional, Sequence

import apache_beam as beam

from transforms.crawl.fetcher import FetchLogEntry, FetchPolicy, Hop, HostClient
from transforms.crawl.links import extract_links
from transforms.crawl.robots import Robots, robots_for_status
from transforms.crawl.urls import host_key, normalize_url, path_and_query
from transforms.crawl.warcfile import RollingWarcWriter
from transforms.doc import Doc, Rejected, stable_id
from transforms.routing import FAILED, REJECTED, StageCounters, make_failure

_LOGGER = logging.getLogger(__name__)

LOG = "fetch_log"
FRONTIER = "frontier"


class CrawlReason(str, Enum):
    ROBOTS = "robots"  # disallowed by robots.txt
    URL_FILTER = "url_filter"  # a seed outside allow_patterns / inside deny_patterns
    HTTP_STATUS = "http_status"  # final response not 2xx (after retries)
    CONTENT_TYPE = "content_type"  # not an allowed content type (body not downloaded)
    TOO_LARGE = "too_large"  # over max_bytes
    OFFSITE_REDIRECT = "offsite_redirect"  # redirected to another host (sent to frontier)
    DUPLICATE = "duplicate"  # redirected to a URL already crawled or queued
    BAD_URL = "bad_url"  # a seed that is no crawlable http(s) URL


@dataclass(frozen=True)
class CrawlConfig:
    """Crawl budget and politeness. Patterns are regular expressions on the full URL."""

    seeds: tuple[str, ...] = ()
    policy: FetchPolicy = FetchPolicy()
    max_redirects: int = 5
    max_pages_per_host: int = 1000
    max_depth: int = 5
    respect_robots: bool = True
    allow_patterns: tuple[str, ...] = ()
    deny_patterns: tuple[str, ...] = ()
    warc_max_bytes: int = 1 << 30

    def __post_init__(self) -> None:
        for name in ("max_redirects", "max_depth"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.max_pages_per_host <= 0 or self.warc_max_bytes <= 0:
            raise ValueError("max_pages_per_host and warc_max_bytes must be > 0")
        for pattern in self.allow_patterns + self.deny_patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"invalid URL pattern {pattern!r}: {exc}") from exc


class Outcome(NamedTuple):
    """How one dequeued URL ended: kind is kept / rejected / failed."""

    url: str
    kind: str
    reason: str = ""
    detail: str = ""


class UrlFilter:
    def __init__(self, allow: Sequence[str], deny: Sequence[str]) -> None:
        self._allow = [re.compile(p) for p in allow]
        self._deny = [re.compile(p) for p in deny]

    def __call__(self, url: str) -> bool:
        if self._allow and not any(p.search(url) for p in self._allow):
            return False
        return not any(p.search(url) for p in self._deny)


class HostCrawl:
    """Breadth-first crawl of one host. ``run`` yields the hops that carry a response
    (to be stored), fetch-log entries, outcomes and frontier URLs, in order."""

    def __init__(self, host: str, config: CrawlConfig, client: HostClient) -> None:
        self.host = host
        self.config = config
        self.client = client
        self.accept = UrlFilter(config.allow_patterns, config.deny_patterns)
        self.robots = Robots.allow_all()
        self.queue: deque[tuple[str, int]] = deque()
        self.seen: set[str] = set()
        self.frontier: set[str] = set()
        self.not_crawled = 0

    def _enqueue(self, url: str, depth: int) -> None:
        if url not in self.seen and self.accept(url):
            self.seen.add(url)
            self.queue.append((url, depth))

    def _load_robots(self) -> Iterator[object]:
        if not self.config.respect_robots:
            return
        hop = self.client.fetch(f"{self.host}/robots.txt", download=False)
        yield from hop.log
        text = hop.body.decode("utf-8", "replace") if hop.kind == "ok" else ""
        status = hop.status if hop.kind in ("ok", "rejected") else 0
        if hop.kind == "redirect":
            status = 404  # RFC 9309 allows following; a redirected robots.txt is treated as absent
        self.robots = robots_for_status(status, text, self.config.policy.user_agent)
        if self.robots.crawl_delay:
            self.client.delay_s = max(self.client.delay_s, self.robots.crawl_delay)
        _LOGGER.info("%s robots.txt: status %s%s, delay %.2fs", self.host, status,
                     " (disallows everything)" if self.robots.blocked else "", self.client.delay_s)

    def run(self, seeds: Sequence[str]) -> Iterator[object]:
        yield from self._load_robots()
        for seed in seeds:
            if seed in self.seen:
                continue
            if not self.accept(seed):
                self.seen.add(seed)
                yield Outcome(seed, "rejected", CrawlReason.URL_FILTER.value, "seed filtered")
                continue
            self._enqueue(seed, 0)
        fetched = 0
        while self.queue:
            if fetched >= self.config.max_pages_per_host:
                self.not_crawled = len(self.queue)
                self.frontier.update(url for url, _ in self.queue)
                break
            url, depth = self.queue.popleft()
            fetched += 1
            yield from self._crawl_url(url, depth)
        for url in sorted(self.frontier):
            yield (FRONTIER, url)

    def _crawl_url(self, url: str, depth: int) -> Iterator[object]:
        if not self.robots.allowed(path_and_query(url)):
            yield Outcome(url, "rejected", CrawlReason.ROBOTS.value, "disallowed by robots.txt")
            return
        chain = [url]
        current = url
        while True:
            hop = self.client.fetch(current, depth=depth)
            yield from hop.log
            if hop.kind in ("ok", "redirect") or (hop.kind == "rejected" and hop.body):
                yield hop
            if hop.kind != "redirect":
                yield from self._finish(url, hop, depth)
                return
            target = normalize_url(hop.location, current)
            verdict = self._redirect_verdict(url, chain, target)
            if verdict is not None or target is None:
                yield verdict or Outcome(url, "failed", "bad_redirect", hop.location)
                return
            chain.append(target)
            self.seen.add(target)
            current = target

    def _redirect_verdict(self, url: str, chain: list[str], target: Optional[str]) -> Optional[Outcome]:
        if target is None:
            return Outcome(url, "failed", "bad_redirect", "redirect to an uncrawlable URL")
        if target in chain:
            return Outcome(url, "failed", "redirect_loop", " -> ".join(chain + [target]))
        if len(chain) > self.config.max_redirects:
            return Outcome(url, "failed", "too_many_redirects",
                           f"more than {self.config.max_redirects} redirects")
        if host_key(target) != self.host:
            self.frontier.add(target)
            return Outcome(url, "rejected", CrawlReason.OFFSITE_REDIRECT.value, target)
        if target in self.seen:
            return Outcome(url, "rejected", CrawlReason.DUPLICATE.value, target)
        if not self.robots.allowed(path_and_query(target)):
            return Outcome(url, "rejected", CrawlReason.ROBOTS.value, f"redirect target {target}")
        return None

    def _finish(self, url: str, hop: Hop, depth: int) -> Iterator[object]:
        if hop.kind == "failed":
            yield Outcome(url, "failed", hop.reason, hop.detail)
            return
        if hop.kind == "rejected":
            yield Outcome(url, "rejected", hop.reason, hop.detail)
            return
        if not 200 <= hop.status < 300:
            yield Outcome(url, "rejected", CrawlReason.HTTP_STATUS.value, f"HTTP {hop.status}")
            return
        yield Outcome(url, "kept")
        if depth >= self.config.max_depth:
            return
        charset = _charset_of(hop.headers)
        for link in extract_links(hop.body, hop.url, charset):
            if host_key(link) == self.host:
                self._enqueue(link, depth + 1)
            else:
                self.frontier.add(link)


def _charset_of(headers: list[tuple[str, str]]) -> str:
    for key, value in headers:
        if key.lower() == "content-type" and "charset=" in value.lower():
            return value.lower().split("charset=", 1)[1].split(";")[0].strip("\"' ")
    return ""


def key_by_host(seed: str) -> Iterator[tuple[str, str]]:
    """(host key, normalised URL) of a seed; nothing for an uncrawlable one."""
    url = normalize_url(seed)
    if url is not None:
        yield host_key(url), url


def _url_doc(url: str) -> Doc:
    return Doc(id=stable_id(url), url=url, text="", source="crawl", fetched_at="")


class _CrawlHostFn(beam.DoFn):
    def __init__(self, config: CrawlConfig, warc_dir: str, stage: str) -> None:
        self._config = config
        self._warc_dir = warc_dir
        self._stage = stage

    def setup(self) -> None:
        self._counters = StageCounters(self._stage)

    def process(self, element: tuple[str, Sequence[str]]) -> Iterator[object]:
        host, seeds = element
        prefix = "crawl-" + hashlib.sha1(host.encode()).hexdigest()[:16]
        writer = RollingWarcWriter(self._warc_dir, prefix, self._config.warc_max_bytes)
        client = HostClient(self._config.policy)
        crawl = HostCrawl(host, self._config, client)
        try:
            for event in crawl.run(sorted(set(seeds))):
                yield from self._route(event, writer)
            writer.close()
        except BaseException:
            writer.abort()
            raise
        finally:
            client.close()
        self._counters.inc("not_crawled_budget", crawl.not_crawled)

    def _route(self, event: object, writer: RollingWarcWriter) -> Iterator[object]:
        if isinstance(event, FetchLogEntry):
            yield beam.pvalue.TaggedOutput(LOG, event)
        elif isinstance(event, Hop):
            writer.write(event)
        elif isinstance(event, Outcome):
            self._counters.record_in()
            if event.kind == "kept":
                self._counters.kept()
            elif event.kind == "rejected":
                self._counters.rejected(event.reason)
                yield beam.pvalue.TaggedOutput(
                    REJECTED, Rejected(_url_doc(event.url), event.reason, event.detail))
            else:
                self._counters.failed(event.reason)
                failure = make_failure(self._stage, f"{event.reason}: {event.detail}", event.url,
                                       -1, event.url.encode(), error_type=event.reason)
                yield beam.pvalue.TaggedOutput(FAILED, failure)
        elif isinstance(event, tuple) and event[0] == FRONTIER:
            yield beam.pvalue.TaggedOutput(FRONTIER, event[1])


class CrawlOutputs(NamedTuple):
    fetch_log: beam.PCollection
    rejected: beam.PCollection
    failed: beam.PCollection
    frontier: beam.PCollection


class Crawl(beam.PTransform):
    """Seed URLs (a ``PCollection[str]``) → WARC files under ``warc_dir`` and ``CrawlOutputs``.

    The frontier holds off-host links and redirects, and same-host URLs left over when
    a host's page budget ran out, de-duplicated.
    """

    def __init__(self, config: CrawlConfig, warc_dir: str, stage: str = "crawl") -> None:
        super().__init__()
        self._config = config
        self._warc_dir = warc_dir
        self._stage = stage

    def expand(self, seeds: beam.PCollection[str]) -> CrawlOutputs:
        hosts = (
            seeds
            | "KeyByHost" >> beam.FlatMap(key_by_host)
            | "GroupByHost" >> beam.GroupByKey()
        )
        results = hosts | "CrawlHosts" >> beam.ParDo(
            _CrawlHostFn(self._config, self._warc_dir, self._stage)
        ).with_outputs(LOG, REJECTED, FAILED, FRONTIER, main="done")
        bad_seeds = (
            seeds
            | "BadSeeds" >> beam.Filter(lambda seed: normalize_url(seed) is None)
            | "RejectBadSeeds" >> beam.ParDo(_RejectSeedFn(self._stage))
        )
        frontier = results[FRONTIER] | "DistinctFrontier" >> beam.Distinct()
        rejected = (results[REJECTED], bad_seeds) | "AllRejected" >> beam.Flatten()
        return CrawlOutputs(results[LOG], rejected, results[FAILED], frontier)


class _RejectSeedFn(beam.DoFn):
    """A seed that is no crawlable http(s) URL: counted in and rejected as ``bad_url``."""

    def __init__(self, stage: str) -> None:
        self._stage = stage

    def setup(self) -> None:
        self._counters = StageCounters(self._stage)

    def process(self, seed: str) -> Iterator[Rejected]:
        self._counters.record_in()
        self._counters.rejected(CrawlReason.BAD_URL.value)
        doc = Doc(id=stable_id(seed), url=seed[:2048], text="", source="crawl", fetched_at="")
        yield Rejected(doc, CrawlReason.BAD_URL.value, "not a crawlable http(s) URL")
