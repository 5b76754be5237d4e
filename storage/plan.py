"""The loader's plan, pure functions of (seed, epoch, the indexes): which shards form a
group, in which order windows and datasets come; and the position ids of a batch of
windows. No I/O, no torch."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

_LOGGER = logging.getLogger(__name__)

__all__ = ["EpochTokens", "Group", "Source", "check_same_tokenizer", "mix_schedule", "position_ids",
           "shard_permutation", "window_locations", "window_permutation", "window_repeat_shares", "windows_in"]


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
    repeat_tokens: tuple[int, ...] = ()  # per shard, index.json's repeat_tokens (empty: none)

    @property
    def total(self) -> int:
        return sum(self.tokens)

    def repeat_share(self, shard: int) -> float:
        """The share of shard ``shard``'s tokens that are copies 1.. of upsampled documents."""
        if not self.repeat_tokens or not self.tokens[shard]:
            return 0.0
        return self.repeat_tokens[shard] / self.tokens[shard]


@dataclass(frozen=True)
class EpochTokens:
    """A rank's tokens in (part of) an epoch: ``samples`` windows, ``tokens`` the tokens
    they train on (targets: ``seq_len`` a window in concat packing, the real tokens but
    the first in document packing), ``repeat_tokens`` how many of those are estimated to
    come from copies 1.. of upsampled documents (each window's tokens times the repeat
    share, ``repeat_tokens / num_tokens`` in index.json, of the shard it starts in: the
    index records repeats per shard, not per token)."""

    epoch: int
    batches: int
    samples: int
    tokens: int
    repeat_tokens: int

    @property
    def repeat_share(self) -> float:
        return self.repeat_tokens / self.tokens if self.tokens else 0.0

    @property
    def unique_tokens(self) -> int:
        return self.tokens - self.repeat_tokens


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
    if len(lengths) == 1:
        return [(0, i) for i in range(lengths[0])]
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


def window_locations(plan: np.ndarray, groups: Sequence[Sequence[Group]], seq_len: int) -> np.ndarray:
    """Where each window of a concat-packed ``plan`` ((samples, 3) rows of stream, group,
    window) starts: (samples, 3) int64 rows of the group's number over all streams, the
    shard in the group and the first token in that shard; the shard is ``-1 - shard``
    when the window runs on into the next shard. One ``searchsorted`` over every shard
    boundary of the epoch (all groups laid end to end), no Python step per sample."""
    if len(plan) == 0:
        return np.zeros((0, 3), dtype=np.int64)
    flat = [group for stream_groups in groups for group in stream_groups]
    first_group = np.cumsum([0] + [len(g) for g in groups])[:-1]
    first_shard = np.cumsum([0] + [len(g.shards) for g in flat])
    bounds = np.concatenate(([0], np.cumsum([t for g in flat for t in g.tokens], dtype=np.int64)))
    gid = first_group[plan[:, 0]] + plan[:, 1]
    start = bounds[first_shard[gid]] + plan[:, 2] * seq_len
    shard = np.searchsorted(bounds, start, side="right") - 1  # the last shard starting at or before
    local = shard - first_shard[gid]
    crosses = start + seq_len + 1 > bounds[shard + 1]
    return np.stack([gid, np.where(crosses, -1 - local, local), start - bounds[shard]], axis=1)


def window_repeat_shares(locations: np.ndarray, groups: Sequence[Sequence[Group]]) -> np.ndarray:
    """The repeat share (``Group.repeat_share``) of the shard each window of
    ``window_locations`` starts in, as float64, one numpy gather over the epoch's shards."""
    if len(locations) == 0:
        return np.zeros(0, dtype=np.float64)
    flat = [group for stream_groups in groups for group in stream_groups]
    shares = np.array([g.repeat_share(i) for g in flat for i in range(len(g.shards))], dtype=np.float64)
    first_shard = np.cumsum([0] + [len(g.shards) for g in flat])
    local = np.where(locations[:, 1] >= 0, locations[:, 1], -1 - locations[:, 1])
    return shares[first_shard[locations[:, 0]] + local]


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


def position_ids(tokens: np.ndarray, eos_id: int) -> np.ndarray:
    """int64 positions of a (rows, width) batch of windows: counting from 0 at the start of
    each row and again after every ``eos_id``.

    Whole-batch numpy steps, no Python step per row or per document: the positions are
    ``i - start of i's segment`` over the flattened batch, the segment starts being the row
    starts and the tokens after each EOS (``np.repeat`` of the starts). A per-row
    ``np.maximum.accumulate`` version cost ~8x more (~10 ns a token)."""
    rows, width = tokens.shape
    size = rows * width
    after = np.flatnonzero(tokens.reshape(-1) == eos_id) + 1
    after = after[after % width != 0]  # an EOS closing a row: the next row starts at 0 anyway
    starts = np.concatenate((np.arange(0, size, width), after))
    starts.sort()
    return (np.arange(size, dtype=np.int64) - np.repeat(starts, np.diff(starts, append=size))).reshape(rows, width)
