"""Language-ID accuracy per language on the Leipzig web sentences (1,000 per language).

    .venv/bin/python -m benchmarks.bench_langid

Each sentence is one document; the file name is the label (lid.176 says ``zh`` for
Chinese too). Reported: accuracy of the top label, the share of sentences kept at the
clean stage's default threshold of 0.65, and the accuracy among those kept.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from benchmarks import SHARED_DATA
from models.fasttext_models import LanguageIdentifier

ROOT = Path(__file__).resolve().parents[1]
DATA = SHARED_DATA


def evaluate(threshold: float = 0.65) -> list[dict[str, float]]:
    model = LanguageIdentifier.load(str(DATA / "models" / "lid.176.ftz"))
    rows = []
    for path in sorted((DATA / "langid" / "lingua_sentences").glob("*.txt")):
        label = path.stem
        sentences = [s for s in path.read_text(encoding="utf-8").splitlines() if s.strip()]
        preds = model.predict(sentences)
        correct = [lang == label for lang, _ in preds]
        kept = [score >= threshold for _, score in preds]
        n_kept = sum(kept)
        rows.append({
            "lang": label, "n": len(sentences), "accuracy": sum(correct) / len(sentences),
            "kept": n_kept / len(sentences),
            "accuracy_kept": sum(c for c, k in zip(correct, kept) if k) / max(n_kept, 1),
        })
    return rows


def main() -> int:
    t0 = time.perf_counter()
    rows = evaluate()
    sys.stdout.write(f"{'lang':<5} {'n':>5} {'accuracy':>9} {'kept@0.65':>10} {'acc kept':>9}\n")
    for r in rows:
        sys.stdout.write(f"{r['lang']:<5} {r['n']:>5} {r['accuracy']:9.3f} {r['kept']:10.3f} "
                         f"{r['accuracy_kept']:9.3f}\n")
    mean = {k: sum(r[k] for r in rows) / len(rows) for k in ("accuracy", "kept", "accuracy_kept")}
    sys.stdout.write(f"{'mean':<5} {'':>5} {mean['accuracy']:9.3f} {mean['kept']:10.3f} "
                     f"{mean['accuracy_kept']:9.3f}   ({time.perf_counter() - t0:.1f}s)\n")
    sys.stdout.write(json.dumps(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
