"""Train and retrain the document labeller (``models/labeller.py``: one calibrated,
versioned fastText classifier per label set of the config's ``label:`` section).

Commands (the labelled examples are JSONL ``{"text": ..., "label": ...}`` or
``{"id": ..., "label": ...}`` for documents of the corpus):

    python -m pipelines.labeller train   --config CFG --set NAME --seed FILE.jsonl
    python -m pipelines.labeller retrain --config CFG --set NAME [--seed FILE.jsonl]
        [--target-precision 0.95]

Both refuse when too few examples are held out to calibrate the model's confidences
(``models.labeller.MIN_CALIBRATION_EXAMPLES``: about 200 examples, the message says how
many more): an uncalibrated model sends nearly every document to review. ``--allow-uncalibrated`` trains it anyway
(a cold-start seed model whose first review round brings the labels to calibrate).

``retrain`` adds every accepted human review (``review/reviews/``) to the seed set and
reports the old and new model's accuracy against held-out human labels, the agreement
between reviewers and the model's suggestions, and the review effort saved (the fraction
of documents auto-accepted at the target precision).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Iterable, Optional, Sequence

import fsspec

from models.files import ModelError
from models.labeller import (MIN_CALIBRATION_EXAMPLES, Labeller, TrainParams, evaluate, is_holdout,
                             train_labeller)
from pipelines.cli import setup_logging

_LOGGER = logging.getLogger(__name__)

__all__ = ["main", "read_examples"]


def read_examples(path: str) -> list[dict[str, str]]:
    """JSONL rows with ``label`` and ``text`` or ``id``; a bad line raises naming it."""
    rows = []
    with fsspec.open(path, "rt", encoding="utf-8", compression="infer") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: not JSON: {exc}") from None
            if not isinstance(row, dict) or not isinstance(row.get("label"), str) or \
                    not (isinstance(row.get("text"), str) or isinstance(row.get("id"), str)):
                raise ValueError(f"{path}:{number}: expected {{\"label\": str, \"text\" or \"id\": str}}")
            rows.append(row)
    return rows


def _texts_for(rows: Iterable[dict[str, str]], docs: dict[str, str]) -> tuple[list[str], list[str], int]:
    texts, labels, missing = [], [], 0
    for row in rows:
        text = row.get("text") or docs.get(row.get("id", ""), "")
        if not text:
            missing += 1
            continue
        texts.append(text)
        labels.append(row["label"])
    return texts, labels, missing


def _command(args: argparse.Namespace) -> int:
    from pipelines.config import load_config_or_report  # after setup_logging: these import Beam
    from pipelines.corpus import finished_doc_stages, sample_docs
    from pipelines.review import accepted_reviews, doc_texts

    config = load_config_or_report(args.config)
    if config is None:
        return 2
    if config.label is None:
        sys.stderr.write(f"{args.config}: no label: section\n")
        return 2
    spec = next((s for s in config.label.sets if s.name == args.set), None)
    if spec is None:
        sys.stderr.write(f"{args.config}: label.sets has no set {args.set!r} "
                         f"(sets: {[s.name for s in config.label.sets]})\n")
        return 2
    params = TrainParams(epoch=args.epoch, lr=args.lr, minn=args.minn, maxn=args.maxn,
                         dim=args.dim, seed=args.random_seed)
    seed_rows = read_examples(args.seed) if args.seed else []
    human = [r for r in accepted_reviews(config) if r["set"] == spec.name] if args.command == "retrain" else []
    wanted = {r["id"] for r in seed_rows if "id" in r and "text" not in r} | {r["doc_id"] for r in human}
    docs = doc_texts(config, wanted) if wanted else {}
    texts, labels, missing = _texts_for(seed_rows, docs)
    if missing:
        sys.stderr.write(f"warning: {missing} seed rows name documents not in the corpus; skipped\n")
    # human labels: a fixed hash-chosen quarter is held out to measure old vs new model
    h_train, h_test = [], []
    for r in human:
        text = docs.get(r["doc_id"], "")
        if text:
            (h_test if is_holdout(r["doc_id"], "", 0.25, 7) else h_train).append((text, r["value"]))
    report: dict[str, object] = {}
    old: Optional[Labeller] = None
    if args.command == "retrain":
        try:
            old = Labeller.load(spec.model, spec.version, spec.name, spec.values)
        except ModelError as exc:
            sys.stderr.write(f"cannot load the current model to compare against: {exc}\n")
            return 2
        agree = [r for r in human if r.get("model_value")]
        report["reviews"] = len(human)
        report["agreement"] = round(sum(r["model_value"] == r["value"] for r in agree) / len(agree), 4) \
            if agree else None
        report["before"] = evaluate(old, [t for t, _ in h_test], [v for _, v in h_test], args.target_precision)
        texts += [t for t, _ in h_train]
        labels += [v for _, v in h_train]
    new, meta = train_labeller(texts, labels, spec.name, spec.values, spec.model, params,
                               extra_meta={"seed_file": args.seed or "",
                                           "human_labels": len(h_train),
                                           "previous_version": old.version if old else ""},
                               allow_uncalibrated=args.allow_uncalibrated)
    if args.command == "retrain":
        report["after"] = evaluate(new, [t for t, _ in h_test], [v for _, v in h_test], args.target_precision)
        report["target_precision"] = args.target_precision
        threshold = (report["after"].get("auto_accept") or {}).get("threshold")
        if threshold is not None:
            # the review effort saved on the corpus: documents the new model labels with
            # at least the confidence that met the target precision on held-out human labels
            stages = finished_doc_stages(config)
            sample = [d.text for d in sample_docs(config, stages[0], 5000, 0)] if stages else []
            if sample:
                confidence = new.predict_proba(sample).max(axis=1)
                report["corpus_auto_accept_fraction"] = round(float((confidence >= threshold).mean()), 4)
                report["corpus_sample"] = len(sample)
        meta["active_learning"] = report
        with open(os.path.join(spec.model, str(meta["version"]), "meta.json"), "w", encoding="utf-8") as fh:
            json.dump(meta, fh, indent=2)
    rel = meta.get("reliability_calibrated") or {}
    raw = meta.get("reliability_raw") or {}
    sys.stdout.write(
        f"{spec.name}: version {meta['version']} in {spec.model} ({meta['examples']} examples, "
        f"{meta['holdout_examples']} held out for calibration (at least {MIN_CALIBRATION_EXAMPLES} needed): accuracy {rel.get('accuracy')}, "
        f"ECE {raw.get('ece')} raw -> {rel.get('ece')} at T={meta['temperature']:.2f})\n")
    if report:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.labeller", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in ("train", "retrain"):
        p = sub.add_parser(command)
        p.add_argument("--config", required=True)
        p.add_argument("--set", required=True, help="label set name (label.sets[].name)")
        p.add_argument("--seed", required=(command == "train"), help="labelled examples (JSONL)")
        p.add_argument("--epoch", type=int, default=TrainParams.epoch)
        p.add_argument("--lr", type=float, default=TrainParams.lr)
        p.add_argument("--dim", type=int, default=TrainParams.dim)
        p.add_argument("--minn", type=int, default=0)
        p.add_argument("--maxn", type=int, default=0)
        p.add_argument("--random-seed", type=int, default=0)
        p.add_argument("--target-precision", type=float, default=0.95)
        p.add_argument("--allow-uncalibrated", action="store_true",
                       help=f"train even when fewer than {MIN_CALIBRATION_EXAMPLES} examples can be held out "
                            "to calibrate (the model's confidences are then raw: most documents go to review)")
    args = parser.parse_args(argv)
    setup_logging()
    try:
        return _command(args)
    except (ValueError, ModelError, FileNotFoundError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
