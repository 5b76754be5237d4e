"""The engine's own floor (issue 37, item 1): the job with every pure function of its
stages replaced by a no-op that emits elements of the same shape, so the same documents
cross the same reads, shuffles and writes, and what is left is the framework.

Replaced (each a few hundred nanoseconds a document instead of the work):

* extract: ``normalize_text`` returns the text as read (JSON parsing stays: it is the
  reader's).
* dedup_exact: ``text_keys`` / ``url_keys`` are Python's ``hash`` of the raw value (the
  floor run sets PYTHONHASHSEED, so every process agrees): exact copies still meet, the
  normalisation and SHA-1/BLAKE2b are gone.
* dedup_minhash: ``MinHasher.signatures`` are random (no shingling or hashing): no
  near-duplicates are found, so every document goes on to the final join.
* tokenize: sentencepiece's ``encode`` returns 2 tokens per 7 characters (the job's model
  averages ~3.5 characters a token) of one id.

So the floor's later stages see slightly more documents than the real run's (nothing is
dropped as a near-duplicate): a floor a little above the true one. ``install`` patches the
modules of this process; ``benchmarks/floor_site/sitecustomize.py`` calls it in every
process of a run started with ``floor_env()``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
VARIABLE = "TOKENFACTORY_BENCH_FLOOR"
_MASK = (1 << 64) - 1


def floor_env(base: Optional[dict[str, str]] = None) -> dict[str, str]:
    """The environment of a floor run: the site folder first on PYTHONPATH, the switch on,
    one hash seed for every process."""
    env = dict(os.environ if base is None else base)
    paths = [str(ROOT / "benchmarks" / "floor_site"), str(ROOT)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env.update(PYTHONPATH=os.pathsep.join(paths), PYTHONHASHSEED="0", **{VARIABLE: "1"})
    return env


def _keys(values: Sequence[Any]) -> np.ndarray:
    from transforms.dedup.exact_keys import KEY_WORDS

    out = np.zeros((len(values), KEY_WORDS), dtype=np.uint64)
    out[:, 0] = [hash(v) & _MASK for v in values]
    return out


def text_keys(texts: Sequence[str]) -> np.ndarray:
    return _keys(texts)


def url_keys(urls: Sequence[Optional[str]]) -> tuple[np.ndarray, np.ndarray]:
    has = np.array([bool(u) for u in urls], dtype=bool)
    return has, _keys([u for u in urls if u])


_RNG = np.random.default_rng()


def signatures(self: Any, texts: Sequence[str]) -> np.ndarray:
    return _RNG.integers(0, 0xFFFFFFFF, size=(len(texts), self.num_perm), dtype=np.uint32)


def encode(self: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
    if isinstance(input, str):
        return [5] * (len(input) * 2 // 7)
    return [[5] * (len(t) * 2 // 7) for t in input]


def install() -> None:
    """Patches this process's modules (idempotent)."""
    import sentencepiece as spm

    from transforms.dedup import exact_files, minhash
    from transforms.extract import extract

    extract.normalize_text = lambda text: text
    exact_files.text_keys, exact_files.url_keys = text_keys, url_keys
    minhash.MinHasher.signatures = signatures
    spm.SentencePieceProcessor.encode = encode
    spm.SentencePieceProcessor.Encode = encode
