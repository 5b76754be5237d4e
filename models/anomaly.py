"""The learned anomaly detector: four unsupervised detectors, one calibrated score.

* ``perplexity``: a small causal language model over sentencepiece tokens
  (``models/textlm.py``) trained on a reference corpus; the NLL per byte of a document's
  first N tokens, centred per language.
* ``representation``: an autoencoder over the language model's mean hidden state,
  trained on the reference; log reconstruction error, centred per language.
* ``signals``: an autoencoder over the document's quality signals (an explicit,
  versioned feature list), trained on the reference and the corpus sample's documents
  that the rules keep (unlabelled, contamination unknown: trimmed loss); log
  reconstruction error, centred per language.
* ``context``: the language model's NLL per byte minus the NLL per byte of the same
  tokens under the reference's unigram distribution (``models/textlm.py``), centred per
  language: how little the context predicted beyond the pieces' own frequencies (word
  salad, templates and placeholder text are common pieces in no order a text has).
* ``cohesion``: the share of sentences sharing no content word with the two before
  them (``transforms/clean/coherence.py``, the ``sentence_gap`` signal), centred per
  language: sentences taken from many documents, each fluent on its own.
* ``language_mix``: the share of sentences language ID puts in another language than
  the document (the ``sentence_other_lang`` signal), centred per language: a different
  language in every sentence. These two read across sentences; the first four read
  tokens, 63 at a time, and never see that sentences do not belong together.

Per-language centring (CCNet keeps one model and one set of perplexity cut-offs per
language): a share of the reference (``holdout_fraction``, never trained on, and at least
``min_language_docs`` documents of each language that has three times as many) gives each
language's median and the spread. Only a language with at least ``min_language_docs``
held-out reference documents gets a centre; a rarer or unseen language gets **no**
score (NaN), never the centre of all languages or of another one: a Chinese page measured
against a median of mostly European text scores 4-6 IQRs above it for being Chinese.
Every detector here is language-dependent (the signals count words and stop words, which
unsegmented Chinese lacks), so such a document is left to the rules (combined score 0),
and the report says how many documents of which languages were. The combination: each detector's score is standardised
by the median and interquartile range of its scores on the corpus sample's documents that
the rules keep (the detector decides only on those: the clean stage applies it after the
rules), and the combined score is the weighted mean of their positive parts (``combine``:
a detector adds evidence only above its corpus median, so a document that is unusually
typical to one detector does not cancel another's alarm; a missing score adds none); the
threshold is the ``1 - flag_rate`` quantile of the combined score on those documents, the
review threshold the ``1 - flag_rate - review_rate`` one: the clean stage queues the
highest-scoring documents between the two for a person (``pipelines/anomaly_review.py``),
beside the held-out reference document nearest to each (``nearest_reference``). All of it
is written in the artifact.

Artifacts are versioned like the labeller's (``models/labeller.py``)::

    <model dir>/<version>/tokenizer.model   sentencepiece
    <model dir>/<version>/lm.pt             language-model state dict (RunInference loads it)
    <model dir>/<version>/autoencoders.pt   the two autoencoders (tensors and plain values)
    <model dir>/<version>/meta.json         calibration, threshold, feature list, sample hashes
    <model dir>/CURRENT                     the version the pipeline uses (written last)

Everything is read with ``torch.load(weights_only=True)`` or as JSON.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Optional, Sequence

import numpy as np
import torch

from models.autoencoder import Autoencoder, AutoencoderParams, train_autoencoder
from models.files import CURRENT, ModelError, local_copy, read_current as read_version, sha256_file
from models.review_head import ReviewHead
from models.textlm import OUTPUT_COLUMNS, LMParams, TextLM, lm_from_state, train_lm

_LOGGER = logging.getLogger(__name__)

__all__ = ["ARTIFACT_KIND", "ARTIFACT_VERSION", "COMBINATIONS", "CROSS_SIGNALS", "CURRENT", "DETECTORS",
           "AnomalyDetector", "DetectorParams", "LanguageCentres", "Scores", "combine", "lm_texts", "read_current", "texts_sha256",
           "train_detector"]

ARTIFACT_KIND = "tokenfactory.anomaly.detector"
# 3: the context detector; 4: no centre for rare languages (no shrinkage); 5: the two
# detectors across sentences (an artifact with other detectors is refused: retrain)
ARTIFACT_VERSION = 5
DETECTORS: tuple[str, ...] = ("perplexity", "representation", "signals", "context", "cohesion", "language_mix")
# The signals (``transforms.doc.Signals``) the cross-sentence detectors read, in DETECTORS order
CROSS_SIGNALS: tuple[str, ...] = ("sentence_gap", "sentence_other_lang")
# The smallest spread of a detector's residuals and of its corpus scores. The two shares
# across sentences move in steps of one sentence in 3-16 and are 0 for most documents of
# most languages (an IQR of 0 would make one odd sentence infinitely anomalous): their
# spread is at least one sentence in eight, and a score of 1 is then one such sentence.
_MIN_SPREAD = {"cohesion": 0.125, "language_mix": 0.125}
_FILES = ("tokenizer.model", "lm.pt", "autoencoders.pt", "meta.json")
_EPS = 1e-9
_HIDDEN = len(OUTPUT_COLUMNS)  # the language model's mean hidden state starts here


@dataclass(frozen=True)
class DetectorParams:
    """What ``train_detector`` builds and how it calibrates."""

    lm: LMParams = LMParams()
    signals: AutoencoderParams = AutoencoderParams()
    representation: AutoencoderParams = AutoencoderParams(hidden=(32, 8), steps=600)
    flag_rate: float = 0.05  # the share of the corpus sample above the threshold
    review_rate: float = 0.10  # the share just under it, between the review threshold and the threshold
    holdout_fraction: float = 0.15  # reference documents kept for the per-language centres
    # held-out reference documents a language needs for its own centre; rarer languages
    # get no language-dependent score (module docstring)
    min_language_docs: int = 5
    # Per detector, DETECTORS order. Chosen on the development families of
    # benchmarks/bench_anomaly.py (docs/BENCHMARKS.md): the representation detector is
    # scored and written but weighted 0 (with it the development AUROC fell from 0.982 to
    # 0.963); perplexity and signals equal (the development AUROC was flat from 1:1 to 6:1);
    # context equal too (development AUROC on seeds 0 / 1 with weight 0: 0.983 / 0.984,
    # 0.5: 0.990 / 0.989, 1: 0.993 / 0.991, 2: 0.996 / 0.990: flat from 1 to 2).
    # cohesion and language_mix equal too (development pooled AUROC on seeds 0 / 1 with
    # both at 0: 0.880 / 0.897, rule-passed 0.822 / 0.817; both at 1: 0.888 / 0.903 and
    # 0.835 / 0.833, spliced pairs 0.53 -> 0.70 / 0.67, two languages 0.78 / 0.82 -> 0.95;
    # the best of a grid, context and cohesion at 0.5: 0.894 / 0.906, within noise).
    weights: tuple[float, ...] = (1.0, 0.0, 1.0, 1.0, 1.0, 1.0)

    def __post_init__(self) -> None:
        if not 0.0 < self.flag_rate < 0.5:
            raise ValueError(f"flag_rate must be in (0, 0.5), got {self.flag_rate}")
        if not 0.0 <= self.review_rate <= 0.5:
            raise ValueError(f"review_rate must be in [0, 0.5], got {self.review_rate}")
        if not 0.0 < self.holdout_fraction < 0.5:
            raise ValueError(f"holdout_fraction must be in (0, 0.5), got {self.holdout_fraction}")
        if self.min_language_docs < 1:
            raise ValueError(f"min_language_docs must be >= 1, got {self.min_language_docs}")
        if (len(self.weights) != len(DETECTORS) or min(self.weights) < 0 or sum(self.weights) <= 0
                or not all(np.isfinite(self.weights))):
            raise ValueError(f"weights must be {len(DETECTORS)} finite numbers >= 0 with a positive sum "
                             f"(one per detector: {', '.join(DETECTORS)}), got {self.weights}")


COMBINATIONS = ("positive_mean", "mean")  # "mean": artifacts of version 2


def combine(z: np.ndarray, weights: np.ndarray, rule: str = "positive_mean") -> np.ndarray:
    """The combined score of standardised detector scores ``z`` [n, detectors]: the
    weighted mean of their positive parts (``positive_mean``) or of the scores (``mean``,
    what version-2 artifacts were calibrated with). A missing score (NaN: a language
    without its own centre) adds nothing; the divisor stays the sum of all weights, so a
    document scored by fewer detectors is flagged less readily, never more."""
    if rule not in COMBINATIONS:
        raise ValueError(f"unknown combination {rule!r}; known: {', '.join(COMBINATIONS)}")
    parts = np.nan_to_num(np.clip(z, 0.0, None) if rule == "positive_mean" else z, nan=0.0)
    return parts @ weights / weights.sum()


@dataclass(frozen=True)
class LanguageCentres:
    """A median for each language with at least ``min_docs`` documents, and one spread
    (the IQR of the residuals about those medians). Any other language has no centre:
    ``apply`` gives NaN for it, never another language's median."""

    centres: dict[str, float]
    spread: float
    docs: dict[str, int]  # the documents each language had at fitting (with a centre or not)
    min_docs: int

    @classmethod
    def fit(cls, raw: np.ndarray, langs: Sequence[str], min_docs: int,
            min_spread: float = _EPS) -> "LanguageCentres":
        langs = np.asarray(langs, dtype=object)
        docs = {str(lang): int((langs == lang).sum()) for lang in sorted(set(langs.tolist()))}
        centres = {lang: float(np.median(raw[langs == lang])) for lang, n in docs.items() if n >= min_docs}
        centred = np.isin(langs, list(centres))
        residual = raw[centred] - np.array([centres[lang] for lang in langs[centred]])
        spread = float(max(np.subtract(*np.percentile(residual, [75, 25])), min_spread)) if len(residual) else 1.0
        return cls(centres=centres, spread=spread, docs=docs, min_docs=min_docs)

    def apply(self, raw: np.ndarray, langs: Sequence[str]) -> np.ndarray:
        return (raw - np.array([self.centres.get(lang, np.nan) for lang in langs], dtype=np.float64)) / self.spread

    def uncentred(self) -> dict[str, int]:
        """The languages seen at fitting without a centre of their own, with their documents."""
        return {lang: n for lang, n in self.docs.items() if lang not in self.centres}


