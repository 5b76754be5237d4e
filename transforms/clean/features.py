"""Feature vectors of the signals autoencoder (pure): an explicit, versioned feature list.

``FEATURE_NAMES`` names the ``Signals`` fields the detector reads, in order; counts are
taken in log scale. A new signal in ``Signals`` does not change it, so trained models keep
loading; changing the list means a new ``FEATURE_SET_VERSION`` (models trained on another
set are refused with "retrain").
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from transforms.doc import Signals

FEATURE_SET_VERSION = 1
FEATURE_NAMES: tuple[str, ...] = (
    "chars", "words", "lines", "mean_word_length", "symbol_word_ratio", "bullet_lines_ratio",
    "ellipsis_lines_ratio", "alpha_words_ratio", "stop_words", "dup_line_frac", "dup_para_frac",
    "dup_line_char_frac", "dup_para_char_frac", "top_2gram_char_frac", "top_3gram_char_frac",
    "top_4gram_char_frac", "dup_5gram_char_frac", "dup_6gram_char_frac", "dup_7gram_char_frac",
    "dup_8gram_char_frac", "dup_9gram_char_frac", "dup_10gram_char_frac", "c4_dropped_lines_frac",
    "c4_sentences", "c4_lorem_ipsum", "c4_curly_bracket", "fineweb_line_punct_ratio",
    "fineweb_short_line_ratio", "fineweb_dup_line_char_ratio", "fineweb_newline_word_ratio",
    "upper_ratio", "digit_ratio", "non_ascii_ratio", "char_entropy", "mojibake_ratio", "url_ratio",
    "unique_word_ratio",
)
FEATURE_SET = f"signals-v{FEATURE_SET_VERSION}"
_LOG_SCALED = frozenset({"chars", "words", "lines", "stop_words", "c4_sentences"})


def signal_vector(signals: Signals) -> list[float]:
    return [math.log1p(getattr(signals, name)) if name in _LOG_SCALED else getattr(signals, name)
            for name in FEATURE_NAMES]


def feature_matrix(signals: Sequence[Signals]) -> np.ndarray:
    """One row per document, columns in ``FEATURE_NAMES`` order (float32)."""
    if not signals:
        return np.zeros((0, len(FEATURE_NAMES)), dtype=np.float32)
    return np.asarray([signal_vector(s) for s in signals], dtype=np.float32)
