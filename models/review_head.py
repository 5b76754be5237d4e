"""A supervised head learnt from reviewed documents (issue 39, item 6): an L2-regularised
logistic regression on the anomaly detectors' standardised scores and the quality
signals, fitted by Newton's method (IRLS) in numpy.

The unsupervised detectors rank junk that a machine made well above text; junk that
reads well sentence by sentence (spliced, garbled, boilerplate prose) sits in the band
just under the drop threshold among normal documents. A reviewer's answers on that band
say which combinations of scores and signals mark it, which no unsupervised calibration
can: the head learns them. Features: each detector's score (0 where it did not score: a
language without a centre), one indicator of that, and the signal features, each
standardised by the corpus sample's mean and spread (robust to a queue that is mostly one
class).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

__all__ = ["ReviewHead", "fit_head", "head_features"]

_EPS = 1e-9


def head_features(z: np.ndarray, signals: np.ndarray) -> np.ndarray:
    """[n, detectors + 1 + signals]: detector scores (NaN → 0), the no-centre indicator,
    the signal features."""
    z = np.asarray(z, dtype=np.float64)
    missing = np.isnan(z).all(axis=1, keepdims=True).astype(np.float64)
    return np.concatenate([np.nan_to_num(z, nan=0.0), missing, np.asarray(signals, dtype=np.float64)], axis=1)


@dataclass(frozen=True)
class ReviewHead:
    """``probability`` of junk from detector scores and signals."""

    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    feature_names: tuple[str, ...]
    examples: int  # reviewed documents it learnt from
    junk_share: float  # of them, answered junk
    threshold: float = 0.5  # flags above it: >= 0.5, and at most ``normal_rate`` of the normal answers

    def probability(self, z: np.ndarray, signals: np.ndarray) -> np.ndarray:
        x = (head_features(z, signals) - self.mean) / self.scale
        return 1.0 / (1.0 + np.exp(-np.clip(x @ self.coef + self.intercept, -50, 50)))

    @classmethod
    def from_state(cls, state: dict[str, Any], width: int) -> "ReviewHead":
        """The head of ``state`` (``state()``'s form); ``ValueError`` unless its arrays are
        ``width`` finite numbers and its threshold is in (0, 1)."""
        arrays = {k: np.asarray(state[k], dtype=np.float64) for k in ("mean", "scale", "coef")}
        if any(a.shape != (width,) or not np.isfinite(a).all() for a in arrays.values()):
            raise ValueError(f"mean, scale and coef must be {width} finite numbers")
        threshold = float(state["threshold"])
        if not 0.0 < threshold < 1.0 or not np.isfinite(float(state["intercept"])):
            raise ValueError(f"threshold must be in (0, 1), got {threshold}")
        return cls(mean=arrays["mean"], scale=arrays["scale"], coef=arrays["coef"],
                   intercept=float(state["intercept"]), feature_names=tuple(str(n) for n in state["feature_names"]),
                   examples=int(state["examples"]), junk_share=float(state["junk_share"]), threshold=threshold)

    def state(self) -> dict[str, Any]:
        return {"mean": self.mean.tolist(), "scale": self.scale.tolist(), "coef": self.coef.tolist(),
                "intercept": self.intercept, "feature_names": list(self.feature_names),
                "examples": self.examples, "junk_share": self.junk_share, "threshold": self.threshold}


def fit_head(z: np.ndarray, signals: np.ndarray, junk: Sequence[bool], corpus_z: np.ndarray,
             corpus_signals: np.ndarray, feature_names: Sequence[str], l2: float = 1.0,
             iterations: int = 50, normal_rate: float = 0.02) -> ReviewHead:
    """The head fitted on reviewed documents (``z``, ``signals``, ``junk`` answers);
    ``corpus_*`` (the corpus sample) standardise the features; the decision threshold is
    0.5 or higher, so that at most ``normal_rate`` of the documents answered normal are
    above it. ``ValueError`` unless both answers occur."""
    y = np.asarray(junk, dtype=np.float64)
    if len(y) != len(z) or y.min() == y.max():
        raise ValueError(f"need reviewed documents of both kinds, got {int(y.sum())} junk of {len(y)}")
    reference = head_features(corpus_z, corpus_signals)
    mean = np.median(reference, axis=0)
    q75, q25 = np.percentile(reference, [75, 25], axis=0)
    scale = np.maximum(q75 - q25, reference.std(axis=0))
    scale = np.where(scale > _EPS, scale, 1.0)
    x = (head_features(z, signals) - mean) / scale
    x1 = np.concatenate([x, np.ones((len(x), 1))], axis=1)
    w = np.zeros(x1.shape[1])
    penalty = np.full(x1.shape[1], l2)
    penalty[-1] = 0.0  # the intercept is not shrunk
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(x1 @ w, -50, 50)))
        gradient = x1.T @ (p - y) + penalty * w
        hessian = (x1 * (p * (1 - p))[:, None]).T @ x1 + np.diag(penalty + _EPS)
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    names = tuple(feature_names)
    normal_p = np.sort(1.0 / (1.0 + np.exp(-np.clip(x1[y == 0] @ w, -50, 50))))
    allowed = int(np.floor(normal_rate * len(normal_p)))  # normal answers that may stay above it
    threshold = max(0.5, float(normal_p[len(normal_p) - 1 - allowed]))
    return ReviewHead(mean=mean, scale=scale, coef=w[:-1], intercept=float(w[-1]), feature_names=names,
                      examples=len(y), junk_share=float(y.mean()), threshold=threshold)
