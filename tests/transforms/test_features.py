"""The signals autoencoder's feature vector (transforms/clean/features.py): an explicit,
versioned list, so a new quality signal never changes a trained model's inputs."""

from __future__ import annotations

import dataclasses

import numpy as np

from transforms.clean.features import (
    FEATURE_NAMES,
    FEATURE_SET,
    SIGNALS_FINGERPRINT,
    feature_matrix,
    signal_vector,
    signals_fingerprint,
)
from transforms.clean.signals import compute_signals
from transforms.doc import Signals

# signals-v2's names, in order (v1's list, read per language since v2): trained models
# read their inputs by position. Another list is another FEATURE_SET_VERSION (and models
# trained on another set are refused: tests/models).
SIGNALS_V2 = (
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


def test_the_feature_list_is_explicit_and_versioned():
    assert (FEATURE_SET, FEATURE_NAMES) == ("signals-v2", SIGNALS_V2)


def test_what_the_signals_read_per_language_is_pinned_to_the_feature_set():
    """A refit of language_rules.json, another segmenter or another sentence end changes
    the signals of some documents: bump FEATURE_SET_VERSION and SIGNALS_FINGERPRINT
    together, so detectors trained on the old signals are refused ("retrain")."""
    assert signals_fingerprint() == SIGNALS_FINGERPRINT


def test_a_new_signal_does_not_change_the_feature_vector():
    extended_type = dataclasses.make_dataclass("ExtendedSignals", [("new_signal", float, 0.0)],
                                               bases=(Signals,), frozen=True)
    signals = compute_signals("One line of text. Another line, with 7 words!\n" * 3)
    extended = extended_type(**vars(signals), new_signal=123.0)
    assert signal_vector(extended) == signal_vector(signals)
    matrix = feature_matrix([extended, signals])
    assert matrix.shape == (2, len(SIGNALS_V2)) and np.array_equal(matrix[0], matrix[1])
