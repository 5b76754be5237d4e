"""The review loop on a real labelled set: uncertainty vs random sampling, calibration,
review effort saved, and labelling documents/s per core.

    .venv/bin/python -m benchmarks.bench_active_learning [--trials 5] [--rounds 3] [--budget 100]

Labelled set: the Leipzig web sentences of 20 languages in ../shared/data/langid (1,000
per language; the label is the file's language). A hash of the sentence puts 25% in the
test set; the rest is the unlabelled pool. Each trial starts from a seed set of 5
sentences per language (100), trains the labeller (fastText, character 2-4-grams,
temperature-calibrated once 30+ examples can be held out), labels the pool with the
label stage's own ``label_batch``, sends the ``--budget`` documents the stage would queue
(``pick_for_review`` with each ``sampling``: uncertainty, balanced, hybrid, random) to
"review"
(answered from the true labels), retrains on seed + reviews, and repeats for
``--rounds`` rounds. Reported per round: test accuracy, ECE before and after
calibration, and the fraction of test documents auto-accepted at 95% precision (the
review effort saved). The same trial seeds are used for both strategies.

Throughput: ``label_batch`` (one label set, 20 values) on ~3 KB documents and on single
sentences, CPU time of one process, batches of 256; and the label stage as a job runs it
(Parquet in, Parquet and review queue out; FnApiRunner in this process, stage seconds
from its manifest minus the start-up on 50 documents) on the same 3 KB documents x4.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
import time
from typing import Sequence

import numpy as np

from benchmarks import SHARED_DATA
from models.labeller import Labeller, TrainParams, auto_accept, reliability, train_labeller
from transforms.doc import Doc
from transforms.label.label import SAMPLING, LabelConfig, LabelSetConfig, label_batch, pick_for_review

DATA = SHARED_DATA / "langid" / "lingua_sentences"
PARAMS = TrainParams(minn=2, maxn=4)
TARGET_PRECISION = 0.95


def load() -> tuple[list[str], list[tuple[str, str]], list[tuple[str, str]]]:
    langs = sorted(p.stem for p in DATA.glob("*.txt"))
    pool, test = [], []
    for lang in langs:
        for line in (DATA / f"{lang}.txt").read_text(encoding="utf-8").splitlines():
            if line.strip():
                digest = hashlib.sha1(line.encode()).digest()[0]
                (test if digest < 64 else pool).append((line.strip(), lang))
    return langs, pool, test


def evaluate(model: Labeller, test: Sequence[tuple[str, str]]) -> dict[str, float]:
    truth = np.array([model.values.index(lab) for _, lab in test])
    raw = model.raw_proba([t for t, _ in test])
    cal = model.predict_proba([t for t, _ in test])
    correct = cal.argmax(1) == truth
    return {"accuracy": float(correct.mean()),
            "ece_raw": reliability(raw.max(1), raw.argmax(1) == truth)["ece"],
            "ece_cal": reliability(cal.max(1), correct)["ece"],
            "auto_accept": auto_accept(cal.max(1), correct, TARGET_PRECISION)["fraction"],
            "temperature": model.temperature}


def run_trial(langs: list[str], pool: list[tuple[str, str]], test: list[tuple[str, str]], trial: int,
              sampling: str, rounds: int, budget: int) -> list[dict[str, float]]:
    rng = np.random.default_rng(trial)
    order = rng.permutation(len(pool))
    labelled: list[tuple[str, str]] = []
    per: dict[str, int] = {}
    for i in order:
        text, lab = pool[i]
        if per.get(lab, 0) < 5:
            labelled.append((text, lab))
            per[lab] = per.get(lab, 0) + 1
    config = LabelConfig(sets=(LabelSetConfig("language", tuple(langs), "-", accept_threshold=0.9),),
                         review_budget=budget, sampling=sampling, seed=trial)
    seen = {t for t, _ in labelled}
    unlabelled = [Doc(id=f"d{i}", url="", text=t, source="", fetched_at="") for i, (t, _) in enumerate(pool)
                  if t not in seen]
    truth = {f"d{i}": lab for i, (_, lab) in enumerate(pool)}
    results = []
    for step in range(rounds + 1):
        params = TrainParams(**{**PARAMS.__dict__, "seed": trial})
        model, _ = train_labeller([t for t, _ in labelled], [lab for _, lab in labelled], "language", langs,
                                  None, params, allow_uncalibrated=True)  # the cold-start seed model
        results.append({"labels": len(labelled), **evaluate(model, test)})
        if step == rounds:
            break
        picked = pick_for_review(label_batch(unlabelled, config, {"language": model}, {}), config)
        agree = np.mean([d.labels[0].value == truth[d.id] for d in picked]) if picked else float("nan")
        results[-1]["reviewed_agreement"] = float(agree)
        ids = {d.id for d in picked}
        labelled += [(d.text, truth[d.id]) for d in picked]
        unlabelled = [d for d in unlabelled if d.id not in ids]
    return results


def throughput(langs: list[str], pool: list[tuple[str, str]]) -> dict[str, float]:
    by_lang: dict[str, list[str]] = {}
    for text, lab in pool:
        by_lang.setdefault(lab, []).append(text)
    long_docs, short_docs = [], []
    for lab, texts in sorted(by_lang.items()):
        for i in range(0, len(texts) - 30, 30):
            long_docs.append(Doc(id=f"{lab}{i}", url="", text=" ".join(texts[i:i + 30]), source="", fetched_at=""))
        short_docs += [Doc(id=f"{lab}s{i}", url="", text=t, source="", fetched_at="") for i, t in enumerate(texts)]
    seed = [(t, lab) for lab, texts in by_lang.items() for t in texts[:50]]
    with tempfile.TemporaryDirectory() as tmp:
        train_labeller([t for t, _ in seed], [lab for _, lab in seed], "language", langs, f"{tmp}/m", PARAMS)
        model = Labeller.load(f"{tmp}/m")
        config = LabelConfig(sets=(LabelSetConfig("language", tuple(langs), f"{tmp}/m"),), review_budget=100)
        out: dict[str, float] = {"long_chars": statistics.mean(len(d.text) for d in long_docs)}
        for name, docs in (("long", long_docs), ("short", short_docs)):
            best = float("inf")
            for _ in range(3):
                t0 = time.process_time()
                for i in range(0, len(docs), 256):
                    label_batch(docs[i:i + 256], config, {"language": model}, {})
                best = min(best, time.process_time() - t0)
            out[f"{name}_docs_per_s"] = len(docs) / best
            out[f"{name}_docs"] = len(docs)
        out["beam_long_docs_per_s"] = beam_rate(long_docs * 4, config)
    return out


def beam_rate(docs: list[Doc], config: LabelConfig) -> float:
    """The label stage as a job runs it (Parquet docs in, labels, queue, Parquet out),
    FnApiRunner in this process: stage seconds from its manifest, minus the fixed
    start-up of the same stage on 50 documents."""
    import io
    import json
    import os

    import yaml

    from pipelines.run import main as run_main

    def run(items: list[Doc], tmp: str) -> float:
        with open(f"{tmp}/docs.jsonl", "w", encoding="utf-8") as fh:
            for i, d in enumerate(items):
                fh.write(json.dumps({"id": f"{d.id}-{i}", "text": d.text}) + "\n")
        spec = config.sets[0]
        with open(f"{tmp}/job.yaml", "w", encoding="utf-8") as fh:
            yaml.safe_dump({"output": f"{tmp}/out", "inputs": [{"format": "jsonl", "path": f"{tmp}/docs.jsonl"}],
                            "label": {"review_budget": config.review_budget, "sets": [
                                {"name": spec.name, "values": list(spec.values), "model": spec.model}]}}, fh)
        assert run_main(["--config", f"{tmp}/job.yaml", "--no-progress", "--no-report", "--force",
                         "--log-level", "WARNING"], out=io.StringIO()) == 0
        with open(f"{tmp}/out/manifests/label.json", encoding="utf-8") as fh:
            return float(json.load(fh)["extra"]["seconds"])

    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(tmp, exist_ok=True)
        fixed = min(run(docs[:50], tmp) for _ in range(2))
        whole = min(run(docs, tmp) for _ in range(2))
    return len(docs) / max(whole - fixed, 1e-9)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=int, default=100)
    parser.add_argument("--skip-throughput", action="store_true")
    args = parser.parse_args(argv)
    if not DATA.exists():
        sys.stderr.write(f"shared data not found: {DATA}\n")
        return 2
    langs, pool, test = load()
    print(f"{len(langs)} languages, pool {len(pool)}, test {len(test)}; seed 5/language, "
          f"budget {args.budget}/round, {args.rounds} rounds, {args.trials} trials")
    table: dict[str, list[list[dict[str, float]]]] = {}
    for sampling in SAMPLING:
        table[sampling] = [run_trial(langs, pool, test, trial, sampling, args.rounds, args.budget)
                           for trial in range(args.trials)]
    print(f"\n{'sampling':<12} {'labels':>6} {'accuracy (mean, min-max)':>26} {'ECE raw':>8} {'ECE cal':>8} "
          f"{'T':>5} {'auto@95%':>9} {'model right on reviewed':>24}")
    for sampling, trials in table.items():
        for step in range(args.rounds + 1):
            rows = [t[step] for t in trials]
            acc = [r["accuracy"] for r in rows]
            agree = [r.get("reviewed_agreement") for r in rows if r.get("reviewed_agreement") is not None]
            print(f"{sampling:<12} {rows[0]['labels']:>6} {statistics.mean(acc):>10.3f} "
                  f"({min(acc):.3f}-{max(acc):.3f})     {statistics.mean(r['ece_raw'] for r in rows):>8.3f} "
                  f"{statistics.mean(r['ece_cal'] for r in rows):>8.3f} "
                  f"{statistics.mean(r['temperature'] for r in rows):>5.2f} "
                  f"{statistics.mean(r['auto_accept'] for r in rows):>9.3f} "
                  f"{(statistics.mean(agree) if agree else float('nan')):>24.3f}")
    for step in range(1, args.rounds + 1):
        gains = {s: statistics.mean(t[step]["accuracy"] - t[0]["accuracy"] for t in table[s]) for s in table}
        wins = {s: sum(a[step]["accuracy"] > r[step]["accuracy"] for a, r in zip(table[s], table["random"]))
                for s in table if s != "random"}
        print(f"after {step * args.budget} reviews: accuracy gain " +
              ", ".join(f"{s} {g:+.3f}" for s, g in gains.items()) +
              "; better than random in " + ", ".join(f"{s} {w}/{args.trials}" for s, w in wins.items()))
    if not args.skip_throughput:
        rate = throughput(langs, pool)
        print(f"\nlabelling, 1 label set x 20 values, CPU of one process: {rate['long_docs_per_s']:,.0f} docs/s "
              f"on {rate['long_chars']:,.0f}-char documents, {rate['short_docs_per_s']:,.0f} docs/s on "
              f"single sentences; the label stage through Beam (FnApiRunner): "
              f"{rate['beam_long_docs_per_s']:,.0f} docs/s on the long documents")
    return 0


if __name__ == "__main__":
    sys.exit(main())
