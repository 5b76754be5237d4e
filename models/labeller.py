"""The document labeller: one fastText classifier per label set, calibrated, versioned.

A label set (``topic``, ``quality_tier``, ``safety``...) is a name and its allowed values
(the taxonomy, in the config). Its model lives in a directory:

    <model dir>/<version>/model.bin     fastText supervised model
    <model dir>/<version>/meta.json     taxonomy, temperature, reliability, training data hash
    <model dir>/CURRENT                 the version the pipeline uses (written last)

``train_labeller`` holds out a hash-chosen fraction of the labelled examples, trains on
the rest, fits a temperature on the held-out part (minimum negative log-likelihood,
Guo et al. 2017) and measures reliability (expected calibration error and per-bin
accuracy) before and after, then trains the final model on all examples with the same
hyper-parameters and keeps the fitted temperature. ``Labeller.predict_proba`` gives the
calibrated distribution over the taxonomy for a batch of texts. Too few examples to
calibrate (``MIN_CALIBRATION_EXAMPLES`` held out) is an error unless an uncalibrated
model is asked for (``allow_uncalibrated``; a cold-start seed model for the review loop).

The train and retrain commands are ``python -m pipelines.labeller`` (``pipelines/labeller.py``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Optional, Sequence

import numpy as np

from models.fasttext_models import LABEL_PREFIX as _LABEL, clean_line as clean_text, fit_supervised, load_fasttext
from models.files import CURRENT, ModelError, local_copy, read_current, sha256_file

_LOGGER = logging.getLogger(__name__)

__all__ = ["CURRENT", "MIN_CALIBRATION_EXAMPLES", "Labeller", "TrainParams", "apply_temperature", "auto_accept",
           "evaluate", "fit_temperature", "is_holdout", "nll", "reliability", "resolve_version", "save_version",
           "train_labeller"]


@dataclass(frozen=True)
class TrainParams:
    """fastText hyper-parameters. ``minn``/``maxn`` > 0 adds character n-grams (useful for
    language- or script-like labels and tiny seed sets)."""

    epoch: int = 50
    lr: float = 1.0
    word_ngrams: int = 2
    dim: int = 50
    minn: int = 0
    maxn: int = 0
    bucket: int = 200_000  # hash buckets for n-grams (fastText's 2M is 400 MB at dim 50)
    min_count: int = 1
    max_chars: int = 4000
    holdout_fraction: float = 0.2
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.holdout_fraction < 1.0:
            raise ValueError("holdout_fraction must be in [0, 1)")
        if self.epoch <= 0 or self.lr <= 0 or self.dim <= 0:
            raise ValueError("epoch, lr and dim must be > 0")


# ---------------------------------------------------------------- calibration (pure)

def apply_temperature(probs: np.ndarray, temperature: float) -> np.ndarray:
    """Softmax(log p / T) row-wise: T > 1 softens an over-confident model."""
    logp = np.log(np.clip(probs, 1e-12, 1.0)) / temperature
    logp -= logp.max(axis=1, keepdims=True)
    out = np.exp(logp)
    return out / out.sum(axis=1, keepdims=True)


def nll(probs: np.ndarray, truth: np.ndarray) -> float:
    return float(-np.mean(np.log(np.clip(probs[np.arange(len(truth)), truth], 1e-12, 1.0))))


def fit_temperature(probs: np.ndarray, truth: np.ndarray) -> float:
    """The temperature in [0.1, 10] minimising held-out NLL (log-spaced grid, then a
    finer grid around the best): no optimiser dependency, deterministic."""
    if len(truth) == 0:
        return 1.0
    grid = np.exp(np.linspace(np.log(0.1), np.log(10.0), 60))
    best = min(grid, key=lambda t: nll(apply_temperature(probs, t), truth))
    fine = np.exp(np.linspace(np.log(best) - 0.1, np.log(best) + 0.1, 21))
    return float(min(fine, key=lambda t: nll(apply_temperature(probs, t), truth)))


def reliability(confidence: np.ndarray, correct: np.ndarray, bins: int = 10) -> dict[str, object]:
    """Expected calibration error and the per-bin (count, mean confidence, accuracy)."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(confidence, edges[1:-1]), 0, bins - 1)
    table, ece = [], 0.0
    for b in range(bins):
        mask = which == b
        n = int(mask.sum())
        if n == 0:
            continue
        conf, acc = float(confidence[mask].mean()), float(correct[mask].mean())
        ece += n / max(len(confidence), 1) * abs(conf - acc)
        table.append({"bin": [float(edges[b]), float(edges[b + 1])], "count": n,
                      "confidence": round(conf, 4), "accuracy": round(acc, 4)})
    return {"ece": round(float(ece), 4), "bins": table,
            "accuracy": round(float(correct.mean()), 4) if len(correct) else None}


