"""Feature vectors for the anomaly detector (pure): every quality signal, counts in log scale."""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np

from transforms.doc import Signals

FEATURE_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Signals))
_LOG_SCALED = frozenset({"chars", "words", "lines", "stop_words", "c4_sentences"})


def signal_vector(signals: Signals) -> list[float]:
    return [math.log1p(getattr(signals, name)) if name in _LOG_SCALED else getattr(signals, name)
            for name in FEATURE_NAMES]


def feature_matrix(signals: Sequence[Signals]) -> np.ndarray:
    """One row per document, columns in ``FEATURE_NAMES`` order (float32)."""
    if not signals:
        return np.zeros((0, len(FEATURE_NAMES)), dtype=np.float32)
    return np.asarray([signal_vector(s) for s in signals], dtype=np.float32)
