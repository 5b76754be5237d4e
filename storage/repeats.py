"""Upsampled documents in a token version: where the copies of a document go, and how far
apart they land. Pure functions, no I/O, no Beam (the tokenize stage and the benchmarks
use them; so can a reader that checks a version).

A document with ``repeats = r`` is written as r entries (copies 0..r-1) of the same token
array. Copy 0 goes where the document would go without upsampling (bucket ``b0`` of the
global shuffle), so a version without repeats is laid out exactly as before. Copy k goes
to bucket

    (b0 + floor(k * S / r)) mod S        (S shards)

* r <= S: the offsets ``floor(k * S / r)`` grow by at least 1 with k and stay below S, so
  the r copies land in r different shards; consecutive copies are ``floor(S / r)`` or
  ``ceil(S / r)`` shards apart (the wrap from copy r-1 back to copy 0 included), and
  ``floor(S / r)`` is the most any r points on a circle of S places can all be apart.
* r > S: every shard gets ``floor(r / S)`` or ``ceil(r / S)`` of the copies, the most even
  split; inside a shard the copies sit at their own shuffle positions (the shard's order
  is by a per-copy key), not side by side.
"""

from __future__ import annotations

import logging
from typing import Any, Optional, Sequence

_LOGGER = logging.getLogger(__name__)

__all__ = ["check_repeats", "copy_bucket", "copy_buckets", "min_copy_distance", "shard_repeat_stats",
           "upsampling_summary"]


def check_repeats(repeats: Any, cap: int) -> Optional[str]:
    """Why ``repeats`` is not a valid repeat count under ``cap`` (an int in 1..cap, not a
    bool), or None when it is."""
    if isinstance(repeats, bool) or not isinstance(repeats, int):
        return f"repeats must be an integer, got {type(repeats).__name__} {repeats!r}"
    if not 1 <= repeats <= cap:
        return f"repeats {repeats} outside 1..{cap} (tokenize.max_repeats)"
    return None


def copy_bucket(first: int, copy: int, repeats: int, shards: int) -> int:
    """The bucket (shard number) of copy ``copy`` of a document of ``repeats`` copies whose
    copy 0 goes to bucket ``first``, among ``shards`` buckets (the rule above)."""
    if shards < 1 or repeats < 1 or not 0 <= copy < repeats or not 0 <= first < shards:
        raise ValueError(f"copy {copy} of {repeats}, first bucket {first} of {shards}: out of range")
    return (first + copy * shards // repeats) % shards


def copy_buckets(first: int, repeats: int, shards: int) -> list[int]:
    """The buckets of copies 0..repeats-1 (``copy_bucket`` of each)."""
    return [copy_bucket(first, k, repeats, shards) for k in range(repeats)]


def min_copy_distance(buckets: Sequence[int], shards: int) -> int:
    """The smallest distance, in shards around the circle of ``shards`` buckets, between two
    copies of one document (0: two copies share a shard; ``shards`` for a single copy)."""
    if len(buckets) < 2:
        return shards
    ordered = sorted(b % shards for b in buckets)
    gaps = [b - a for a, b in zip(ordered, ordered[1:])] + [ordered[0] + shards - ordered[-1]]
    return min(gaps)


def shard_repeat_stats(entries: Sequence[tuple[int, int, int, Sequence[str]]]) -> dict[str, Any]:
    """What a shard holds of upsampling, from its entries' (tokens, copy, repeats, rules):
    ``repeat_docs`` and ``repeat_tokens`` (entries of copy >= 1 and their tokens),
    ``upsampled_docs`` (copy-0 entries of documents with repeats > 1) and ``rules``:
    rule name → [documents, tokens once, tokens x repeats], counted at each document's
    copy 0 (so exactly once over all shards), a document under every rule it names."""
    repeat_docs = repeat_tokens = upsampled = 0
    rules: dict[str, list[int]] = {}
    for tokens, copy, repeats, names in entries:
        if copy:
            repeat_docs, repeat_tokens = repeat_docs + 1, repeat_tokens + tokens
            continue
        upsampled += repeats > 1
        for name in sorted(set(names)):
            row = rules.setdefault(name, [0, 0, 0])
            row[0], row[1], row[2] = row[0] + 1, row[1] + tokens, row[2] + tokens * repeats
    return {"repeat_docs": repeat_docs, "repeat_tokens": repeat_tokens, "upsampled_docs": upsampled,
            "rules": dict(sorted(rules.items()))}


def merge_repeat_stats(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``shard_repeat_stats`` of a shard from those of its parts (any order): the counts
    and each rule's row summed, rule names sorted."""
    rules: dict[str, list[int]] = {}
    for part in parts:
        for name, row in part["rules"].items():
            total = rules.setdefault(name, [0, 0, 0])
            for i in range(3):
                total[i] += int(row[i])
    return {key: sum(int(p[key]) for p in parts) for key in ("repeat_docs", "repeat_tokens", "upsampled_docs")} | {
        "rules": dict(sorted(rules.items()))}


def upsampling_summary(shards: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The version's upsampling from its shards' records (``num_docs``, ``num_tokens`` and
    the ``shard_repeat_stats`` fields): ``documents`` and ``tokens_before`` (each document
    once), ``tokens_after`` (as written), ``upsampled_docs``, ``repeat_docs``,
    ``repeat_tokens`` and ``rules``: name → ``{documents, tokens_before, tokens_after}``,
    names sorted. The same for the same shards in any order."""
    rules: dict[str, list[int]] = {}
    for shard in shards:
        for name, row in (shard.get("rules") or {}).items():
            total = rules.setdefault(name, [0, 0, 0])
            for i in range(3):
                total[i] += int(row[i])
    entries = sum(int(s["num_docs"]) for s in shards)
    tokens = sum(int(s["num_tokens"]) for s in shards)
    repeat_docs = sum(int(s.get("repeat_docs", 0)) for s in shards)
    repeat_tokens = sum(int(s.get("repeat_tokens", 0)) for s in shards)
    return {"documents": entries - repeat_docs, "upsampled_docs": sum(int(s.get("upsampled_docs", 0)) for s in shards),
            "tokens_before": tokens - repeat_tokens, "tokens_after": tokens, "repeat_docs": repeat_docs,
            "repeat_tokens": repeat_tokens,
            "rules": {name: {"documents": d, "tokens_before": b, "tokens_after": a}
                      for name, (d, b, a) in sorted(rules.items())}}