def auto_accept(confidence: np.ndarray, correct: np.ndarray, target_precision: float) -> dict[str, float]:
    """The lowest confidence threshold whose accepted set (confidence >= t) still has
    precision >= ``target_precision``, and the fraction of documents it accepts (the
    review effort saved). Threshold 1.01 / fraction 0 when no threshold reaches it."""
    if len(confidence) == 0:
        return {"threshold": 1.01, "fraction": 0.0, "precision": 0.0}
    order = np.argsort(-confidence, kind="stable")
    ranked = confidence[order]
    hits = np.cumsum(correct[order].astype(float))
    precision = hits / np.arange(1, len(order) + 1)
    # A threshold accepts every tie at its value, so only the last index of a run of equal
    # confidences is a set some threshold accepts (([.9, .8, .8], [1, 1, 0]) at 0.9: the
    # middle index has precision 1.0, but no threshold accepts only it).
    last_of_tie = np.append(ranked[1:] != ranked[:-1], True)
    ok = np.nonzero((precision >= target_precision) & last_of_tie)[0]
    if len(ok) == 0:
        return {"threshold": 1.01, "fraction": 0.0, "precision": 0.0}
    threshold = float(ranked[int(ok.max())])
    accepted = confidence >= threshold
    return {"threshold": round(threshold, 6), "fraction": round(float(accepted.mean()), 4),
            "precision": round(float(correct[accepted].mean()), 4)}


# ---------------------------------------------------------------- the model

@dataclass
class Labeller:
    """A loaded, calibrated label-set model."""

    name: str
    values: tuple[str, ...]
    version: str
    temperature: float
    model: object
    path: str
    max_chars: int = 4000

    @classmethod
    def load(cls, model_dir: str, version: str = "", name: str = "",
             values: Sequence[str] = ()) -> "Labeller":
        """The model of ``model_dir`` at ``version`` (default: ``CURRENT``). ``name`` and
        ``values`` (the config's taxonomy) must match what the model was trained on."""
        version = version or _read_current(model_dir)
        base = f"{model_dir.rstrip('/')}/{version}"
        try:
            meta = json.loads(open(local_copy(f"{base}/meta.json"), encoding="utf-8").read())
        except (OSError, ValueError) as exc:
            raise ModelError(f"{base}/meta.json: unreadable labeller metadata: {exc}") from exc
        path = local_copy(f"{base}/model.bin")
        try:
            model = load_fasttext().load_model(path)
        except Exception as exc:
            raise ModelError(f"not a fastText model: {base}/model.bin: {exc}") from exc
        model_values = tuple(meta.get("values", ()))
        if name and meta.get("name") != name:
            raise ModelError(f"{base}: trained for label set {meta.get('name')!r}, not {name!r}")
        if values and tuple(values) != model_values:
            missing = sorted(set(values) - set(model_values))
            extra = sorted(set(model_values) - set(values))
            raise ModelError(f"{base}: taxonomy differs from the config (config only: {missing}, "
                             f"model only: {extra}); retrain the labeller")
        return cls(name=meta["name"], values=model_values, version=meta["version"],
                   temperature=float(meta.get("temperature", 1.0)), model=model, path=path,
                   max_chars=int(meta.get("params", {}).get("max_chars", 4000)))

    def raw_proba(self, texts: Sequence[str]) -> np.ndarray:
        return _proba(self.model, self.values, texts, self.max_chars)

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        """Calibrated probabilities, shape (len(texts), len(values)), in taxonomy order."""
        if not texts:
            return np.zeros((0, len(self.values)))
        return apply_temperature(self.raw_proba(texts), self.temperature)


def _proba(model: object, values: Sequence[str], texts: Sequence[str], max_chars: int) -> np.ndarray:
    """Raw probabilities in taxonomy order. A text without any non-space character gets
    the uniform distribution (fastText would answer with its label prior, confidently)."""
    index = {_LABEL + v: i for i, v in enumerate(values)}
    lines = [clean_text(t, max_chars) for t in texts]
    try:
        labels, probs = model.predict(lines, k=-1)  # type: ignore[attr-defined]
    except (TypeError, UnicodeError):  # lone surrogates cannot cross into C++
        lines = [line.encode("utf-8", "replace").decode("utf-8") for line in lines]
        labels, probs = model.predict(lines, k=-1)  # type: ignore[attr-defined]
    out = np.full((len(texts), len(values)), 1e-9)
    for row, (labs, ps) in enumerate(zip(labels, probs)):
        if not lines[row].strip():
            out[row, :] = 1.0
            continue
        for lab, p in zip(labs, ps):
            col = index.get(lab)
            if col is not None:
                out[row, col] = max(float(p), 1e-9)
    return out / out.sum(axis=1, keepdims=True)


