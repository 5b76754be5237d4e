"""fastText models: language identification (lid.176) and supervised text classifiers.

``load(path_or_url)`` checks the file before anything runs; ``predict(texts)`` is batched
(one C++ call per batch). fastText reads one line per example, so newlines are replaced
by spaces, and texts are cut to ``max_chars`` (the first few thousand characters decide
the quality as well as the whole document does, at a fraction of the cost). Language ID
of a document reads up to ``max_windows`` windows spread over it (``lid_windows``), so a
boilerplate header does not decide the language of the article under it, and records the
second language of a mixed document (``LanguageMix``).
"""

from __future__ import annotations

import logging
import os
import random
import re
import sys
import tempfile
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from models.files import ModelError, local_copy, sha256_file
from models.progress import Working

_LOGGER = logging.getLogger(__name__)

__all__ = ["LABEL_PREFIX", "LANGUAGE_ALIASES", "LanguageIdentifier", "LanguageMix", "TextClassifier",
           "canonical_language", "clean_line", "combine_windows", "fit_supervised", "lid_windows",
           "load_fasttext", "train_classifier"]

LABEL_PREFIX = "__label__"


def load_fasttext():
    import fasttext

    fasttext.FastText.eprint = lambda *args, **kwargs: None  # silence load warnings
    return fasttext


def clean_line(text: str, max_chars: int) -> str:
    return text[:max_chars].replace("\n", " ").replace("\r", " ")


def _load(path_or_url: str):
    path = local_copy(path_or_url)
    try:
        return load_fasttext().load_model(path), path
    except Exception as exc:  # fastText raises ValueError / RuntimeError on bad files
        raise ModelError(f"not a fastText model: {path_or_url}: {exc}") from exc


# Codes a config may use for a language that lid.176 labels otherwise: Norwegian Bokmål is
# "no" in lid.176 (a config listing "nb" silently dropped every Norwegian document), and
# the retired ISO 639-1 codes that older tools still emit.
LANGUAGE_ALIASES = {"nb": "no", "iw": "he", "in": "id", "ji": "yi", "jw": "jv", "mo": "ro", "fil": "tl",
                    "zh-cn": "zh", "zh-tw": "zh", "zh-hans": "zh", "zh-hant": "zh"}


def canonical_language(code: str) -> str:
    """The label lid.176 uses for ``code`` (lower case, ``_`` as ``-``, aliases resolved)."""
    code = code.strip().lower().replace("_", "-")
    return LANGUAGE_ALIASES.get(code, code)


_SPACE = re.compile(r"\s")
_SNAP_CHARS = 64  # a window boundary moves at most this far forward to reach a whitespace


def _after_space(text: str, pos: int, limit: int) -> int:
    """``pos`` moved just past the first whitespace in ``text[pos:pos + limit]`` (a window
    then starts on a word), or ``pos`` itself where there is none (Chinese, Japanese)."""
    match = _SPACE.search(text, pos, pos + limit)
    return match.end() if match else pos