@dataclass(frozen=True)
class Scores:
    """Per document: the combined score, each detector's standardised score, perplexity."""

    combined: np.ndarray
    detectors: np.ndarray  # [n, len(DETECTORS)]
    perplexity: np.ndarray  # exp(NLL per token) of the scored tokens, CCNet's figure


@dataclass
class AnomalyDetector:
    """A trained detector: models, calibration and threshold (see the module docstring)."""

    lm: TextLM
    representation: Autoencoder
    signals: Autoencoder
    languages: dict[str, LanguageCentres]  # per detector
    location: np.ndarray  # per detector, on the corpus sample
    scale: np.ndarray
    weights: np.ndarray
    threshold: float
    detector_thresholds: np.ndarray
    feature_set: str
    combination: str = "positive_mean"  # see ``combine``
    # documents scoring above it (and not above ``threshold``) go to the review queue
    review_threshold: Optional[float] = None
    # held-out reference documents' snippets and normalised mean hidden states: the nearest
    # one is shown beside a queued document (``nearest_reference``)
    snippets: tuple[str, ...] = ()
    snippet_vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    head: Optional[ReviewHead] = None  # learnt from reviewed documents (``with_head``)
    version: str = ""
    path: str = ""  # the version directory it was loaded from or saved to
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def feature_names(self) -> tuple[str, ...]:
        return self.signals.feature_names

    def raw(self, lm_out: np.ndarray, features: np.ndarray, cross: np.ndarray, langs: Sequence[str]) -> np.ndarray:
        """[n, len(DETECTORS)] detector scores before the corpus standardisation; ``cross``:
        the documents' ``CROSS_SIGNALS`` [n, 2]."""
        nll = lm_out[:, 0].astype(np.float64)
        cross = np.asarray(cross, dtype=np.float64).reshape(len(lm_out), len(CROSS_SIGNALS))
        return np.stack([
            self.languages["perplexity"].apply(nll, langs),
            self.languages["representation"].apply(
                np.log(self.representation.score(lm_out[:, _HIDDEN:]) + _EPS), langs),
            self.languages["signals"].apply(np.log(self.signals.score(features) + _EPS), langs),
            self.languages["context"].apply(nll - lm_out[:, 2].astype(np.float64), langs),
            self.languages["cohesion"].apply(cross[:, 0], langs),
            self.languages["language_mix"].apply(cross[:, 1], langs),
        ], axis=1)

    def score_lm_output(self, lm_out: np.ndarray, features: np.ndarray, cross: np.ndarray,
                        langs: Sequence[str]) -> Scores:
        """Scores from the language model's output (``ConvLM.forward`` rows; the GPU path
        computes them with RunInference), the signal features, the signals across
        sentences (``CROSS_SIGNALS``) and the languages."""
        if len(lm_out) == 0:
            return Scores(np.zeros(0), np.zeros((0, len(DETECTORS))), np.zeros(0))
        z = (self.raw(lm_out, features, cross, langs) - self.location) / self.scale
        combined = combine(z, self.weights, self.combination)
        if self.head is not None:
            combined = self.with_head(combined, z, features)
        return Scores(combined=combined, detectors=z, perplexity=np.exp(lm_out[:, 1].astype(np.float64)))

    def with_head(self, combined: np.ndarray, z: np.ndarray, features: np.ndarray) -> np.ndarray:
        """The decision score with a review head (``pipelines.anomaly learn``): the larger
        of the combined score and the head's probability scaled so that its own threshold
        lands on the drop threshold (``threshold * p / head.threshold``): the head drops
        what reviewers would, the combined score what it did before. A document no detector
        scored (its language has no centre) is never judged by the head (its signals are
        language-dependent too)."""
        assert self.head is not None
        p = self.head.probability(z, features)
        p[np.isnan(z).all(axis=1)] = 0.0
        return np.maximum(combined, self.threshold * p / self.head.threshold)

    def score(self, texts: Sequence[str], features: np.ndarray, cross: np.ndarray, langs: Sequence[str]) -> Scores:
        return self.score_lm_output(self.lm.score(texts), features, cross, langs)

    def nearest_reference(self, lm_out: np.ndarray) -> list[str]:
        """Per document (``ConvLM.forward`` rows), the held-out reference snippet whose mean
        hidden state is nearest by cosine; '' when the artifact has none."""
        if not self.snippets or len(lm_out) == 0:
            return [""] * len(lm_out)
        hidden = lm_out[:, _HIDDEN:].astype(np.float64)
        hidden /= np.maximum(np.linalg.norm(hidden, axis=1, keepdims=True), _EPS)
        return [self.snippets[i] for i in np.argmax(hidden @ self.snippet_vectors.T, axis=1)]

    def save(self, model_dir: str) -> str:
        """Writes ``<model_dir>/<version>/`` (meta.json last), then ``CURRENT``."""
        base = os.path.join(model_dir, self.version)
        os.makedirs(base, exist_ok=True)
        _write(os.path.join(base, "tokenizer.model"), lambda p: open(p, "wb").write(self.lm.tokenizer_proto))
        _write(os.path.join(base, "lm.pt"), lambda p: torch.save(self.lm.net.state_dict(), p))
        _write(os.path.join(base, "autoencoders.pt"), lambda p: torch.save(
            {"signals": self.signals.state(), "representation": self.representation.state()}, p))
        meta = self._meta()
        meta["sha256"] = {name: sha256_file(os.path.join(base, name)) for name in _FILES[:3]}
        _write(os.path.join(base, "meta.json"), lambda p: open(p, "w", encoding="utf-8").write(
            json.dumps(meta, indent=2)))
        _write(os.path.join(model_dir, CURRENT), lambda p: open(p, "w", encoding="utf-8").write(self.version + "\n"))
        self.path = base
        return base

    def _meta(self) -> dict[str, Any]:
        return {
            "kind": ARTIFACT_KIND, "artifact_version": ARTIFACT_VERSION, "version": self.version,
            "detectors": list(DETECTORS), "feature_set": self.feature_set,
            "feature_names": list(self.feature_names), "lm": self.lm.meta(),
            "languages": {k: dataclasses.asdict(v) for k, v in self.languages.items()},
            "location": self.location.tolist(), "scale": self.scale.tolist(),
            "weights": self.weights.tolist(), "threshold": self.threshold,
            # None: a detector no calibration document had a score of (no language centre)
            "detector_thresholds": [float(v) if np.isfinite(v) else None for v in self.detector_thresholds],
            "combination_rule": self.combination,
            "review_threshold": self.review_threshold,
            "review_head": None if self.head is None else self.head.state(),
            "reference_snippets": {"texts": list(self.snippets),
                                   "vectors": np.round(self.snippet_vectors, 5).tolist()},
            "combination": "weighted mean of the positive parts of the detectors' scores, each "
                           "standardised by its median and IQR on the corpus sample",
            **self.metadata,
        }

    @classmethod
    def load(cls, model_dir: str, version: str = "", feature_set: Optional[str] = None,
             feature_names: Optional[Sequence[str]] = None) -> "AnomalyDetector":
        """The detector of ``model_dir`` at ``version`` (default ``CURRENT``); ``feature_set``
        and ``feature_names`` (the pipeline's) must match what it was trained on."""
        version = version or read_current(model_dir)
        base = f"{model_dir.rstrip('/')}/{version}"
        meta = _read_meta(base)
        _check_features(base, meta, feature_set, feature_names)
        if list(meta.get("detectors", ())) != list(DETECTORS):
            raise ModelError(f"{base}: built with the detectors {meta.get('detectors')} (artifact version "
                             f"{meta.get('artifact_version')}), this code scores {list(DETECTORS)} (version "
                             f"{ARTIFACT_VERSION}): retrain it (python -m pipelines.anomaly train)")
        if meta.get("combination_rule", "mean") not in COMBINATIONS:
            raise ModelError(f"{base}: unknown combination {meta.get('combination_rule')!r}; "
                             f"known: {', '.join(COMBINATIONS)}")
        # artifacts from before score_tokens scored (and were calibrated on) max_tokens tokens
        lm_meta = {"score_tokens": meta["lm"].get("max_tokens"), **meta["lm"]}
        lm_params = LMParams(**{**lm_meta, "dilations": tuple(meta["lm"]["dilations"])})
        with open(local_copy(f"{base}/tokenizer.model"), "rb") as fh:
            proto = fh.read()
        lm = lm_from_state(proto, _torch_load(f"{base}/lm.pt"), lm_params, base)
        states = _torch_load(f"{base}/autoencoders.pt")
        snippets = meta.get("reference_snippets") or {}
        if not isinstance(snippets, dict):
            raise ModelError(f"{base}/meta.json: reference_snippets is not an object")
        languages = {k: LanguageCentres(**v) for k, v in meta["languages"].items()}
        return cls(lm=lm, representation=Autoencoder.from_state(states["representation"], base),
                   signals=Autoencoder.from_state(states["signals"], base), languages=languages,
                   location=np.array(meta["location"]), scale=np.array(meta["scale"]),
                   weights=np.array(meta["weights"]), threshold=float(meta["threshold"]),
                   detector_thresholds=np.array([np.inf if v is None else v for v in meta["detector_thresholds"]],
                                                dtype=np.float64),
                   feature_set=str(meta["feature_set"]), combination=str(meta.get("combination_rule", "mean")),
                   review_threshold=_optional_float(meta.get("review_threshold")),
                   head=_head(base, meta.get("review_head"), len(DETECTORS) + 1 + len(meta["feature_names"])),
                   snippets=tuple(str(t) for t in snippets.get("texts", ())),
                   snippet_vectors=np.array(snippets.get("vectors", []), dtype=np.float64).reshape(
                       len(snippets.get("texts", ())), -1),
                   version=str(meta["version"]), path=base,
                   metadata={k: meta[k] for k in ("training", "trained_at", "review") if k in meta})


