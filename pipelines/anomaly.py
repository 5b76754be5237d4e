"""Train the learned anomaly detector of the clean stage (``models/anomaly.py``).

    python -m pipelines.anomaly train --config configs/X.yaml [--reference FILE ...]
        [--stage extract] [--sample 20000] [--steps 1500] [--batch-size 32] [--window 256]
        [--seed 0] [--out DIR] [--force]

The language model learns from the reference corpus (``--reference``: plain-text files
cut into ~3 KB chunks at blank lines, JSONL or Parquet files with a ``text`` field, e.g.
the kept documents of a previous run or a curated set; or ``--reference default``: all the
real text of the shared data folder, 20 languages, ``pipelines/reference_corpus.py``).
Reference text goes through the extract stage's normalisation, as corpus documents did;
the documents per language (language ID) and per source are recorded in meta.json. The corpus sample is a uniform
sample of ``docs/<stage>/`` (PII redacted, as the clean stage sees it); the config's
language ID and rules decide which of its documents the rules keep: the signals
autoencoder learns from those and the reference, and the calibration and threshold
(``clean.anomaly.flag_rate`` of them flagged) are set on them. Without ``--reference``
the corpus sample's documents that the rules keep are the reference too (a warning says
so: the corpus's junk that passes the rules is then learned as normal). The detector is
written as a new version under ``--out`` or ``clean.anomaly.model`` (``CURRENT`` last).
When the current version was trained on the same corpus sample, reference, settings and
code (``training.key`` in its meta.json), nothing is trained: it is reused (``--force``
retrains).

    python -m pipelines.anomaly learn --config configs/X.yaml --answers ANSWERS.jsonl ...
        [--queue review/anomaly-<time>/ ...] [--model DIR]

learns a review head (``models/review_head.py``) from the answers a reviewer gave on the
clean stage's anomaly review queue (``pipelines/anomaly_review.py``; the review page's
answer files): a logistic regression on the answered tasks' detector scores and signal
features, saved as a new version of the detector whose decision score is the larger of
the combined score and the head's scaled probability (``AnomalyDetector.with_head``).
Only answers to tasks scored by the current version are used; the rest are counted.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import os
import sys
from typing import Any, Optional, Sequence

import numpy as np

from pipelines.cli import setup_logging

_LOGGER = logging.getLogger(__name__)


def _annotated(texts: Sequence[str], clean: object) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """(languages, signal features, signals across sentences, kept by language ID and
    rules) of ``texts``."""
    from models.progress import Steps
    from transforms.clean.clean import Models, annotate, select
    from transforms.clean.detect import AnomalyConfig
    from transforms.clean.features import cross_matrix, feature_matrix
    from transforms.doc import Doc

    config = dataclasses.replace(clean, anomaly=AnomalyConfig(), quality=dataclasses.replace(
        clean.quality, model=""))  # type: ignore[type-var]
    models = Models(config)
    docs = [Doc(id=str(i), url="", text=t, source="train", fetched_at="") for i, t in enumerate(texts)]
    annotated = []
    with Steps(len(docs), "language ID and rules", unit="document") as bar:
        for start in range(0, len(docs), 256):
            annotated.extend(annotate(docs[start:start + 256], models, config, score_anomaly=False,
                                      every_language=True, cross_sentence=True)[0])
            bar.update(len(docs[start:start + 256]))
    kept = np.array([select(d, config, None) is None for d in annotated], dtype=bool)
    signals = [d.signals for d in annotated]
    return [d.lang for d in annotated], feature_matrix(signals), cross_matrix(signals), kept


def training_key(corpus: Sequence[str], reference: Sequence[str], params: Any, seed: int,
                 clean_hash: str, code: str) -> str:
    """What a trained detector depends on, hashed: the corpus sample and reference texts,
    the training settings and seed, the clean section (language ID, rules, anomaly
    settings) and the code version. The same key means the same model would be trained."""
    digest = hashlib.sha256()
    head = {"params": dataclasses.asdict(params), "seed": seed, "clean": clean_hash, "code": code,
            "corpus": len(corpus), "reference": len(reference)}
    digest.update(json.dumps(head, sort_keys=True, default=str).encode())
    for text in list(corpus) + ["\x00reference\x00"] + list(reference):
        digest.update(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest())
    return digest.hexdigest()


def trained_version(model_dir: str, key: str) -> str:
    """The ``CURRENT`` version of ``model_dir`` when it was trained with ``key`` (its
    meta.json says so and its files are there), else ''."""
    from models.files import ModelError, read_version_meta

    try:
        version, meta = read_version_meta(model_dir)
    except ModelError:
        return ""
    training = meta.get("training")
    files_there = all(os.path.exists(os.path.join(model_dir, version, name))
                      for name in ("tokenizer.model", "lm.pt", "autoencoders.pt"))
    return version if isinstance(training, dict) and training.get("key") == key and files_there else ""


def _counts(labels: Sequence[str]) -> dict[str, int]:
    """Label → count, most frequent first (ties by label)."""
    from collections import Counter

    return dict(sorted(Counter(labels).items(), key=lambda kv: (-kv[1], kv[0])))


def _reference(paths: Sequence[str], seed: int) -> tuple[list[str], dict[str, int]]:
    """(texts, documents per source) of ``--reference``: ``default`` (alone) is the shared
    data's corpus, anything else files; all normalised as extracted text."""
    from pipelines.corpus import reference_texts
    from pipelines.reference_corpus import DEFAULT, default_reference

    if not paths:
        return [], {}
    if DEFAULT in paths:
        if len(paths) > 1:
            raise ValueError(f"--reference {DEFAULT} stands alone (got {' '.join(paths)})")
        docs = default_reference(seed=seed)
        return [d.text for d in docs], _counts([d.source for d in docs])
    texts: list[str] = []
    per_file: dict[str, int] = {}
    for path in paths:
        read = [t for t in reference_texts([path]) if t.strip()]
        per_file[path] = per_file.get(path, 0) + len(read)
        texts.extend(read)
    return texts, per_file


