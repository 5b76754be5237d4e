"""Connected components in Beam: large-star / small-star rounds (Kiveris et al., SoCC 2014).

Edges are ``(node, node)`` string pairs. One round is large-star then small-star; after
enough rounds every node points at the smallest node of its component (the "root"). The
driver runs rounds as separate pipelines until a round leaves the edge set unchanged
(compared by an order-free checksum), so no machine ever holds the graph.

Nodes are strings whose order decides the root: ``node_key`` puts documents of earlier
runs first, then the ranking rule (smallest id or highest quality), then the id, so the
root of a component is the document to keep.
"""

from __future__ import annotations

import hashlib
import zlib
from typing import Any, Iterable, Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics

Edge = tuple[str, str]


def node_key(doc_id: str, previous_run: bool = False, quality: float | None = None) -> str:
    """Sortable node name: ``<0 old|1 new><rank>|<id>``; ``quality`` ranks best first.
    ``DedupConfig.node`` inserts the id's natural-order key before the ``|``."""
    rank = "" if quality is None else f"{1.0 - min(max(quality, 0.0), 1.0):.6f}"
    return f"{0 if previous_run else 1}{rank}|{doc_id}"


def doc_id_of(node: str) -> str:
    return node.split("|", 1)[1]


def edge_checksum(edge: Edge) -> int:
    return int.from_bytes(hashlib.blake2b(f"{edge[0]}\x00{edge[1]}".encode(), digest_size=8).digest(), "big")


def _both_ways(edge: Edge) -> Iterator[Edge]:
    yield edge
    yield edge[1], edge[0]


def _larger_first(edge: Edge) -> Edge:
    a, b = edge
    return (a, b) if a > b else (b, a)


# --- hot nodes ------------------------------------------------------------------------
# A star step groups every node with its neighbours. The root of a giant component (say
# 200,000 copies of one boilerplate page) would be one hot key holding every member on
# one worker. Nodes whose degree is above ``hot_degree`` are split: their neighbours go
# to ``salts_for(degree)`` sub-groups by a stable hash, each sub-group sends its minimum
# to one combine per node, and the node's minimum is joined back to each sub-group. The
# edges out are the same as without splitting (exact); only the grouping changes.

HOT_DEGREE = 10_000  # more neighbours than this: the node is split
SAMPLE_EVERY = 64  # degrees are estimated from 1 in 64 (node, neighbour) pairs
MAX_SALTS = 4096


def stable_hash(text: str) -> int:
    """A hash that is the same in every process (Python's ``hash`` is salted per process)."""
    return zlib.crc32(text.encode("utf-8", "surrogatepass"))