def _check_features(base: str, meta: dict[str, Any], feature_set: Optional[str],
                    feature_names: Optional[Sequence[str]]) -> None:
    """``ModelError`` naming the model, both feature sets and both feature lists (and what
    differs) unless the artifact was trained on the pipeline's (a None is not checked)."""
    trained_set, trained = meta.get("feature_set"), list(meta.get("feature_names", ()))
    names = None if feature_names is None else list(feature_names)
    if (feature_set is None or trained_set == feature_set) and (names is None or trained == names):
        return
    pipeline = f"{feature_set!r}" + ("" if names is None else f" {names}")
    difference = ""
    if names is not None and trained != names:
        only_model = [n for n in trained if n not in names]
        only_pipeline = [n for n in names if n not in trained]
        difference = (f" (only the model's: {only_model}; only the pipeline's: {only_pipeline})"
                      if only_model or only_pipeline else " (the same names in another order)")
    raise ModelError(f"{base}: trained on feature set {trained_set!r} {trained}, the pipeline computes "
                     f"{pipeline}{difference}: retrain it")


def _head(base: str, state: Any, width: int) -> Optional[ReviewHead]:
    if state is None:
        return None
    try:
        return ReviewHead.from_state(state, width)
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelError(f"{base}/meta.json: unreadable review_head: {exc}") from exc