def resolve_version(model_dir: str, version: str = "") -> str:
    """The version a label set uses (``version`` or the directory's ``CURRENT``), without
    loading the model: what the label stage's resume fingerprint needs."""
    return version or _read_current(model_dir)


def _read_current(model_dir: str) -> str:
    return read_current(model_dir, f"no trained labeller ({CURRENT} missing): run `python -m pipelines.labeller train`")


def is_holdout(text: str, label: str, fraction: float, seed: int) -> bool:
    """True for a hash-chosen ``fraction`` of the (text, label) pairs: the same ones for
    the same seed, whatever else the examples hold."""
    key = hashlib.sha1(f"{seed}:{label}:{text}".encode()).digest()
    return int.from_bytes(key[:8], "big") / 2.0**64 < fraction


def _fit(texts: Sequence[str], labels: Sequence[str], params: TrainParams) -> object:
    rows = [f"{_LABEL}{lab} {clean_text(t, params.max_chars)}" for t, lab in zip(texts, labels)]
    return fit_supervised(rows, params.seed, epoch=params.epoch, lr=params.lr,
                          wordNgrams=params.word_ngrams, dim=params.dim, minn=params.minn,
                          maxn=params.maxn, minCount=params.min_count, bucket=params.bucket)


# Held-out examples needed to fit the temperature. One parameter fitted by NLL needs few
# points, but the reliability measured on them (10 confidence bins) is noise below ~3 per
# bin, and on the benchmark's real labels (docs/BENCHMARKS.md, review loop) 20 held out
# (100 labels) left the model uncalibrated with ECE 0.34, while 30+ brought it to
# 0.01-0.07. Uncalibrated, fastText's softmax is under-confident on small sets, so nearly
# every document falls below ``accept_threshold`` and goes to review.
MIN_CALIBRATION_EXAMPLES = 30


def examples_for_holdout(held_needed: int, fraction: float, confidence: float = 0.95) -> int:
    """The fewest new examples that put at least ``held_needed`` in the hash-chosen
    held-out ``fraction`` with probability ``confidence`` (each example is held out
    independently: a binomial count). 0 when none are needed; -1 when no number can
    (``fraction`` 0)."""
    if held_needed <= 0:
        return 0
    if fraction <= 0.0:
        return -1
    if fraction >= 1.0:
        return held_needed
    m = held_needed
    while True:  # P(Binomial(m, fraction) >= held_needed), grown until it reaches confidence
        below = sum(math.comb(m, k) * fraction**k * (1 - fraction) ** (m - k) for k in range(held_needed))
        if 1.0 - below >= confidence:
            return m
        m += 1


def _check_calibratable(name: str, pairs: Sequence[tuple[str, str]], held: Sequence[tuple[str, str]],
                        params: TrainParams, allow: bool) -> None:
    """``ValueError`` naming the set, the counts per label and how many more examples are
    needed when fewer than ``MIN_CALIBRATION_EXAMPLES`` are held out, unless ``allow``
    (then a warning)."""
    if len(held) >= MIN_CALIBRATION_EXAMPLES:
        return
    more = examples_for_holdout(MIN_CALIBRATION_EXAMPLES - len(held), params.holdout_fraction)
    total, held_by = Counter(lab for _, lab in pairs), Counter(lab for _, lab in held)
    by_label = ", ".join(f"{lab} {n} ({held_by[lab]} held out)" for lab, n in sorted(total.items()))
    per_label = math.ceil(more / len(total)) if total else more
    message = (f"label set {name!r}: {len(pairs)} examples put {len(held)} in the hash-chosen "
               f"{params.holdout_fraction:.0%} held out to calibrate the confidences; at least "
               f"{MIN_CALIBRATION_EXAMPLES} are needed (by label: {by_label}). "
               + (f"Add about {more} more labelled examples (about {per_label} of each label): that many "
                  f"put the missing {MIN_CALIBRATION_EXAMPLES - len(held)} in the held-out "
                  f"{params.holdout_fraction:.0%} with 95% odds"
                  if more > 0 else "No number of examples can: holdout_fraction is 0")
               + ". Uncalibrated, the model's confidences are fastText's raw ones (under-confident on "
                 "small sets): nearly every document would fall below accept_threshold and go to review")
    if not allow:
        raise ValueError(f"{message}. Add labelled examples, or train an uncalibrated seed model "
                         "explicitly (--allow-uncalibrated)")
    _LOGGER.warning("%s; training it UNCALIBRATED as asked (allow_uncalibrated)", message)


