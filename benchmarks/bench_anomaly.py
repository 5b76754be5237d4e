"""The learned anomaly detector vs the best single heuristic, on planted anomalies.

    .venv/bin/python -m benchmarks.bench_anomaly [--seeds 5]

The set (benchmarks/anomalies.py): ~3 KB chunks of the books in ../shared/data/text
(clean) plus 20 planted documents of each of 7 kinds. The autoencoder is trained, as in
production, on the corpus itself (anomalies included, unlabelled) with the contamination
set to the planted share, then scores the same documents. Baselines: every signal alone
as a score (AUROC taken in its better direction, which flatters the baseline) and every
Gopher / C4 / FineWeb rule alone as a binary flag.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

from benchmarks.anomalies import build
from models.anomaly import train
from transforms.clean.features import FEATURE_NAMES, feature_matrix
from transforms.clean.rules import QualityRules, first_failure
from transforms.clean.signals import compute_signals

ROOT = Path(__file__).resolve().parents[1]


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Probability that a random anomaly scores above a random clean document (ties 1/2)."""
    from scipy.stats import rankdata

    ranks = rankdata(scores)
    pos = int(labels.sum())
    neg = len(labels) - pos
    return float((ranks[labels == 1].sum() - pos * (pos + 1) / 2) / (pos * neg))


def evaluate(seeds: int = 5) -> dict[str, object]:
    texts, kinds = build(ROOT.parent / "shared" / "data" / "text")
    labels = np.array([k != "clean" for k in kinds], dtype=int)
    signals = [compute_signals(t) for t in texts]
    x = feature_matrix(signals)
    contamination = float(labels.mean())
    runs = []
    for seed in range(seeds):
        model = train(x, FEATURE_NAMES, contamination=contamination, seed=seed)
        scores = model.score(x)
        flagged = scores > model.threshold
        tp = int((flagged & (labels == 1)).sum())
        per_kind = {k: float(np.mean(flagged[[i for i, kk in enumerate(kinds) if kk == k]]))
                    for k in sorted(set(kinds))}
        runs.append({"auroc": auroc(scores, labels), "precision": tp / max(int(flagged.sum()), 1),
                     "recall": tp / int(labels.sum()), "flagged_by_kind": per_kind})
    single = sorted(((max(a, 1 - a), name) for name, a in
                     ((n, auroc(x[:, j], labels)) for j, n in enumerate(FEATURE_NAMES))), reverse=True)
    rules = QualityRules()
    rule_flags = [first_failure(s, rules) for s in signals]
    rule_aurocs = {}
    for reason in sorted({r[0] for r in rule_flags if r}):
        flag = np.array([r is not None and r[0] == reason for r in rule_flags], dtype=float)
        rule_aurocs[reason] = auroc(flag, labels)
    any_rule = np.array([r is not None for r in rule_flags], dtype=float)
    return {"documents": len(texts), "anomalies": int(labels.sum()), "contamination": contamination,
            "runs": runs, "best_signal": single[:3], "best_rule": max(rule_aurocs.items(), key=lambda kv: kv[1]),
            "all_rules_together": auroc(any_rule, labels)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args(argv)
    result = evaluate(args.seeds)
    runs = result["runs"]
    sys.stdout.write(f"{result['documents']} documents, {result['anomalies']} planted anomalies "
                     f"(contamination {result['contamination']:.3f})\n")
    for key in ("auroc", "precision", "recall"):
        values = [r[key] for r in runs]
        sys.stdout.write(f"autoencoder {key:<9} mean {statistics.mean(values):.3f}  min {min(values):.3f}\n")
    kinds = runs[0]["flagged_by_kind"]
    sys.stdout.write("flagged share by kind (seed 0): " +
                     ", ".join(f"{k}={v:.2f}" for k, v in kinds.items()) + "\n")
    sys.stdout.write("best single signals (AUROC): " +
                     ", ".join(f"{n}={a:.3f}" for a, n in result["best_signal"]) + "\n")
    name, value = result["best_rule"]
    sys.stdout.write(f"best single rule: {name} AUROC {value:.3f}; all rules together "
                     f"{result['all_rules_together']:.3f}\n")
    sys.stdout.write(json.dumps(result, default=float) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