def _optional_float(value: Any) -> Optional[float]:
    return None if value is None else float(value)


def _write(path: str, write: Any) -> None:
    write(path + ".tmp")
    os.replace(path + ".tmp", path)


def _torch_load(url: str) -> Any:
    try:
        return torch.load(local_copy(url), map_location="cpu", weights_only=True)
    except ModelError:
        raise
    except Exception as exc:  # torch raises RuntimeError, UnpicklingError, EOFError...
        raise ModelError(f"{url}: unreadable: {exc}") from exc


def read_current(model_dir: str) -> str:
    """The version ``CURRENT`` names."""
    if os.path.isfile(model_dir):
        raise ModelError(f"{model_dir}: a single file (the version-1 signals autoencoder); the detector "
                         f"is now a directory of versions: retrain it with `python -m pipelines.anomaly train`")
    return read_version(model_dir, f"no trained anomaly detector (model file not found: {CURRENT}): "
                                   f"run `python -m pipelines.anomaly train`")


def _read_meta(base: str) -> dict[str, Any]:
    try:
        with open(local_copy(f"{base}/meta.json"), encoding="utf-8") as fh:
            meta = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ModelError(f"{base}/meta.json: unreadable anomaly detector metadata: {exc}") from exc
    if not isinstance(meta, dict) or meta.get("kind") != ARTIFACT_KIND:
        raise ModelError(f"{base}: not a {ARTIFACT_KIND} artifact")
    if meta.get("artifact_version") != ARTIFACT_VERSION:
        raise ModelError(f"{base}: artifact version {meta.get('artifact_version')}, this code reads "
                         f"{ARTIFACT_VERSION}: retrain it")
    return meta


