"""The anomaly detector's review queue (issue 39, item 6: route, don't only drop).

The clean stage keeps a document whose combined anomaly score is at or under the drop
threshold; the ones above the review threshold (``models/anomaly.py``: the corpus
sample's ``1 - flag_rate - review_rate`` quantile, or ``anomaly.review_threshold``) are the
detector's doubtful band. The ``anomaly.review_budget`` highest of them (ties by id) go to

    review/anomaly-<time>/tasks.jsonl

in the review page's task format (``python -m pipelines.review serve --queue DIR --out
ANSWERS.jsonl``): one label set, ``anomaly`` (``junk`` | ``ok``, the detector's suggestion
``ok``: it kept the document), the text cut as in the label stage's queue, and as
``context`` lines the page shows: the combined score against both thresholds, each
detector's score, and the held-out reference document nearest to it by the language
model's mean hidden state (what normal text like it looks like). Each task also carries
the detector version and the document's signal features, what a supervised head would
learn the answers from.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Optional, Sequence

from apache_beam.io.filesystems import FileSystems

from transforms.clean.detect import AnomalyConfig
from transforms.doc import ID_SCHEME, Doc
from transforms.label.label import QUEUE_TEXT_LIMIT

_LOGGER = logging.getLogger(__name__)

__all__ = ["LABEL_SET", "TAXONOMY", "anomaly_task", "in_band", "queue_dir_name", "review_band",
           "write_anomaly_queue"]

LABEL_SET = "anomaly"
TAXONOMY = {LABEL_SET: ["junk", "ok"]}
TEXT_LIMIT = QUEUE_TEXT_LIMIT - 1  # characters a task shows (the label queue's)


def queue_dir_name(stamp: str) -> str:
    return f"anomaly-{stamp}"


def review_band(config: AnomalyConfig) -> Optional[tuple[float, float]]:
    """(review threshold, drop threshold) of the configured detector, from its meta.json
    (no model loaded) and the config's overrides; None when there is no band to queue
    (no model, budget 0, an artifact without a review threshold, or an empty band)."""
    if not config.model or config.review_budget <= 0:
        return None
    from models.files import read_version_meta

    _, meta = read_version_meta(config.model, config.version)
    drop = config.threshold if config.threshold is not None else meta.get("threshold")
    review = config.review_threshold if config.review_threshold is not None else meta.get("review_threshold")
    if drop is None or review is None or float(review) >= float(drop):
        return None
    return float(review), float(drop)


def in_band(doc: Doc, band: tuple[float, float]) -> bool:
    """Above the review threshold and at most the drop threshold."""
    return doc.anomaly_score is not None and band[0] < doc.anomaly_score <= band[1]


def _fmt(value: Optional[float]) -> str:
    return "none (no centre for its language)" if value is None else f"{value:.3f}"


def anomaly_task(doc: Doc, band: tuple[float, float], version: str, features: Sequence[float],
                 nearest: str) -> dict[str, Any]:
    """The review task of a queued document."""
    scores = {} if doc.anomaly_scores is None else dict(vars(doc.anomaly_scores))
    detectors = {k: v for k, v in scores.items() if k != "token_perplexity"}
    context = [f"anomaly score {doc.anomaly_score:.3f}: review above {band[0]:.3f}, dropped above {band[1]:.3f}",
               "detectors: " + ", ".join(f"{k} {_fmt(v)}" for k, v in detectors.items()),
               f"language {doc.lang or '?'}; detector {version}"]
    if nearest:
        context.append(f"nearest reference document: {nearest}")
    return {
        "task_id": doc.id, "doc_id": doc.id, "source_id": doc.source_id, "id_scheme": ID_SCHEME,
        "url": doc.url, "title": doc.title,
        "text": doc.text[:TEXT_LIMIT], "text_truncated": len(doc.text) > TEXT_LIMIT,
        "suggestions": {LABEL_SET: {"value": "ok", "score": 1.0, "version": version}},
        "taxonomy": TAXONOMY,
        "context": context,
        "anomaly": {"score": doc.anomaly_score, "review_threshold": band[0], "threshold": band[1],
                    "scores": detectors, "lang": doc.lang, "version": version,
                    "features": [float(v) for v in features], "nearest_reference": nearest},
    }


def write_anomaly_queue(directory: str, docs: Sequence[Doc], config: AnomalyConfig,
                        band: tuple[float, float]) -> dict[str, Any]:
    """``tasks.jsonl`` of ``docs`` (highest score first) under ``directory``; the detector
    is loaded to find each document's nearest reference snippet."""
    from pipelines.review import write_text
    from transforms.clean.detect import load_detector
    from transforms.clean.features import feature_matrix

    docs = sorted(docs, key=lambda d: (-(d.anomaly_score or 0.0), d.id))
    detector = load_detector(config)
    nearest = detector.nearest_reference(detector.lm.score([d.text for d in docs])) if docs else []
    features = feature_matrix([d.signals for d in docs]) if docs else []
    tasks = [anomaly_task(d, band, detector.version, f, n) for d, f, n in zip(docs, features, nearest)]
    write_text(FileSystems.join(directory, "tasks.jsonl"),
               "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks))
    return {"directory": directory, "tasks": len(tasks)}
