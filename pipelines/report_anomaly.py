"""The anomaly-detector part of the run report: each detector's score with its threshold,
the documents that score highest, and the documents only the detector caught (the page's
section: ``pipelines.report_html.anomaly_html``).

Read from the clean stage's kept and rejected Parquet files batch by batch (columns
``anomaly_score``, ``anomaly_scores`` and, for the tables, ``id``, ``url``, ``text`` and the
rejection ``reason``); only the ``TOP`` best-scoring rows are held. A document rejected with
reason ``anomaly`` is one that language ID and every rule passed (the clean stage applies
the detector last), so that table lists what the detector alone removed, with a snippet
for a person to judge.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
from typing import Any, Optional

import numpy as np

from pipelines.report_data import Histogram, iter_batches, stage_files
from transforms.doc import AnomalyScores

_LOGGER = logging.getLogger(__name__)

TOP = 20
SNIPPET_CHARS = 300
# each detector's standardised score on the record, in models.anomaly.DETECTORS order
DETECTOR_FIELDS = tuple(f.name for f in dataclasses.fields(AnomalyScores) if f.name != "token_perplexity")
_Z = np.linspace(-5.0, 20.0, 51)  # standardised scores: 0 the corpus sample's median, 1 its IQR


def detector_thresholds(clean: Any) -> dict[str, Optional[float]]:
    """The combined threshold (the config's override, else the artifact's) and each
    detector's own (its ``1 - flag_rate`` quantile on the corpus sample, for the plots)."""
    out: dict[str, Optional[float]] = {"combined": clean.anomaly.threshold}
    if not clean.anomaly.model:
        return out
    try:
        meta = artifact_meta(clean.anomaly.model, clean.anomaly.version)
        threshold = float(meta["threshold"])
        per_detector = [None if v is None else float(v) for v in meta["detector_thresholds"]]
    except Exception as exc:  # a missing or retrained artifact must not stop the report
        _LOGGER.warning("report: no anomaly thresholds from %s: %s", clean.anomaly.model, exc)
        return out
    if out["combined"] is None:
        out["combined"] = threshold
    out.update({name: v for name, v in zip(DETECTOR_FIELDS, per_detector)})
    return out


def artifact_meta(model_dir: str, version: str = "") -> dict[str, Any]:
    """The ``meta.json`` of the detector version the clean stage uses (``CURRENT`` without
    ``version``), read as JSON: the report needs its thresholds only, and loading the
    detector imports torch (~2 CPU-s of the demo's report, 2026-12-07)."""
    from models.files import read_version_meta

    return read_version_meta(model_dir, version)[1]


def _value(scores: Optional[dict[str, Any]], name: str) -> float:
    value = (scores or {}).get(name)
    return float("nan") if value is None else float(value)


def _snippet(text: Optional[str]) -> str:
    return " ".join((text or "")[:SNIPPET_CHARS].split())


def _push(heap: list[tuple[float, int, dict[str, Any]]], score: float, row: dict[str, Any], seq: int) -> None:
    item = (score, seq, row)
    if len(heap) < TOP:
        heapq.heappush(heap, item)
    elif score > heap[0][0]:
        heapq.heapreplace(heap, item)


def collect_anomaly(output: str, stage: str = "clean") -> dict[str, Any]:
    """Histograms of the combined and per-detector scores (kept / rejected), the ``TOP``
    highest-scoring documents, the ``TOP`` highest of those rejected as ``anomaly``, and
    per language the documents no detector scored (their language had too few reference
    documents for a centre: ``models/anomaly.py``)."""
    hists = {name: Histogram(_Z) for name in ("combined",) + DETECTOR_FIELDS}
    top: list[tuple[float, int, dict[str, Any]]] = []
    only: list[tuple[float, int, dict[str, Any]]] = []
    caught_only, seq = 0, 0
    uncentred: dict[str, int] = {}
    columns = ("id", "url", "text", "lang", "anomaly_score", "anomaly_scores", "reason")
    for series, kind in (("kept", "docs"), ("rejected", "rejected")):
        for batch in iter_batches(stage_files(output, kind, stage), columns):
            rows = batch.to_pylist()
            scored = [r for r in rows if r.get("anomaly_score") is not None]
            hists["combined"].add(np.array([r["anomaly_score"] for r in scored]), series)
            for name in DETECTOR_FIELDS:
                hists[name].add(np.array([_value(r.get("anomaly_scores"), name) for r in scored]), series)
            for r in scored:
                if np.isnan(_value(r.get("anomaly_scores"), "perplexity")):
                    lang = r.get("lang") or "?"
                    uncentred[lang] = uncentred.get(lang, 0) + 1
                seq += 1
                entry = {"id": r.get("id"), "url": r.get("url") or "", "score": float(r["anomaly_score"]),
                         "scores": r.get("anomaly_scores") or {}, "status": r.get("reason") or series,
                         "snippet": _snippet(r.get("text"))}
                _push(top, entry["score"], entry, seq)
                if r.get("reason") == "anomaly":
                    caught_only += 1
                    _push(only, entry["score"], entry, seq)
    return {"histograms": {k: h.to_json() for k, h in hists.items()},
            "top": [e for _, _, e in sorted(top, key=lambda t: -t[0])],
            "caught_only_by_detector": [e for _, _, e in sorted(only, key=lambda t: -t[0])],
            "caught_only_count": caught_only,
            "without_language_terms": dict(sorted(uncentred.items(), key=lambda kv: (-kv[1], kv[0])))}