def lid_windows(text: str, window_chars: int, max_windows: int) -> list[str]:
    """The windows language ID reads from ``text``.

    A text of up to ``window_chars`` characters, or any text when ``max_windows`` is 1, is
    one window: its first ``window_chars`` characters (the single-window behaviour, kept
    exactly). A longer text is cut into ``n = min(max_windows, ceil(len / window_chars))``
    consecutive segments of equal length (each boundary moved forward to just past the next
    whitespace, at most 64 characters), and each segment's first ``window_chars``
    characters are one window: the windows cover the whole text when it is at most
    ``max_windows * window_chars`` long, and sample it evenly when it is longer.
    """
    n = min(max_windows, -(-len(text) // window_chars))
    if n <= 1:
        return [text[:window_chars]]
    limit = min(_SNAP_CHARS, len(text) // n // 2)  # boundaries stay in order
    cuts = [0] + [_after_space(text, len(text) * i // n, limit) for i in range(1, n)] + [len(text)]
    return [text[start:min(end, start + window_chars)] for start, end in zip(cuts, cuts[1:])]


@dataclass(frozen=True)
class LanguageMix:
    """A document's languages: the main one with its score, and the second one with its share.

    ``score`` is the sum over the windows labelled ``lang`` of window length × fastText's
    probability, divided by the total length of all windows (the main language's share of
    the text times its mean confidence; with one window, fastText's probability).
    ``lang2_share`` is the length share of the windows labelled ``lang2`` ("" and 0.0 when
    every window has the main language).
    """

    lang: str
    score: float
    lang2: str = ""
    lang2_share: float = 0.0


def combine_windows(preds: Sequence[tuple[str, float]], lengths: Sequence[int]) -> LanguageMix:
    """The ``LanguageMix`` of one document from its windows' (language, probability) and
    lengths. Languages rank by length share, then by summed length × probability, then
    by the first window that has them."""
    if len(preds) == 1:
        return LanguageMix(preds[0][0], preds[0][1])
    share: dict[str, int] = {}
    mass: dict[str, float] = {}
    for (lang, prob), length in zip(preds, lengths):
        share[lang] = share.get(lang, 0) + length
        mass[lang] = mass.get(lang, 0.0) + length * prob
    total = max(sum(lengths), 1)
    ranked = sorted(share, key=lambda lang: (-share[lang], -mass[lang]))  # stable: first window wins ties
    lang = ranked[0]
    lang2 = ranked[1] if len(ranked) > 1 else ""
    return LanguageMix(lang, mass[lang] / total, lang2, share[lang2] / total if lang2 else 0.0)


@dataclass
class LanguageIdentifier:
    """fastText language identification: ``predict`` gives (ISO code, probability) of each
    text's first ``max_chars`` characters; ``identify`` the ``LanguageMix`` of each text
    over up to ``max_windows`` windows of ``max_chars`` (``lid_windows``)."""

    model: object
    path: str
    sha256: str
    max_chars: int = 4000
    max_windows: int = 1

    @classmethod
    def load(cls, path_or_url: str, max_chars: int = 4000, max_windows: int = 1) -> "LanguageIdentifier":
        model, path = _load(path_or_url)
        if not any(label.startswith(LABEL_PREFIX) for label in model.get_labels()[:5]):
            raise ModelError(f"{path_or_url}: no __label__ labels, not a language-ID model")
        return cls(model=model, path=path, sha256=sha256_file(path), max_chars=max_chars,
                   max_windows=max_windows)

    @property
    def labels(self) -> frozenset[str]:
        """The language codes the model can emit."""
        return frozenset(label[len(LABEL_PREFIX):] for label in self.model.get_labels())

    def predict(self, texts: Sequence[str]) -> list[tuple[str, float]]:
        if not texts:
            return []
        labels, probs = self.model.predict([clean_line(t, self.max_chars) for t in texts], k=1)
        return [((lab[0][len(LABEL_PREFIX):] if lab else ""), float(min(p[0], 1.0)) if len(p) else 0.0)
                for lab, p in zip(labels, probs)]

    def identify(self, texts: Sequence[str]) -> list[LanguageMix]:
        """The ``LanguageMix`` of each text: every window of every text in one fastText call."""
        per_text = [lid_windows(t, self.max_chars, self.max_windows) for t in texts]
        preds = self.predict([w for windows in per_text for w in windows])
        mixes, start = [], 0
        for windows in per_text:
            mixes.append(combine_windows(preds[start:start + len(windows)], [len(w) for w in windows]))
            start += len(windows)
        return mixes


@dataclass
class TextClassifier:
    """A fastText supervised binary classifier; ``predict`` gives P(positive label)."""

    model: object
    path: str
    sha256: str
    positive: str = "hq"
    max_chars: int = 8000

    @classmethod
    def load(cls, path_or_url: str, positive: str = "hq", max_chars: int = 8000) -> "TextClassifier":
        model, path = _load(path_or_url)
        labels = [label[len(LABEL_PREFIX):] for label in model.get_labels()]
        if positive not in labels:
            raise ModelError(f"{path_or_url}: label {positive!r} not in model labels {labels}")
        return cls(model=model, path=path, sha256=sha256_file(path), positive=positive,
                   max_chars=max_chars)

    def predict(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0)
        labels, probs = self.model.predict([clean_line(t, self.max_chars) for t in texts], k=2)
        out = np.zeros(len(texts))
        target = LABEL_PREFIX + self.positive
        for i, (labs, ps) in enumerate(zip(labels, probs)):
            for lab, p in zip(labs, ps):
                if lab == target:
                    out[i] = min(float(p), 1.0)
        return out


def fit_supervised(rows: list[str], seed: int, **params: object) -> object:
    """A fastText supervised model from ``__label__X text`` rows (shuffled with ``seed``,
    written to a temporary file, one thread so the result is reproducible). Progress: fastText's
    own line on a terminal, else the elapsed time every few seconds."""
    rows = list(rows)
    random.Random(seed).shuffle(rows)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as fh:
        fh.write("\n".join(rows) + "\n")
    try:
        if sys.stderr.isatty():  # fastText's own progress line: rate, loss and ETA
            return load_fasttext().train_supervised(input=fh.name, seed=seed, thread=1, verbose=2, **params)
        with Working(f"fastText training on {len(rows):,} examples"):
            return load_fasttext().train_supervised(input=fh.name, seed=seed, thread=1, verbose=0, **params)
    finally:
        os.unlink(fh.name)


def train_classifier(positive: Iterable[str], negative: Iterable[str], out_path: str,
                     positive_label: str = "hq", negative_label: str = "cc", seed: int = 0,
                     epoch: int = 5, lr: float = 0.1, word_ngrams: int = 2, dim: int = 64,
                     min_count: int = 2, max_chars: int = 8000) -> dict[str, object]:
    """Trains a fastText classifier (the DCLM recipe: reference text vs random crawl text),
    saves it to ``out_path`` and returns its metadata (counts, hash, hyper-parameters)."""
    rows = [f"{LABEL_PREFIX}{positive_label} {clean_line(t, max_chars)}" for t in positive if t.strip()]
    n_pos = len(rows)
    rows += [f"{LABEL_PREFIX}{negative_label} {clean_line(t, max_chars)}" for t in negative if t.strip()]
    n_neg = len(rows) - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"need positive and negative examples, got {n_pos} and {n_neg}")
    model = fit_supervised(rows, seed, epoch=epoch, lr=lr, wordNgrams=word_ngrams, dim=dim,
                           minCount=min_count)
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    tmp_out = out_path + ".tmp"
    model.save_model(tmp_out)
    os.replace(tmp_out, out_path)
    return {"positives": n_pos, "negatives": n_neg, "sha256": sha256_file(out_path),
            "positive_label": positive_label, "epoch": epoch, "lr": lr, "word_ngrams": word_ngrams,
            "dim": dim, "seed": seed}
