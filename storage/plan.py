"""The loader's plan, pure functions of (seed, epoch, the indexes): which shards form a
group, in which order windows and datasets come. No I/O, no torch."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

_LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class Source:
    """One dataset version: its ``index.json`` URL and mixing weight."""

    index_url: str
    weight: float = 1.0


@dataclass(frozen=True)
class Group:
    """A run of consecutive shards (in epoch order) cut into windows together."""

    stream: int
    shards: tuple[str, ...]
    tokens: tuple[int, ...]

    @property
    def total(self) -> int:
        return sum(self.tokens)


def shard_permutation(num_shards: int, seed: int, epoch: int, stream: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch, stream, 0]).permutation(num_shards)


def window_permutation(num_windows: int, seed: int, epoch: int, stream: int, group: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch, stream, 1, group]).permutation(num_windows)


def windows_in(tokens: int, seq_len: int) -> int:
    """Windows of ``seq_len + 1`` tokens at stride ``seq_len`` in a stream of ``tokens``."""
    return max(0, (tokens - 1) // seq_len)


def mix_schedule(lengths: Sequence[int], weights: Sequence[float]) -> list[tuple[int, int]]:
    """(stream, i-th sample of that stream) by smooth weighted round robin, until the
    first stream runs out."""
    total = sum(weights)
    credit = [0.0] * len(lengths)
    taken = [0] * len(lengths)
    order = []
    while True:
        for s, w in enumerate(weights):
            credit[s] += w
        s = max(range(len(credit)), key=lambda k: (credit[k], -k))
        if taken[s] >= lengths[s]:
            return order
        credit[s] -= total
        order.append((s, taken[s]))
        taken[s] += 1


def check_same_tokenizer(sources: Sequence[Source], indexes: Sequence[dict[str, Any]]) -> None:
    """Mixing datasets of two tokenizers would feed one model two meanings of each id."""
    seen: dict[str, str] = {}
    for source, index in zip(sources, indexes):
        tokenizer = index.get("tokenizer")
        sha = tokenizer.get("sha256") if isinstance(tokenizer, dict) else None
        if sha:
            seen.setdefault(sha, source.index_url)
    if len(seen) > 1:
        raise ValueError("sources use different tokenizers: " +
                         ", ".join(f"{url} (tokenizer sha256 {sha[:12]}...)" for sha, url in seen.items()))