def _train_command(args: argparse.Namespace) -> int:
    from models.anomaly import DetectorParams, train_detector
    from models.autoencoder import AutoencoderParams
    from models.textlm import LMParams
    from pipelines.config import load_config_or_report
    from pipelines.manifest import code_version
    from pipelines.corpus import sample_docs
    from transforms.clean.features import FEATURE_NAMES, FEATURE_SET
    from transforms.clean.pii import redact

    config = load_config_or_report(args.config)
    if config is None:
        return 2
    clean = config.clean
    if clean is None:
        sys.stderr.write(f"{args.config}: no clean: section (the detector uses its language ID and rules)\n")
        return 2
    out = args.out or clean.anomaly.model
    if not out:
        sys.stderr.write("no output directory: give --out or clean.anomaly.model in the config\n")
        return 2
    corpus = [redact(doc.text)[0] for doc in sample_docs(config, args.stage, args.sample, args.seed)]
    if len(corpus) < 10:
        sys.stderr.write(f"only {len(corpus)} documents in docs/{args.stage}: run that stage first\n")
        return 2
    try:
        given_reference, sources = _reference(args.reference, args.seed)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"cannot read the reference: {exc}\n")
        return 2
    trim = clean.anomaly.contamination
    params = DetectorParams(
        lm=LMParams(steps=args.steps, batch_size=args.batch_size, max_tokens=args.window),
        signals=AutoencoderParams(trim=trim),
        representation=AutoencoderParams(hidden=(32, 8), steps=600, trim=trim),
        flag_rate=clean.anomaly.flag_rate, review_rate=clean.anomaly.review_rate)
    key = training_key(corpus, given_reference, params, args.seed, config.section_hash("clean"), code_version())
    reused = trained_version(out, key)
    if reused and not args.force:
        sys.stdout.write(f"anomaly detector unchanged: reusing {out}/{reused} (same corpus sample, reference, "
                         f"settings and code; --force retrains)\n")
        return 0
    corpus_langs, corpus_x, corpus_cross, kept = _annotated(corpus, clean)
    if args.reference:
        reference = given_reference
        reference_langs, reference_x, reference_cross, _ = _annotated(reference, clean)
    else:
        _LOGGER.warning("no --reference: the language model learns the %d corpus documents the rules "
                        "keep (their junk is learned as normal; `--reference default` is the shared "
                        "data's real text in 20 languages)", int(kept.sum()))
        reference = [t for t, k in zip(corpus, kept) if k]
        reference_langs = [g for g, k in zip(corpus_langs, kept) if k]
        reference_x, reference_cross = corpus_x[kept], corpus_cross[kept]
    try:
        detector = train_detector(reference, reference_langs, reference_x, corpus, corpus_langs, corpus_x,
                                  FEATURE_NAMES, FEATURE_SET, params, args.seed, corpus_kept=kept,
                                  reference_cross=reference_cross, corpus_cross=corpus_cross)
    except ValueError as exc:
        sys.stderr.write(f"cannot train the anomaly detector: {exc}\n")
        return 2
    detector.metadata["training"].update({
        "corpus_source": f"{config.output}/docs/{args.stage}",
        "reference_source": list(args.reference) or "the corpus sample's documents that the rules keep",
        "reference_sources": sources or {"corpus sample (rules keep)": len(reference)},
        "reference_languages": _counts(reference_langs),
        "reference_normalisation": "transforms.extract.html.normalize_text (as the extract stage)",
        "key": key})
    path = detector.save(out)
    sys.stdout.write(f"trained on {len(reference)} reference documents and {len(corpus)} of docs/{args.stage} "
                     f"({int(kept.sum())} kept by the rules); threshold {detector.threshold:.3f} "
                     f"(flag rate {params.flag_rate}); saved {path}\n")
    return 0


