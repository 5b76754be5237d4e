"""Feature vectors of the signals autoencoder (pure): an explicit, versioned feature list.

``FEATURE_NAMES`` names the ``Signals`` fields the detector reads, in order; counts are
taken in log scale. A new signal in ``Signals`` does not change it, so trained models keep
loading; changing the list means a new ``FEATURE_SET_VERSION`` (models trained on another
set are refused with "retrain").

So does changing what a listed signal means for some documents: the words and stop words
of a language (``transforms/clean/language_rules.json``, the segmenters of ``segment.py``)
and what ends a line or a sentence (``signals.py``). ``SIGNALS_FINGERPRINT`` is the hash of
those; a test fails when it changes, so a change to them comes with a new version.

* v1 (2026-12-01): whitespace words and Gopher's English stop words for every language.
* v2 (2026-12-03): words per language (jieba, newmm, kiwi, characters), each language's
  own stop words (67 tables), CJK, danda and Khmer sentence ends.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from transforms.doc import Signals

FEATURE_SET_VERSION = 2
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
# signals_fingerprint() when FEATURE_SET_VERSION was last set
SIGNALS_FINGERPRINT = "7e2f17a7fcc2d706c86c8694a5038d34082f361173ef9e2fc1a641d45520e846"
_LOG_SCALED = frozenset({"chars", "words", "lines", "stop_words", "c4_sentences"})


def signals_fingerprint() -> str:
    """sha256 of what the signals read per language: the fitted tables, the segmenter of
    each language and script, the line and sentence ends."""
    import hashlib
    import json

    from transforms.clean import segment, signals
    from transforms.clean.language_rules import LANGUAGE_RULES_FILE

    parts = {"tables": hashlib.sha256(LANGUAGE_RULES_FILE.read_bytes()).hexdigest(),
             "languages": segment.LANGUAGE_SEGMENTERS, "scripts": segment.SCRIPT_SEGMENTERS,
             "terminal": list(signals.TERMINAL_PUNCT), "sentence": signals._SENTENCE_PUNCT}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def signal_vector(signals: Signals) -> list[float]:
    return [math.log1p(getattr(signals, name)) if name in _LOG_SCALED else getattr(signals, name)
            for name in FEATURE_NAMES]


def feature_matrix(signals: Sequence[Signals]) -> np.ndarray:
    """One row per document, columns in ``FEATURE_NAMES`` order (float32)."""
    if not signals:
        return np.zeros((0, len(FEATURE_NAMES)), dtype=np.float32)
    return np.asarray([signal_vector(s) for s in signals], dtype=np.float32)


# The signals across sentences (``transforms/clean/coherence.py``) the anomaly detector's
# cohesion and language_mix detectors read: models.anomaly.CROSS_SIGNALS (a test holds
# them equal; models/ does not import transforms/). Not in FEATURE_NAMES: the signals
# autoencoder and its feature set are unchanged.
CROSS_FEATURES: tuple[str, ...] = ("sentence_gap", "sentence_other_lang")


def cross_matrix(signals: Sequence[Optional[Signals]]) -> np.ndarray:
    """One row per document, columns in ``CROSS_FEATURES`` order (float64; zeros for a
    document without signals)."""
    return np.array([[0.0, 0.0] if s is None else [s.sentence_gap, s.sentence_other_lang] for s in signals],
                    dtype=np.float64).reshape(len(signals), len(CROSS_FEATURES))
