"""The peer detector: CCNet's perplexity (Wenzek et al. 2020), a KenLM 5-gram over
sentencepiece tokens, trained on the same reference corpus as our language model.

As in CCNet (``cc_net/perplexity.py``): text is tokenized with a sentencepiece model
trained on the reference (unigram), one line per paragraph; the score of a document is
``10 ** (-sum of the lines' log10 probabilities / (tokens + lines))``, KenLM adding the
end-of-sentence of every line. ``lmplz`` (KenLM's C++ estimator, modified Kneser-Ney)
builds the 5-gram; the ``kenlm`` Python module (PyPI) queries it. ``make bench-env``
installs both into ``.bench-venv`` (benchmarks/setup_peers.sh).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Sequence

import numpy as np

_LOGGER = logging.getLogger(__name__)


def find_lmplz() -> str:
    """``lmplz`` beside this Python (a venv's bin/) or on the PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "lmplz")
    found = here if os.access(here, os.X_OK) else shutil.which("lmplz")
    if not found:
        raise FileNotFoundError("lmplz (KenLM's estimator) not found beside this Python or on "
                                "the PATH: run `make bench-env` (benchmarks/setup_peers.sh)")
    return found


class KenLMPerplexity:
    """A sentencepiece tokenizer and a KenLM 5-gram trained on a reference corpus."""

    def __init__(self, workdir: str, order: int = 5) -> None:
        self._dir = workdir
        self._order = order
        self._sp: object = None
        self._lm: object = None

    def train(self, reference: Sequence[str], vocab_size: int = 8000, seed: int = 0) -> None:
        import kenlm
        import sentencepiece as spm

        corpus = os.path.join(self._dir, "reference.txt")
        with open(corpus, "w", encoding="utf-8") as fh:
            for text in reference:
                for line in text.splitlines():
                    if line.strip():
                        fh.write(line.strip() + "\n")
        prefix = os.path.join(self._dir, "sp")
        spm.SentencePieceTrainer.train(input=corpus, model_prefix=prefix, vocab_size=vocab_size,
                                       model_type="unigram", character_coverage=0.9995,
                                       input_sentence_size=2_000_000, shuffle_input_sentence=True,
                                       seed_sentencepiece_size=200_000, minloglevel=2,
                                       num_threads=2)
        self._sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
        pieces = os.path.join(self._dir, "reference.sp")
        with open(corpus, encoding="utf-8") as src, open(pieces, "w", encoding="utf-8") as dst:
            for line in src:
                dst.write(" ".join(self._sp.encode(line.strip(), out_type=str)) + "\n")
        arpa = os.path.join(self._dir, "lm.arpa")
        with open(pieces, "rb") as src, open(arpa, "wb") as dst:
            subprocess.run([find_lmplz(), "-o", str(self._order), "--discount_fallback", "-S", "20%",
                            "-T", self._dir], stdin=src, stdout=dst, stderr=subprocess.DEVNULL,
                           check=True)
        self._lm = kenlm.Model(arpa)

    def perplexity(self, texts: Sequence[str], max_chars: int = 0) -> np.ndarray:
        """CCNet's document perplexity (of the first ``max_chars`` characters when > 0)."""
        out = np.zeros(len(texts))
        for i, text in enumerate(texts):
            if max_chars:
                text = text[:max_chars]
            log_score, length = 0.0, 0
            for line in text.splitlines():
                if not line.strip():
                    continue
                pieces = self._sp.encode(line.strip(), out_type=str)  # type: ignore[attr-defined]
                log_score += self._lm.score(" ".join(pieces))  # type: ignore[attr-defined]
                length += len(pieces) + 1
            out[i] = 10.0 ** (-log_score / length) if length else 0.0
        return out


def trained_peer(reference: Sequence[str], seed: int = 0) -> tuple[KenLMPerplexity, tempfile.TemporaryDirectory]:
    """A trained peer and the temporary directory holding its files (keep it alive)."""
    tmp = tempfile.TemporaryDirectory(prefix="kenlm-peer-")
    peer = KenLMPerplexity(tmp.name)
    peer.train(reference, seed=seed)
    return peer, tmp
