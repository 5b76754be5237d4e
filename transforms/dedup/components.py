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
from typing import Iterable, Iterator

import apache_beam as beam

Edge = tuple[str, str]


def node_key(doc_id: str, previous_run: bool = False, quality: float | None = None) -> str:
    """Sortable node name: ``<0 old|1 new><rank>|<id>``; ``quality`` ranks best first."""
    rank = "" if quality is None else f"{1.0 - min(max(quality, 0.0), 1.0):.6f}"
    return f"{0 if previous_run else 1}{rank}|{doc_id}"


def doc_id_of(node: str) -> str:
    return node.split("|", 1)[1]


def large_star(node: str, neighbours: Iterable[str]) -> Iterator[Edge]:
    """Connect every larger neighbour of ``node`` to the smallest of node + neighbours."""
    nbrs = set(neighbours)
    smallest = min(nbrs | {node})
    for v in nbrs:
        if v > node and v != smallest:
            yield v, smallest


def small_star(node: str, smaller: Iterable[str]) -> Iterator[Edge]:
    """Connect ``node`` and its smaller-or-equal neighbours to the smallest of them."""
    group = set(smaller) | {node}
    smallest = min(group)
    for v in group:
        if v != smallest:
            yield v, smallest


def edge_checksum(edge: Edge) -> int:
    return int.from_bytes(hashlib.blake2b(f"{edge[0]}\x00{edge[1]}".encode(), digest_size=8).digest(), "big")


def _both_ways(edge: Edge) -> Iterator[Edge]:
    yield edge
    yield edge[1], edge[0]


def _larger_first(edge: Edge) -> Edge:
    a, b = edge
    return (a, b) if a > b else (b, a)


class StarRound(beam.PTransform):
    """One large-star + small-star round: ``PCollection[Edge]`` → ``PCollection[Edge]``."""

    def expand(self, edges: beam.PCollection) -> beam.PCollection:
        large = (
            edges
            | "BothWays" >> beam.FlatMap(_both_ways)
            | "GroupLarge" >> beam.GroupByKey()
            | "LargeStar" >> beam.FlatMapTuple(large_star)
        )
        return (
            large
            | "LargerFirst" >> beam.Map(_larger_first)
            | "GroupSmall" >> beam.GroupByKey()
            | "SmallStar" >> beam.FlatMapTuple(small_star)
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
