"""The learned anomaly detector in the clean stage: its config, loading, the scores it
writes on documents, and the RunInference path.

Two ways to run the language model (``anomaly.inference``):

* ``inline`` (default): inside the clean stage's batch DoFn, on the CPU, with the other
  models (``annotate``);
* ``runinference``: a Beam ``RunInference`` step with a keyed
  ``PytorchModelHandlerTensor`` on ``device="GPU"``: batches of fixed-length token
  tensors go to the worker's GPU when it has one (Beam falls back to the CPU when it
  has none); the signals, the autoencoders, the combination and the selection run after
  it, batched again.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.utils import shared

from transforms.clean.features import FEATURE_NAMES, FEATURE_SET, cross_matrix, feature_matrix
from transforms.doc import AnomalyScores, Doc

_LOGGER = logging.getLogger(__name__)
INFERENCE_MODES = ("inline", "runinference")


@dataclass(frozen=True)
class AnomalyConfig:
    """The learned anomaly detector (``python -m pipelines.anomaly train``): a model
    directory of versions and ``CURRENT``; "" = off."""

    model: str = ""  # a directory of versions and CURRENT (``python -m pipelines.anomaly train``); "" = off
    version: str = ""  # a version of ``model``; "" = the one CURRENT names
    flag_rate: float = 0.05  # the train command: share of the corpus sample above the threshold
    review_rate: float = 0.10  # the train command: share under it that scores above the review threshold
    contamination: float = 0.05  # the train command: share of each batch left out of the autoencoders' loss
    threshold: Optional[float] = None  # overrides the artifact's calibrated threshold
    # kept documents above the review threshold (and under the threshold) queued for a
    # person, highest first, per run (review/anomaly-<time>/); 0: no queue
    review_budget: int = 100
    review_threshold: Optional[float] = None  # overrides the artifact's review threshold
    inference: str = "inline"  # inline | runinference (GPU when the worker has one)
    batch_size: int = 64  # documents per language-model batch

    def __post_init__(self) -> None:
        if not 0.0 < self.flag_rate < 0.5:
            raise ValueError(f"flag_rate must be in (0, 0.5), got {self.flag_rate}")
        if not 0.0 <= self.contamination < 0.5:
            raise ValueError(f"contamination must be in [0, 0.5), got {self.contamination}")
        if self.threshold is not None and not math.isfinite(self.threshold):
            raise ValueError(f"threshold must be a finite number, got {self.threshold}")
        if not 0.0 <= self.review_rate <= 0.5:
            raise ValueError(f"review_rate must be in [0, 0.5], got {self.review_rate}")
        if self.review_budget < 0:
            raise ValueError(f"review_budget must be >= 0, got {self.review_budget}")
        if self.review_threshold is not None and not math.isfinite(self.review_threshold):
            raise ValueError(f"review_threshold must be a finite number, got {self.review_threshold}")
        if self.inference not in INFERENCE_MODES:
            raise ValueError(f"inference must be one of {list(INFERENCE_MODES)}, got {self.inference!r}")
        if self.batch_size <= 0:
            raise ValueError(f"batch_size must be > 0, got {self.batch_size}")


def load_detector(config: AnomalyConfig) -> Any:
    """The configured ``models.anomaly.AnomalyDetector`` (``ModelError`` when missing or
    trained on another feature list)."""
    from models.anomaly import AnomalyDetector

    return AnomalyDetector.load(config.model, config.version, FEATURE_SET, FEATURE_NAMES)


def with_scores(docs: Sequence[Doc], detector: Any, lm_out: np.ndarray) -> list[Doc]:
    """``docs`` (annotated: signals and language set) with the combined score in
    ``anomaly_score`` and each detector's in ``anomaly_scores``."""
    features = feature_matrix([d.signals for d in docs])
    scores = detector.score_lm_output(lm_out, features, cross_matrix([d.signals for d in docs]),
                                      [d.lang for d in docs])
    return [dataclasses.replace(doc, anomaly_score=float(combined), anomaly_scores=AnomalyScores(
                perplexity=_score(z[0]), representation=_score(z[1]), signals=_score(z[2]),
                context=_score(z[3]), token_perplexity=float(ppl), cohesion=_score(z[4]),
                language_mix=_score(z[5])))
            for doc, combined, z, ppl in zip(docs, scores.combined, scores.detectors, scores.perplexity)]


def _score(value: float) -> Optional[float]:
    """A detector's score on the record; None where it did not score (NaN: no centre for
    the document's language), so records stay comparable and valid JSON."""
    return float(value) if math.isfinite(value) else None


def score_docs(docs: Sequence[Doc], detector: Any) -> list[Doc]:
    """The CPU path: the language model, then ``with_scores``."""
    return with_scores(docs, detector, detector.lm.score([d.text for d in docs]))


class _Detector:
    """Weak-referenceable holder for ``shared.Shared``."""

    def __init__(self, config: AnomalyConfig) -> None:
        self.detector = load_detector(config)


class _DetectorFn(beam.DoFn):
    """A DoFn holding the detector, loaded once per worker process (``shared.Shared``)."""

    def __init__(self, config: AnomalyConfig) -> None:
        self._config = config
        self._shared = shared.Shared()

    def setup(self) -> None:
        self._detector = self._shared.acquire(lambda: _Detector(self._config),
                                              tag=f"anomaly:{self._config.model}|{self._config.version}").detector


class _TokenizeFn(_DetectorFn):
    """Doc → (doc, fixed-length token tensor): the keyed input of RunInference."""

    def process(self, doc: Doc) -> Iterator[tuple[Doc, Any]]:
        yield doc, self._detector.lm.batch_tensor([doc.text])[0]


class _ScoreFn(_DetectorFn):
    """Batches of (doc, PredictionResult) → docs with their anomaly scores."""

    def process(self, batch: list[tuple[Doc, Any]]) -> Iterator[Doc]:
        lm_out = np.stack([np.asarray(result.inference.detach().cpu().numpy(), dtype=np.float32)
                           for _, result in batch])
        yield from with_scores([doc for doc, _ in batch], self._detector, lm_out)


class ScoreWithRunInference(beam.PTransform):
    """Annotated ``Doc`` → the same with anomaly scores, the language model in RunInference."""

    def __init__(self, config: AnomalyConfig) -> None:
        super().__init__()
        self._config = config

    def expand(self, docs: beam.PCollection[Doc]) -> beam.PCollection[Doc]:
        from apache_beam.ml.inference.base import KeyedModelHandler, RunInference
        from apache_beam.ml.inference.pytorch_inference import PytorchModelHandlerTensor

        from models.textlm import ConvLM

        detector = load_detector(self._config)  # the version and sizes, read once here
        params = detector.lm.params
        handler = PytorchModelHandlerTensor(
            state_dict_path=f"{detector.path}/lm.pt", model_class=ConvLM,
            model_params={"vocab_size": detector.lm.tokenizer.get_piece_size(), "dim": params.dim,
                          "dilations": list(params.dilations), "kernel": params.kernel},
            device="GPU", min_batch_size=1, max_batch_size=self._config.batch_size)
        config = dataclasses.replace(self._config, version=detector.version)
        return (docs
                | "Tokenize" >> beam.ParDo(_TokenizeFn(config))
                | "LanguageModel" >> RunInference(KeyedModelHandler(handler))
                | "Batch" >> beam.BatchElements(min_batch_size=1, max_batch_size=256)
                | "Score" >> beam.ParDo(_ScoreFn(config)))