def train_labeller(texts: Sequence[str], labels: Sequence[str], name: str, values: Sequence[str],
                   model_dir: Optional[str] = None, params: TrainParams = TrainParams(),
                   extra_meta: Optional[dict[str, object]] = None,
                   allow_uncalibrated: bool = False) -> tuple["Labeller", dict[str, object]]:
    """Trains, calibrates and (when ``model_dir`` is given) saves a new version.

    Every label must be one of ``values``; empty texts are dropped. Fewer than
    ``MIN_CALIBRATION_EXAMPLES`` held out raise ``ValueError`` unless
    ``allow_uncalibrated`` (the model then keeps temperature 1). Returns the loaded
    model and its metadata (also written to ``meta.json``)."""
    values = tuple(values)
    bad = sorted({lab for lab in labels if lab not in values})
    if bad:
        raise ValueError(f"labels outside the taxonomy of {name!r}: {bad} (allowed: {list(values)})")
    pairs = [(t, lab) for t, lab in zip(texts, labels) if t and t.strip()]
    if len({lab for _, lab in pairs}) < 2:
        raise ValueError(f"label set {name!r} needs examples of at least two values, "
                         f"got {sorted({lab for _, lab in pairs})}")
    held = [p for p in pairs if is_holdout(p[0], p[1], params.holdout_fraction, params.seed)]
    train = [p for p in pairs if not is_holdout(p[0], p[1], params.holdout_fraction, params.seed)]
    _check_calibratable(name, pairs, held, params, allow_uncalibrated)
    temperature, before, after = 1.0, None, None
    if len(held) >= MIN_CALIBRATION_EXAMPLES and len({lab for _, lab in train}) >= 2:
        model = _fit([t for t, _ in train], [lab for _, lab in train], params)
        raw = _proba(model, values, [t for t, _ in held], params.max_chars)
        truth = np.array([values.index(lab) for _, lab in held])
        temperature = fit_temperature(raw, truth)
        cal = apply_temperature(raw, temperature)
        before = reliability(raw.max(axis=1), raw.argmax(axis=1) == truth)
        after = reliability(cal.max(axis=1), cal.argmax(axis=1) == truth)
    final = _fit([t for t, _ in pairs], [lab for _, lab in pairs], params)
    digest = hashlib.sha256()
    for t, lab in sorted(pairs):
        digest.update(f"{lab}\t{t}\n".encode())
    data_hash = digest.hexdigest()
    version = f"v{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S%f')[:-3]}-{data_hash[:8]}"
    counts: dict[str, int] = {}
    for _, lab in pairs:
        counts[lab] = counts.get(lab, 0) + 1
    meta: dict[str, object] = {
        "name": name, "values": list(values), "version": version, "temperature": temperature,
        "examples": len(pairs), "examples_per_value": counts, "holdout_examples": len(held),
        "reliability_raw": before, "reliability_calibrated": after,
        "training_data_sha256": data_hash, "params": params.__dict__,
        "trained_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    meta.update(extra_meta or {})
    path = ""
    if model_dir:
        path = save_version(final, meta, model_dir)
    labeller = Labeller(name=name, values=values, version=version, temperature=temperature,
                        model=final, path=path, max_chars=params.max_chars)
    return labeller, meta


def save_version(model: object, meta: dict[str, object], model_dir: str) -> str:
    """Writes ``<model_dir>/<version>/`` (model, then meta), then points ``CURRENT`` at it.
    Earlier versions are never touched."""
    base = os.path.join(model_dir, str(meta["version"]))
    os.makedirs(base, exist_ok=True)
    path = os.path.join(base, "model.bin")
    model.save_model(path + ".tmp")  # type: ignore[attr-defined]
    os.replace(path + ".tmp", path)
    meta["sha256"] = sha256_file(path)
    with open(os.path.join(base, "meta.json.tmp"), "w", encoding="utf-8") as fh:
        json.dump(meta, fh, indent=2)
    os.replace(os.path.join(base, "meta.json.tmp"), os.path.join(base, "meta.json"))
    with open(os.path.join(model_dir, CURRENT + ".tmp"), "w", encoding="utf-8") as fh:
        fh.write(str(meta["version"]) + "\n")
    os.replace(os.path.join(model_dir, CURRENT + ".tmp"), os.path.join(model_dir, CURRENT))
    return path


# ---------------------------------------------------------------- evaluation against humans

def evaluate(labeller: Labeller, texts: Sequence[str], labels: Sequence[str],
             target_precision: float) -> dict[str, object]:
    """Accuracy, reliability and auto-accept fraction of ``labeller`` on human labels."""
    if not texts:
        return {"examples": 0}
    proba = labeller.predict_proba(texts)
    truth = np.array([labeller.values.index(lab) for lab in labels])
    conf = proba.max(axis=1)
    correct = proba.argmax(axis=1) == truth
    rel = reliability(conf, correct)
    return {"examples": len(texts), "accuracy": rel["accuracy"], "ece": rel["ece"],
            "auto_accept": auto_accept(conf, correct, target_precision)}