SNIPPETS = 200  # held-out reference documents kept for the review page
SNIPPET_CHARS = 300


def _snippets(texts: Sequence[str], lm_out: np.ndarray) -> tuple[tuple[str, ...], np.ndarray]:
    """Up to ``SNIPPETS`` of the held-out reference documents (evenly spaced) as snippets,
    with their normalised mean hidden states."""
    if not len(texts):
        return (), np.zeros((0, 0))
    pick = np.unique(np.linspace(0, len(texts) - 1, min(SNIPPETS, len(texts))).astype(int))
    vectors = lm_out[pick, _HIDDEN:].astype(np.float64)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), _EPS)
    return tuple(" ".join(texts[i][:SNIPPET_CHARS].split()) for i in pick), vectors


def _standardisation(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per detector: the median and IQR of its finite scores (0 and 1 when it has none:
    no language of the corpus sample has a centre); the IQR of a detector with a
    ``_MIN_SPREAD`` is at least 1 (its residuals' spread floor)."""
    location, scale = np.zeros(raw.shape[1]), np.ones(raw.shape[1])
    for j, column in enumerate(raw.T):
        finite = column[np.isfinite(column)]
        if len(finite):
            q75, q50, q25 = np.percentile(finite, [75, 50, 25])
            location[j], scale[j] = q50, max(q75 - q25, 1.0 if DETECTORS[j] in _MIN_SPREAD else _EPS)
    return location, scale


def texts_sha256(texts: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8", "replace"))
        digest.update(b"\x00")
    return digest.hexdigest()


def _holdout(texts: Sequence[str], fraction: float, langs: Optional[Sequence[str]] = None,
             per_language: int = 0) -> np.ndarray:
    """A hash-chosen ``fraction`` of the texts (at least 10); with ``langs``, also at least
    ``per_language`` of each language that has ``3 * per_language`` texts or more (its
    lowest hash keys), so a language of 15-40 reference documents gets a centre of its own
    rather than 15% of them (2-6) falling short of ``min_language_docs``."""
    keys = np.array([int.from_bytes(hashlib.sha1(t.encode("utf-8", "replace")).digest()[:8], "big")
                     for t in texts], dtype=np.float64) / 2.0**64
    held = keys < fraction
    if held.sum() < 10:
        held = keys <= np.sort(keys)[min(9, len(keys) - 1)]
    if langs is not None and per_language > 0:
        codes = np.asarray(langs, dtype=object)
        for lang in set(codes.tolist()):
            member = np.flatnonzero(codes == lang)
            if len(member) >= 3 * per_language and held[member].sum() < per_language:
                held[member[np.argsort(keys[member], kind="stable")[:per_language]]] = True
    return held


def lm_texts(reference: Sequence[str], reference_langs: Sequence[str], params: DetectorParams) -> list[str]:
    """The reference documents the language model learns: all but the held-out ones."""
    held = _holdout(reference, params.holdout_fraction, reference_langs, params.min_language_docs)
    return [t for t, h in zip(reference, held) if not h]


def train_detector(reference: Sequence[str], reference_langs: Sequence[str], reference_features: np.ndarray,
                   corpus: Sequence[str], corpus_langs: Sequence[str], corpus_features: np.ndarray,
                   feature_names: Sequence[str], feature_set: str,
                   params: DetectorParams = DetectorParams(), seed: int = 0,
                   corpus_kept: Optional[np.ndarray] = None, lm: Optional[TextLM] = None, *,
                   reference_cross: np.ndarray, corpus_cross: np.ndarray) -> AnomalyDetector:
    """Trains the detectors and calibrates them (module docstring). ``*_langs`` are
    the language-ID labels of the texts, ``*_features`` their signal features,
    ``*_cross`` their ``CROSS_SIGNALS`` [n, 2],
    ``corpus_kept`` marks the corpus documents the rules keep (default: all). ``lm``: a
    language model already trained on this reference's non-held-out documents with
    ``params.lm`` and ``seed`` (a benchmark's cache); trained here when None."""
    kept = np.ones(len(corpus), dtype=bool) if corpus_kept is None else np.asarray(corpus_kept, dtype=bool)
    if len(reference) < 20 or kept.sum() < 10:
        raise ValueError(f"need at least 20 reference documents and 10 corpus documents that the "
                         f"rules keep, got {len(reference)} and {int(kept.sum())}")
    if len(reference_langs) != len(reference) or len(corpus_langs) != len(corpus) or len(kept) != len(corpus):
        raise ValueError("one language and one kept flag per text are needed")
    reference_cross = np.asarray(reference_cross, dtype=np.float64)
    corpus_cross = np.asarray(corpus_cross, dtype=np.float64)
    if reference_cross.shape != (len(reference), len(CROSS_SIGNALS)) or \
            corpus_cross.shape != (len(corpus), len(CROSS_SIGNALS)):
        raise ValueError(f"the signals across sentences ({', '.join(CROSS_SIGNALS)}) are needed for every text")
    held = _holdout(reference, params.holdout_fraction, reference_langs, params.min_language_docs)
    if lm is None:
        lm = train_lm([t for t, h in zip(reference, held) if not h], params.lm, seed)  # as lm_texts
    ref_out = lm.score(reference)
    hidden_names = [f"lm_hidden_{j}" for j in range(ref_out.shape[1] - _HIDDEN)]
    representation = train_autoencoder(ref_out[~held, _HIDDEN:], hidden_names, params.representation, seed,
                                       desc="representation autoencoder")
    signals = train_autoencoder(np.concatenate([reference_features[~held], corpus_features[kept]]), feature_names,
                                params.signals, seed, desc="signals autoencoder")
    held_langs = [lang for lang, h in zip(reference_langs, held) if h]
    languages = {
        "perplexity": LanguageCentres.fit(ref_out[held, 0].astype(np.float64), held_langs,
                                          params.min_language_docs),
        "representation": LanguageCentres.fit(np.log(representation.score(ref_out[held, _HIDDEN:]) + _EPS),
                                              held_langs, params.min_language_docs),
        "context": LanguageCentres.fit(ref_out[held, 0].astype(np.float64) - ref_out[held, 2],
                                       held_langs, params.min_language_docs),
        # the signals are language-dependent too (words, stop words, word length: Chinese
        # text, unsegmented, is an outlier to an autoencoder of mostly European text)
        "signals": LanguageCentres.fit(np.log(signals.score(reference_features[held]) + _EPS), held_langs,
                                       params.min_language_docs),
        **{name: LanguageCentres.fit(reference_cross[held, j], held_langs, params.min_language_docs,
                                     _MIN_SPREAD[name])
           for j, name in enumerate(("cohesion", "language_mix"))},
    }
    n = len(DETECTORS)
    detector = AnomalyDetector(lm=lm, representation=representation, signals=signals, languages=languages,
                               location=np.zeros(n), scale=np.ones(n), weights=np.array(params.weights, dtype=np.float64),
                               threshold=0.0, detector_thresholds=np.zeros(n), feature_set=feature_set)
    sample_hash = texts_sha256(corpus)
    corpus = [t for t, k in zip(corpus, kept) if k]
    raw = detector.raw(lm.score(corpus), corpus_features[kept], corpus_cross[kept],
                       [g for g, k in zip(corpus_langs, kept) if k])
    detector.location, detector.scale = _standardisation(raw)
    z = (raw - detector.location) / detector.scale
    combined = combine(z, detector.weights, detector.combination)
    detector.threshold = float(np.quantile(combined, 1.0 - params.flag_rate))
    detector.review_threshold = (float(np.quantile(combined, 1.0 - params.flag_rate - params.review_rate))
                                 if params.review_rate > 0 else None)
    detector.snippets, detector.snippet_vectors = _snippets(
        [t for t, h in zip(reference, held) if h], ref_out[held])
    detector.detector_thresholds = np.array([float(np.quantile(column[np.isfinite(column)], 1.0 - params.flag_rate))
                                             if np.isfinite(column).any() else np.inf for column in z.T])
    corpus_hash = texts_sha256(corpus)  # the documents calibrated on (the rules keep them)
    detector.version = f"v{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S%f')[:-3]}-{corpus_hash[:8]}"
    detector.metadata = {
        "trained_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "training": {
            "corpus_docs": len(kept), "corpus_docs_rules_keep": len(corpus),
            "training_sample_sha256": corpus_hash, "corpus_sample_sha256": sample_hash,
            "reference_docs": len(reference), "reference_heldout_docs": int(held.sum()),
            "reference_sha256": texts_sha256(reference), "flag_rate": params.flag_rate,
            "review_rate": params.review_rate,
            "corpus_flagged": float((combined > detector.threshold).mean()),
            "holdout_fraction": params.holdout_fraction, "min_language_docs": params.min_language_docs,
            "seed": seed, "signals_autoencoder": dataclasses.asdict(params.signals),
            "representation_autoencoder": dataclasses.asdict(params.representation),
        },
    }
    return detector