def queued_anomaly_tasks(paths: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Task id → task of the anomaly review queues (folders or tasks.jsonl files, in order:
    a later queue's task wins)."""
    from pipelines.review import load_queue

    tasks: dict[str, dict[str, Any]] = {}
    for path in paths:
        for task in load_queue(path):
            if isinstance(task, dict) and isinstance(task.get("anomaly"), dict) and "task_id" in task:
                tasks[str(task["task_id"])] = task
    return tasks


def read_answers(paths: Sequence[str]) -> tuple[dict[str, bool], dict[str, int]]:
    """(task id → junk?, lines set aside by reason) of review-page answer files (``{"task_id",
    "labels": {"anomaly": "junk" | "ok"}}``; a later answer to a task wins)."""
    answers: dict[str, bool] = {}
    aside: dict[str, int] = {}
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    value = row["labels"]["anomaly"]
                    task_id = str(row["task_id"])
                except (ValueError, KeyError, TypeError):
                    aside["not an anomaly answer"] = aside.get("not an anomaly answer", 0) + 1
                    continue
                if value not in ("junk", "ok"):
                    aside["value not junk or ok"] = aside.get("value not junk or ok", 0) + 1
                    continue
                answers[task_id] = value == "junk"
    return answers, aside


def _learn_command(args: argparse.Namespace) -> int:
    """A supervised head on the answered queue tasks' detector scores and signals, saved as
    a new version of the detector (``CURRENT`` last)."""
    import glob
    from datetime import datetime, timezone

    from models.anomaly import DETECTORS, AnomalyDetector
    from models.files import ModelError
    from models.review_head import fit_head
    from pipelines.config import load_config_or_report
    from transforms.clean.features import FEATURE_NAMES

    config = load_config_or_report(args.config)
    if config is None:
        return 2
    model = args.model or (config.clean.anomaly.model if config.clean is not None else "")
    if not model:
        sys.stderr.write("no detector: give --model or clean.anomaly.model in the config\n")
        return 2
    queues = args.queue or sorted(glob.glob(os.path.join(config.output, "review", "anomaly-*")))
    try:
        detector = AnomalyDetector.load(model)
        tasks = queued_anomaly_tasks(queues)
        answers, aside = read_answers(args.answers)
    except (OSError, ValueError, ModelError) as exc:
        sys.stderr.write(f"cannot learn from the review: {exc}\n")
        return 2
    rows, skipped = [], {"not in a queue": 0, "scored by another detector version": 0}
    for task_id, junk in answers.items():
        task = tasks.get(task_id)
        if task is None:
            skipped["not in a queue"] += 1
        elif task["anomaly"].get("version") != detector.version:
            skipped["scored by another detector version"] += 1
        else:
            rows.append((task["anomaly"], junk))
    pool = [t["anomaly"] for t in tasks.values() if t["anomaly"].get("version") == detector.version]
    set_aside = {**aside, **{k: v for k, v in skipped.items() if v}}

    def arrays(items: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
        z = np.array([[np.nan if a["scores"].get(d) is None else float(a["scores"][d]) for d in DETECTORS]
                      for a in items], dtype=np.float64).reshape(len(items), len(DETECTORS))
        x = np.array([a["features"] for a in items], dtype=np.float64).reshape(len(items), len(FEATURE_NAMES))
        return z, x

    try:
        z, x = arrays([a for a, _ in rows])
        pool_z, pool_x = arrays(pool)
        head = fit_head(z, x, [junk for _, junk in rows], pool_z, pool_x,
                        list(DETECTORS) + ["no_centre"] + list(FEATURE_NAMES))
    except (ValueError, KeyError, TypeError) as exc:
        sys.stderr.write(f"cannot learn from the review ({len(rows)} usable answers; set aside: {set_aside}): {exc}\n")
        return 2
    previous = detector.version
    detector.head = head
    detector.version = f"v{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S%f')[:-3]}-review"
    detector.metadata["review"] = {"answers": len(rows), "junk": int(sum(j for _, j in rows)),
                                   "from_version": previous, "queues": list(queues),
                                   "set_aside": set_aside,
                                   "learnt_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    path = detector.save(model)
    sys.stdout.write(f"review head learnt from {len(rows)} answers ({int(sum(j for _, j in rows))} junk); "
                     f"threshold {head.threshold:.3f}; saved {path} (was {previous})\n")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.anomaly", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train on a reference corpus and a sample of a stage's documents")
    train.add_argument("--config", required=True)
    train.add_argument("--reference", nargs="*", default=[],
                       help="reference text files (txt, jsonl, parquet), or `default`: the shared data's "
                            "real text in 20 languages")
    train.add_argument("--stage", default="extract", help="docs/<stage>/ to sample (default extract)")
    train.add_argument("--sample", type=int, default=20000)
    train.add_argument("--steps", type=int, default=1500, help="language-model optimiser steps")
    train.add_argument("--batch-size", type=int, default=32, help="language-model windows per step")
    train.add_argument("--window", type=int, default=256, help="language-model training window, in tokens")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--out", default=None, help="model directory (default: clean.anomaly.model)")
    train.add_argument("--force", action="store_true",
                       help="train even when the current model was trained on the same corpus sample, "
                            "reference, settings and code (it is reused otherwise)")
    learn = sub.add_parser("learn", help="learn a review head from answered anomaly review tasks")
    learn.add_argument("--config", required=True)
    learn.add_argument("--answers", nargs="+", required=True, help="review-page answer files (JSONL)")
    learn.add_argument("--queue", nargs="*", default=[],
                       help="review/anomaly-<time>/ folders (default: all of the config's output)")
    learn.add_argument("--model", default="", help="detector directory (default: clean.anomaly.model)")
    args = parser.parse_args(argv)
    setup_logging()
    return _learn_command(args) if args.command == "learn" else _train_command(args)


if __name__ == "__main__":
    sys.exit(main())
