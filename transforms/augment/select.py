"""Which documents an augmentation applies to, and how often a document repeats.

Pure functions of a ``Doc`` and the section (and, for ``top_quality_fraction``, the
quality score cut of this run): deterministic, so a rerun selects the same documents.
"""

from __future__ import annotations

import hashlib
from typing import Optional, Sequence

from transforms.augment.config import Selection, UpsampleRule
from transforms.doc import Doc

__all__ = ["quality_cut", "has_label", "in_sample", "matches", "repeats_for"]


def quality_cut(quantiles: Sequence[float], fraction: float) -> float:
    """The quality score at the top ``fraction`` of a run, from its evenly spaced
    quantiles (minimum first, maximum last): a document at or above it is in the top."""
    if not quantiles:
        return float("-inf")
    index = int(round((1.0 - fraction) * (len(quantiles) - 1)))
    return float(quantiles[index])


def has_label(doc: Doc, pair: str, min_score: float) -> bool:
    """``pair`` is ``set=value``: a human label of that set and value, or a model label
    at least ``min_score`` confident."""
    name, _, value = pair.partition("=")
    return any(label.name == name and label.value == value
               and (label.origin == "human" or label.score >= min_score)
               for label in doc.labels)


def in_sample(doc_id: str, rate: float, seed: int) -> bool:
    """A seeded hash sample: the same documents for the same (rate, seed) on every run
    and engine; raising the rate only adds documents."""
    if rate >= 1.0:
        return True
    digest = hashlib.blake2b(f"augment:{seed}:{doc_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < int(rate * (1 << 64))


def matches(doc: Doc, selection: Selection, cut: Optional[float] = None) -> bool:
    """Whether ``doc`` passes every condition ``selection`` sets. ``cut`` is this run's
    quality cut for ``top_quality_fraction`` (``quality_cut``); needed when it is set."""
    if selection.min_quality is not None and (doc.quality_score is None or doc.quality_score < selection.min_quality):
        return False
    if selection.needs_quantile:
        if cut is None:
            raise ValueError("top_quality_fraction needs this run's quality cut")
        if doc.quality_score is None or doc.quality_score < cut:
            return False
    if selection.max_anomaly is not None and doc.anomaly_score is not None and doc.anomaly_score > selection.max_anomaly:
        return False
    if selection.labels and not any(has_label(doc, pair, selection.min_label_score) for pair in selection.labels):
        return False
    if selection.languages and doc.lang not in selection.languages:
        return False
    return in_sample(doc.id, selection.sample_rate, selection.seed)


def repeats_for(doc: Doc, rules: Sequence[UpsampleRule], max_repeats: int,
                cuts: Sequence[Optional[float]]) -> tuple[int, tuple[str, ...]]:
    """(repeat count, names of the matching rules): the largest matching rule's repeat,
    capped at ``max_repeats``; (1, ()) when none matches. ``cuts[i]`` is rule i's
    quality cut (None when it needs none)."""
    names, repeat = [], 1
    for rule, cut in zip(rules, cuts):
        if matches(doc, rule.when, cut):
            names.append(rule.name)
            repeat = max(repeat, rule.repeat)
    return min(repeat, max_repeats), tuple(names)
