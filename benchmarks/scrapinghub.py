"""The scrapinghub article-extraction benchmark pages and token-level F1 scoring.

Scoring follows the benchmark's own method: bags of lower-cased word tokens of the
prediction and of the hand-made ``articleBody``, F1 of their multiset overlap.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

_TOKEN = re.compile(r"\w+")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def precision_recall_f1(predicted: str, truth: str) -> tuple[float, float, float]:
    pred, gold = Counter(tokens(predicted)), Counter(tokens(truth))
    if not pred and not gold:
        return 1.0, 1.0, 1.0
    overlap = sum((pred & gold).values())
    if overlap == 0:
        return 0.0, 0.0, 0.0
    precision = overlap / sum(pred.values())
    recall = overlap / sum(gold.values())
    return precision, recall, 2 * precision * recall / (precision + recall)


def load_pages(root: Path) -> list[tuple[str, bytes, str]]:
    """(page id, raw HTML bytes, articleBody) for every page under ``root``."""
    truth = json.loads((root / "ground-truth.json").read_text(encoding="utf-8"))
    pages = []
    for page_id in sorted(truth):
        path = root / "html" / f"{page_id}.html.gz"
        if path.exists():
            pages.append((page_id, gzip.decompress(path.read_bytes()), truth[page_id]["articleBody"]))
    return pages
