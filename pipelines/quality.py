"""Train the quality classifier: reference text vs random crawl text (the DCLM recipe).

    python -m pipelines.quality train --config configs/X.yaml --positive FILE [FILE ...]
        [--stage extract] [--negatives 20000] [--out PATH]

Positives are reference documents: plain-text files (cut into ~3 KB chunks at blank
lines), JSONL or Parquet files with a ``text`` field. Negatives are a uniform sample of
the corpus's own documents (``docs/<stage>/``). The fastText model is written to
``--out`` or to ``clean.quality.model`` of the config, with its metadata beside it
(``<model>.json``: counts, hyper-parameters, sha256). The training itself is
``models.fasttext_models.train_classifier``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Optional, Sequence

from models.fasttext_models import train_classifier
from pipelines.cli import setup_logging

_LOGGER = logging.getLogger(__name__)

__all__ = ["main"]


def _train_command(args: argparse.Namespace) -> int:
    from pipelines.config import load_config_or_report  # after setup_logging: these import Beam
    from pipelines.corpus import reference_texts, sample_docs

    config = load_config_or_report(args.config)
    if config is None:
        return 2
    out = args.out or (config.clean.quality.model if config.clean else "")
    if not out:
        sys.stderr.write("no output path: give --out or clean.quality.model in the config\n")
        return 2
    positives = list(reference_texts(args.positive))
    negatives = [d.text for d in sample_docs(config, args.stage, args.negatives, args.seed)]
    label = config.clean.quality.positive_label if config.clean else "hq"
    meta = train_classifier(positives, negatives, out, positive_label=label, seed=args.seed,
                            epoch=args.epoch)
    meta.update({"positive_sources": list(args.positive), "negative_source": f"docs/{args.stage}"})
    with open(out + ".json", "w", encoding="utf-8") as fh:
        json.dump(meta, fh, indent=2)
    sys.stdout.write(f"trained on {meta['positives']} reference and {meta['negatives']} crawl "
                     f"documents; saved {out}\n")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.quality", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train")
    train.add_argument("--config", required=True)
    train.add_argument("--positive", nargs="+", required=True)
    train.add_argument("--stage", default="extract")
    train.add_argument("--negatives", type=int, default=20000)
    train.add_argument("--epoch", type=int, default=5)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    setup_logging()
    return _train_command(args)


if __name__ == "__main__":
    sys.exit(main())
