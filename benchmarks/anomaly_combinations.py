"""How the anomaly detectors could combine, chosen on development families only (issue 39, item 4).

    .bench-venv/bin/python -m benchmarks.bench_anomaly --seed 0 --dump /tmp/d0.npz ...
    .bench-venv/bin/python -m benchmarks.bench_anomaly --seed 1 --dump /tmp/d1.npz ...
    .bench-venv/bin/python -m benchmarks.anomaly_combinations /tmp/d0.npz /tmp/d1.npz

Reads the standardised detector scores the benchmark dumps (every document of the
development and held-out splits) and reports, per seed:

* the production combination (``models.anomaly.combine``: the weighted mean of positive
  parts, ``DetectorParams().weights``) against a grid of weights and two other rules
  (the largest weighted positive part; their root mean square), scored by development
  pooled + rule-passed AUROC summed over the seeds;
* a supervised head: L2 logistic regression on the positive and negative parts and a
  "no centre" flag, fitted on the *other* seed's development split (another draw of the
  same development families), scored on this seed's development and held-out splits;
* per development row, whether the combination reaches the best single detector.

Family AUROCs follow ``bench_anomaly._table`` (spliced families against the coherent
sources only; a single detector over the documents it scores, a combination over all).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from typing import Sequence

import numpy as np

from benchmarks.anomaly_web import COHERENT_SOURCES, DEV_FAMILIES, HELD_OUT_FAMILIES, SPLICED
from benchmarks.bench_anomaly import auroc
from models.anomaly import DETECTORS, DetectorParams, combine

RULES = ("positive_mean", "max", "rms")


def load(path: str, split: str) -> dict[str, np.ndarray]:
    data = np.load(path)
    out = {k: data[f"{split}_{k}"] for k in ("z", "family", "source", "caught")}
    out["family"] = np.where(out["family"] == "web", "normal", out["family"])
    base = ~np.char.startswith(out["source"].astype(str), "leipzig+:")  # as bench_anomaly's AUROCs
    return {k: v[base] for k, v in out.items()}


def family_aurocs(score: np.ndarray, split: dict[str, np.ndarray], families: Sequence[str]) -> dict[str, float]:
    """AUROC per row: pooled, rule-passed pooled, each family."""
    junk = split["family"] != "normal"
    out = {}
    for row in ("pooled", "rule-passed") + tuple(families):
        member = junk.copy() if row in ("pooled", "rule-passed") else split["family"] == row
        reference = ~junk & (np.isin(split["source"], COHERENT_SOURCES) if row in SPLICED else True)
        mask = member | reference
        if row == "rule-passed":
            mask &= ~split["caught"]
        s, y = score[mask], member[mask].astype(int)
        finite = np.isfinite(s)
        out[row] = auroc(s[finite], y[finite]) if 0 < y[finite].sum() < finite.sum() else float("nan")
    return out


def combined(z: np.ndarray, weights: np.ndarray, rule: str) -> np.ndarray:
    if rule == "positive_mean":
        return combine(z, weights)
    parts = np.nan_to_num(np.clip(z, 0.0, None), nan=0.0)
    if rule == "max":
        return (parts * weights).max(axis=1)
    return np.sqrt((parts ** 2) @ weights / weights.sum())


def head_inputs(z: np.ndarray) -> np.ndarray:
    filled = np.nan_to_num(z, nan=0.0)
    return np.c_[np.clip(filled, 0, None), np.clip(filled, None, 0), np.isnan(z).all(axis=1)]


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1.0, steps: int = 50) -> np.ndarray:
    """Newton's method on the L2-penalised log loss (intercept not penalised)."""
    x = np.c_[x, np.ones(len(x))]
    w = np.zeros(x.shape[1])
    penalty = np.r_[np.full(len(w) - 1, l2), 0.0]
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-x @ w))
        hessian = (x * (p * (1 - p))[:, None]).T @ x + np.diag(penalty)
        w -= np.linalg.solve(hessian, x.T @ (p - y) + penalty * w)
    return w


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dumps", nargs=2, help="bench_anomaly --dump files of two seeds")
    args = parser.parse_args(argv)
    dev = [load(p, "dev") for p in args.dumps]
    test = [load(p, "test") for p in args.dumps]
    default = np.array(DetectorParams().weights)
    grid = []
    for rule in RULES:
        for w in itertools.product((0, 1), (0,), (0.5, 1), (0, 0.5, 1), (0, 0.5, 1, 2), (0, 0.5, 1, 2)):
            weights = np.array(w, dtype=np.float64)
            rows = [family_aurocs(combined(d["z"], weights, rule), d, DEV_FAMILIES) for d in dev]
            grid.append((sum(r["pooled"] + r["rule-passed"] for r in rows), rule, w, rows))
    grid.sort(key=lambda g: -g[0])
    out = sys.stdout
    out.write("development pooled + rule-passed AUROC, summed over both seeds (best 5, then the default):\n")
    default_row = next(g for g in grid if g[1] == "positive_mean" and np.allclose(g[2], default))
    for total, rule, w, rows in grid[:5] + [default_row]:
        out.write(f"  {total:.3f} {rule:13s} weights {w}: pooled {[round(r['pooled'], 3) for r in rows]} "
                  f"rule-passed {[round(r['rule-passed'], 3) for r in rows]}\n")
    for i, (d, t) in enumerate(zip(dev, test)):
        other = dev[1 - i]
        w = fit_logistic(head_inputs(other["z"]), (other["family"] != "normal").astype(float))
        head = lambda z: np.c_[head_inputs(z), np.ones(len(z))] @ w  # noqa: E731
        out.write(f"seed file {args.dumps[i]}: row, default combination, supervised head (fitted on the other "
                  "seed's development split), best single detector\n")
        for split, families, name in ((d, DEV_FAMILIES, "dev"), (t, HELD_OUT_FAMILIES, "held-out")):
            best_grid = family_aurocs(combined(split["z"], np.array(grid[0][2], dtype=np.float64), grid[0][1]),
                                      split, families)
            spliced = best_grid.get("spliced_pairs", best_grid.get("spliced_sentences", float("nan")))
            out.write(f"  {name}: the grid's best on development, pooled {best_grid['pooled']:.3f} rule-passed "
                      f"{best_grid['rule-passed']:.3f}, spliced {spliced:.3f}\n")
            base = family_aurocs(combine(split["z"], default), split, families)
            learnt = family_aurocs(head(split["z"]), split, families)
            singles = {name_: family_aurocs(split["z"][:, j], split, families) for j, name_ in enumerate(DETECTORS)}
            below = 0
            for row in base:
                best = max((singles[k][row], k) for k in DETECTORS if np.isfinite(singles[k][row]))
                below += base[row] < best[0] - 1e-9
                out.write(f"  {name:8s} {row:22s} {base[row]:.3f}  head {learnt[row]:.3f}  best {best[1]} "
                          f"{best[0]:.3f}\n")
            out.write(f"  {name}: the default combination is below the best single detector on {below} of "
                      f"{len(base)} rows\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
