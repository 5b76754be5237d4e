"""fastText models: language identification (lid.176) and supervised text classifiers.

``load(path_or_url)`` checks the file before anything runs; ``predict(texts)`` is batched
(one C++ call per batch). fastText reads one line per example, so newlines are replaced
by spaces, and texts are cut to ``max_chars`` (the first few thousand characters decide
the language and the quality as well as the whole document does, at a fraction of the
cost).
"""

from __future__ import annotations

import logging
import os
import random
import tempfile
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from models.files import ModelError, local_copy, sha256_file

_LOGGER = logging.getLogger(__name__)

__all__ = ["LABEL_PREFIX", "LANGUAGE_ALIASES", "LanguageIdentifier", "TextClassifier", "canonical_language",
           "clean_line", "fit_supervised", "load_fasttext", "train_classifier"]

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


@dataclass
class LanguageIdentifier:
    """fastText language identification: ``predict`` gives (ISO code, probability)."""

    model: object
    path: str
    sha256: str
    max_chars: int = 4000

    @classmethod
    def load(cls, path_or_url: str, max_chars: int = 4000) -> "LanguageIdentifier":
        model, path = _load(path_or_url)
        if not any(label.startswith(LABEL_PREFIX) for label in model.get_labels()[:5]):
            raise ModelError(f"{path_or_url}: no __label__ labels, not a language-ID model")
        return cls(model=model, path=path, sha256=sha256_file(path), max_chars=max_chars)

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
    written to a temporary file, one thread so the result is reproducible)."""
    rows = list(rows)
    random.Random(seed).shuffle(rows)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as fh:
        fh.write("\n".join(rows) + "\n")
    try:
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
