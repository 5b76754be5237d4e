"""Deduplication stages: exact (normalised text hash, URL) and MinHash-LSH near-duplicates.

Exact: documents are grouped by normalised URL, then by the sha1 of their normalised text;
one per group is kept (the first by the ranking rule), the others are rejected as
``duplicate_url`` / ``duplicate_text`` with the id they duplicate. A document without a
URL is never a URL duplicate (its text may still be a duplicate).

Near: signatures (``MinHasher``, batched) → LSH bands → buckets. The stage sends a
bundle's band values a chunk per group (``band_chunks.py``: no element per band key
crosses the shuffle) and links each bucket's members to its smallest node. The per-key
path here (``BandKeys`` → ``BucketEdges``: a bucket grouped under ``salts`` sub-keys
first, then the sub-bucket minima under the bucket key) is the reference the chunked one
is tested against (same components), and ``BandKeys`` writes the signature index. The
edges go to the connected components (``components.py``: in the driver or large-star /
small-star rounds); the root of each component is the document to keep.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from dataclasses import dataclass
from enum import Enum
from typing import Any, Iterable, Iterator, Optional

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.crawl.urls import normalize_url
from transforms.dedup.components import Edge, doc_id_of, node_key
from transforms.dedup.minhash import MinHasher, band_keys, is_empty, normalize_for_dedup, optimal_bands
from transforms.doc import Doc, Rejected
from transforms.routing import REJECTED, CountFn, StageOutputs


class DedupReason(str, Enum):
    DUPLICATE_URL = "duplicate_url"
    DUPLICATE_TEXT = "duplicate_text"
    NEAR_DUPLICATE = "near_duplicate"


@dataclass(frozen=True)
class MinHashConfig:
    """Near-duplicate detection: MinHash signatures, LSH bands, connected components."""

    num_perm: int = 112  # hash functions per signature (= bands x rows)
    bands: int = 14  # LSH bands: two documents sharing one band's hashes are a candidate pair
    rows: int = 8  # hashes per band
    ngram: int = 5  # words per shingle
    seed: int = 1  # of the hash functions
    threshold: Optional[float] = None  # set: bands x rows from datasketch's optimiser
    compat: bool = False  # datasketch-identical signatures (sha1 per shingle, slower)
    batch_size: int = 256  # documents per signature batch
    salts: int = 16  # sub-keys a band bucket is split into first (a huge bucket never lands on one worker)
    max_rounds: int = 50  # connected-component rounds at most (a warning if they did not converge)
    # bucket edges up to this many: the connected components are computed in the stage's
    # driver (one pass, union-find: 1M edges took 4 CPU-s and ~120 MB besides the node
    # names) instead of star-round pipelines; more edges, or 0: the rounds, on the workers
    driver_max_edges: int = 1_000_000
    # connected components: a node with more neighbours than this is split into groups of
    # about this size (the root of a giant component would otherwise be one hot key)
    hot_degree: int = 10_000

    def __post_init__(self) -> None:
        if self.threshold is not None and not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {self.threshold}")
        if self.threshold is None and self.bands * self.rows > self.num_perm:
            raise ValueError(f"bands x rows ({self.bands} x {self.rows}) exceeds num_perm {self.num_perm}")
        for name in ("num_perm", "bands", "rows", "ngram", "batch_size", "salts", "max_rounds",
                     "hot_degree"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        if self.driver_max_edges < 0:
            raise ValueError(f"driver_max_edges must be >= 0, got {self.driver_max_edges}")

    def layout(self) -> tuple[int, int]:
        """(bands, rows) actually used."""
        if self.threshold is not None:
            return optimal_bands(self.threshold, self.num_perm)
        return self.bands, self.rows

    def hasher(self) -> MinHasher:
        return MinHasher(num_perm=self.num_perm, seed=self.seed, ngram=self.ngram, compat=self.compat)


_DIGIT_RUNS = re.compile(r"([0-9]+)")  # split: text, digits, text, ...
_ID_CONTROL = re.compile(r"[\x00-\x1f|]")
_ID_TEXT = {ord("|"): "{", **{c: " " for c in range(0x20)}}
_RUN_SIZES = [str(size) for size in range(9)]


def id_order_key(doc_id: str) -> str:
    """A string whose code point order is the natural order of ids: runs of ASCII digits
    compare by their numeric value (``t980 < t2023``, ``doc-9 < doc-10``), other
    characters by code point, a shorter id before its extensions (``t1 < t1a``).

    Each digit run becomes its significant length (one digit below 9, else ``9`` and nine
    digits) and its digits, so it sorts where a digit would against other characters. The
    key never holds ``|`` (the node separator; ``|`` orders as ``{``) and ends with a
    space, below every printable character (control characters order as spaces). Ids with
    equal keys (``t007``, ``t7``) are ordered by the raw id after the separator.
    """
    if _ID_CONTROL.search(doc_id) is not None:
        doc_id = doc_id.translate(_ID_TEXT)
    parts = _DIGIT_RUNS.split(doc_id)
    for i in range(1, len(parts), 2):  # split + loop: ~0.7 µs an id, re.sub with a callback ~1.1
        digits = parts[i].lstrip("0") or "0"
        size = len(digits)
        parts[i] = (_RUN_SIZES[size] if size < 9 else f"9{size:09d}") + digits
    parts.append(" ")
    return "".join(parts)


@dataclass(frozen=True)
class DedupConfig:
    """``keep``: ``smallest_id`` or ``highest_quality`` (then smallest id). The smallest
    id is the first in natural order (``id_order_key``): numbers inside ids compare by
    value, so ``t980`` is kept over ``t2023``, then by code point."""

    exact_text: bool = True  # drop documents whose normalised text another has (duplicate_text)
    exact_url: bool = True  # drop documents whose normalised URL another has (duplicate_url)
    keep: str = "smallest_id"  # which of a group is kept: smallest_id | highest_quality
    minhash: MinHashConfig = MinHashConfig()  # near duplicates (the dedup_minhash stage)
    index: str = ""  # signature index of earlier runs (cross-dump dedup); "" = none

    def __post_init__(self) -> None:
        if self.keep not in ("smallest_id", "highest_quality"):
            raise ValueError(f"keep must be smallest_id or highest_quality, got {self.keep!r}")

    def node(self, doc: Doc, previous_run: bool = False) -> str:
        return self.node_of(doc.id, doc.quality_score, previous_run)

    def node_of(self, doc_id: str, quality_score: Optional[float], previous_run: bool = False) -> str:
        """``node`` of a document given only its id and quality score (the Arrow path
        ranks rows without building ``Doc`` objects)."""
        quality = quality_score if self.keep == "highest_quality" else None
        if self.keep == "highest_quality" and quality is None:
            quality = 0.0
        # node_key's "<old|new><rank>|<id>" with the natural-order key before the
        # separator: node strings compare as (run, rank, id_order_key, id).
        head = node_key(doc_id, previous_run, quality).split("|", 1)[0]
        return f"{head}{id_order_key(doc_id)}|{doc_id}"


def text_key(doc: Doc) -> str:
    return hashlib.sha1(normalize_for_dedup(doc.text).encode("utf-8")).hexdigest()


# Counted beside duplicate_url (the run's table shows it): documents dropped as URL
# duplicates whose URL has a #fragment, e.g. a book's chapters at book.html#ch1, #ch2, ...:
# URL normalisation drops the fragment, so they are one URL; the count says so.
FRAGMENT_COUNTER = "duplicate_url_fragment"
FRAGMENT_PATTERN = r"#."  # a '#' with something after it (an empty fragment is no fragment)


class _KeepFirstFn(beam.DoFn):
    """In a group of duplicates keep the first by ``DedupConfig.node``, reject the rest."""

    def __init__(self, config: DedupConfig, reason: DedupReason, stage: str = "dedup_exact") -> None:
        self._config = config
        self._reason = reason
        self._fragments = Metrics.counter(stage, FRAGMENT_COUNTER)

    def process(self, group: tuple[str, Iterable[Doc]]) -> Iterator[Any]:
        if group[0].startswith(NO_URL_KEY):
            yield from group[1]  # documents without a URL are never URL duplicates
            return
        docs = sorted(group[1], key=self._config.node)
        yield docs[0]
        for doc in docs[1:]:
            if self._reason is DedupReason.DUPLICATE_URL and re.search(FRAGMENT_PATTERN, doc.url or ""):
                self._fragments.inc()
            yield beam.pvalue.TaggedOutput(REJECTED, Rejected(doc, self._reason.value, f"duplicate of {docs[0].id}"))


NO_URL_KEY = "\x00no-url:"


def _url_key(doc: Doc) -> str:
    """The normalised URL; a document without one (or with one that does not normalise)
    gets ``NO_URL_KEY`` and its id, a group of its own spread like any other key, whose
    members ``_KeepFirstFn`` keeps all: it is never a URL duplicate of anything."""
    return (normalize_url(doc.url) if doc.url else None) or f"{NO_URL_KEY}{doc.id}"


class ExactDedup(beam.PTransform):
    """``Doc`` → ``StageOutputs``: URL duplicates, then text duplicates, rejected."""

    def __init__(self, config: DedupConfig, stage: str = "dedup_exact") -> None:
        super().__init__()
        self._config = config
        self._stage = stage

    def expand(self, docs: beam.PCollection[Doc]) -> StageOutputs:
        stage = self._stage
        current = docs | "CountIn" >> beam.ParDo(CountFn(stage, "in"))
        rejected = []
        steps = [("Url", _url_key, DedupReason.DUPLICATE_URL, self._config.exact_url),
                 ("Text", text_key, DedupReason.DUPLICATE_TEXT, self._config.exact_text)]
        for name, key, reason, enabled in steps:
            if not enabled:
                continue
            out = (current
                   | f"KeyBy{name}" >> beam.Map(lambda d, k=key: (k(d), d))
                   | f"Group{name}" >> beam.GroupByKey()
                   | f"Keep{name}" >> beam.ParDo(_KeepFirstFn(self._config, reason, stage)).with_outputs(
                       REJECTED, main="kept"))
            current = out["kept"]
            # counted before the Flatten: a counter after it runs once per branch, and
            # Beam's Flink runner keeps only one branch's count
            rejected.append(out[REJECTED] | f"CountRejected{name}" >> beam.ParDo(CountFn(stage, "rejected")))
        all_rejected = (tuple(rejected) or (docs.pipeline | "NoRejects" >> beam.Create([]),)) | "AllRejected" >> beam.Flatten()
        return StageOutputs(
            kept=current | "CountKept" >> beam.ParDo(CountFn(stage, "kept")),
            rejected=all_rejected,
            failed=docs.pipeline | "NoFailures" >> beam.Create([]),
        )


# --- near duplicates ---------------------------------------------------------------

class _BandKeysFn(beam.DoFn):
    """Batches of (node, text) → (band key, node) for every band of every signature."""

    def __init__(self, config: MinHashConfig) -> None:
        self._config = config

    def setup(self) -> None:
        self._hasher = self._config.hasher()
        self._bands, self._rows = self._config.layout()

    def process(self, batch: list[tuple[str, str]]) -> Iterator[tuple[bytes, str]]:
        signatures = self._hasher.signatures([text for _, text in batch])
        for (node, _), signature in zip(batch, signatures):
            if is_empty(signature):
                continue  # no shingles: nothing to compare
            for key in band_keys(signature, self._bands, self._rows):
                yield key, node


def _salted(item: tuple[bytes, str], salts: int) -> tuple[tuple[bytes, int], str]:
    key, node = item
    return (key, zlib.crc32(node.encode()) % salts), node


def _link_to_min(group: tuple[Any, Iterable[str]]) -> Iterator[Any]:
    """Star edges to the smallest node of the (sub-)bucket; the minimum goes on as 'min'."""
    key, nodes = group
    members = sorted(set(nodes))
    for node in members[1:]:
        yield node, members[0]
    yield beam.pvalue.TaggedOutput("min", (key[0] if isinstance(key, tuple) else key, members[0]))


class BandKeys(beam.PTransform):
    """``PCollection[(node, text)]`` → ``PCollection[(band key, node)]`` (batched MinHash)."""

    def __init__(self, config: MinHashConfig) -> None:
        super().__init__()
        self._config = config

    def expand(self, nodes: beam.PCollection[tuple[str, str]]) -> beam.PCollection[tuple[bytes, str]]:
        return (
            nodes
            | "Batch" >> beam.BatchElements(min_batch_size=8, max_batch_size=self._config.batch_size)
            | "BandKeys" >> beam.ParDo(_BandKeysFn(self._config))
        )


class BucketEdges(beam.PTransform):
    """``PCollection[(band key, node)]`` → ``PCollection[Edge]``: star edges inside every
    bucket, grouped under salted sub-keys first so no bucket is a hot key."""

    def __init__(self, salts: int) -> None:
        super().__init__()
        self._salts = salts

    def expand(self, keyed: beam.PCollection[tuple[bytes, str]]) -> beam.PCollection[Edge]:
        sub = (
            keyed
            | "Salt" >> beam.Map(_salted, self._salts)
            | "GroupSub" >> beam.GroupByKey()
            | "LinkSub" >> beam.FlatMap(_link_to_min).with_outputs("min", main="edges")
        )
        top = (
            sub["min"]
            | "GroupBucket" >> beam.GroupByKey()
            | "LinkBucket" >> beam.FlatMap(_link_to_min).with_outputs("min", main="edges")
        )
        return (sub["edges"], top["edges"]) | "AllEdges" >> beam.Flatten() | "Distinct" >> beam.Distinct()


def assign_component(element: tuple[str, dict[str, list[Any]]]) -> Iterator[Any]:
    """Join of node → (docs, roots): the document kept or rejected with its component."""
    node, joined = element
    for doc in joined["docs"]:
        roots = joined["roots"]
        if not roots:
            yield doc
            continue
        root = roots[0]
        cluster = doc_id_of(root)
        if root == node:
            yield _with_cluster(doc, cluster)
        else:
            yield beam.pvalue.TaggedOutput(REJECTED, Rejected(
                _with_cluster(doc, cluster), DedupReason.NEAR_DUPLICATE.value, component_detail(root)))


def component_detail(root: str) -> str:
    """A near-duplicate's detail: its component and the document kept (an ``0``-ranked
    root is a document of an earlier run)."""
    cluster = doc_id_of(root)
    origin = "an earlier run's " if root.startswith("0") else ""
    return f"component {cluster}: kept {origin}{cluster}"


def _with_cluster(doc: Doc, cluster: str) -> Doc:
    import dataclasses

    return dataclasses.replace(doc, dup_cluster=cluster)