def salts_for(sampled: int, sample_every: int, hot_degree: int) -> int:
    """Sub-groups for a node with ``sampled`` of its pairs seen in the sample (1 = not hot)."""
    estimate = sampled * sample_every
    if estimate <= hot_degree:
        return 1
    return min(MAX_SALTS, -(-estimate // hot_degree))


def star_edges(kind: str, node: str, members: Iterable[str], smallest: str) -> Iterator[Edge]:
    """The edges of one (sub-)group of ``node`` towards ``smallest`` (the minimum of the node
    and all its group members): large-star links the members larger than the node,
    small-star every member (the node's own link is made once, by its caller)."""
    for v in members:
        if v != smallest and (kind == "small" or v > node):
            yield v, smallest


def large_star(node: str, neighbours: Iterable[str]) -> Iterator[Edge]:
    """Connect every larger neighbour of ``node`` to the smallest of node + neighbours."""
    nbrs = set(neighbours)
    yield from star_edges("large", node, nbrs, min(nbrs | {node}))


def small_star(node: str, smaller: Iterable[str]) -> Iterator[Edge]:
    """Connect ``node`` and its smaller-or-equal neighbours to the smallest of them."""
    group = set(smaller)
    smallest = min(group | {node})
    yield from star_edges("small", node, group, smallest)
    if node != smallest:
        yield node, smallest


class _StarGroupFn(beam.DoFn):
    """A group ``((node, salt), members)``: a node that is not hot gets its edges here; a
    hot node's sub-group sends its minimum (``partial``) and its members (``split``) on."""

    def __init__(self, kind: str) -> None:
        self._kind = kind

    def setup(self) -> None:
        self._sizes = Metrics.distribution("dedup_edges", "star_group_size")

    def process(self, group: tuple[tuple[str, int], Iterable[str]], hot: dict[str, int]) -> Iterator[Any]:
        (node, salt), members = group
        distinct = set(members)
        self._sizes.update(len(distinct))
        if node not in hot:
            if self._kind == "large":
                yield from large_star(node, distinct)
            else:
                yield from small_star(node, distinct)
            return
        yield beam.pvalue.TaggedOutput("partial", (node, min(distinct)))
        yield beam.pvalue.TaggedOutput("split", ((node, salt), tuple(sorted(distinct))))


def _key_by_salt(pair: Edge, hot: dict[str, int]) -> tuple[tuple[str, int], str]:
    node, member = pair
    salts = hot.get(node, 1)
    return (node, stable_hash(member) % salts if salts > 1 else 0), member


def _broadcast_min(item: tuple[str, str], hot: dict[str, int]) -> Iterator[tuple[tuple[str, int], str]]:
    node, partial = item
    smallest = min(node, partial)
    for salt in range(hot[node]):
        yield (node, salt), smallest


def _split_edges(kind: str, item: tuple[tuple[str, int], dict[str, list[Any]]]) -> Iterator[Edge]:
    (node, salt), joined = item
    smallest = joined["min"][0]
    for members in joined["members"]:
        yield from star_edges(kind, node, members, smallest)
    if kind == "small" and salt == 0 and node != smallest:
        yield node, smallest  # the node's own link, once


class StarStep(beam.PTransform):
    """``PCollection[(node, member)]`` → the large-star or small-star edges of every node,
    with hot nodes split (see above). ``hot_degree`` and ``sample_every`` are for tests."""

    def __init__(self, kind: str, hot_degree: int = HOT_DEGREE, sample_every: int = SAMPLE_EVERY) -> None:
        super().__init__()
        if kind not in ("large", "small") or hot_degree < 1 or sample_every < 1:
            raise ValueError(f"StarStep(kind large|small, hot_degree >= 1, sample_every >= 1), got "
                             f"{kind!r}, {hot_degree}, {sample_every}")
        self._kind, self._hot_degree, self._every = kind, hot_degree, sample_every

    def expand(self, pairs: beam.PCollection[Edge]) -> beam.PCollection[Edge]:
        kind, every, hot_degree = self._kind, self._every, self._hot_degree
        hot = beam.pvalue.AsDict(
            pairs
            | "Sample" >> beam.Filter(lambda p: stable_hash(f"{p[0]}\x00{p[1]}") % every == 0)
            | "One" >> beam.Map(lambda p: (p[0], 1))
            | "Degrees" >> beam.CombinePerKey(sum)
            | "Hot" >> beam.FlatMapTuple(lambda node, n: [(node, salts_for(n, every, hot_degree))]
                                         if salts_for(n, every, hot_degree) > 1 else []))
        groups = (pairs
                  | "KeyBySalt" >> beam.Map(_key_by_salt, hot=hot)
                  | "Group" >> beam.GroupByKey()
                  | "Star" >> beam.ParDo(_StarGroupFn(kind), hot=hot).with_outputs(
                      "partial", "split", main="edges"))
        minimum = (groups.partial | "NodeMin" >> beam.CombinePerKey(min)
                   | "ToSubGroups" >> beam.FlatMap(_broadcast_min, hot=hot))
        split = ({"members": groups.split, "min": minimum} | "JoinMin" >> beam.CoGroupByKey()
                 | "SplitEdges" >> beam.FlatMap(lambda item: _split_edges(kind, item)))
        return (groups.edges, split) | "Edges" >> beam.Flatten()


class StarRound(beam.PTransform):
    """One large-star + small-star round: ``PCollection[Edge]`` → ``PCollection[Edge]``."""

    def __init__(self, hot_degree: int = HOT_DEGREE, sample_every: int = SAMPLE_EVERY) -> None:
        super().__init__()
        self._hot = (hot_degree, sample_every)

    def expand(self, edges: beam.PCollection[Edge]) -> beam.PCollection[Edge]:
        large = (
            edges
            | "BothWays" >> beam.FlatMap(_both_ways)
            | "LargeStar" >> StarStep("large", *self._hot)
        )
        return (
            large
            | "LargerFirst" >> beam.Map(_larger_first)
            | "SmallStar" >> StarStep("small", *self._hot)
            | "Dedupe" >> beam.Distinct()
        )


def components_in_memory(edges: Iterable[Edge]) -> dict[str, str]:
    """The same rounds on one machine (tests and small inputs): node → root."""
    current = set(edges)
    while True:
        grouped: dict[str, set[str]] = {}
        for a, b in current:
            grouped.setdefault(a, set()).add(b)
            grouped.setdefault(b, set()).add(a)
        large = {e for u, n in grouped.items() for e in large_star(u, n)}
        smaller: dict[str, set[str]] = {}
        for a, b in large:
            hi, lo = _larger_first((a, b))
            smaller.setdefault(hi, set()).add(lo)
        nxt = {e for u, n in smaller.items() for e in small_star(u, n)}
        if nxt == current:
            return {a: b for a, b in current}
        current = nxt


def components_union_find(edges: Iterable[Edge]) -> dict[str, str]:
    """node → root for every node that is not its component's root, where the root is the
    component's smallest node: what the star rounds converge to (their last edge set),
    in one pass over the edges on one machine (union by the smaller root, path halving).
    The driver uses it for edge sets that fit its memory (``MinHashConfig.driver_max_edges``)."""
    parent: dict[str, str] = {}

    def find(node: str) -> str:
        while True:
            up = parent.get(node, node)
            if up == node:
                return node
            grand = parent.get(up, up)
            parent[node] = grand  # path halving
            node = grand

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            if rb < ra:
                ra, rb = rb, ra
            parent[rb] = ra  # the smaller root stays the root
            parent.setdefault(ra, ra)
    roots = {node: find(node) for node in parent}
    return {node: root for node, root in roots.items() if node != root}
