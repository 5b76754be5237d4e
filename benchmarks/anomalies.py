"""An anomaly-detection test set: real clean text with planted anomalies of six kinds.

Clean documents are ~3 KB chunks (cut at paragraph boundaries) of the public-domain
books in ``../shared/data/text``. Anomalies are planted by seeded generators: gibberish,
repeated boilerplate, keyword spam, mojibake (real text encoded UTF-8, decoded cp1252),
code and log dumps (real Python source of the standard library; generated server logs),
and link lists.
"""

from __future__ import annotations

import glob
import os
import random
import sysconfig
from pathlib import Path

KINDS = ("gibberish", "boilerplate", "keyword_spam", "mojibake", "code", "logs", "links")
BOOKS = ("pg1342_pride_and_prejudice.txt", "pg2701_moby_dick.txt", "botchan.txt",
         "tinyshakespeare_input.txt")
_LETTERS = "etaoinshrdlcumwfgypbvkjxqz"
_BOILER = ("Subscribe to our newsletter for the latest updates. Click here to accept cookies. "
           "Copyright 2024 All rights reserved. Privacy Policy | Terms of Use | Contact Us\n")
_SPAM = ("cheap", "best", "price", "buy", "online", "discount", "casino", "loans", "free",
         "shipping", "viagra", "replica", "watches", "deal", "sale", "bonus", "crypto", "win")
_TYPOGRAPHY = {"'": "\u2019", '"': "\u201c", "--": "\u2014", "e ": "\u00e9 "}


def clean_chunks(text_dir: Path, size: int = 3000) -> list[str]:
    """~``size``-character chunks of the books, cut at blank lines."""
    chunks: list[str] = []
    for name in BOOKS:
        path = text_dir / name
        if not path.exists():
            continue
        current = ""
        for para in path.read_text(encoding="utf-8", errors="replace").split("\n\n"):
            current += para.strip() + "\n\n"
            if len(current) >= size:
                chunks.append(current.strip())
                current = ""
    return chunks


def _gibberish(rng: random.Random, size: int) -> str:
    words = ["".join(rng.choice(_LETTERS) for _ in range(rng.randint(2, 9))) for _ in range(size // 6)]
    return " ".join(words)


def _mojibake(rng: random.Random, clean: list[str]) -> str:
    text = rng.choice(clean)
    for plain, fancy in _TYPOGRAPHY.items():
        text = text.replace(plain, fancy)
    return text.encode("utf-8").decode("cp1252", errors="replace")


def _code(rng: random.Random, size: int) -> str:
    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))
    source = Path(rng.choice(files)).read_text(encoding="utf-8", errors="replace")
    start = rng.randrange(max(1, len(source) - size))
    return source[start:start + size]


def _logs(rng: random.Random, size: int) -> str:
    lines = []
    while sum(map(len, lines)) < size:
        lines.append(f"2024-05-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
                     f"{rng.randint(0, 59):02d},{rng.randint(0, 999):03d} {rng.choice(['INFO', 'WARN', 'ERROR'])} "
                     f"[worker-{rng.randint(1, 16)}] GET /api/v1/items?id={rng.randint(1, 99999)} "
                     f"{rng.choice([200, 200, 404, 500])} {rng.randint(1, 900)}ms")
    return "\n".join(lines)


def _links(rng: random.Random, size: int) -> str:
    lines = []
    while sum(map(len, lines)) < size:
        slug = "-".join(rng.choice(_SPAM + ("news", "world", "sport", "tech")) for _ in range(3))
        lines.append(f"https://www.example{rng.randint(1, 50)}.com/{slug}/{rng.randint(1, 9999)}.html")
    return "\n".join(lines)


def planted(kind: str, rng: random.Random, clean: list[str], size: int = 3000) -> str:
    if kind == "gibberish":
        return _gibberish(rng, size)
    if kind == "boilerplate":
        return (_BOILER * (size // len(_BOILER) + 1))[:size]
    if kind == "keyword_spam":
        return " ".join(rng.choice(_SPAM) for _ in range(size // 6))
    if kind == "mojibake":
        return _mojibake(rng, clean)
    if kind == "code":
        return _code(rng, size)
    if kind == "logs":
        return _logs(rng, size)
    if kind == "links":
        return _links(rng, size)
    raise ValueError(f"unknown anomaly kind {kind!r}")


def build(text_dir: Path, per_kind: int = 20, seed: int = 0) -> tuple[list[str], list[str]]:
    """(texts, labels): the clean chunks ("clean") and ``per_kind`` planted of each kind."""
    rng = random.Random(seed)
    clean = clean_chunks(text_dir)
    texts, labels = list(clean), ["clean"] * len(clean)
    for kind in KINDS:
        for _ in range(per_kind):
            texts.append(planted(kind, rng, clean))
            labels.append(kind)
    order = list(range(len(texts)))
    rng.shuffle(order)
    return [texts[i] for i in order], [labels[i] for i in order]
